#pragma once

// The node configuration model: what a YAML file may say, with defaults.
// Loading is strict (unknown keys, wrong types, missing required fields and
// bad values are errors naming file, key path, line and expectation).

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <caf/timespan.hpp>

#include "keel/context_window.hpp"
#include "keel/delivery_policy.hpp"
#include "keel/error.hpp"
#include "keel/model_params.hpp"
#include "keel/provider_policy.hpp"
#include "keel/turn_guard.hpp"
#include "keel/units.hpp"

namespace keel {

/// TLS on the gateway (`gateway.tls:`): wss:// and https:// instead of ws://
/// and http://. Off while `certificate_file` is empty.
struct tls_config {
  /// PEM certificate chain presented to clients.
  std::string certificate_file;
  /// PEM private key of the certificate.
  std::string key_file;
  /// Oldest protocol version accepted: "1.2" or "1.3".
  std::string min_version = "1.2";

  bool enabled() const {
    return !certificate_file.empty();
  }
};

/// A token bucket per WebSocket connection (`gateway.rate_limit:`): frames
/// beyond it are answered with a `rate_limited` error frame and dropped.
struct rate_limit_config {
  /// Frames per second refilled into the bucket; 0 turns the limit off.
  double per_second = 50;
  /// Frames a client may send at once after being quiet.
  size_t burst = 100;
};

/// The OpenAI- and Anthropic-compatible HTTP API under `/v1/`
/// (`gateway.compat:`).
struct compat_config {
  /// Serve `/v1/`; off, its paths answer 404.
  bool enabled = true;
  /// A keep-alive event goes out after this long without another one.
  caf::timespan keepalive = std::chrono::seconds{15};
  /// A request waits this long for its outcome, then gets 504 (a retry
  /// with the same key joins the turn); below the SDKs' 600 s timeout.
  caf::timespan wait_timeout = std::chrono::seconds{590};
  /// A keyless SDK retry (`X-Stainless-Retry-Count` >= 1) of a request
  /// seen within this is the same message.
  caf::timespan retry_window = std::chrono::minutes{10};
  /// Largest request body under `/v1/` (chat histories outgrow
  /// `max_frame_bytes`).
  size_t max_body_bytes = 8 << 20;
};

/// WebSocket/HTTP gateway settings (`gateway:`).
struct gateway_config {
  /// Address to listen on.
  std::string host = "127.0.0.1";
  /// TCP port; 0 picks a free port (printed at startup).
  uint16_t port = 8080;
  /// The client token (`token:` or the first line of `token_file:`): when
  /// non-empty, WebSocket upgrades must present it (or the admin token). A
  /// gateway on a non-loopback address refuses to start without one unless
  /// `allow_unauthenticated` is set.
  std::string token;
  /// The admin token (`admin_token:` or `admin_token_file:`) for
  /// `/api/v1/*`. When empty, the admin API is open on a loopback gateway
  /// (or with `allow_unauthenticated`) and answers 403 everywhere else.
  std::string admin_token;
  /// Explicitly serve clients without a token on a non-loopback address.
  bool allow_unauthenticated = false;
  /// Accept tokens in URLs (`?token=`) as well as in `Authorization`.
  bool allow_query_token = false;
  /// Browser origins ("https://app.example.com") whose pages may open
  /// WebSockets; "*" allows any. Besides these, only the gateway's own
  /// origin is accepted. Requests without `Origin` (non-browser clients)
  /// are unaffected.
  std::vector<std::string> allowed_origins;
  /// Names clients may use in `Host` besides the listen address and, on a
  /// loopback gateway, localhost, 127.0.0.1 and [::1] (stops DNS rebinding).
  /// A gateway on a wildcard address (0.0.0.0, ::) with none listed accepts
  /// any `Host`.
  std::vector<std::string> allowed_hosts;
  /// Largest WebSocket message (and HTTP body) accepted; larger WebSocket
  /// messages close with 1009.
  size_t max_frame_bytes = 1 << 20;
  /// Longest message text accepted in a `send` frame (bytes of UTF-8).
  size_t max_text_bytes = 64 * 1024;
  /// Connections that passed the token check (WebSockets, HTTP connections
  /// that made an allowed request); above this a request that passes it is
  /// refused with 503. The node raises RLIMIT_NOFILE to fit this plus
  /// `max_unauthenticated` at start.
  size_t max_connections = 10000;
  /// Connections that have not yet passed the token check (a fresh
  /// connection, probes, refused requests), counted apart from
  /// `max_connections`: one beyond it closes the oldest of them.
  size_t max_unauthenticated = 1000;
  /// Of those, from one client address: one beyond it closes that
  /// address's oldest.
  size_t max_unauthenticated_per_address = 100;
  /// Time a connection that has not passed the token check gets for its
  /// TLS handshake and for each request's headers (and, while idle between
  /// requests, for the next one).
  caf::timespan header_timeout = std::chrono::seconds{10};
  /// Bytes of outgoing frames queued for one client; a client whose queue
  /// grows past this is disconnected (1008, "client too slow").
  size_t max_queued_bytes = 4 << 20;
  /// A write that makes no progress for this long disconnects the client.
  caf::timespan write_timeout = std::chrono::seconds{30};
  /// SO_SNDBUF of each client socket; 0 keeps the kernel's autotuning (up
  /// to net.ipv4.tcp_wmem's maximum, 4 MiB on Debian 12). Bounds the kernel
  /// memory a stalled reader holds before its queue starts to grow.
  size_t socket_send_buffer = 0;
  /// Bytes of one `history` page's entries as the frame encodes them; a
  /// page stops early (with `more: true`) when the next entry would pass
  /// this.
  size_t max_history_bytes = 1 << 20;
  /// Requests (frames but `ping`) one connection may have under way, not
  /// yet answered; more are refused with the error `busy`.
  size_t max_requests_in_flight = 128;
  /// Threads one connection may follow (by `subscribe` or by sending);
  /// more are refused with the error `subscription_limit`.
  size_t max_subscriptions_per_connection = 1000;
  /// Frames per connection per second.
  rate_limit_config rate_limit;
  /// Threads running the network I/O.
  size_t io_threads = 1;
  /// wss:// and https://.
  tls_config tls;
  /// The OpenAI- and Anthropic-compatible API.
  compat_config compat;
};

/// Returns whether `host` names the loopback interface only: "localhost" (in
/// any case), an address in 127.0.0.0/8 or ::1.
bool is_loopback_host(std::string_view host);

/// Returns whether `host` is a wildcard listen address (0.0.0.0 or ::).
bool is_wildcard_host(std::string_view host);

/// Endpoints that break the node on purpose (`chaos:`), for chaos tests.
/// Both need the admin token and are off by default.
struct chaos_config {
  /// `POST /api/v1/kill`: kill an actor by path.
  bool kill = false;
  /// `POST /api/v1/chaos/disk`: make RocksDB's writes fail (EIO or disk
  /// full) in the running node.
  bool disk = false;
};

/// One step of a scripted provider (`providers[].script[]`).
struct scripted_step {
  /// When non-empty, the step applies only when the last user message or
  /// tool result (whichever came last) contains this text; otherwise steps
  /// without `match` apply in turn.
  std::string match;
  /// The reply text; `{input}` is replaced by that last user message or
  /// tool result, `{max_tokens}` by the call's token limit.
  std::string reply;
  /// Simulated latency before the outcome.
  caf::timespan delay{0};
  /// When non-empty, the step fails with this provider error class
  /// (auth, rate_limit, billing, timeout, overloaded, model_not_found,
  /// context_overflow, invalid_request, action_not_supported, format,
  /// unknown).
  std::string fail;
  /// When true, the step throws inside the provider worker (tests crash
  /// isolation).
  bool crash = false;
  /// With `fail`: the failure comes in a stream that had begun (a stream
  /// cut after its first text), which the pool's stream layer retries.
  bool cut = false;
  /// With `fail`: the Retry-After the simulated provider sends.
  std::optional<std::chrono::milliseconds> retry_after;
  /// When non-empty, the answer also calls this tool (`tool.name`) with
  /// `tool.arguments` (JSON text; `{input}` replaced as in `reply`).
  std::string tool_name;
  std::string tool_arguments;
};

/// A provider's parameters unless its config sets them: answers of at
/// most `default_output_tokens`, the rest the server's.
inline model_params default_provider_params() {
  model_params result;
  result.max_output_tokens = default_output_tokens;
  return result;
}

/// One provider endpoint (`providers[]`).
struct provider_config {
  /// Unique name, referenced by pools.
  std::string name;
  /// "echo", "scripted" (offline), "openai" (OpenAI-compatible chat
  /// completions) or "anthropic" (Anthropic Messages).
  std::string kind;
  /// Model name: sent to HTTP providers, reported in replies.
  std::string model;
  /// For `scripted`: the steps.
  std::vector<scripted_step> script;

  // -- HTTP kinds ------------------------------------------------------------

  /// Scheme, host, optional port and path prefix, e.g.
  /// "https://api.openai.com" or "http://127.0.0.1:4010/v1"; the client
  /// appends "/v1/chat/completions" or "/v1/messages" unless the prefix
  /// already ends in "/v1".
  std::string base_url;
  /// Secret sent as `Authorization: Bearer` (openai) or `x-api-key`
  /// (anthropic); write it as `${ENV_VAR}` so it stays out of the file.
  std::string api_key;
  /// Extra request headers (name -> value).
  std::map<std::string, std::string> headers;
  /// TCP connect plus TLS handshake.
  std::chrono::milliseconds connect_timeout{5000};
  /// From the request written to the first byte of the answer.
  std::chrono::milliseconds first_byte_timeout{30000};
  /// Whole call, queueing for a connection included.
  std::chrono::milliseconds total_timeout{120000};
  /// Calls in flight at once; further calls wait for a free slot.
  size_t max_concurrency = 64;
  /// PEM file of trusted CAs for https; empty uses the system's store.
  std::string ca_file;
  /// Ask for server-sent events and pass tokens on as they arrive.
  bool stream = true;
  /// The parameters of every call to it (an agent's go over them).
  model_params params = default_provider_params();
  /// The request field of the output limit on the openai wire:
  /// "max_completion_tokens" (what OpenAI's reasoning models need) or
  /// "max_tokens" (older servers); anthropic's is always max_tokens.
  std::string token_limit_field = "max_completion_tokens";
  /// Largest response body (or whole event stream) read from the provider;
  /// a larger one fails the call as a `format` error.
  size_t max_response_bytes = 8 << 20;

  // -- every kind ------------------------------------------------------------

  /// The model's context window in tokens (`context_window:`, at least
  /// 1024); 0: the window the table of known models gives for `model`.
  uint64_t context_window = 0;
};

/// Returns whether `kind` is one of the HTTP provider kinds.
bool is_http_kind(std::string_view kind);

/// A provider pool (`pools[]`): an ordered failover chain.
struct pool_config {
  /// Unique name, referenced by `threads.pool`.
  std::string name;
  /// Provider names in the order they are tried.
  std::vector<std::string> chain;
  /// Attempts per provider before moving to the next one, backoff between
  /// them (`max_attempts` and `retry:`); `retry.max_attempts` mirrors
  /// `max_attempts`.
  retry_policy retry;
  /// Attempts one request may make across the whole chain (`retry.budget`);
  /// 0 means `max_attempts` + `stream_retries` times the chain length.
  uint32_t budget = 0;
  /// The per-provider circuit breakers (`breaker:` and `cooldowns:`).
  breaker_config breaker;
  /// A timed-out call is retried once with `max_tokens` scaled by this.
  double timeout_max_tokens_factor = 0.5;
  /// The stream layer (`retry.stream_retries`, `retry.stream_delay`): a
  /// stream that broke after it began (cut, ended early, an error event) is
  /// retried on its provider up to this many times, the n-th retry after
  /// `stream_delay` * 2^(n-1) (jittered like `retry`), whatever
  /// `max_attempts` says; each retry is an attempt of the retry budget.
  uint32_t stream_retries = 2;
  std::chrono::milliseconds stream_delay{1500};
  /// Names of the tools (`tools[].name`) of threads this pool answers, on
  /// top of those of their kind (`threads.tools`, `threads.agent_tools`).
  std::vector<std::string> tools;
};

/// Resource limits of a tool's process (`tools[].limits`), set before it
/// starts and inherited by everything it starts; 0: not limited here (the
/// node's own limit applies).
struct tool_limits {
  /// Address space in bytes (RLIMIT_AS).
  uint64_t memory = uint64_t{4} << 30;
  /// CPU time, in whole seconds (RLIMIT_CPU).
  std::chrono::seconds cpu_time{600};
  /// Open files (RLIMIT_NOFILE).
  uint64_t open_files = 1024;
  /// Processes of the tool's user (RLIMIT_NPROC; root is exempt).
  uint64_t processes = 1024;
  /// Largest file it may write, in bytes (RLIMIT_FSIZE).
  uint64_t file_size = uint64_t{1} << 30;
};

/// One tool the model may call (`tools[]`): a program run as a
/// subprocess with the model's arguments.
struct tool_config {
  /// Unique name the model calls it by: 1-64 of [A-Za-z0-9_-]; not
  /// `spawn_agent` or `message_agent` (built in).
  std::string name;
  /// What the model is told the tool does (required, non-empty).
  std::string description;
  /// JSON schema of the arguments object, as compact JSON text (written in
  /// YAML as a mapping; must have "type": "object"). Default: an object
  /// without properties.
  std::string parameters = R"({"type":"object","properties":{}})";
  /// The argv template (`command:`, a non-empty YAML sequence of strings);
  /// `{name}` in an element is replaced by argument `name`, `{{`/`}}` are
  /// literal braces. Every `{name}` must be a property of `parameters`.
  std::vector<std::string> command;
  /// Working directory; empty: the node's working directory.
  std::string cwd;
  /// The argument naming what a call works on (e.g. `path` of a tool that
  /// edits files): more than `threads.guard.file_loop_limit` calls on one
  /// value in one message are a file loop. Empty: none; else a property
  /// of `parameters`.
  std::string loop_key;
  /// Names of the node's environment variables passed to the tool (an
  /// allow-list); nothing else of the node's environment is passed.
  std::vector<std::string> env;
  /// The whole process tree is killed after this (SIGTERM, then SIGKILL
  /// after `grace`).
  std::chrono::milliseconds timeout{120000};
  std::chrono::milliseconds grace{2000};
  /// Bytes of stdout and of stderr each kept for the model (size units).
  size_t output_cap = 16 * 1024;
  tool_limits limits;
  /// The account the tool runs as (`user:`, a name or a number; empty:
  /// the node's), and its group (`group:`; empty: the user's primary
  /// group). Resolved when the file is read: `uid`/`gid` -1 for none.
  std::string user;
  std::string group;
  int64_t uid = -1;
  int64_t gid = -1;
};

/// Limits of agent trees (`threads.agents:`).
struct agent_limits {
  /// Children one thread may have.
  size_t max_children = 16;
  /// Depth of a tree: a root is at depth 0, its children at 1, ...; a
  /// spawn that would create a thread deeper than this is refused.
  size_t max_depth = 4;
  /// spawn_agent calls one model answer may make.
  size_t max_spawns_per_reply = 4;
  /// Messages exchanged between the threads of one tree (parent to child
  /// and back) on behalf of one client message before further ones are
  /// refused.
  size_t hop_budget = 64;
};

/// The name of the agent built from the `threads` keys when the file names
/// none of its own (`threads.default_agent`'s default).
inline constexpr const char* default_agent_name = "default";

/// Defaults for new threads (`threads:`).
struct thread_defaults {
  /// System prompt placed before the context.
  std::string system_prompt = "You are a helpful assistant.";
  /// An idle thread passivates (actor stops, state stays on disk) after this.
  caf::timespan idle_timeout = std::chrono::minutes{5};
  /// The provider pool answering new threads.
  std::string pool = "default";
  /// Unanswered messages one thread may hold before new ones are refused.
  size_t max_inbox = 1000;
  /// A turn that takes longer than this ends with a descriptive error. Twice
  /// the providers' default `total_timeout`: room for one failover.
  caf::timespan turn_timeout = std::chrono::minutes{4};
  /// Conversations live in memory at once on this node; when a new one
  /// would pass this, the idlest live one passivates first.
  size_t max_live = 10000;
  /// Threads stored on the node (all created through its one client token);
  /// a `send` or `spawn` that would create one more is refused with
  /// `thread_limit`. 0: no limit.
  size_t max_stored_threads = 0;
  /// A provider's reply text longer than this is cut to it (at a UTF-8
  /// boundary, marked as cut) before it enters the thread's context.
  size_t max_reply_bytes = 256 * 1024;
  /// Tool output longer than this is cut the same way.
  size_t max_tool_output_bytes = 64 * 1024;
  /// Tools (`tools[].name`) of root threads, the threads a client created.
  /// A thread's tools are these (or `agent_tools`) plus its pool's.
  std::vector<std::string> tools;
  /// Tools of child agents, the threads another thread spawned.
  std::vector<std::string> agent_tools;
  /// The safety guard of each message's turn loop (`guard:`).
  guard_limits guard;
  /// A tool failing this many times in one thread is disabled there.
  uint32_t disable_tool_after = 3;
  /// Tool processes running at once on the node; further calls wait their
  /// turn (in order, holding no thread).
  size_t max_concurrent_tools = 8;
  /// When to warn about and compact a full context (`compaction:`).
  compaction_settings compaction;
  /// Whether contexts are compacted at all (`compaction.enabled`).
  bool compaction_enabled = true;
  /// Limits of agent trees (`agents:`).
  agent_limits agents;
  /// The agent of threads whose first message names none.
  std::string default_agent = default_agent_name;
  /// The agent answering a message that names an agent the node does not
  /// have (its reply is told which agent was asked for); empty: such a
  /// message is refused with `unknown_agent`.
  std::string system_agent;
};

/// Whether an agent answers (`agents[].status`): a `paused` or `archived`
/// agent stores each message and answers it with the offline text.
enum class agent_status : uint8_t {
  active,
  paused,
  archived,
};

/// The YAML spellings of the agent statuses, indexed by their enum values.
inline constexpr const char* agent_status_names[] = {"active", "paused",
                                                     "archived"};

/// Parses the spelling of an agent status; `std::nullopt` for anything else.
std::optional<agent_status> parse_agent_status(std::string_view str);

/// The prefix of the pool made for an agent whose `models` or `execution`
/// differ from its pool's ("agent:NAME"); no configured pool may use it.
inline constexpr const char* agent_pool_prefix = "agent:";

/// One named agent (`agents[]`): what answers the threads bound to it. Keys
/// the file leaves out take the `threads` defaults (guard and agent limits
/// key by key), so the agent `default` built from them answers as a node
/// without agents did.
struct agent_config {
  /// 1-64 of [A-Za-z0-9._-]; threads bind to it by this name.
  std::string name;
  /// What the agent is for (listed by `keelctl agents` and /v1/models).
  std::string description;
  /// Placed before the context of every turn.
  std::string system_prompt;
  /// Files read fresh for every turn and placed after the prompt in this
  /// order (identity, memory, skills); one that cannot be read is left out
  /// and logged once.
  std::vector<std::string> prompt_files;
  /// The pool answering its threads: `pool`, or the pool made for its
  /// `models` and `execution` (`agent_pool_prefix` + name).
  std::string pool;
  /// Tools of its root threads and of its child threads (both from
  /// `tools` when the agent names them, else `threads.tools` and
  /// `threads.agent_tools`), on top of its pool's; `deny` takes tools
  /// away from both, the pool's included.
  std::vector<std::string> tools;
  std::vector<std::string> agent_tools;
  std::vector<std::string> deny;
  /// Agents its threads may start children of (`spawn_agent`'s `agent`);
  /// a child of its own kind needs no entry.
  std::vector<std::string> spawns;
  /// The limits of its turns and of its trees.
  guard_limits guard;
  agent_limits agents;
  /// A turn taking longer ends with an error (`execution.timeout`, else
  /// `threads.turn_timeout`).
  caf::timespan turn_timeout = std::chrono::minutes{4};
  /// The status the file gives; an operator's change through the admin
  /// API is stored and wins over it.
  agent_status status = agent_status::active;
  /// The parameters of its model calls (`model:`), over its provider's.
  model_params params;
};

/// How a supervisor reacts when one of its children exits abnormally.
enum class restart_strategy : uint8_t {
  /// Restart only the child that exited.
  one_for_one,
  /// Stop all other children, then restart all of them.
  one_for_all,
  /// Stop the children started after the one that exited, then restart it
  /// and them.
  rest_for_one,
};

/// The YAML spellings of the strategies, indexed by their enum values.
inline constexpr const char* restart_strategy_names[]
  = {"one_for_one", "one_for_all", "rest_for_one"};

/// Returns the YAML spelling of `x`: "one_for_one", "one_for_all" or
/// "rest_for_one".
std::string to_string(restart_strategy x);

/// Parses the YAML spelling of a strategy; `std::nullopt` for anything else.
std::optional<restart_strategy> parse_restart_strategy(std::string_view str);

/// Restart backoff with jitter (`supervision.NAME.backoff:`); OTP has none.
/// The n-th consecutive restart of a child waits
/// `min(max, initial * multiplier^(n-1))`, varied by up to `jitter` of itself.
struct backoff_config {
  /// Delay before the first restart; zero restarts at once.
  caf::timespan initial = std::chrono::milliseconds{10};
  /// Upper bound of the delay.
  caf::timespan max = std::chrono::seconds{2};
  /// Growth factor from one delay to the next (at least 1).
  double multiplier = 2.0;
  /// A child that stayed up this long restarts from `initial` again.
  caf::timespan reset_after = std::chrono::seconds{30};
  /// Random variation of each delay as a fraction of it, in 0..1
  /// (0.2: up to +-20 %), so children restarting together spread out.
  double jitter = 0.2;
};

/// The settings of one supervisor of the node's tree.
struct supervisor_settings {
  /// The restart strategy (always one_for_one for dynamic supervisors).
  restart_strategy strategy = restart_strategy::one_for_one;
  /// Restart intensity: more than this many restarts within `period` stop
  /// the supervisor, which escalates to its parent.
  uint32_t max_restarts = 1;
  /// The window for `max_restarts`.
  caf::timespan period = std::chrono::seconds{5};
  /// How long a child may take to stop before it is killed.
  caf::timespan shutdown_timeout = std::chrono::seconds{5};
  /// Messages held per child while it restarts; 0 holds none (senders get
  /// an error at once).
  size_t buffer = 1000;
  /// Delays between restarts.
  backoff_config backoff;

  /// The defaults above with restart intensity `n` restarts in `period`.
  static supervisor_settings with_intensity(uint32_t n, caf::timespan period) {
    supervisor_settings result;
    result.max_restarts = n;
    result.period = period;
    return result;
  }
};

/// The node's supervisors (`supervision:`). The node tolerates a few
/// crashes of one child, so its intensities are higher than OTP's library
/// default of 1 restart in 5 s (which the supervisor library keeps).
struct supervision_config {
  /// The root supervisor: 3 restarts in 5 s.
  supervisor_settings root
    = supervisor_settings::with_intensity(3, std::chrono::seconds{5});
  /// The providers supervisor, one child per pool: 5 restarts in 10 s.
  supervisor_settings providers
    = supervisor_settings::with_intensity(5, std::chrono::seconds{10});
  /// The conversations supervisor (dynamic, one child per active thread):
  /// 10 restarts in 10 s.
  supervisor_settings conversations
    = supervisor_settings::with_intensity(10, std::chrono::seconds{10});
};

/// Logging (`logging:`).
struct logging_config {
  /// One of trace, debug, info, warn, error, off.
  std::string level = "info";
  /// Log file; empty logs to stderr.
  std::string file;
  /// `text` (one human-readable line per event) or `json` (one JSON object
  /// per line; fields in docs/operations.md).
  std::string format = "text";
};

/// How the node stops (`shutdown:`).
struct shutdown_config {
  /// On SIGTERM the node stops taking messages and lets the turns under way
  /// finish for up to this long, then stops them (their messages are
  /// answered after the next start) and exits.
  caf::timespan drain_timeout = std::chrono::seconds{30};
};

/// Whom the node's users are told to contact (`owner:`).
struct owner_config {
  /// Fills `{ownerContact}` in the texts users get when their message fails
  /// for good (credits exhausted, every model failing, the agent offline);
  /// empty: "our team".
  std::string contact;
  /// The channel of `delivery.channels` owner notices go to (its retry
  /// policy applies); empty: notices are only logged and listed.
  std::string channel;
  /// Dedup windows set in `owner.notices` (by kind; the others keep
  /// `default_dedup_window`).
  std::map<notice_kind, std::chrono::milliseconds> notice_windows;
};

/// One outbound channel (`delivery.channels[]`): the replies of the threads
/// bound to it are sent there, besides any WebSocket subscriber.
struct channel_config {
  /// Unique name (`[A-Za-z0-9_-]`), part of every idempotency key.
  std::string name;
  /// `webhook` or `telegram`.
  channel_kind kind = channel_kind::webhook;
  /// webhook: the URL each event is POSTed to; telegram: the Bot API's
  /// base URL (default "https://api.telegram.org").
  std::string url;
  /// webhook: the HMAC-SHA256 key of the `X-Keel-Signature` header; empty:
  /// unsigned.
  std::string secret;
  /// telegram: the bot token (`${ENV_VAR}` keeps it out of the file).
  std::string token;
  /// telegram: the chat the replies go to.
  std::string chat_id;
  /// telegram: `Markdown` (default), `MarkdownV2`, `HTML`, or empty for
  /// plain text.
  std::string parse_mode = "Markdown";
  /// The threads bound to it: exact ids, or prefixes ending in `*` (`*`
  /// alone binds every thread).
  std::vector<std::string> threads;
  /// Attempts, backoff, Retry-After floor, send timeout, plain-text
  /// fallback: the kind's preset unless `retry:` and `timeout:` change it.
  channel_retry retry;
  /// PEM file of trusted CAs for https; empty uses the system's store.
  std::string ca_file;
};

/// Whether channel pattern `pattern` binds thread `thread`.
bool channel_binds(const std::string& pattern, const std::string& thread);

/// What happens to outcomes that could not reach anyone (`delivery:`).
struct delivery_config {
  /// When dead letters are retried, and when abandoned
  /// (`delivery.dead_letters`: `max_retries`, `interval`, `batch`).
  dead_letter_schedule dead_letters;
  /// Outbound channels (`delivery.channels`); none by default.
  std::vector<channel_config> channels;

  /// Names of the channels `thread` is bound to, in configuration order.
  std::vector<std::string> channels_of(const std::string& thread) const;
  /// Returns the channel named `name`, or null.
  const channel_config* find_channel(const std::string& name) const;
};

/// Where the store lives (`storage.backend`).
enum class storage_backend {
  /// RocksDB in `node.data_dir`/db: no outside service.
  rocksdb,
  /// A PostgreSQL database (`storage.postgres`), shared by a cluster.
  postgres,
};

/// RocksDB's memory (`storage.rocksdb:`): after the live threads, the
/// largest part of a node's RSS.
struct rocksdb_config {
  /// All memtables together (RocksDB's `db_write_buffer_size`): writes
  /// collect there until a flush to SST files. Smaller: less memory, more
  /// flushes and compactions.
  size_t memtables = 64u << 20;
  /// The block cache every column family shares (reads of SST files).
  size_t block_cache = 32u << 20;
};

/// The PostgreSQL store (`storage.postgres:`).
struct postgres_config {
  /// libpq URI or conninfo string; write `${KEEL_PG_URL}` to keep a
  /// password out of the file. Never logged.
  std::string url;
  /// Connections the store keeps open (a thread's writes always use the
  /// same one).
  size_t connections = 2;
  /// The server cancels a statement running longer; the write is then a
  /// failed write, retried like a disk fault.
  caf::timespan statement_timeout = std::chrono::seconds{10};
  /// How long a starting node waits for the server to answer (trying
  /// again every second, logging each failure) before it gives up; 0
  /// gives up at the first failure.
  caf::timespan startup_wait = std::chrono::seconds{30};
};

/// Storage (`storage:`).
struct storage_config {
  storage_backend backend = storage_backend::rocksdb;
  rocksdb_config rocksdb;
  postgres_config postgres;
  /// Sync every acknowledged write (the contract; turn off only for tests
  /// of throughput ceilings, never in production).
  bool sync = true;
  /// How long a conversation waits for each storage request (an accept, a
  /// commit, a load) before it treats the outcome as unknown: the request
  /// may still land, and the conversation reads the store back to learn.
  caf::timespan request_timeout = std::chrono::seconds{30};
};

/// TLS on the links between nodes (`cluster.tls:`): every node presents
/// `cert` and checks its peers against `ca`.
struct cluster_tls_config {
  std::string cert;
  std::string key;
  std::string ca;
  bool enabled() const {
    return !cert.empty();
  }
};

/// The cluster (`cluster:`). Off by default: then no middleman port and no
/// database connection beyond the store's are opened.
struct cluster_config {
  bool enabled = false;
  /// This node's id in the membership table; defaults to `node.name`.
  std::string node_id;
  /// Where the node listens for its peers (CAF middleman): host and port.
  std::string listen_host = "127.0.0.1";
  uint16_t listen_port = 7701;
  /// The host:port peers use to reach it; defaults to the listen address.
  std::string advertise;
  /// Shards of the thread space, fixed when the cluster is created (a node
  /// with another count refuses to start).
  uint32_t shards = 256;
  /// A node whose lease is this old is declared dead (>= 3 heartbeats).
  caf::timespan lease_ttl = std::chrono::seconds{3};
  caf::timespan heartbeat = std::chrono::seconds{1};
  /// How long a message routed to another node may take to be durable
  /// there before the client is told `unavailable` (and resends).
  caf::timespan route_timeout = std::chrono::seconds{5};
  /// How long an owner handing a shard over waits for its running turns.
  caf::timespan handoff_timeout = std::chrono::seconds{10};
  /// Shards moved at a time when the cluster rebalances.
  uint32_t rebalance_batch = 16;
  /// Shared secret every message between nodes carries; required.
  std::string token;
  /// Mutual TLS between nodes; required unless `insecure_plaintext`.
  cluster_tls_config tls;
  /// Plaintext links between nodes, allowed only on a loopback
  /// `cluster.listen` (a test cluster on one machine) and warned at start.
  bool insecure_plaintext = false;
};

/// How the actor scheduler's workers find work (`node.scheduler`).
enum class scheduler_policy {
  /// One shared queue; idle workers sleep until work arrives, so they take
  /// no CPU from tool processes and the store while the node waits.
  sharing,
  /// A queue per worker; idle workers poll and steal (CAF's default: more
  /// CPU spent waiting, which pays off only with cores to spare).
  stealing,
};

/// The whole node configuration.
struct node_config {
  /// Node name, shown in status and used as the node id.
  std::string name = "keel-1";
  /// Folder for RocksDB and other node data.
  std::string data_dir = "./data";
  /// How the scheduler's workers wait for work.
  scheduler_policy scheduler = scheduler_policy::sharing;
  /// Scheduler worker threads; 0: one per core, at least 2 (CAF's own
  /// default, at least 4, wakes more threads per message than there are
  /// cores to run them).
  size_t workers = 0;
  gateway_config gateway;
  std::vector<provider_config> providers;
  std::vector<pool_config> pools;
  /// The tools threads may be given (`tools:`); none by default.
  std::vector<tool_config> tools;
  thread_defaults threads;
  /// The agents the file defines (`agents:`); `agents_of` adds the agent
  /// `default` built from `threads`.
  std::vector<agent_config> agents;
  supervision_config supervision;
  logging_config logging;
  shutdown_config shutdown;
  storage_config storage;
  cluster_config cluster;
  chaos_config chaos;
  owner_config owner;
  delivery_config delivery;
  /// Settings that are valid but risky, one sentence each naming the key;
  /// `keel-node` logs them as warnings at start.
  std::vector<std::string> warnings;
  /// Where this configuration came from (file path or "<default>").
  std::string source = "<default>";

  /// Returns the provider named `name`, or null.
  const provider_config* find_provider(const std::string& name) const;
  /// Returns the pool named `name`, or null.
  const pool_config* find_pool(const std::string& name) const;
  /// Returns the tool named `name`, or null.
  const tool_config* find_tool(const std::string& name) const;
  /// Returns the agent named `name`, or null.
  const agent_config* find_agent(const std::string& name) const;
};

/// The agent `default_agent_name` as the `threads` keys of `node` make it.
agent_config threads_agent(const node_config& node);

/// Every agent of `node`: those it defines, then the agent `default` built
/// from `threads` unless it defines one of that name.
std::vector<agent_config> agents_of(const node_config& node);

/// Looks up an environment variable; injected so tests need no real env.
using env_lookup
  = std::function<std::optional<std::string>(const std::string&)>;

/// Reads the process environment.
env_lookup process_env();

/// The embedded default: one offline `echo` provider in pool `default`,
/// data in `./data`, gateway on 127.0.0.1:8080.
node_config default_config();

/// Parses and validates YAML text. `source` names the file in errors.
caf::expected<node_config> parse_config(const std::string& yaml,
                                        const std::string& source,
                                        const env_lookup& env);

/// Reads, parses and validates a YAML file.
caf::expected<node_config> load_config_file(const std::string& path,
                                            const env_lookup& env);

} // namespace keel
