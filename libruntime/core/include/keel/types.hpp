#pragma once

// The data model shared by the store, the actors and the wire protocol.
// Every type here is a plain struct with an `inspect` overload so it can
// travel in CAF messages (and, later, across nodes). For the stored records
// the `inspect` overload also names each field (`field`, see
// keel/record_field.hpp): their JSON form (keel/json_codec.hpp) is derived
// from it.

#include <cstdint>
#include <iosfwd>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <caf/error.hpp>
#include <caf/intrusive_ptr.hpp>
#include <caf/meta/load_callback.hpp>
#include <caf/meta/type_name.hpp>
#include <caf/ref_counted.hpp>

#include "keel/delivery_policy.hpp"
#include "keel/record_field.hpp"

namespace keel {

/// Milliseconds since the Unix epoch (wall clock, for display and records).
using millis = int64_t;

/// Per-thread sequence number. Every log entry of a thread gets the next one;
/// inbox and context entries reuse the sequence number of the log entry they
/// came from. Starts at 1; 0 means "none".
using seq_t = uint64_t;

/// Lifecycle of a thread's session record.
enum class session_state : uint8_t {
  /// A conversation actor is running for the thread.
  active,
  /// No actor runs; the thread comes back on its next message.
  suspended,
  /// Closed by its owner; new messages are refused.
  closed,
};

/// Returns the stored name of `x` ("ACTIVE", "SUSPENDED", "CLOSED").
const char* to_string(session_state x);

/// Parses a stored session state name.
std::optional<session_state> parse_session_state(const std::string& str);

/// How often one tool failed in one thread (`session_record`).
struct tool_failure_count {
  std::string tool;
  uint32_t failures = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, tool_failure_count& x) {
  return f(caf::meta::type_name("keel::tool_failure_count"), field("tool"),
           x.tool, field("failures"), x.failures);
}

/// Tokens of model calls: as their providers reported them or, for a call
/// that reported none, estimated (`estimate_tokens` of its request and its
/// answer) and counted in `estimated_calls`.
struct usage_count {
  uint64_t input_tokens = 0;
  uint64_t output_tokens = 0;
  /// The model calls counted.
  uint32_t model_calls = 0;
  /// Of those, the calls whose tokens are estimated.
  uint32_t estimated_calls = 0;

  usage_count& operator+=(const usage_count& other) {
    input_tokens += other.input_tokens;
    output_tokens += other.output_tokens;
    model_calls += other.model_calls;
    estimated_calls += other.estimated_calls;
    return *this;
  }

  bool empty() const {
    return model_calls == 0 && input_tokens == 0 && output_tokens == 0;
  }
};

inline bool operator==(const usage_count& x, const usage_count& y) {
  return x.input_tokens == y.input_tokens && x.output_tokens == y.output_tokens
         && x.model_calls == y.model_calls
         && x.estimated_calls == y.estimated_calls;
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, usage_count& x) {
  constexpr auto omit = field_form::omit_default;
  return f(caf::meta::type_name("keel::usage_count"),
           field("input_tokens", omit), x.input_tokens,
           field("output_tokens", omit), x.output_tokens,
           field("model_calls", omit), x.model_calls,
           field("estimated_calls", omit), x.estimated_calls);
}

/// The durable record of one thread (column family `sessions`).
struct session_record {
  /// Thread id (also the agent id).
  std::string thread;
  /// Parent thread id for sub-agents; empty for roots.
  std::string parent;
  /// Provider pool that answers this thread.
  std::string pool;
  /// The model that answered the thread last, as its provider named it;
  /// empty until one has (a spawned child starts with its parent's).
  std::string model;
  /// The provider that answered the thread last; empty until one has.
  std::string provider;
  /// Current lifecycle state.
  session_state state = session_state::suspended;
  /// Creation time.
  millis created_at = 0;
  /// Set by the recovery on boot when it found the session ACTIVE (the node
  /// died while the thread was live): the thread's next turn carries the
  /// recovery prompt, and its commit clears the mark. 0 otherwise.
  millis recovered_at = 0;
  /// Opaque provider state: stored and handed back, never interpreted.
  std::string provider_state;
  /// Tools that failed in this thread, with how often; one that reached
  /// `tools_config::disable_after` is no longer offered to the model here.
  std::vector<tool_failure_count> tool_failures;
  /// When an operator paused the thread (it answers messages with the
  /// offline text until resumed); 0 while it is not paused.
  millis paused_at = 0;
  /// The agent answering the thread (`agents[].name`), bound when the
  /// thread was created; empty in records written before agents, which
  /// read as the agent `default`.
  std::string agent;
  /// Every model call of the thread's stored turns, running totals: the
  /// sum of its messages' log entries' usage.
  usage_count usage;
  /// The part of `usage` that the inbox front's turn has used so far (its
  /// steps' calls), so a turn resumed after a restart counts on from it;
  /// cleared when the turn's answer commits.
  usage_count turn_usage;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, session_record& x) {
  // `provider` and `recovered_at` are missing in records written before the
  // crash recovery stored them.
  return f(caf::meta::type_name("keel::session_record"), field("thread"),
           x.thread, field("parent"), x.parent, field("pool"), x.pool,
           field("model"), x.model, field("provider", field_form::optional),
           x.provider, field("state"), x.state, field("created_at"),
           x.created_at, field("recovered_at", field_form::optional),
           x.recovered_at, field("provider_state"), x.provider_state,
           field("tool_failures", field_form::omit_default), x.tool_failures,
           field("paused_at", field_form::omit_default), x.paused_at,
           field("agent", field_form::omit_default), x.agent,
           field("usage", field_form::embedded), x.usage,
           field("turn_usage", field_form::optional), x.turn_usage);
}

/// The agent `session` is bound to: its `agent`, or `default` for a
/// session written before agents.
const std::string& agent_of(const session_record& session);

/// One parent -> child link of the agent tree (column family `tree`, key
/// `parent + '/' + child`). Written with the child's session record, in the
/// same synced batch, before the spawn is acknowledged.
struct tree_link {
  std::string parent;
  std::string child;
  millis created_at = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, tree_link& x) {
  return f(caf::meta::type_name("keel::tree_link"), field("parent"), x.parent,
           field("child"), x.child, field("created_at"), x.created_at);
}

/// A message one thread sends another (column family `outbox`, key
/// `from + '/' + 8-byte big-endian seq`): the log of messages between
/// threads. Written in the same batch as the turn that produced it; removed
/// in the same batch that appends it to the target's inbox (the "delivered"
/// mark), so it is always in exactly one of the two places. The target
/// deduplicates by `client_id`, so delivering it again after a crash is
/// harmless.
struct outbox_entry {
  /// The sending thread.
  std::string from;
  /// A sequence number of the sender's thread reserved for this message
  /// (taken after the turn's log entry; the log has no entry with it).
  seq_t seq = 0;
  /// The target thread.
  std::string to;
  /// The deduplication key in the target: `agent:` + from + `:` + seq.
  std::string client_id;
  /// The message text as the target's model sees it.
  std::string text;
  millis created_at = 0;
  /// Messages between threads since the client's message this one follows
  /// from, this one included (see `agent_limits::hop_budget`).
  uint32_t hops = 0;
  /// For a client's message (never stored in the outbox): the agent it
  /// names, empty if none.
  std::string agent;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, outbox_entry& x) {
  return f(caf::meta::type_name("keel::outbox_entry"), field("from"), x.from,
           field("seq"), x.seq, field("to"), x.to, field("client_id"),
           x.client_id, field("text"), x.text, field("created_at"),
           x.created_at, field("hops", field_form::omit_default), x.hops,
           field("agent", field_form::omit_default), x.agent);
}

/// Returns the deduplication key of a message from thread `from`, log entry
/// `seq`: `agent:<from>:<seq>`.
std::string agent_client_id(const std::string& from, seq_t seq);

/// The prefix of every `agent_client_id`. Clients may not use it: a client
/// id equal to a future agent message's id would make that message look like
/// a duplicate and drop it.
inline constexpr std::string_view agent_client_id_prefix = "agent:";

/// True if `id` is reserved for messages between agents.
bool reserved_client_id(std::string_view id);

/// Something that happened to a dead letter after it was written: a
/// scheduled or operator retry and its outcome, or an operator's drop.
struct dead_letter_event {
  millis at = 0;
  /// "scheduled retry", "operator retry" or "operator drop".
  std::string action;
  /// "delivered", the error of a failed retry, or the drop's reason.
  std::string outcome;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, dead_letter_event& x) {
  return f(caf::meta::type_name("keel::dead_letter_event"), field("at"), x.at,
           field("action"), x.action, field("outcome"), x.outcome);
}

/// An outbox entry that could not be delivered (column family
/// `dead_letters`, key `from + '/' + 8-byte big-endian seq`), with its
/// retry schedule. Records written before the schedule existed read as
/// pending with no retry made and none scheduled: the queue schedules them
/// when it first sees them.
struct dead_letter {
  outbox_entry entry;
  /// Why it could not be delivered (e.g. "target thread t9 has no session").
  std::string reason;
  /// When it was moved out of the outbox: its first failed attempt.
  millis at = 0;
  /// Where it stands.
  dead_letter_status status = dead_letter_status::pending;
  /// Scheduled retries made so far.
  uint32_t retries = 0;
  /// The last attempt (the first one: `at`).
  millis last_attempt_at = 0;
  /// When the next scheduled retry is due; 0 when none is.
  millis next_retry_at = 0;
  /// Retries and operator actions, oldest first.
  std::vector<dead_letter_event> events;
  /// Set for a reply no outbound channel could deliver: the channels it
  /// failed on (`entry.from` and `entry.seq` are the reply's thread and log
  /// entry, `entry.to` is empty). Empty for a message between threads.
  std::vector<std::string> channels;
  /// A reply's letter: the message the reply answers.
  seq_t reply_to = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, dead_letter& x) {
  return f(caf::meta::type_name("keel::dead_letter"),
           field("entry", field_form::embedded), x.entry, field("reason"),
           x.reason, field("at"), x.at, field("status", field_form::optional),
           x.status, field("retries", field_form::omit_default), x.retries,
           field("last_attempt_at", field_form::omit_default),
           x.last_attempt_at, field("next_retry_at", field_form::omit_default),
           x.next_retry_at, field("events", field_form::omit_default), x.events,
           field("channels", field_form::omit_default), x.channels,
           field("reply_to", field_form::omit_default), x.reply_to);
}

/// The id operators name a dead letter by: `from/seq` (thread ids hold no
/// '/').
std::string dead_letter_id(const dead_letter& x);

/// Splits a `dead_letter_id` into thread and seq; nullopt if `id` is not
/// one.
std::optional<std::pair<std::string, seq_t>>
parse_dead_letter_id(std::string_view id);

/// A reply on its way to the outbound channels its thread is bound to
/// (column family `deliveries`, key `thread/seq` of the reply). Written in
/// the batch that commits the reply, so it costs no sync of its own;
/// rewritten as channels deliver, removed once none is left or when the
/// reply becomes a dead letter.
struct reply_delivery {
  std::string thread;
  /// The reply's log entry, and the message it answers.
  seq_t seq = 0;
  seq_t reply_to = 0;
  std::string text;
  /// When the reply was committed.
  millis at = 0;
  /// The channels it has yet to reach.
  std::vector<std::string> channels;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, reply_delivery& x) {
  return f(caf::meta::type_name("keel::reply_delivery"), field("thread"),
           x.thread, field("seq"), x.seq, field("reply_to"), x.reply_to,
           field("text"), x.text, field("at"), x.at, field("channels"),
           x.channels);
}

/// What the node's owner was told about one kind and subject (column family
/// `notices`, key `kind/subject`): the latest notice, and how many were
/// suppressed since because its dedup window was still open. A restart
/// reads them back, so it does not send again what a window suppresses.
struct owner_notice {
  notice_kind kind = notice_kind::all_models_failed;
  /// What it is about: a pool, a channel, a tool, a thread, a dead letter's
  /// destination.
  std::string subject;
  /// The message, one or two sentences.
  std::string text;
  /// When it was raised (and sent).
  millis at = 0;
  notice_status status = notice_status::pending;
  /// Why the owner's channel did not take it (status `failed`).
  std::string error;
  /// Notices of the same kind and subject raised since `at` and suppressed,
  /// and the last of them.
  uint64_t suppressed = 0;
  millis last_suppressed_at = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, owner_notice& x) {
  return f(caf::meta::type_name("keel::owner_notice"), field("kind"), x.kind,
           field("subject"), x.subject, field("text"), x.text, field("at"),
           x.at, field("status"), x.status,
           field("error", field_form::omit_default), x.error,
           field("suppressed", field_form::omit_default), x.suppressed,
           field("last_suppressed_at", field_form::omit_default),
           x.last_suppressed_at);
}

/// The store key of `x`: `kind/subject`.
std::string notice_key(const owner_notice& x);

/// An accepted message that has not been answered yet (column family
/// `inbox`). It stays until the turn that answers it commits.
struct inbox_entry {
  /// Sequence number of the user message in the thread's log.
  seq_t seq = 0;
  /// The client's message id, unique per thread (deduplication key).
  std::string client_id;
  /// The message text.
  std::string text;
  /// When the node accepted the message.
  millis accepted_at = 0;
  /// For a message from another thread, its `outbox_entry::hops`; 0 for a
  /// client's.
  uint32_t hops = 0;
  /// The agent the message asked for when the node has none of that name
  /// and its system agent answers instead (the model is told); else empty.
  std::string asked_agent;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, inbox_entry& x) {
  return f(caf::meta::type_name("keel::inbox_entry"), field("seq"), x.seq,
           field("client_id"), x.client_id, field("text"), x.text,
           field("accepted_at"), x.accepted_at,
           field("hops", field_form::omit_default), x.hops,
           field("asked_agent", field_form::omit_default), x.asked_agent);
}

/// What kind of visible event a log entry records.
enum class log_kind : uint8_t {
  /// A message from the user (client).
  user,
  /// The assistant's reply to a user message.
  reply,
  /// A descriptive error posted in place of a reply.
  error,
  /// A step of a turn's tool loop: a tool's result, or a tool disabled
  /// for the thread. Not an answer: the turn goes on.
  tool,
};

/// Returns the stored name of `x` ("user", "reply", "error").
const char* to_string(log_kind x);

/// Parses a stored log kind name.
std::optional<log_kind> parse_log_kind(const std::string& str);

/// Where an accepted message stands as a task. Stored in its log entry as
/// the batches that already go to the store reach it: `queued` with the
/// accept, `in_progress` with the first step its turn commits, `retried`
/// with the next write after its turn ran again (a failed commit, a
/// restart), `succeeded` or `dead_lettered` with the answer. `dispatched`
/// (the turn started; nothing is written then) is only ever live.
enum class task_state : uint8_t {
  /// Not recorded: an entry of an older build, or not a message.
  none,
  queued,
  dispatched,
  in_progress,
  retried,
  /// Answered with a reply.
  succeeded,
  /// Answered with an error: no attempt follows.
  dead_lettered,
};

/// Returns the stored name of `x` (e.g. "in_progress").
const char* to_string(task_state x);

/// Parses a stored task state name.
std::optional<task_state> parse_task_state(const std::string& str);

/// One entry of a thread's visible history (column family `log`).
struct log_entry {
  /// Position in the thread.
  seq_t seq = 0;
  /// What this entry is.
  log_kind kind = log_kind::user;
  /// For user messages the client's id; for replies and errors the client id
  /// of the message they answer.
  std::string client_id;
  /// For replies and errors: the sequence number of the answered message.
  seq_t reply_to = 0;
  /// The text shown to the user.
  std::string text;
  /// For errors: the machine-readable error code; empty otherwise.
  std::string code;
  /// Which provider produced a reply (empty otherwise).
  std::string provider;
  /// When the entry was written.
  millis at = 0;
  /// For tool steps: the tool's name (empty otherwise).
  std::string tool;
  /// For messages: where the message stands as a task, its turn's runs
  /// after the first, and when that was last written.
  task_state task = task_state::none;
  uint32_t attempts = 0;
  millis task_at = 0;
  /// For messages: the tokens of the model calls of its turn (so far, while
  /// it runs).
  usage_count usage;
  /// For errors: what operators read beside the user's `text` (a guard's
  /// "Forced stop: ..." report); empty otherwise.
  std::string detail;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, log_entry& x) {
  constexpr auto omit = field_form::omit_default;
  return f(caf::meta::type_name("keel::log_entry"), field("seq"), x.seq,
           field("kind"), x.kind, field("client_id"), x.client_id,
           field("reply_to", omit), x.reply_to, field("text"), x.text,
           field("code", omit), x.code, field("provider", omit), x.provider,
           field("at"), x.at, field("tool", omit), x.tool, field("task", omit),
           x.task, field("attempts", omit), x.attempts, field("task_at", omit),
           x.task_at, field("usage", field_form::embedded), x.usage,
           field("detail", omit), x.detail);
}

/// The log entry of an accepted message: `queued` as of its acceptance.
log_entry message_log_entry(const inbox_entry& entry);

/// A function call the model asks for in its answer (OpenAI `tool_calls`,
/// Anthropic `tool_use` content blocks).
struct tool_call {
  /// The provider's id of the call.
  std::string id;
  /// The function name.
  std::string name;
  /// The arguments as JSON text, exactly as the provider sent them.
  std::string arguments;
};

bool operator==(const tool_call& x, const tool_call& y);

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, tool_call& x) {
  return f(caf::meta::type_name("keel::tool_call"), field("id"), x.id,
           field("name"), x.name, field("arguments"), x.arguments);
}

/// What an entry of a tool exchange holds besides its text: the calls an
/// "assistant" entry asks for, or the call a "tool" entry answers.
struct tool_exchange {
  /// For "assistant": the tool calls the model asked for, in order.
  std::vector<tool_call> calls;
  /// For "tool": the id of the call this result answers, and its tool.
  std::string call_id;
  std::string tool;

  bool empty() const {
    return calls.empty() && call_id.empty() && tool.empty();
  }
};

bool operator==(const tool_exchange& x, const tool_exchange& y);

/// The role of a context entry: "user", "assistant", "tool", "system", or
/// none (empty, a default entry's). One byte: an index into the names, all
/// of them known to the build, so an entry holds no string for it. A
/// record naming any other role is corrupt (no build writes one) and fails
/// to load with the name it holds.
class context_role {
public:
  /// None (the empty name).
  context_role() = default;

  /// One of the names above, as written in the code; throws
  /// std::invalid_argument for any other.
  context_role(const char* name);

  /// The role named `name`, if it is one.
  static std::optional<context_role> parse(std::string_view name);

  const std::string& str() const;

  operator const std::string&() const {
    return str();
  }

  friend bool operator==(const context_role& x, const context_role& y) {
    return x.index_ == y.index_;
  }

  friend bool operator!=(const context_role& x, const context_role& y) {
    return !(x == y);
  }

  friend bool operator==(const context_role& x, const char* y) {
    return x.str() == y;
  }

  friend bool operator!=(const context_role& x, const char* y) {
    return !(x == y);
  }

  friend std::string operator+(const context_role& x, const char* y) {
    return x.str() + y;
  }

private:
  explicit context_role(uint8_t index) : index_(index) {
    // nop
  }

  uint8_t index_ = 0;
};

std::string to_string(const context_role& x);

/// The error of a record naming a role no build writes.
caf::error unknown_role(const std::string& name);

std::ostream& operator<<(std::ostream& out, const context_role& x);

/// One message of the model's working memory (column family `context`).
/// Roles: "user", "assistant" (with `tool_calls` when the model asked for
/// tools), "tool" (the result of call `tool_call_id` of tool `tool_name`)
/// and "system" (notes for the model: recovery, summaries of compacted
/// entries). A conversation holds its whole context, so an entry is kept
/// small (64 bytes with libstdc++ on x86-64): the role is one byte, and the
/// tool exchange, which most entries lack, lives apart.
struct context_entry {
  context_entry() = default;
  context_entry(seq_t seq, context_role role, std::string content)
    : seq(seq), role(role), content(std::move(content)) {
    // nop
  }

  /// The entry's place in the context, which is in seq order: taken from
  /// the thread's sequence when the entry joined the context (an answer's
  /// is its log entry's).
  seq_t seq = 0;
  context_role role;
  /// The message content.
  std::string content;
  /// For "user": the message's seq in the inbox and the log, taken when it
  /// was accepted (earlier than `seq` when messages queued). 0: `seq` is
  /// the message's (records stored before the two were kept apart).
  seq_t message_seq = 0;

  /// The entry's tool exchange; an empty one if it has none.
  const tool_exchange& tools() const;

  const std::vector<tool_call>& tool_calls() const {
    return tools().calls;
  }

  const std::string& tool_call_id() const {
    return tools().call_id;
  }

  const std::string& tool_name() const {
    return tools().tool;
  }

  /// Replaces the tool exchange (an empty one holds nothing).
  void set_tools(tool_exchange exchange);

  /// For "assistant": the calls the model asked for.
  void set_tool_calls(std::vector<tool_call> calls);

  /// For "tool": the call this entry answers, and its tool.
  void set_tool_result(std::string call_id, std::string tool);

private:
  /// A tool exchange shared by the copies of an entry.
  struct shared_tools : caf::ref_counted {
    explicit shared_tools(tool_exchange value) : value(std::move(value)) {
      // nop
    }

    tool_exchange value;
  };

  /// Null when the entry has no tool exchange. Never changed in place, so
  /// copies of an entry share it.
  caf::intrusive_ptr<const shared_tools> tools_;
};

/// The role travels (and is stored) as its name, and the tool exchange as
/// three fields of the entry, as when they were members.
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, context_entry& x) {
  // Starts from the entry's own, also when loading: a reader may visit the
  // fields in several passes, each ending with `adopt`.
  auto role = x.role.str();
  auto tools = x.tools();
  auto adopt = caf::meta::load_callback([&]() -> caf::error {
    auto known = context_role::parse(role);
    if (!known)
      return unknown_role(role);
    x.role = *known;
    x.set_tools(std::move(tools));
    return caf::none;
  });
  return f(caf::meta::type_name("keel::context_entry"), field("seq"), x.seq,
           field("role"), role, field("content"), x.content,
           field("tool_calls", field_form::omit_default), tools.calls,
           field("tool_call_id", field_form::omit_default), tools.call_id,
           field("tool_name", field_form::omit_default), tools.tool,
           field("message_seq", field_form::omit_default), x.message_seq,
           adopt);
}

bool operator==(const context_entry& x, const context_entry& y);

/// Everything a conversation actor needs to resume a thread.
struct thread_snapshot {
  /// True if the thread has a session record (it was seen before).
  bool exists = false;
  /// The session record, valid if `exists`.
  session_record session;
  /// Unanswered messages in order.
  std::vector<inbox_entry> inbox;
  /// The model's working memory in order.
  std::vector<context_entry> context;
  /// The next free sequence number.
  seq_t next_seq = 1;
  /// Messages this thread sent that are not delivered yet, in seq order.
  std::vector<outbox_entry> outbox;
  /// The thread's children (from the tree), in key order.
  std::vector<std::string> children;
  /// True if records that could not be read were just moved to quarantine:
  /// the thread starts fresh as far as they go, and says so.
  bool quarantined = false;
  /// True if the quarantine took the committed steps of the first inbox
  /// message's turn: that message is answered with an error, not run again.
  bool steps_lost = false;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, thread_snapshot& x) {
  return f(caf::meta::type_name("keel::thread_snapshot"), x.exists, x.session,
           x.inbox, x.context, x.next_seq, x.outbox, x.children, x.quarantined,
           x.steps_lost);
}

/// Everything stored about one thread (for the invariant checker).
struct thread_dump {
  std::string thread;
  /// The whole log in order.
  std::vector<log_entry> log;
  /// Unanswered messages in order.
  std::vector<inbox_entry> inbox;
  /// The client id index: client id -> seq of the user message.
  std::vector<std::pair<std::string, seq_t>> client_ids;
  /// The thread's undelivered outgoing messages in order.
  std::vector<outbox_entry> outbox;
  /// The model's working memory in order (read so that every record of the
  /// thread is checked).
  std::vector<context_entry> context;
};

/// A message to append to a thread's inbox (and log) with one synced write.
struct accept_request {
  /// The thread.
  std::string thread;
  /// True for the first message of a thread: `session` is written with it.
  bool create_session = false;
  /// The session record to create, valid if `create_session`.
  session_record session;
  /// The entry to append (its `seq` assigned by the conversation actor).
  inbox_entry entry;
  /// For a message from another thread: the outbox entry it came from
  /// (`from` thread and `seq`), removed in the same batch. Empty `from` for
  /// client messages.
  std::string outbox_from;
  seq_t outbox_seq = 0;
  /// In a cluster, the epoch of the thread's shard the conversation loaded
  /// the thread under (`shard_table::tenure`): the write commits only while
  /// the node still holds the shard at it. 0: not fenced by a view.
  uint64_t tenure = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, accept_request& x) {
  return f(caf::meta::type_name("keel::accept_request"), x.thread,
           x.create_session, x.session, x.entry, x.outbox_from, x.outbox_seq,
           x.tenure);
}

/// The outcome of an accept: where the message is, and whether it had been
/// accepted before under the same client id.
struct accept_result {
  /// Sequence number of the (possibly earlier) user message.
  seq_t seq = 0;
  /// True if the client id was already known: nothing was written.
  bool duplicate = false;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, accept_result& x) {
  return f(caf::meta::type_name("keel::accept_result"), x.seq, x.duplicate);
}

/// Everything one turn changes, committed in one synced WriteBatch: the
/// inbox entry's removal, the new context entries and the new log entries.
struct turn_commit {
  /// The thread.
  std::string thread;
  /// The inbox entry this turn answered (removed by the commit).
  seq_t inbox_seq = 0;
  /// Context entries to add.
  std::vector<context_entry> context;
  /// Log entries to add (the reply or the error).
  std::vector<log_entry> log;
  /// When set, the thread's session record is rewritten with the commit
  /// (provider used, recovery mark cleared, CLOSED on cancel).
  bool write_session = false;
  session_record session;
  /// Messages to other threads (to children, or the reply forwarded to the
  /// parent), written to the outbox with the commit.
  std::vector<outbox_entry> outbox;
  /// The conversation's tenure, as in `accept_request`.
  uint64_t tenure = 0;
  /// A step within a turn (a tool call or result, a compaction): the inbox
  /// entry stays, the turn goes on.
  bool keeps_inbox = false;
  /// Context entries removed in the same batch (a compaction retires what
  /// its summary replaces), by seq.
  std::vector<seq_t> retire_context;
  /// The reply for the thread's outbound channels, if it is bound to any.
  std::vector<reply_delivery> deliveries;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, turn_commit& x) {
  return f(caf::meta::type_name("keel::turn_commit"), x.thread, x.inbox_seq,
           x.context, x.log, x.write_session, x.session, x.outbox, x.tenure,
           x.keeps_inbox, x.retire_context, x.deliveries);
}

/// A spawn of a child agent: the child's session record (its `parent` set)
/// and link, written in one synced batch.
struct spawn_request {
  session_record child;
  tree_link link;
  /// A new child is refused (`agent_limit`) if its parent has this many
  /// children already, or if it would be deeper in its tree than
  /// `max_depth` (a root is at depth 0). 0: no limit.
  size_t max_children = 0;
  size_t max_depth = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, spawn_request& x) {
  return f(caf::meta::type_name("keel::spawn_request"), x.child, x.link,
           x.max_children, x.max_depth);
}

/// The outcome of a spawn: `created` is false when the same child of the
/// same parent existed already (a resent spawn; nothing was written).
struct spawn_result {
  std::string parent;
  std::string child;
  bool created = false;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, spawn_result& x) {
  return f(caf::meta::type_name("keel::spawn_result"), x.parent, x.child,
           x.created);
}

/// One step of a recovery on boot: how many items it handled and how long
/// it took.
struct recovery_step {
  /// "read_sessions", "rebuild_tree", "suspend_active", "scan_undelivered",
  /// "resume_roots", "resume_children".
  std::string name;
  uint64_t count = 0;
  /// Duration in microseconds.
  int64_t micros = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, recovery_step& x) {
  return f(caf::meta::type_name("keel::recovery_step"), field("name"), x.name,
           field("count"), x.count, field("micros"), x.micros);
}

/// What the recovery on boot found and did, stored in `meta` under
/// `last_recovery` and served by `keelctl recovery`.
struct recovery_report {
  /// Wall clock at the start and end of the recovery.
  millis started_at = 0;
  millis finished_at = 0;
  /// Session records read, and how many of them were roots.
  uint64_t sessions = 0;
  uint64_t roots = 0;
  /// Tree links read.
  uint64_t links = 0;
  /// Sessions found ACTIVE and marked SUSPENDED.
  uint64_t suspended = 0;
  /// Unanswered inbox entries, and the threads holding them.
  uint64_t inbox_messages = 0;
  uint64_t inbox_threads = 0;
  /// Outbox entries (messages between threads) not delivered yet: re-sent.
  uint64_t outbox_messages = 0;
  /// Threads started at boot: roots with pending work, then children whose
  /// pending messages demand them.
  uint64_t roots_resumed = 0;
  uint64_t children_resumed = 0;
  /// Children of CLOSED parents found still open: their cancel is finished.
  uint64_t cancels_finished = 0;
  /// Inconsistencies found and how they were handled (named, one per line).
  std::vector<std::string> problems;
  /// The steps in order.
  std::vector<recovery_step> steps;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, recovery_report& x) {
  // The counters are optional so that a report stored by an older build
  // (with fewer counters) still reads.
  constexpr auto optional = field_form::optional;
  return f(caf::meta::type_name("keel::recovery_report"), field("started_at"),
           x.started_at, field("finished_at"), x.finished_at,
           field("sessions", optional), x.sessions, field("roots", optional),
           x.roots, field("links", optional), x.links,
           field("suspended", optional), x.suspended,
           field("inbox_messages", optional), x.inbox_messages,
           field("inbox_threads", optional), x.inbox_threads,
           field("outbox_messages", optional), x.outbox_messages,
           field("roots_resumed", optional), x.roots_resumed,
           field("children_resumed", optional), x.children_resumed,
           field("cancels_finished", optional), x.cancels_finished,
           field("problems", optional), x.problems, field("steps"), x.steps);
}

/// One agent of the agent tree (a thread with a session) with its children,
/// as GET /api/v1/agents and `keelctl tree --agents` show it.
struct agent_info {
  std::string thread;
  /// Empty for roots.
  std::string parent;
  /// The session state's stored name ("ACTIVE", "SUSPENDED", "CLOSED").
  std::string state;
  std::string pool;
  std::string model;
  std::string provider;
  millis created_at = 0;
  /// Child thread ids, from the tree.
  std::vector<std::string> children;
  /// Tools that failed in the thread, with how often (from the session).
  std::vector<tool_failure_count> tool_failures;
  /// When an operator paused the thread; 0 if it is not paused.
  millis paused_at = 0;
  /// The agent answering the thread (`agent_of` its session).
  std::string agent;
  /// Its model calls' tokens (the session's totals).
  usage_count usage;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, agent_info& x) {
  constexpr auto optional = field_form::optional;
  return f(caf::meta::type_name("keel::agent_info"), record_name("agent"),
           field("thread"), x.thread, field("parent"), x.parent, field("state"),
           x.state, field("pool", optional), x.pool, field("model", optional),
           x.model, field("provider", optional), x.provider,
           field("created_at", optional), x.created_at, field("children"),
           x.children, field("tool_failures", field_form::omit_default),
           x.tool_failures, field("paused_at", field_form::omit_default),
           x.paused_at, field("agent", optional), x.agent,
           field("usage", field_form::embedded), x.usage);
}

/// A page of a thread's history.
struct history_page {
  /// The thread.
  std::string thread;
  /// Entries with `seq > after`, in order, at most `limit` of them.
  std::vector<log_entry> entries;
  /// True if more entries follow the last one returned.
  bool more = false;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, history_page& x) {
  return f(caf::meta::type_name("keel::history_page"), x.thread, x.entries,
           x.more);
}

/// A thread event pushed to subscribers (status changes and replies).
struct thread_event {
  /// The thread.
  std::string thread;
  /// The event as a ready-to-send server frame (JSON text).
  std::string frame;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, thread_event& x) {
  return f(caf::meta::type_name("keel::thread_event"), x.thread, x.frame);
}

/// Checks a thread id: 1 to 128 characters of `[A-Za-z0-9._:-]`. The
/// restricted alphabet keeps RocksDB key prefixes unambiguous.
bool valid_thread_id(const std::string& id);

/// Checks an agent name: 1 to 64 characters of `[A-Za-z0-9._-]`.
bool valid_agent_name(const std::string& name);

/// What `valid_agent_name` accepts, for messages.
inline constexpr const char* agent_rule
  = "1 to 64 characters from A-Z, a-z, 0-9, '.', '_' and '-'";

/// Checks a client message id: 1 to 128 printable ASCII characters.
bool valid_client_id(const std::string& id);

/// The durable health of one provider of one pool (column family `health`,
/// key `pool + '/' + provider`), so cooldowns survive a restart. Times are
/// wall clock; an actor converts them to its own clock when restoring.
struct provider_health_record {
  std::string pool;
  std::string provider;
  /// "healthy", "degraded" or "unhealthy" ("down" in records of older
  /// builds, read as unhealthy).
  std::string status = "healthy";
  /// "closed", "open" or "half_open".
  std::string breaker = "closed";
  /// Failures (counting against the provider) since the last success.
  uint32_t consecutive_failures = 0;
  /// Text and class (see `error_class`) of the last failure; empty if none.
  std::string last_error;
  std::string last_error_class;
  /// Last success; 0 if never.
  millis last_success = 0;
  /// End of the cooldown while unhealthy; 0 otherwise.
  millis cooldown_until = 0;
  /// Calls and failures since the pool started (not persisted totals).
  uint64_t calls = 0;
  uint64_t failures = 0;
  /// Last failure (of any class); 0 if never.
  millis last_failure = 0;
};

template <class Inspector>
typename Inspector::result_type
inspect(Inspector& f, provider_health_record& x) {
  // `calls`, `failures` and `last_failure` may be missing: records written
  // before they were stored lack them.
  constexpr auto optional = field_form::optional;
  return f(caf::meta::type_name("keel::provider_health_record"), field("pool"),
           x.pool, field("provider"), x.provider, field("status"), x.status,
           field("breaker"), x.breaker, field("consecutive_failures"),
           x.consecutive_failures, field("last_error"), x.last_error,
           field("last_error_class"), x.last_error_class, field("last_success"),
           x.last_success, field("cooldown_until"), x.cooldown_until,
           field("calls", optional), x.calls, field("failures", optional),
           x.failures, field("last_failure", optional), x.last_failure);
}

/// What the recovery found to do, handed from the persistence actor (which
/// ran the on-disk steps before serving anything) to the orchestrator (which
/// resumes threads).
struct recovery_plan {
  /// True for the plan made at boot (its report is stored); false for the
  /// plan an orchestrator restart asks for (resume pending work only).
  bool boot = false;
  /// The report so far (steps 1-4); the orchestrator adds steps 5-6.
  recovery_report report;
  /// Root threads with pending work (inbox or outbox entries).
  std::vector<std::string> roots;
  /// Child threads with pending work.
  std::vector<std::string> children;
  /// Open threads under a CLOSED ancestor: an interrupted cancel.
  std::vector<std::string> cancels;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, recovery_plan& x) {
  return f(caf::meta::type_name("keel::recovery_plan"), x.boot, x.report,
           x.roots, x.children, x.cancels);
}

} // namespace keel
