#include "keel/config.hpp"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <set>
#include <utility>

#include <nlohmann/json.hpp>

#include "keel/accounts.hpp"
#include "keel/config_secrets.hpp"
#include "keel/file_modes.hpp"
#include "keel/strict_yaml.hpp"

namespace keel {

namespace {

using strict_yaml::contains;
using strict_yaml::describe;
using strict_yaml::indexed;
using strict_yaml::line_of;
using strict_yaml::map_reader;
using strict_yaml::no_limit;
using strict_yaml::one_of;
using strict_yaml::quote;
using strict_yaml::render_number;
using strict_yaml::strings;

// -- the schema's names -------------------------------------------------------

constexpr const char* top_level_keys[]
  = {"node",    "gateway",     "providers", "pools",    "tools",
     "threads", "supervision", "logging",   "shutdown", "storage",
     "cluster", "chaos",       "owner",     "delivery"};

constexpr const char* gateway_keys[] = {"host",
                                        "port",
                                        "token",
                                        "token_file",
                                        "admin_token",
                                        "admin_token_file",
                                        "allow_unauthenticated",
                                        "allow_query_token",
                                        "allowed_origins",
                                        "allowed_hosts",
                                        "max_frame_bytes",
                                        "max_text_bytes",
                                        "max_connections",
                                        "max_unauthenticated",
                                        "max_unauthenticated_per_address",
                                        "header_timeout",
                                        "max_queued_bytes",
                                        "write_timeout",
                                        "socket_send_buffer",
                                        "max_history_bytes",
                                        "max_requests_in_flight",
                                        "max_subscriptions_per_connection",
                                        "rate_limit",
                                        "io_threads",
                                        "tls"};

constexpr const char* tls_versions[] = {"1.2", "1.3"};

constexpr const char* provider_kinds[] = {"echo", "scripted", "openai",
                                          "anthropic"};

constexpr const char* http_provider_keys[] = {"base_url",
                                              "api_key",
                                              "headers",
                                              "connect_timeout",
                                              "first_byte_timeout",
                                              "total_timeout",
                                              "max_concurrency",
                                              "ca_file",
                                              "stream",
                                              "max_tokens",
                                              "max_response_bytes"};

constexpr const char* retry_keys[] = {"base_delay",      "multiplier",
                                      "max_delay",       "jitter",
                                      "retry_after_cap", "budget"};

constexpr const char* channel_keys[]
  = {"name",       "kind",    "url",   "secret",  "token",  "chat_id",
     "parse_mode", "threads", "retry", "timeout", "ca_file"};

constexpr const char* channel_kinds[] = {"webhook", "telegram"};

/// The keys of `owner.notices`: the kinds of notice, each a dedup window.
constexpr const char* notice_kind_names[]
  = {"all_models_failed",    "credits_exhausted",     "channel_unhealthy",
     "tool_disabled",        "dead_letter_abandoned", "agent_stuck",
     "dead_letters_pending", "provider_unauthorized"};

constexpr const char* telegram_parse_modes[] = {"Markdown", "MarkdownV2",
                                                "HTML", ""};

constexpr const char* channel_retry_keys[]
  = {"max_attempts", "base_delay", "multiplier", "max_delay", "jitter"};

constexpr const char* breaker_keys[] = {"failure_threshold", "probe_lead",
                                        "probe_timeout"};

constexpr const char* failure_classes[]
  = {"auth",       "rate_limit",      "billing",          "timeout",
     "overloaded", "model_not_found", "context_overflow", "invalid_request",
     "format",     "unknown"};

constexpr const char* tool_keys[]
  = {"name",    "description", "parameters", "command", "cwd",  "env",
     "timeout", "grace",       "output_cap", "limits",  "user", "group"};

constexpr const char* tool_limit_keys[] = {"memory", "cpu_time", "open_files",
                                           "processes", "file_size"};

/// Tools the runtime itself gives threads; `tools[]` cannot take their names.
constexpr const char* builtin_tools[] = {"spawn_agent", "message_agent"};

/// What tool names look like, for messages (the providers' function names).
constexpr const char* tool_name_expected
  = "1 to 64 characters from A-Z, a-z, 0-9, '_' and '-'";

constexpr const char* thread_keys[] = {"system_prompt",
                                       "idle_timeout",
                                       "pool",
                                       "max_inbox",
                                       "turn_timeout",
                                       "max_live",
                                       "max_stored_threads",
                                       "max_reply_bytes",
                                       "max_tool_output_bytes",
                                       "tools",
                                       "agent_tools",
                                       "guard",
                                       "disable_tool_after",
                                       "max_concurrent_tools",
                                       "compaction",
                                       "agents"};

constexpr const char* guard_keys[]
  = {"max_events",         "max_tool_calls",      "max_duration",
     "per_tool",           "repeated_call_limit", "repeated_error_limit",
     "similar_reply_limit"};

constexpr const char* compaction_keys[]
  = {"enabled",      "warn_at",     "compact_at",    "strip_over",
     "protect_last", "min_entries", "chunk_entries", "chunk_overlap"};

constexpr const char* agent_keys[] = {"max_children", "max_depth",
                                      "max_spawns_per_reply", "hop_budget"};

/// Smallest `providers[].context_window` (besides 0, "from the table").
constexpr int64_t min_context_window = 1024;

constexpr const char* log_formats[] = {"text", "json"};

constexpr const char* log_levels[] = {"trace", "debug", "info",
                                      "warn",  "error", "off"};

constexpr const char* storage_backends[] = {"rocksdb", "postgres"};
constexpr const char* scheduler_policies[] = {"sharing", "stealing"};

constexpr const char* cluster_keys[]
  = {"enabled",           "node_id",       "listen",
     "advertise",         "shards",        "lease_ttl",
     "heartbeat",         "route_timeout", "handoff_timeout",
     "rebalance_batch",   "token",         "tls",
     "insecure_plaintext"};

constexpr const char* cluster_tls_keys[] = {"cert", "key", "ca"};

/// Shortest `cluster.token` accepted when the cluster is on.
constexpr size_t min_cluster_token_size = 16;

/// `cluster.lease_ttl` must cover this many heartbeats.
constexpr int64_t heartbeats_per_lease = 3;

constexpr const char* supervisor_names[] = {"root", "providers",
                                            "conversations"};

constexpr const char* supervisor_keys[] = {"strategy", "max_restarts",
                                           "period",   "shutdown_timeout",
                                           "buffer",   "backoff"};

constexpr const char* backoff_keys[] = {"initial", "max", "multiplier",
                                        "reset_after", "jitter"};

/// What node names and cluster node ids look like, for messages.
constexpr const char* id_expected
  = "1 to 64 characters from A-Z, a-z, 0-9, '.', '_' and '-'";

/// Whether `x` is a valid node name or cluster node id (`id_expected`).
bool is_valid_id(const std::string& x) {
  auto valid_char = [](char c) {
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z')
           || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
  };
  return !x.empty() && x.size() <= 64
         && std::all_of(x.begin(), x.end(), valid_char);
}

/// Whether `x` is 1 to 64 characters of [A-Za-z0-9_-]: a tool or channel
/// name (`tool_name_expected`).
bool is_plain_name(const std::string& x) {
  auto valid_char = [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-';
  };
  return !x.empty() && x.size() <= 64
         && std::all_of(x.begin(), x.end(), valid_char);
}

/// Whether `x` is a valid environment variable name: letters, digits and
/// `_`, not starting with a digit.
bool is_valid_env_name(const std::string& x) {
  auto valid_char = [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
  };
  return !x.empty() && !std::isdigit(static_cast<unsigned char>(x.front()))
         && std::all_of(x.begin(), x.end(), valid_char);
}

/// An address written "host:port" or, for IPv6, "[address]:port".
struct host_port {
  /// The host name or address, without brackets.
  std::string host;
  uint16_t port = 0;
};

/// What `parse_host_port` accepts, for messages.
constexpr const char* host_port_expected
  = "host:port with a port in 1..65535 (IPv6 in brackets, as in "
    "[::1]:7701)";

/// Parses "host:port" (a host name or IPv4 address of A-Z, a-z, 0-9, '.',
/// '_' and '-') or "[IPv6]:port", with a port in 1..65535.
std::optional<host_port> parse_host_port(std::string_view text) {
  auto colon = text.rfind(':');
  if (colon == std::string_view::npos)
    return std::nullopt;
  auto port = parse_digits(text.substr(colon + 1));
  if (!port || *port < 1 || *port > 65535)
    return std::nullopt;
  auto host = text.substr(0, colon);
  auto name_char = [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_'
           || c == '-';
  };
  auto ipv6_char = [](char c) {
    return std::isxdigit(static_cast<unsigned char>(c)) || c == ':' || c == '.';
  };
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
    if (host.find(':') == std::string_view::npos
        || !std::all_of(host.begin(), host.end(), ipv6_char))
      return std::nullopt;
  } else if (host.empty()
             || !std::all_of(host.begin(), host.end(), name_char)) {
    return std::nullopt;
  }
  return host_port{std::string{host}, static_cast<uint16_t>(*port)};
}

/// Renders `host` and `port` as `parse_host_port` reads them back.
std::string render_host_port(const std::string& host, uint16_t port) {
  auto bracketed = host.find(':') != std::string::npos;
  return (bracketed ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

/// Fills the cluster keys whose defaults come from other keys: `node_id`
/// from `node.name`, `advertise` from `listen`.
void fill_cluster_defaults(node_config& cfg) {
  auto& cl = cfg.cluster;
  if (cl.node_id.empty())
    cl.node_id = cfg.name;
  if (cl.advertise.empty())
    cl.advertise = render_host_port(cl.listen_host, cl.listen_port);
}

/// Upper bound of `max_restarts` and `buffer`: far beyond any sane value,
/// low enough that a typo of a few extra digits is caught.
constexpr int64_t supervision_limit = 1'000'000;

/// The names of `xs` (providers or pools), in order.
template <class T>
std::vector<std::string> names_of(const std::vector<T>& xs) {
  std::vector<std::string> result;
  for (auto& x : xs)
    result.push_back(x.name);
  return result;
}

// -- the parser ---------------------------------------------------------------

/// Reads a YAML document into a `node_config`, throwing `strict_yaml::error`
/// at the first problem. Sections are read in the order of
/// `top_level_keys`, then `validate` checks the fields against each other.
class parser : public strict_yaml::reader {
public:
  using reader::reader;

  node_config run(const YAML::Node& root);

private:
  /// Reads the list at `path` (see `read_list`) with the member
  /// `read_item(item, item_path)` for each item.
  template <class T, class Self>
  std::vector<T>
  read_each(const YAML::Node& node, const std::string& path,
            const std::string& expected,
            T (Self::*read_item)(const YAML::Node&, const std::string&)) {
    std::vector<T> result;
    auto items = read_list(node, path, expected);
    for (size_t i = 0; i < items.size(); ++i)
      result.push_back((this->*read_item)(items[i], indexed(path, i)));
    return result;
  }

  // -- sections ---------------------------------------------------------------

  void read_node(const map_reader& m, node_config& cfg);
  void read_gateway(const map_reader& m, gateway_config& cfg);
  void read_gateway_auth(const map_reader& m, gateway_config& cfg);
  void read_gateway_limits(const map_reader& m, gateway_config& cfg);
  /// Reads the secret at `key` or, from its first line, the file named at
  /// `key_file`; errors never show the secret.
  std::string read_secret(const map_reader& m, const std::string& key,
                          const std::string& key_file);
  /// Reads the list at `key` (`list_expected` in errors), each item a
  /// string `valid` accepts (`item_expected` in errors).
  std::vector<std::string>
  read_checked_strings(const map_reader& m, const std::string& key,
                       const std::string& list_expected,
                       const std::string& item_expected,
                       bool (*valid)(const std::string&));
  std::vector<std::string> read_origins(const map_reader& m);
  std::vector<std::string> read_hosts(const map_reader& m);
  void read_rate_limit(const map_reader& m, rate_limit_config& cfg);
  void read_tls(const map_reader& m, tls_config& cfg);
  void read_providers(const map_reader& top, node_config& cfg);
  provider_config read_provider(const YAML::Node& node,
                                const std::string& path);
  void read_http_provider(const map_reader& m, provider_config& cfg);
  void read_base_url(const map_reader& m, provider_config& cfg);
  void read_headers(const YAML::Node& node, const std::string& path,
                    std::map<std::string, std::string>& cfg);
  void read_http_limits(const map_reader& m, provider_config& cfg);
  scripted_step read_step(const YAML::Node& node, const std::string& path);
  void read_tool(const YAML::Node& node, const std::string& path,
                 scripted_step& cfg);
  void read_pools(const map_reader& top, node_config& cfg);
  void read_tools(const map_reader& top, node_config& cfg);
  tool_config read_tool_entry(const YAML::Node& node, const std::string& path);
  void read_tool_command(const map_reader& m, tool_config& cfg,
                         const nlohmann::ordered_json& parameters);
  void read_tool_limits(const map_reader& m, tool_config& cfg);
  void read_tool_rlimits(const map_reader& m, tool_limits& cfg);
  void read_tool_account(const map_reader& m, tool_config& cfg);
  /// Reads the JSON schema at `parameters` (a mapping with type: object).
  nlohmann::ordered_json read_parameters(const map_reader& m);
  /// Converts YAML to JSON: scalars by their plain YAML type (quoted ones
  /// are strings), lists to arrays, mappings to objects.
  nlohmann::ordered_json to_json(const YAML::Node& node,
                                 const std::string& path);
  nlohmann::ordered_json scalar_to_json(const YAML::Node& node,
                                        const std::string& path);
  /// Checks the `{name}` placeholders of command element `element` (at
  /// `path`) against the properties of `parameters`.
  void check_placeholders(const YAML::Node& node, const std::string& path,
                          const std::string& element,
                          const nlohmann::ordered_json& parameters) const;
  pool_config read_pool(const YAML::Node& node, const std::string& path);
  void read_retry(const map_reader& m, pool_config& cfg);
  void read_breaker(const map_reader& m, breaker_config& cfg);
  void read_cooldowns(const map_reader& m, cooldown_table& cfg);
  void read_threads(const map_reader& m, thread_defaults& cfg);
  void read_thread_limits(const map_reader& m, thread_defaults& cfg);
  void read_guard(const map_reader& m, guard_limits& cfg);
  void read_per_tool(const YAML::Node& node, const std::string& path,
                     std::map<std::string, uint64_t>& cfg);
  void read_compaction(const map_reader& m, thread_defaults& cfg);
  void check_compaction(const map_reader& m,
                        const compaction_settings& cfg) const;
  void read_agents(const map_reader& m, agent_limits& cfg);
  /// Reads the integer at `key` of `m` (if set), which must be at least
  /// `lo`, into `out`.
  template <class T>
  void
  read_count(const map_reader& m, const std::string& key, int64_t lo, T& out) {
    if (auto x = m.get(key))
      out = static_cast<T>(read_int(*x, m.path(key), lo, no_limit));
  }
  void read_supervision(const map_reader& m, supervision_config& cfg);
  void read_supervisor(const map_reader& m, supervisor_settings& cfg,
                       bool dynamic);
  void read_backoff(const map_reader& m, backoff_config& cfg);
  void read_logging(const map_reader& m, logging_config& cfg);
  void read_storage(const map_reader& m, storage_config& cfg);
  void read_postgres(const map_reader& m, postgres_config& cfg);
  void read_cluster(const map_reader& m, cluster_config& cfg);
  void read_cluster_addresses(const map_reader& m, cluster_config& cfg);
  void read_cluster_timing(const map_reader& m, cluster_config& cfg);
  void read_cluster_tls(const map_reader& m, cluster_tls_config& cfg);
  /// Reads the duration at `key` of `m` (if set), which must be at least
  /// `minimum`.
  void read_duration_at_least(const map_reader& m, const std::string& key,
                              caf::timespan minimum, caf::timespan& out);
  void read_chaos(const map_reader& m, chaos_config& cfg);
  void read_dead_letters(const map_reader& m, dead_letter_schedule& cfg);
  void read_owner(const map_reader& m, owner_config& cfg);
  channel_config read_channel(const YAML::Node& node, const std::string& path);
  void read_channel_target(const map_reader& m, channel_config& cfg);
  void read_channel_retry(const map_reader& m, channel_retry& cfg);
  /// Reads `base_delay`, `multiplier`, `max_delay` (at least `base_delay`)
  /// and `jitter` of a retry policy.
  void read_backoff_delays(const map_reader& m, retry_policy& r);

  // -- checks across fields ---------------------------------------------------

  void validate(const node_config& cfg) const;
  void check_gateway_limits(const gateway_config& cfg) const;
  void check_gateway_auth(const gateway_config& cfg) const;
  void check_header_values(const std::vector<provider_config>& providers) const;
  void collect_warnings(node_config& cfg) const;
  /// Warns of argv placeholders a value starting with '-' turns into an
  /// option (no "--" before them).
  void collect_tool_warnings(node_config& cfg) const;
  void check_backoff_bounds(const supervision_config& cfg) const;
  void check_providers(const std::vector<provider_config>& providers) const;
  void check_pools(const node_config& cfg) const;
  void check_chain(const node_config& cfg, size_t pool_index) const;
  void check_thread_pool(const node_config& cfg) const;
  void check_tools(const node_config& cfg) const;
  /// Checks that `names`, the list at `path`, are declared tools, each
  /// listed once.
  void check_tool_refs(const node_config& cfg, const std::string& path,
                       const std::vector<std::string>& names) const;
  void check_storage(const node_config& cfg) const;
  void check_channels(const node_config& cfg) const;

  /// Fails for the first item of `items`, the list at `path`, whose name an
  /// earlier item has: "duplicate WHAT name ...".
  template <class T>
  void check_unique_names(const std::vector<T>& items, const std::string& path,
                          const std::string& what) const {
    std::map<std::string, size_t> index;
    for (size_t i = 0; i < items.size(); ++i) {
      auto [pos, added] = index.emplace(items[i].name, i);
      if (added)
        continue;
      auto at = indexed(path, i) + ".name";
      fail(line(at), at,
           "duplicate " + what + " name " + quote(items[i].name) + " (also "
             + indexed(path, pos->second) + ")");
    }
  }
  void check_cluster(const node_config& cfg) const;
  void check_cluster_token(const cluster_config& cfg) const;
  void check_cluster_advertise(const cluster_config& cfg) const;
  void check_cluster_tls(const cluster_tls_config& cfg) const;
  void check_cluster_transport(const cluster_config& cfg) const;

  /// Fails for `path` because `value` is below `lower`, the value of
  /// `lower_path`.
  [[noreturn]] void fail_below(int line, const std::string& path,
                               const std::string& lower_path,
                               caf::timespan lower, caf::timespan value) const;

  /// The file replaced the default providers.
  bool providers_written_ = false;
  /// The file replaced the default pools.
  bool pools_written_ = false;
  /// The file set `threads.pool`.
  bool thread_pool_written_ = false;
  /// The token files read: key path and file path (their modes are
  /// warned about).
  std::vector<std::pair<std::string, std::string>> secret_files_;
};

node_config parser::run(const YAML::Node& root) {
  auto cfg = default_config();
  cfg.source = source();
  // These follow node.name and cluster.listen unless the file sets them:
  // derived again once the file is read.
  cfg.cluster.node_id.clear();
  cfg.cluster.advertise.clear();
  // An empty document (or one holding only comments) means all defaults.
  if (root.IsNull()) {
    fill_cluster_defaults(cfg);
    return cfg;
  }
  if (!root.IsMap())
    fail(line_of(root), "",
         "expected a mapping of top-level keys (" + one_of(top_level_keys)
           + "), got " + describe(root));
  map_reader top{*this, root, "", line_of(root), strings(top_level_keys)};
  // Mappings are read key by key over the defaults.
  if (auto m = section(top, "node",
                       {"name", "data_dir", "scheduler", "workers"}))
    read_node(*m, cfg);
  if (auto m = section(top, "gateway", strings(gateway_keys)))
    read_gateway(*m, cfg.gateway);
  read_providers(top, cfg);
  read_pools(top, cfg);
  read_tools(top, cfg);
  if (auto m = section(top, "threads", strings(thread_keys)))
    read_threads(*m, cfg.threads);
  if (auto m = section(top, "supervision", strings(supervisor_names)))
    read_supervision(*m, cfg.supervision);
  if (auto m = section(top, "logging", {"level", "file", "format"}))
    read_logging(*m, cfg.logging);
  if (auto m = section(top, "shutdown", {"drain_timeout"}))
    if (auto x = m->get("drain_timeout"))
      cfg.shutdown.drain_timeout = read_duration(*x, m->path("drain_timeout"),
                                                 true);
  if (auto m
      = section(top, "storage",
                {"backend", "sync", "request_timeout", "rocksdb", "postgres"}))
    read_storage(*m, cfg.storage);
  if (auto m = section(top, "cluster", strings(cluster_keys)))
    read_cluster(*m, cfg.cluster);
  if (auto m = section(top, "chaos", {"kill", "disk"}))
    read_chaos(*m, cfg.chaos);
  if (auto m = section(top, "owner", {"contact", "channel", "notices"}))
    read_owner(*m, cfg.owner);
  if (auto m = section(top, "delivery", {"dead_letters", "channels"})) {
    if (auto d = section(*m, "dead_letters",
                         {"max_retries", "interval", "batch"}))
      read_dead_letters(*d, cfg.delivery.dead_letters);
    if (auto x = m->get("channels"))
      cfg.delivery.channels = read_each(
        *x, m->path("channels"), "a list of channels", &parser::read_channel);
  }
  validate(cfg);
  fill_cluster_defaults(cfg);
  collect_warnings(cfg);
  return cfg;
}

// -- node and gateway ---------------------------------------------------------

void parser::read_node(const map_reader& m, node_config& cfg) {
  if (auto x = m.get("name")) {
    auto path = m.path("name");
    cfg.name = read_string(*x, path);
    if (!is_valid_id(cfg.name))
      bad_value(*x, path, cfg.name, id_expected);
  }
  if (auto x = m.get("data_dir")) {
    auto path = m.path("data_dir");
    cfg.data_dir = read_string(*x, path);
    if (cfg.data_dir.empty())
      bad_value(*x, path, cfg.data_dir, "a non-empty folder path");
  }
  if (auto x = m.get("scheduler"))
    cfg.scheduler = read_enum(*x, m.path("scheduler"), scheduler_policies)
                        == "stealing"
                      ? scheduler_policy::stealing
                      : scheduler_policy::sharing;
  if (auto x = m.get("workers"))
    cfg.workers = static_cast<size_t>(read_int(*x, m.path("workers"), 0, 256));
}

void parser::read_gateway(const map_reader& m, gateway_config& cfg) {
  if (auto x = m.get("host")) {
    auto path = m.path("host");
    cfg.host = read_string(*x, path);
    if (cfg.host.empty())
      bad_value(*x, path, cfg.host, "a non-empty host name or address");
  }
  if (auto x = m.get("port"))
    cfg.port = static_cast<uint16_t>(read_int(*x, m.path("port"), 0, 65535));
  read_gateway_auth(m, cfg);
  read_gateway_limits(m, cfg);
  if (auto x = m.get("io_threads"))
    cfg.io_threads
      = static_cast<size_t>(read_int(*x, m.path("io_threads"), 1, 64));
  if (auto t = section(m, "tls",
                       {"certificate_file", "key_file", "min_version"}))
    read_tls(*t, cfg.tls);
}

void parser::read_gateway_auth(const map_reader& m, gateway_config& cfg) {
  cfg.token = read_secret(m, "token", "token_file");
  cfg.admin_token = read_secret(m, "admin_token", "admin_token_file");
  if (auto x = m.get("allow_unauthenticated"))
    cfg.allow_unauthenticated = read_bool(*x, m.path("allow_unauthenticated"));
  if (auto x = m.get("allow_query_token"))
    cfg.allow_query_token = read_bool(*x, m.path("allow_query_token"));
  cfg.allowed_origins = read_origins(m);
  cfg.allowed_hosts = read_hosts(m);
}

void parser::read_gateway_limits(const map_reader& m, gateway_config& cfg) {
  if (auto x = m.get("max_frame_bytes"))
    cfg.max_frame_bytes = read_size(*x, m.path("max_frame_bytes"), 1024);
  if (auto x = m.get("max_text_bytes"))
    cfg.max_text_bytes = read_size(*x, m.path("max_text_bytes"), 1);
  if (auto x = m.get("max_connections"))
    cfg.max_connections = static_cast<size_t>(
      read_int(*x, m.path("max_connections"), 1, 1'000'000));
  if (auto x = m.get("max_unauthenticated"))
    cfg.max_unauthenticated = static_cast<size_t>(
      read_int(*x, m.path("max_unauthenticated"), 1, 1'000'000));
  if (auto x = m.get("max_unauthenticated_per_address"))
    cfg.max_unauthenticated_per_address = static_cast<size_t>(
      read_int(*x, m.path("max_unauthenticated_per_address"), 1, 1'000'000));
  if (!m.has("max_unauthenticated_per_address"))
    cfg.max_unauthenticated_per_address
      = std::min(cfg.max_unauthenticated_per_address, cfg.max_unauthenticated);
  if (auto x = m.get("header_timeout"))
    cfg.header_timeout = read_duration(*x, m.path("header_timeout"), true);
  if (auto x = m.get("max_queued_bytes"))
    cfg.max_queued_bytes = read_size(*x, m.path("max_queued_bytes"), 1024);
  if (auto x = m.get("write_timeout"))
    cfg.write_timeout = read_duration(*x, m.path("write_timeout"), true);
  if (auto x = m.get("socket_send_buffer"))
    cfg.socket_send_buffer = read_size(*x, m.path("socket_send_buffer"), 0);
  if (auto x = m.get("max_history_bytes"))
    cfg.max_history_bytes = read_size(*x, m.path("max_history_bytes"), 1024);
  if (auto x = m.get("max_requests_in_flight"))
    cfg.max_requests_in_flight = static_cast<size_t>(
      read_int(*x, m.path("max_requests_in_flight"), 1, 100'000));
  if (auto x = m.get("max_subscriptions_per_connection"))
    cfg.max_subscriptions_per_connection = static_cast<size_t>(
      read_int(*x, m.path("max_subscriptions_per_connection"), 1, 1'000'000));
  if (auto r = section(m, "rate_limit", {"per_second", "burst"}))
    read_rate_limit(*r, cfg.rate_limit);
}

std::string parser::read_secret(const map_reader& m, const std::string& key,
                                const std::string& key_file) {
  if (m.has(key) && m.has(key_file))
    fail(m.line(key_file), m.path(key_file),
         "set only one of " + key + " and " + key_file);
  std::string result;
  if (auto x = m.get(key)) {
    result = read_string(*x, m.path(key));
  } else if (auto f = m.get(key_file)) {
    auto path = read_string(*f, m.path(key_file));
    errno = 0;
    std::ifstream in{path};
    if (!in)
      fail(m.line(key_file), m.path(key_file),
           "cannot read " + quote(path) + ": " + std::strerror(errno));
    std::getline(in, result);
    secret_files_.emplace_back(m.path(key_file), path);
    if (!result.empty() && result.back() == '\r')
      result.pop_back();
    if (result.empty())
      fail(m.line(key_file), m.path(key_file),
           "the first line of " + quote(path) + " is empty (expected the " + key
             + ")");
  }
  // A token travels in an HTTP header: visible ASCII only.
  auto visible = [](char c) { return c > ' ' && c < 0x7f; };
  if (!std::all_of(result.begin(), result.end(), visible))
    fail(m.line(m.has(key) ? key : key_file),
         m.path(m.has(key) ? key : key_file),
         "the " + key
           + " may hold only visible ASCII characters (no spaces or "
             "control characters)");
  return result;
}

std::vector<std::string>
parser::read_checked_strings(const map_reader& m, const std::string& key,
                             const std::string& list_expected,
                             const std::string& item_expected,
                             bool (*valid)(const std::string&)) {
  std::vector<std::string> result;
  auto x = m.get(key);
  if (!x)
    return result;
  auto path = m.path(key);
  auto items = read_list(*x, path, list_expected);
  for (size_t i = 0; i < items.size(); ++i) {
    auto item_path = indexed(path, i);
    auto item = read_string(items[i], item_path);
    if (!valid(item))
      bad_value(items[i], item_path, item, item_expected);
    result.push_back(std::move(item));
  }
  return result;
}

std::vector<std::string> parser::read_origins(const map_reader& m) {
  auto valid = [](const std::string& origin) {
    auto scheme_end = origin.find("://");
    return origin == "*"
           || (scheme_end != std::string::npos && scheme_end > 0
               && origin.size() > scheme_end + 3
               && origin.find('/', scheme_end + 3) == std::string::npos);
  };
  return read_checked_strings(m, "allowed_origins", "a list of origins",
                              "an origin such as \"https://app.example.com\" "
                              "(scheme, host and optional port, no path) or "
                              "\"*\"",
                              valid);
}

std::vector<std::string> parser::read_hosts(const map_reader& m) {
  auto valid = [](const std::string& host) {
    auto bad_char = [](char c) {
      return c <= ' ' || c >= 0x7f || c == '/' || c == '@';
    };
    return !host.empty() && std::none_of(host.begin(), host.end(), bad_char);
  };
  return read_checked_strings(m, "allowed_hosts", "a list of host names",
                              "a host name or address, optionally with :port",
                              valid);
}

void parser::read_rate_limit(const map_reader& m, rate_limit_config& cfg) {
  if (auto x = m.get("per_second"))
    cfg.per_second = read_number(*x, m.path("per_second"), 0.0, 1e6);
  if (auto x = m.get("burst"))
    cfg.burst
      = static_cast<size_t>(read_int(*x, m.path("burst"), 1, 1'000'000));
}

void parser::read_tls(const map_reader& m, tls_config& cfg) {
  auto read_file = [&](const char* key, std::string& out) {
    auto x = m.get(key);
    if (!x)
      return;
    out = read_string(*x, m.path(key));
    if (!std::ifstream{out})
      bad_value(*x, m.path(key), out, "a readable PEM file");
  };
  read_file("certificate_file", cfg.certificate_file);
  read_file("key_file", cfg.key_file);
  if (cfg.certificate_file.empty() != cfg.key_file.empty()) {
    auto missing = cfg.key_file.empty() ? "key_file" : "certificate_file";
    fail(m.line(), m.path(missing),
         "TLS needs both certificate_file and key_file");
  }
  if (auto x = m.get("min_version"))
    cfg.min_version = read_enum(*x, m.path("min_version"), tls_versions);
}

// -- providers ----------------------------------------------------------------

void parser::read_providers(const map_reader& top, node_config& cfg) {
  // A list replaces the defaults as a whole.
  if (auto node = top.get("providers")) {
    providers_written_ = true;
    cfg.providers = read_each(*node, "providers", "a list of providers",
                              &parser::read_provider);
  }
}

provider_config parser::read_provider(const YAML::Node& node,
                                      const std::string& path) {
  std::vector<std::string> known{"name", "kind", "model", "script",
                                 "context_window"};
  known.insert(known.end(), std::begin(http_provider_keys),
               std::end(http_provider_keys));
  map_reader m{*this, node, path, line_of(node), std::move(known)};
  provider_config result;
  result.name = read_name(required(m, "name", "a non-empty provider name"),
                          m.path("name"));
  result.kind = read_enum(required(m, "kind", one_of(provider_kinds)),
                          m.path("kind"), provider_kinds);
  if (auto x = m.get("model"))
    result.model = read_string(*x, m.path("model"));
  if (auto x = m.get("context_window")) {
    auto path = m.path("context_window");
    auto value = read_int(*x, path, 0, no_limit);
    if (value > 0 && value < min_context_window)
      fail(line_of(*x), path,
           "expected 0 (the model's window from the table of known models) "
           "or an integer >= "
             + std::to_string(min_context_window) + ", got "
             + quote(std::to_string(value)));
    result.context_window = static_cast<uint64_t>(value);
  }
  auto script_path = m.path("script");
  if (result.kind == "echo" && m.has("script"))
    fail(m.line("script"), script_path, "echo providers take no script");
  if (auto x = m.get("script"))
    result.script = read_each(*x, script_path, "a list of script steps",
                              &parser::read_step);
  if (result.kind == "scripted" && result.script.empty())
    fail(m.line("script"), script_path,
         "a scripted provider needs a non-empty list of script steps");
  read_http_provider(m, result);
  return result;
}

void parser::read_http_provider(const map_reader& m, provider_config& cfg) {
  if (!is_http_kind(cfg.kind)) {
    for (auto key : http_provider_keys)
      if (m.has(key))
        fail(m.line(key), m.path(key),
             "only openai and anthropic providers take " + std::string{key}
               + " (this provider is " + quote(cfg.kind) + ")");
    return;
  }
  if (m.has("script"))
    fail(m.line("script"), m.path("script"),
         cfg.kind + " providers take no script");
  read_base_url(m, cfg);
  if (cfg.model.empty())
    fail(m.line("model"), m.path("model"),
         "missing required key (expected the model name to request)");
  if (auto x = m.get("api_key"))
    cfg.api_key = read_string(*x, m.path("api_key"));
  if (auto x = m.get("headers"))
    read_headers(*x, m.path("headers"), cfg.headers);
  read_http_limits(m, cfg);
}

void parser::read_base_url(const map_reader& m, provider_config& cfg) {
  auto url = required(m, "base_url", "an http:// or https:// URL");
  cfg.base_url = read_string(url, m.path("base_url"));
  auto url_ok = [](const std::string& x) {
    for (std::string_view scheme : {"http://", "https://"})
      if (x.size() > scheme.size() && x.compare(0, scheme.size(), scheme) == 0)
        return true;
    return false;
  };
  if (!url_ok(cfg.base_url))
    bad_value(url, m.path("base_url"), cfg.base_url,
              "an http:// or https:// URL with a host");
}

void parser::read_headers(const YAML::Node& node, const std::string& path,
                          std::map<std::string, std::string>& cfg) {
  if (!node.IsMap())
    fail(line_of(node), path,
         "expected a mapping of header names to values, got " + describe(node));
  for (auto kv : node) {
    auto name = read_name(kv.first, path);
    cfg[name] = read_string(kv.second, path + "." + name);
  }
}

void parser::read_http_limits(const map_reader& m, provider_config& cfg) {
  if (auto x = m.get("connect_timeout"))
    cfg.connect_timeout = read_millis(*x, m.path("connect_timeout"), true);
  if (auto x = m.get("first_byte_timeout"))
    cfg.first_byte_timeout = read_millis(*x, m.path("first_byte_timeout"),
                                         true);
  if (auto x = m.get("total_timeout"))
    cfg.total_timeout = read_millis(*x, m.path("total_timeout"), true);
  if (auto x = m.get("max_concurrency"))
    cfg.max_concurrency
      = static_cast<size_t>(read_int(*x, m.path("max_concurrency"), 1, 100000));
  if (auto x = m.get("ca_file")) {
    cfg.ca_file = read_string(*x, m.path("ca_file"));
    if (!cfg.ca_file.empty() && !std::ifstream{cfg.ca_file})
      bad_value(*x, m.path("ca_file"), cfg.ca_file,
                "a readable PEM file of CA certificates");
  }
  if (auto x = m.get("stream"))
    cfg.stream = read_bool(*x, m.path("stream"));
  if (auto x = m.get("max_tokens"))
    cfg.max_tokens
      = static_cast<uint32_t>(read_int(*x, m.path("max_tokens"), 1, 1'000'000));
  if (auto x = m.get("max_response_bytes"))
    cfg.max_response_bytes = read_size(*x, m.path("max_response_bytes"), 1024);
}

scripted_step parser::read_step(const YAML::Node& node,
                                const std::string& path) {
  map_reader m{*this,
               node,
               path,
               line_of(node),
               {"match", "reply", "delay", "fail", "retry_after", "crash",
                "tool"}};
  scripted_step result;
  if (auto x = m.get("match"))
    result.match = read_string(*x, m.path("match"));
  bool has_reply = false;
  if (auto x = m.get("reply")) {
    has_reply = true;
    result.reply = read_string(*x, m.path("reply"));
  }
  if (auto x = m.get("delay"))
    result.delay = read_duration(*x, m.path("delay"), false);
  if (auto x = m.get("fail"))
    result.fail = read_enum(*x, m.path("fail"), failure_classes);
  if (auto x = m.get("retry_after")) {
    if (result.fail.empty())
      fail(m.line("retry_after"), m.path("retry_after"),
           "retry_after needs fail (it is part of a simulated failure)");
    result.retry_after = read_millis(*x, m.path("retry_after"), false);
  }
  if (auto x = m.get("crash"))
    result.crash = read_bool(*x, m.path("crash"));
  if (auto x = m.get("tool")) {
    read_tool(*x, m.path("tool"), result);
    has_reply = true; // A tool call is an answer, with or without text.
  }
  auto outcomes = int{has_reply} + int{!result.fail.empty()}
                  + int{result.crash};
  if (outcomes == 0)
    fail(m.line(), path, "a step needs one of reply, fail or crash: true");
  if (outcomes > 1)
    fail(m.line(), path,
         "a step takes only one of reply, fail and crash: true");
  return result;
}

void parser::read_tool(const YAML::Node& node, const std::string& path,
                       scripted_step& cfg) {
  map_reader t{*this, node, path, line_of(node), {"name", "arguments"}};
  if (auto name = t.get("name"))
    cfg.tool_name = read_string(*name, t.path("name"));
  if (cfg.tool_name.empty())
    fail(t.line(), path, "a tool call needs a non-empty name");
  cfg.tool_arguments = "{}";
  if (auto args = t.get("arguments"))
    cfg.tool_arguments = read_string(*args, t.path("arguments"));
}

// -- pools --------------------------------------------------------------------

void parser::read_pools(const map_reader& top, node_config& cfg) {
  if (auto node = top.get("pools")) {
    // A list replaces the defaults as a whole.
    pools_written_ = true;
    cfg.pools = read_each(*node, "pools", "a list of pools",
                          &parser::read_pool);
  } else if (providers_written_) {
    // Providers without pools: the default pool chains all of them in order.
    cfg.pools.front().chain = names_of(cfg.providers);
  }
}

pool_config parser::read_pool(const YAML::Node& node, const std::string& path) {
  map_reader m{*this,
               node,
               path,
               line_of(node),
               {"name", "chain", "max_attempts", "retry", "breaker",
                "cooldowns", "timeout_max_tokens_factor", "tools"}};
  pool_config result;
  result.name = read_name(required(m, "name", "a non-empty pool name"),
                          m.path("name"));
  auto chain_path = m.path("chain");
  auto chain = required(m, "chain", "a non-empty list of provider names");
  result.chain = read_each(chain, chain_path, "a list of provider names",
                           &reader::read_name);
  if (result.chain.empty())
    fail(line_of(chain), chain_path,
         "expected a non-empty list of provider names, got an empty list");
  if (auto x = m.get("max_attempts"))
    result.retry.max_attempts
      = static_cast<uint32_t>(read_int(*x, m.path("max_attempts"), 1, 100));
  if (auto r = section(m, "retry", strings(retry_keys)))
    read_retry(*r, result);
  if (auto b = section(m, "breaker", strings(breaker_keys)))
    read_breaker(*b, result.breaker);
  if (auto c = section(m, "cooldowns", strings(failure_classes)))
    read_cooldowns(*c, result.breaker.cooldowns);
  if (auto x = m.get("timeout_max_tokens_factor"))
    result.timeout_max_tokens_factor
      = read_number(*x, m.path("timeout_max_tokens_factor"), 0.01, 1.0);
  if (auto x = m.get("tools"))
    result.tools = read_each(*x, m.path("tools"), "a list of tool names",
                             &reader::read_name);
  return result;
}

void parser::read_retry(const map_reader& m, pool_config& cfg) {
  auto& r = cfg.retry;
  if (auto x = m.get("retry_after_cap"))
    r.retry_after_cap = read_millis(*x, m.path("retry_after_cap"), false);
  if (auto x = m.get("budget"))
    cfg.budget
      = static_cast<uint32_t>(read_int(*x, m.path("budget"), 1, 10000));
  read_backoff_delays(m, r);
}

void parser::read_breaker(const map_reader& m, breaker_config& cfg) {
  if (auto x = m.get("failure_threshold"))
    cfg.failure_threshold = static_cast<uint32_t>(
      read_int(*x, m.path("failure_threshold"), 1, 1000));
  if (auto x = m.get("probe_lead"))
    cfg.probe_lead = read_millis(*x, m.path("probe_lead"), false);
  if (auto x = m.get("probe_timeout"))
    cfg.probe_timeout = read_millis(*x, m.path("probe_timeout"), true);
}

void parser::read_cooldowns(const map_reader& m, cooldown_table& cfg) {
  for (auto name : failure_classes)
    if (auto x = m.get(name))
      cfg.set(*parse_error_class(name), read_millis(*x, m.path(name), false));
}

// -- tools --------------------------------------------------------------------

void parser::read_tools(const map_reader& top, node_config& cfg) {
  if (auto node = top.get("tools"))
    cfg.tools = read_each(*node, "tools", "a list of tools",
                          &parser::read_tool_entry);
}

tool_config parser::read_tool_entry(const YAML::Node& node,
                                    const std::string& path) {
  map_reader m{*this, node, path, line_of(node), strings(tool_keys)};
  tool_config result;
  auto name = required(m, "name", "a tool name");
  result.name = read_string(name, m.path("name"));
  if (!is_plain_name(result.name))
    bad_value(name, m.path("name"), result.name, tool_name_expected);
  if (contains(builtin_tools, result.name))
    fail(line_of(name), m.path("name"),
         quote(result.name)
           + " is the name of a built-in tool (spawn_agent and "
             "message_agent are reserved)");
  auto what = "a non-empty description of what the tool does";
  auto description = required(m, "description", what);
  result.description = read_string(description, m.path("description"));
  if (result.description.empty())
    bad_value(description, m.path("description"), result.description, what);
  auto parameters = read_parameters(m);
  result.parameters = parameters.dump();
  read_tool_command(m, result, parameters);
  read_tool_limits(m, result);
  return result;
}

nlohmann::ordered_json parser::read_parameters(const map_reader& m) {
  auto x = m.get("parameters");
  if (!x)
    return nlohmann::ordered_json::parse(tool_config{}.parameters);
  auto path = m.path("parameters");
  if (!x->IsMap())
    fail(line_of(*x), path,
         "expected a JSON schema of the arguments written as a mapping (with "
         "type: object), got "
           + describe(*x));
  auto result = to_json(*x, path);
  auto type = result.find("type");
  if (type == result.end())
    fail(line_of(*x), path + ".type",
         "missing required key (expected \"object\": the arguments of a "
         "tool call are an object)");
  if (*type != "object")
    fail(line(path + ".type", path), path + ".type",
         "expected \"object\" (the arguments of a tool call are an object), "
         "got "
           + quote(type->is_string() ? type->get<std::string>()
                                     : type->dump()));
  auto props = result.find("properties");
  if (props != result.end() && !props->is_object())
    fail(line(path + ".properties", path), path + ".properties",
         "expected a mapping of argument names to their schemas, got "
           + quote(props->dump()));
  return result;
}

nlohmann::ordered_json parser::to_json(const YAML::Node& node,
                                       const std::string& path) {
  switch (node.Type()) {
    case YAML::NodeType::Sequence: {
      auto result = nlohmann::ordered_json::array();
      for (auto& item : read_list(node, path, "a list"))
        result.push_back(to_json(item, indexed(path, result.size())));
      return result;
    }
    case YAML::NodeType::Map: {
      auto result = nlohmann::ordered_json::object();
      for (auto kv : node) {
        if (!kv.first.IsScalar())
          fail(line_of(kv.first), path,
               "expected a key name, got " + describe(kv.first));
        auto key = kv.first.Scalar();
        auto key_path = path + "." + key;
        if (result.contains(key))
          fail(line_of(kv.first), key_path,
               "duplicate key (first given on line "
                 + std::to_string(line(key_path)) + ")");
        remember(key_path, line_of(kv.first));
        result[key] = to_json(kv.second, key_path);
      }
      return result;
    }
    case YAML::NodeType::Scalar: return scalar_to_json(node, path);
    default: return nullptr;
  }
}

nlohmann::ordered_json parser::scalar_to_json(const YAML::Node& node,
                                              const std::string& path) {
  auto text = scalar(node, path, "a value");
  // Quoted scalars ("1", 'true') are strings, as in YAML.
  if (node.Tag() == "!")
    return text;
  std::string lower = text;
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  if (lower == "true" || lower == "false")
    return lower == "true";
  if (lower == "null" || lower == "~")
    return nullptr;
  auto first = text.data();
  auto last = first + text.size();
  int64_t integer = 0;
  if (auto [ptr, err] = std::from_chars(first, last, integer);
      err == std::errc{} && ptr == last)
    return integer;
  double number = 0;
  auto numeric = text.find_first_of(".eE") != std::string::npos;
  if (auto [ptr, err] = std::from_chars(first, last, number);
      numeric && err == std::errc{} && ptr == last && std::isfinite(number))
    return number;
  return text;
}

void parser::read_tool_command(const map_reader& m, tool_config& cfg,
                               const nlohmann::ordered_json& parameters) {
  auto expected = "a non-empty list of strings (the program and its "
                  "arguments)";
  auto path = m.path("command");
  auto command = required(m, "command", expected);
  auto items = read_list(command, path, expected);
  if (items.empty())
    fail(line_of(command), path,
         std::string{"expected "} + expected + ", got an empty list");
  for (size_t i = 0; i < items.size(); ++i) {
    auto item_path = indexed(path, i);
    cfg.command.push_back(read_string(items[i], item_path));
    check_placeholders(items[i], item_path, cfg.command.back(), parameters);
  }
  if (cfg.command.front().empty())
    bad_value(items.front(), indexed(path, 0), cfg.command.front(),
              "a program name or path");
}

void parser::check_placeholders(
  const YAML::Node& node, const std::string& path, const std::string& element,
  const nlohmann::ordered_json& parameters) const {
  auto props = parameters.find("properties");
  std::vector<std::string> declared;
  if (props != parameters.end())
    for (auto& [key, value] : props->items())
      declared.push_back(key);
  for (size_t i = 0; i < element.size(); ++i) {
    auto c = element[i];
    if ((c == '{' || c == '}') && i + 1 < element.size()
        && element[i + 1] == c) {
      ++i; // `{{` and `}}`: a literal brace.
      continue;
    }
    if (c != '{')
      continue;
    auto close = element.find('}', i);
    if (close == std::string::npos)
      fail(line_of(node), path,
           quote(element)
             + " has a '{' without its '}' (write {{ for a literal '{')");
    auto name = element.substr(i + 1, close - i - 1);
    if (std::find(declared.begin(), declared.end(), name) == declared.end())
      fail(line_of(node), path,
           "the placeholder {" + name
             + "} names no property of parameters (expected "
             + (declared.empty() ? std::string{"none: parameters declares no "
                                               "properties"}
                                 : one_of(declared))
             + "; write {{ and }} for literal braces)");
    i = close;
  }
}

void parser::read_tool_limits(const map_reader& m, tool_config& cfg) {
  if (auto x = m.get("cwd"))
    cfg.cwd = read_string(*x, m.path("cwd"));
  cfg.env = read_checked_strings(m, "env",
                                 "a list of environment variable names",
                                 "an environment variable name (letters, "
                                 "digits and _, not starting with a digit)",
                                 is_valid_env_name);
  caf::timespan timeout = cfg.timeout;
  read_duration_at_least(m, "timeout", std::chrono::milliseconds{1}, timeout);
  cfg.timeout = std::chrono::duration_cast<std::chrono::milliseconds>(timeout);
  if (auto x = m.get("grace"))
    cfg.grace = read_millis(*x, m.path("grace"), false);
  if (auto x = m.get("output_cap"))
    cfg.output_cap = read_size(*x, m.path("output_cap"), 1);
  if (auto l = section(m, "limits", strings(tool_limit_keys)))
    read_tool_rlimits(*l, cfg.limits);
  read_tool_account(m, cfg);
}

void parser::read_tool_account(const map_reader& m, tool_config& cfg) {
  auto user = m.get("user");
  auto group = m.get("group");
  if (group && !user)
    fail(line_of(*group), m.path("group"),
         "a group needs a user (set user: as well)");
  if (!user)
    return;
  cfg.user = read_string(*user, m.path("user"));
  if (group)
    cfg.group = read_string(*group, m.path("group"));
  auto account = resolve_account(cfg.user, cfg.group);
  if (!account.error.empty()) {
    auto& at = account.group_error ? *group : *user;
    fail(line_of(at), m.path(account.group_error ? "group" : "user"),
         account.error);
  }
  cfg.uid = account.uid;
  cfg.gid = account.gid;
}

void parser::read_tool_rlimits(const map_reader& m, tool_limits& cfg) {
  if (auto x = m.get("memory"))
    cfg.memory = read_size(*x, m.path("memory"), 0);
  if (auto x = m.get("cpu_time")) {
    // Whole seconds, as the kernel counts them; a fraction rounds up.
    auto ms = read_millis(*x, m.path("cpu_time"), false).count();
    cfg.cpu_time = std::chrono::seconds{(ms + 999) / 1000};
  }
  read_count(m, "open_files", 0, cfg.open_files);
  read_count(m, "processes", 0, cfg.processes);
  if (auto x = m.get("file_size"))
    cfg.file_size = read_size(*x, m.path("file_size"), 0);
}

// -- threads, supervision, logging and storage --------------------------------

void parser::read_threads(const map_reader& m, thread_defaults& cfg) {
  if (auto x = m.get("system_prompt"))
    cfg.system_prompt = read_string(*x, m.path("system_prompt"));
  if (auto x = m.get("idle_timeout"))
    cfg.idle_timeout = read_duration(*x, m.path("idle_timeout"), true);
  if (auto x = m.get("pool")) {
    thread_pool_written_ = true;
    cfg.pool = read_name(*x, m.path("pool"));
  }
  read_count(m, "max_inbox", 1, cfg.max_inbox);
  if (auto x = m.get("turn_timeout"))
    cfg.turn_timeout = read_duration(*x, m.path("turn_timeout"), true);
  read_thread_limits(m, cfg);
  if (auto x = m.get("tools"))
    cfg.tools = read_each(*x, m.path("tools"), "a list of tool names",
                          &reader::read_name);
  if (auto x = m.get("agent_tools"))
    cfg.agent_tools = read_each(*x, m.path("agent_tools"),
                                "a list of tool names", &reader::read_name);
  if (auto g = section(m, "guard", strings(guard_keys)))
    read_guard(*g, cfg.guard);
  if (auto x = m.get("disable_tool_after"))
    cfg.disable_tool_after
      = static_cast<uint32_t>(read_int(*x, m.path("disable_tool_after"), 1,
                                       std::numeric_limits<uint32_t>::max()));
  read_count(m, "max_concurrent_tools", 1, cfg.max_concurrent_tools);
  if (auto c = section(m, "compaction", strings(compaction_keys)))
    read_compaction(*c, cfg);
  if (auto a = section(m, "agents", strings(agent_keys)))
    read_agents(*a, cfg.agents);
}

void parser::read_thread_limits(const map_reader& m, thread_defaults& cfg) {
  read_count(m, "max_live", 1, cfg.max_live);
  read_count(m, "max_stored_threads", 0, cfg.max_stored_threads);
  if (auto x = m.get("max_reply_bytes"))
    cfg.max_reply_bytes = read_size(*x, m.path("max_reply_bytes"), 64);
  if (auto x = m.get("max_tool_output_bytes"))
    cfg.max_tool_output_bytes = read_size(*x, m.path("max_tool_output_bytes"),
                                          64);
}

void parser::read_guard(const map_reader& m, guard_limits& cfg) {
  read_count(m, "max_events", 1, cfg.max_events);
  read_count(m, "max_tool_calls", 1, cfg.max_tool_calls);
  caf::timespan max_duration = cfg.max_duration;
  read_duration_at_least(m, "max_duration", std::chrono::milliseconds{1},
                         max_duration);
  cfg.max_duration
    = std::chrono::duration_cast<std::chrono::milliseconds>(max_duration);
  // Given, the map replaces the default caps as a whole (like a list).
  if (auto x = m.get("per_tool")) {
    cfg.per_tool.clear();
    read_per_tool(*x, m.path("per_tool"), cfg.per_tool);
  }
  read_count(m, "repeated_call_limit", 1, cfg.repeated_call_limit);
  read_count(m, "repeated_error_limit", 1, cfg.repeated_error_limit);
  read_count(m, "similar_reply_limit", 1, cfg.similar_reply_limit);
}

void parser::read_per_tool(const YAML::Node& node, const std::string& path,
                           std::map<std::string, uint64_t>& cfg) {
  if (!node.IsMap())
    fail(line_of(node), path,
         "expected a mapping of tool names to call counts, got "
           + describe(node));
  for (auto kv : node) {
    auto name = read_name(kv.first, path);
    auto key_path = path + "." + name;
    if (cfg.count(name) > 0)
      fail(line_of(kv.first), key_path,
           "duplicate key (first given on line "
             + std::to_string(line(key_path)) + ")");
    remember(key_path, line_of(kv.first));
    cfg[name]
      = static_cast<uint64_t>(read_int(kv.second, key_path, 1, no_limit));
  }
}

void parser::read_compaction(const map_reader& m, thread_defaults& cfg) {
  auto& c = cfg.compaction;
  if (auto x = m.get("enabled"))
    cfg.compaction_enabled = read_bool(*x, m.path("enabled"));
  for (auto [key, out] : {std::pair{"warn_at", &c.warn_at},
                          std::pair{"compact_at", &c.compact_at}})
    if (auto x = m.get(key)) {
      // A share of the window: above 0 (0 would compact an empty context).
      *out = read_number(*x, m.path(key), 0.0, 1.0);
      if (*out <= 0.0)
        bad_value(*x, m.path(key), read_string(*x, m.path(key)),
                  "a number above 0 and at most 1");
    }
  read_count(m, "strip_over", 1, c.strip_over);
  read_count(m, "protect_last", 1, c.protect_last);
  read_count(m, "min_entries", 1, c.min_entries);
  read_count(m, "chunk_entries", 2, c.chunk_entries);
  read_count(m, "chunk_overlap", 0, c.chunk_overlap);
  check_compaction(m, c);
}

void parser::check_compaction(const map_reader& m,
                              const compaction_settings& cfg) const {
  // Checked over the defaults: the file may set only one key of a pair. The
  // error names the key that must change, at its line or else its peer's.
  auto out_of_order = [&](const char* key, const char* peer,
                          const std::string& peer_value,
                          const std::string& value, const char* relation) {
    fail(line(m.path(key), m.path(peer)), m.path(key),
         std::string{"expected "} + relation + " " + m.path(peer) + " ("
           + peer_value + "), got " + value);
  };
  if (cfg.warn_at >= cfg.compact_at)
    out_of_order("warn_at", "compact_at", render_number(cfg.compact_at),
                 render_number(cfg.warn_at), "less than");
  if (cfg.min_entries <= cfg.protect_last)
    out_of_order("min_entries", "protect_last",
                 std::to_string(cfg.protect_last),
                 std::to_string(cfg.min_entries), "more than");
  if (cfg.chunk_overlap >= cfg.chunk_entries)
    out_of_order("chunk_overlap", "chunk_entries",
                 std::to_string(cfg.chunk_entries),
                 std::to_string(cfg.chunk_overlap), "less than");
}

void parser::read_agents(const map_reader& m, agent_limits& cfg) {
  read_count(m, "max_children", 1, cfg.max_children);
  read_count(m, "max_depth", 1, cfg.max_depth);
  read_count(m, "max_spawns_per_reply", 1, cfg.max_spawns_per_reply);
  read_count(m, "hop_budget", 1, cfg.hop_budget);
}

void parser::read_supervision(const map_reader& m, supervision_config& cfg) {
  auto sub = [&](const char* name, supervisor_settings& settings,
                 bool dynamic) {
    if (auto s = section(m, name, strings(supervisor_keys)))
      read_supervisor(*s, settings, dynamic);
  };
  sub("root", cfg.root, false);
  sub("providers", cfg.providers, false);
  sub("conversations", cfg.conversations, true);
}

void parser::read_supervisor(const map_reader& m, supervisor_settings& cfg,
                             bool dynamic) {
  // A dynamic supervisor's children are alike and independent; any other
  // strategy would let one thread's crash restart the others.
  if (dynamic && m.has("strategy"))
    fail(m.line("strategy"), m.path("strategy"),
         "conversations is a dynamic supervisor; its strategy is always "
         "one_for_one (remove this key)");
  if (auto x = m.get("strategy"))
    cfg.strategy = *parse_restart_strategy(
      read_enum(*x, m.path("strategy"), restart_strategy_names));
  if (auto x = m.get("max_restarts"))
    cfg.max_restarts = static_cast<uint32_t>(
      read_int(*x, m.path("max_restarts"), 0, supervision_limit));
  if (auto x = m.get("period"))
    cfg.period = read_duration(*x, m.path("period"), true);
  if (auto x = m.get("shutdown_timeout"))
    cfg.shutdown_timeout = read_duration(*x, m.path("shutdown_timeout"), true);
  if (auto x = m.get("buffer"))
    cfg.buffer = static_cast<size_t>(
      read_int(*x, m.path("buffer"), 0, supervision_limit));
  if (auto b = section(m, "backoff", strings(backoff_keys)))
    read_backoff(*b, cfg.backoff);
}

void parser::read_backoff(const map_reader& m, backoff_config& cfg) {
  if (auto x = m.get("initial"))
    cfg.initial = read_duration(*x, m.path("initial"), false);
  if (auto x = m.get("max"))
    cfg.max = read_duration(*x, m.path("max"), false);
  if (auto x = m.get("multiplier"))
    cfg.multiplier = read_number(*x, m.path("multiplier"), 1.0,
                                 std::numeric_limits<double>::infinity());
  if (auto x = m.get("reset_after"))
    cfg.reset_after = read_duration(*x, m.path("reset_after"), true);
  if (auto x = m.get("jitter"))
    cfg.jitter = read_number(*x, m.path("jitter"), 0.0, 1.0);
}

void parser::read_logging(const map_reader& m, logging_config& cfg) {
  if (auto x = m.get("level"))
    cfg.level = read_enum(*x, m.path("level"), log_levels);
  if (auto x = m.get("file"))
    cfg.file = read_string(*x, m.path("file"));
  if (auto x = m.get("format"))
    cfg.format = read_enum(*x, m.path("format"), log_formats);
}

void parser::read_dead_letters(const map_reader& m, dead_letter_schedule& cfg) {
  read_count(m, "max_retries", 0, cfg.max_retries);
  read_count(m, "batch", 1, cfg.batch);
  caf::timespan interval = cfg.interval;
  read_duration_at_least(m, "interval", std::chrono::milliseconds{1}, interval);
  cfg.interval
    = std::chrono::duration_cast<std::chrono::milliseconds>(interval);
}

void parser::read_owner(const map_reader& m, owner_config& cfg) {
  if (auto x = m.get("contact"))
    cfg.contact = read_string(*x, m.path("contact"));
  if (auto x = m.get("channel"))
    cfg.channel = read_string(*x, m.path("channel"));
  auto n = section(m, "notices", strings(notice_kind_names));
  if (!n)
    return;
  for (auto name : notice_kind_names)
    if (auto x = n->get(name))
      cfg.notice_windows[*parse_notice_kind(name)]
        = read_millis(*x, n->path(name), false);
}

channel_config parser::read_channel(const YAML::Node& node,
                                    const std::string& path) {
  map_reader m{*this, node, path, line_of(node), strings(channel_keys)};
  channel_config result;
  auto name = required(m, "name", "a channel name of [A-Za-z0-9_-]");
  result.name = read_name(name, m.path("name"));
  if (!is_plain_name(result.name))
    bad_value(name, m.path("name"), result.name,
              "1 to 64 characters of [A-Za-z0-9_-] (a channel name is part "
              "of every idempotency key)");
  auto kind = read_enum(required(m, "kind", one_of(channel_kinds)),
                        m.path("kind"), channel_kinds);
  result.kind = *parse_channel_kind(kind);
  result.retry = channel_retry_preset(result.kind);
  read_channel_target(m, result);
  auto threads = m.get("threads");
  if (threads)
    result.threads = read_each(*threads, m.path("threads"),
                               "a list of thread ids or prefixes ending in *",
                               &reader::read_string);
  for (size_t i = 0; i < result.threads.size(); ++i) {
    auto& x = result.threads[i];
    auto id = x.empty() || x.back() != '*' ? x : x.substr(0, x.size() - 1);
    if (x.empty() || (id.empty() ? x != "*" : !valid_thread_id(id)))
      fail(line_of((*threads)[i]), indexed(m.path("threads"), i),
           "expected a thread id or a prefix of one ending in *, got "
             + quote(x));
  }
  if (auto r = section(m, "retry", strings(channel_retry_keys)))
    read_channel_retry(*r, result.retry);
  if (auto x = m.get("timeout"))
    result.retry.send_timeout = read_millis(*x, m.path("timeout"), true);
  if (auto x = m.get("ca_file"))
    result.ca_file = read_string(*x, m.path("ca_file"));
  return result;
}

void parser::read_channel_target(const map_reader& m, channel_config& cfg) {
  auto only = [&](const char* key, channel_kind kind) {
    if (m.has(key) && cfg.kind != kind)
      fail(m.line(key), m.path(key),
           std::string{"only "} + to_string(kind) + " channels take " + key);
  };
  only("secret", channel_kind::webhook);
  only("token", channel_kind::telegram);
  only("chat_id", channel_kind::telegram);
  only("parse_mode", channel_kind::telegram);
  if (cfg.kind == channel_kind::webhook) {
    auto url = required(m, "url", "an http:// or https:// URL");
    cfg.url = read_string(url, m.path("url"));
    if (auto x = m.get("secret"))
      cfg.secret = read_string(*x, m.path("secret"));
  } else {
    cfg.url = "https://api.telegram.org";
    if (auto x = m.get("url"))
      cfg.url = read_string(*x, m.path("url"));
    auto token = required(m, "token", "the bot token");
    cfg.token = read_string(token, m.path("token"));
    auto chat = required(m, "chat_id", "the chat to send to");
    cfg.chat_id = read_string(chat, m.path("chat_id"));
    // Never show the token, not even in an error.
    if (cfg.token.empty())
      fail(line_of(token), m.path("token"), "expected the bot token, got \"\"");
    if (cfg.chat_id.empty())
      bad_value(chat, m.path("chat_id"), cfg.chat_id, "the chat to send to");
    if (auto x = m.get("parse_mode"))
      cfg.parse_mode = read_enum(*x, m.path("parse_mode"),
                                 telegram_parse_modes);
  }
  auto scheme_ok = cfg.url.rfind("http://", 0) == 0
                   || cfg.url.rfind("https://", 0) == 0;
  if (!scheme_ok || cfg.url.find("://") + 3 >= cfg.url.size())
    fail(m.line("url"), m.path("url"),
         "expected an http:// or https:// URL with a host, got "
           + quote(cfg.url));
}

void parser::read_channel_retry(const map_reader& m, channel_retry& cfg) {
  if (auto x = m.get("max_attempts"))
    cfg.backoff.max_attempts
      = static_cast<uint32_t>(read_int(*x, m.path("max_attempts"), 1, 100));
  read_backoff_delays(m, cfg.backoff);
}

void parser::read_backoff_delays(const map_reader& m, retry_policy& r) {
  if (auto x = m.get("base_delay"))
    r.base_delay = read_millis(*x, m.path("base_delay"), false);
  if (auto x = m.get("multiplier"))
    r.multiplier = read_number(*x, m.path("multiplier"), 1.0, 100.0);
  if (auto x = m.get("max_delay"))
    r.max_delay = read_millis(*x, m.path("max_delay"), false);
  if (auto x = m.get("jitter"))
    r.jitter = read_number(*x, m.path("jitter"), 0.0, 1.0);
  if (r.max_delay >= r.base_delay)
    return;
  if (m.has("max_delay"))
    fail_below(m.line("max_delay"), m.path("max_delay"), m.path("base_delay"),
               r.base_delay, r.max_delay);
  fail(m.line("base_delay"), m.path("base_delay"),
       "expected at most " + m.path("max_delay") + " ("
         + render_duration(r.max_delay) + ", its default; set it too), got "
         + render_duration(r.base_delay));
}

void parser::read_storage(const map_reader& m, storage_config& cfg) {
  if (auto x = m.get("sync"))
    cfg.sync = read_bool(*x, m.path("sync"));
  if (auto x = m.get("request_timeout"))
    cfg.request_timeout = read_duration(*x, m.path("request_timeout"), true);
  if (auto x = m.get("backend"))
    cfg.backend = read_enum(*x, m.path("backend"), storage_backends)
                      == "postgres"
                    ? storage_backend::postgres
                    : storage_backend::rocksdb;
  if (auto r = section(m, "rocksdb", {"memtables", "block_cache"})) {
    if (auto x = r->get("memtables"))
      cfg.rocksdb.memtables = read_size(*x, r->path("memtables"), 1u << 20);
    if (auto x = r->get("block_cache"))
      cfg.rocksdb.block_cache = read_size(*x, r->path("block_cache"), 0);
  }
  if (auto p
      = section(m, "postgres",
                {"url", "connections", "statement_timeout", "startup_wait"}))
    read_postgres(*p, cfg.postgres);
}

void parser::read_postgres(const map_reader& m, postgres_config& cfg) {
  if (auto x = m.get("url"))
    cfg.url = read_string(*x, m.path("url"));
  if (auto x = m.get("connections"))
    cfg.connections
      = static_cast<size_t>(read_int(*x, m.path("connections"), 1, 64));
  if (auto x = m.get("statement_timeout")) {
    cfg.statement_timeout = read_duration(*x, m.path("statement_timeout"),
                                          true);
    // PostgreSQL counts milliseconds, and 0 turns the timeout off.
    if (cfg.statement_timeout < std::chrono::milliseconds{1})
      fail(m.line("statement_timeout"), m.path("statement_timeout"),
           "expected at least 1ms, got "
             + render_duration(cfg.statement_timeout));
  }
  if (auto x = m.get("startup_wait")) {
    cfg.startup_wait = read_duration(*x, m.path("startup_wait"), false);
    if (cfg.startup_wait > std::chrono::hours{1})
      fail(m.line("startup_wait"), m.path("startup_wait"),
           "expected at most 1h, got " + render_duration(cfg.startup_wait));
  }
}

// -- cluster ------------------------------------------------------------------

void parser::read_cluster(const map_reader& m, cluster_config& cfg) {
  if (auto x = m.get("enabled"))
    cfg.enabled = read_bool(*x, m.path("enabled"));
  if (auto x = m.get("node_id")) {
    auto path = m.path("node_id");
    cfg.node_id = read_string(*x, path);
    if (!is_valid_id(cfg.node_id))
      bad_value(*x, path, cfg.node_id, id_expected);
  }
  read_cluster_addresses(m, cfg);
  read_cluster_timing(m, cfg);
  // A secret: never part of a message (check_cluster_token checks it).
  if (auto x = m.get("token"))
    cfg.token = read_string(*x, m.path("token"));
  if (auto t = section(m, "tls", strings(cluster_tls_keys)))
    read_cluster_tls(*t, cfg.tls);
  if (auto x = m.get("insecure_plaintext"))
    cfg.insecure_plaintext = read_bool(*x, m.path("insecure_plaintext"));
}

void parser::read_cluster_addresses(const map_reader& m, cluster_config& cfg) {
  if (auto x = m.get("listen")) {
    auto path = m.path("listen");
    auto text = read_string(*x, path);
    auto addr = parse_host_port(text);
    if (!addr)
      bad_value(*x, path, text, host_port_expected);
    cfg.listen_host = std::move(addr->host);
    cfg.listen_port = addr->port;
  }
  if (auto x = m.get("advertise")) {
    auto path = m.path("advertise");
    cfg.advertise = read_string(*x, path);
    // Empty (the default) stands for the listen address.
    if (cfg.advertise.empty())
      return;
    auto addr = parse_host_port(cfg.advertise);
    if (!addr)
      bad_value(*x, path, cfg.advertise, host_port_expected);
    if (is_wildcard_host(addr->host))
      bad_value(*x, path, cfg.advertise,
                "the host:port peers reach this node at",
                " (a wildcard address only makes sense in cluster.listen)");
  }
}

void parser::read_cluster_timing(const map_reader& m, cluster_config& cfg) {
  if (auto x = m.get("shards"))
    cfg.shards
      = static_cast<uint32_t>(read_int(*x, m.path("shards"), 1, 65536));
  if (auto x = m.get("lease_ttl"))
    cfg.lease_ttl = read_duration(*x, m.path("lease_ttl"), true);
  read_duration_at_least(m, "heartbeat", std::chrono::milliseconds{10},
                         cfg.heartbeat);
  read_duration_at_least(m, "route_timeout", std::chrono::milliseconds{100},
                         cfg.route_timeout);
  if (auto x = m.get("handoff_timeout"))
    cfg.handoff_timeout = read_duration(*x, m.path("handoff_timeout"), false);
  if (auto x = m.get("rebalance_batch"))
    cfg.rebalance_batch = static_cast<uint32_t>(
      read_int(*x, m.path("rebalance_batch"), 1, 65536));
}

void parser::read_cluster_tls(const map_reader& m, cluster_tls_config& cfg) {
  // Readability is checked only for an enabled cluster (check_cluster_tls).
  std::pair<const char*, std::string*> files[]
    = {{"cert", &cfg.cert}, {"key", &cfg.key}, {"ca", &cfg.ca}};
  for (auto [key, out] : files)
    if (auto x = m.get(key))
      *out = read_string(*x, m.path(key));
  auto given = static_cast<size_t>(
    std::count_if(std::begin(files), std::end(files),
                  [](auto& file) { return !file.second->empty(); }));
  if (given == 0 || given == std::size(files))
    return;
  for (auto [key, out] : files)
    if (out->empty())
      fail(m.line(), m.path(key),
           "missing required key (cluster TLS needs all three of cert, key "
           "and ca, or none of them)");
}

void parser::read_duration_at_least(const map_reader& m, const std::string& key,
                                    caf::timespan minimum, caf::timespan& out) {
  auto x = m.get(key);
  if (!x)
    return;
  out = read_duration(*x, m.path(key), false);
  if (out < minimum)
    fail(m.line(key), m.path(key),
         "expected at least " + render_duration(minimum) + ", got "
           + render_duration(out));
}

void parser::read_chaos(const map_reader& m, chaos_config& cfg) {
  if (auto x = m.get("kill"))
    cfg.kill = read_bool(*x, m.path("kill"));
  if (auto x = m.get("disk"))
    cfg.disk = read_bool(*x, m.path("disk"));
}

// -- checks across fields -----------------------------------------------------

void parser::validate(const node_config& cfg) const {
  check_gateway_limits(cfg.gateway);
  check_gateway_auth(cfg.gateway);
  check_header_values(cfg.providers);
  check_backoff_bounds(cfg.supervision);
  check_providers(cfg.providers);
  check_pools(cfg);
  check_thread_pool(cfg);
  check_tools(cfg);
  check_storage(cfg);
  check_cluster(cfg);
  check_channels(cfg);
}

void parser::fail_below(int line, const std::string& path,
                        const std::string& lower_path, caf::timespan lower,
                        caf::timespan value) const {
  fail(line, path,
       "expected at least " + lower_path + " (" + render_duration(lower)
         + "), got " + render_duration(value));
}

void parser::check_gateway_limits(const gateway_config& cfg) const {
  if (cfg.max_text_bytes > cfg.max_frame_bytes)
    fail(line("gateway.max_text_bytes", "gateway.max_frame_bytes"),
         "gateway.max_text_bytes",
         "expected at most gateway.max_frame_bytes ("
           + std::to_string(cfg.max_frame_bytes) + "), got "
           + std::to_string(cfg.max_text_bytes));
  if (cfg.max_unauthenticated_per_address > cfg.max_unauthenticated)
    fail(line("gateway.max_unauthenticated_per_address",
              "gateway.max_unauthenticated"),
         "gateway.max_unauthenticated_per_address",
         "expected at most gateway.max_unauthenticated ("
           + std::to_string(cfg.max_unauthenticated) + "), got "
           + std::to_string(cfg.max_unauthenticated_per_address));
}

void parser::check_gateway_auth(const gateway_config& cfg) const {
  if (!cfg.token.empty() || cfg.allow_unauthenticated
      || is_loopback_host(cfg.host))
    return;
  fail(line("gateway.token", "gateway.host"), "gateway.token",
       "the gateway listens on " + quote(cfg.host)
         + ", which other machines can reach, but no client token is set: set "
           "gateway.token (or gateway.token_file), or set "
           "gateway.allow_unauthenticated: true to serve anyone who can "
           "connect");
}

void parser::check_header_values(
  const std::vector<provider_config>& providers) const {
  // CR or LF in a value would let it add headers or end the request early.
  auto has_line_break = [](const std::string& x) {
    return x.find_first_of("\r\n") != std::string::npos;
  };
  for (size_t i = 0; i < providers.size(); ++i) {
    auto prefix = indexed("providers", i);
    if (has_line_break(providers[i].api_key))
      fail(line(prefix + ".api_key", prefix), prefix + ".api_key",
           "the API key contains a line break (CR or LF)");
    for (auto& [name, value] : providers[i].headers)
      if (has_line_break(value)) {
        auto path = prefix + ".headers." + name;
        fail(line(path, prefix), path,
             "header values must not contain a line break (CR or LF)");
      }
  }
}

void parser::collect_warnings(node_config& cfg) const {
  auto& out = cfg.warnings;
  auto& gw = cfg.gateway;
  if (gw.allow_unauthenticated && gw.token.empty()
      && !is_loopback_host(gw.host))
    out.push_back("gateway.allow_unauthenticated is true: anyone who can "
                  "reach "
                  + gw.host + ":" + std::to_string(gw.port)
                  + " can read and write every thread");
  if (!gw.token.empty() && gw.admin_token.empty()
      && (is_loopback_host(gw.host) || gw.allow_unauthenticated))
    out.push_back("gateway.admin_token is not set: the client token also "
                  "opens the admin API (/api/v1/*, /metrics); set "
                  "gateway.admin_token to keep clients out of it");
  if (gw.allow_query_token)
    out.push_back("gateway.allow_query_token is true: tokens in URLs can end "
                  "up in proxy logs and browser history");
  for (size_t i = 0; i < cfg.providers.size(); ++i) {
    auto& p = cfg.providers[i];
    if (!p.api_key.empty() && p.base_url.compare(0, 7, "http://") == 0)
      out.push_back(indexed("providers", i)
                    + ".base_url is http://, so "
                      "the API key of provider "
                    + quote(p.name) + " travels unencrypted");
  }
  for (size_t i = 0; i < cfg.delivery.channels.size(); ++i) {
    auto& c = cfg.delivery.channels[i];
    if (!c.token.empty() && c.url.compare(0, 7, "http://") == 0)
      out.push_back(indexed("delivery.channels", i)
                    + ".url is http://, so the bot token of channel "
                    + quote(c.name) + " travels unencrypted");
  }
  if (!cfg.storage.sync)
    out.push_back("storage.sync is false: acknowledged messages can be lost "
                  "when the machine crashes");
  if (cfg.cluster.enabled && cfg.cluster.insecure_plaintext
      && !cfg.cluster.tls.enabled())
    out.push_back(
      "cluster.insecure_plaintext is true: links between nodes "
      "are neither encrypted nor authenticated, so any local "
      "process that reaches "
      + render_host_port(cfg.cluster.listen_host, cfg.cluster.listen_port)
      + " can send the node's peers actor messages");
  for (auto& [key, path] : secret_files_)
    if (auto w = exposed_file_warning(key, path))
      out.push_back(*w);
  if (auto w = exposed_file_warning("gateway.tls.key_file",
                                    cfg.gateway.tls.key_file))
    out.push_back(*w);
  if (auto w = exposed_file_warning("cluster.tls.key", cfg.cluster.tls.key))
    out.push_back(*w);
  if (cfg.chaos.kill)
    out.push_back("chaos.kill is true: admin clients can kill any actor");
  if (cfg.chaos.disk)
    out.push_back("chaos.disk is true: admin clients can make every disk "
                  "write fail");
  collect_tool_warnings(cfg);
}

void parser::collect_tool_warnings(node_config& cfg) const {
  for (size_t i = 0; i < cfg.tools.size(); ++i) {
    auto& command = cfg.tools[i].command;
    for (size_t j = 1; j < command.size(); ++j) {
      if (command[j] == "--")
        break; // What follows is never read as an option.
      auto& element = command[j];
      if (element.size() < 2 || element[0] != '{' || element[1] == '{')
        continue;
      cfg.warnings.push_back(
        indexed(indexed("tools", i) + ".command", j) + ": " + quote(element)
        + " starts with an argument of the model's choosing and no \"--\" "
          "comes before it, so a value starting with '-' is read as an "
          "option (put \"--\" before it, or a fixed prefix such as "
          "--name={name})");
    }
  }
}

void parser::check_backoff_bounds(const supervision_config& cfg) const {
  // Checked after merging over the defaults: the file may set only one bound.
  const std::pair<const char*, const supervisor_settings*> supervisors[] = {
    {"root", &cfg.root},
    {"providers", &cfg.providers},
    {"conversations", &cfg.conversations},
  };
  for (auto [name, settings] : supervisors) {
    auto& b = settings->backoff;
    if (b.max >= b.initial)
      continue;
    auto prefix = std::string{"supervision."} + name + ".backoff";
    fail_below(line(prefix + ".max", prefix + ".initial"), prefix + ".max",
               prefix + ".initial", b.initial, b.max);
  }
}

void parser::check_providers(
  const std::vector<provider_config>& providers) const {
  if (providers_written_ && providers.empty())
    fail(line("providers"), "providers",
         "expected a non-empty list of providers, got an empty list");
  check_unique_names(providers, "providers", "provider");
}

void parser::check_channels(const node_config& cfg) const {
  auto& channels = cfg.delivery.channels;
  check_unique_names(channels, "delivery.channels", "channel");
  auto& owner = cfg.owner.channel;
  if (!owner.empty() && !cfg.delivery.find_channel(owner))
    fail(line("owner.channel"), "owner.channel",
         "expected the name of a channel of delivery.channels, got "
           + quote(owner));
  for (size_t i = 0; i < channels.size(); ++i) {
    auto path = indexed("delivery.channels", i);
    if (channels[i].threads.empty() && channels[i].name != owner)
      fail(line(path + ".threads", path), path + ".threads",
           "expected at least one thread id or prefix ending in * (channel "
             + quote(channels[i].name)
             + " is not owner.channel and would send nothing)");
  }
}

void parser::check_pools(const node_config& cfg) const {
  if (pools_written_ && cfg.pools.empty())
    fail(line("pools"), "pools",
         "expected a non-empty list of pools, got an empty list");
  check_unique_names(cfg.pools, "pools", "pool");
  for (size_t i = 0; i < cfg.pools.size(); ++i)
    check_chain(cfg, i);
}

void parser::check_chain(const node_config& cfg, size_t pool_index) const {
  // Each entry names an existing provider, and only once.
  auto prefix = indexed("pools", pool_index);
  auto& chain = cfg.pools[pool_index].chain;
  std::set<std::string> seen;
  for (size_t j = 0; j < chain.size(); ++j) {
    auto path = indexed(prefix + ".chain", j);
    auto& entry = chain[j];
    // Only a defaulted pool has no lines: blame the providers instead.
    auto at = line(path, pools_written_ ? prefix : "providers");
    if (cfg.find_provider(entry) == nullptr)
      fail(at, path,
           "unknown provider " + quote(entry) + " (expected "
             + one_of(names_of(cfg.providers)) + ")");
    if (!seen.insert(entry).second)
      fail(at, path, "provider " + quote(entry) + " is listed twice");
  }
}

void parser::check_tools(const node_config& cfg) const {
  check_unique_names(cfg.tools, "tools", "tool");
  for (size_t i = 0; i < cfg.pools.size(); ++i)
    check_tool_refs(cfg, indexed("pools", i) + ".tools", cfg.pools[i].tools);
  check_tool_refs(cfg, "threads.tools", cfg.threads.tools);
  check_tool_refs(cfg, "threads.agent_tools", cfg.threads.agent_tools);
}

void parser::check_tool_refs(const node_config& cfg, const std::string& path,
                             const std::vector<std::string>& names) const {
  std::set<std::string> seen;
  for (size_t i = 0; i < names.size(); ++i) {
    auto item_path = indexed(path, i);
    auto at = line(item_path, path);
    if (cfg.find_tool(names[i]) == nullptr)
      fail(at, item_path,
           "unknown tool " + quote(names[i])
             + (cfg.tools.empty()
                  ? std::string{" (no tools are declared: define it under "
                                "tools)"}
                  : " (expected " + one_of(names_of(cfg.tools)) + ")"));
    if (!seen.insert(names[i]).second)
      fail(at, item_path, "tool " + quote(names[i]) + " is listed twice");
  }
}

void parser::check_storage(const node_config& cfg) const {
  if (cfg.storage.backend != storage_backend::postgres)
    return;
  if (cfg.chaos.disk)
    fail(line("chaos.disk", "storage.backend"), "chaos.disk",
         "injects faults into RocksDB's file system and has no effect when "
         "storage.backend is \"postgres\" (to test database faults, stop "
         "or kill the PostgreSQL server)");
  if (!cfg.storage.postgres.url.empty())
    return;
  fail(line("storage.postgres.url", "storage.backend"), "storage.postgres.url",
       "required when storage.backend is \"postgres\" (a libpq URI such as "
       "postgresql://keel@db.example/keel; write ${KEEL_PG_URL} to take it "
       "from the environment)");
}

void parser::check_cluster(const node_config& cfg) const {
  auto& cl = cfg.cluster;
  // A cluster that is off opens nothing: its keys only need the right types.
  if (!cl.enabled)
    return;
  if (cfg.storage.backend != storage_backend::postgres)
    fail(line("cluster.enabled"), "cluster.enabled",
         "a cluster needs storage.backend \"postgres\" (every node must read "
         "every thread, so the store must be shared), but storage.backend is "
         "\"rocksdb\"");
  check_cluster_token(cl);
  if (cl.lease_ttl.count() / heartbeats_per_lease < cl.heartbeat.count())
    fail(line("cluster.lease_ttl", "cluster.heartbeat"), "cluster.lease_ttl",
         "expected at least " + std::to_string(heartbeats_per_lease)
           + " x cluster.heartbeat (" + std::to_string(heartbeats_per_lease)
           + " x " + render_duration(cl.heartbeat) + "), got "
           + render_duration(cl.lease_ttl));
  check_cluster_advertise(cl);
  check_cluster_tls(cl.tls);
  check_cluster_transport(cl);
}

void parser::check_cluster_transport(const cluster_config& cfg) const {
  if (cfg.tls.enabled())
    return;
  if (!cfg.insecure_plaintext)
    fail(line("cluster.tls", "cluster.enabled"), "cluster.tls",
         "required when cluster.enabled is true: links between nodes are "
         "mutual TLS (cert, key and ca; `keelctl cluster certs DIR` makes "
         "them), since anyone who reaches a plaintext cluster port can send "
         "the node's actors messages; a test cluster on loopback may set "
         "cluster.insecure_plaintext: true instead");
  if (!is_loopback_host(cfg.listen_host))
    fail(line("cluster.insecure_plaintext"), "cluster.insecure_plaintext",
         "allowed only when cluster.listen is a loopback address, got "
           + quote(render_host_port(cfg.listen_host, cfg.listen_port))
           + " (set cluster.tls for links that leave the machine)");
}

void parser::check_cluster_token(const cluster_config& cfg) const {
  // The token is never shown, only its length.
  if (cfg.token.empty())
    fail(line("cluster.token", "cluster.enabled"), "cluster.token",
         "required when cluster.enabled is true (a shared secret of at least "
           + std::to_string(min_cluster_token_size)
           + " characters, the same on every node; write "
             "${KEEL_CLUSTER_TOKEN} to take it from the environment)");
  if (cfg.token.size() < min_cluster_token_size)
    fail(line("cluster.token"), "cluster.token",
         "expected a shared secret of at least "
           + std::to_string(min_cluster_token_size) + " characters, got "
           + std::to_string(cfg.token.size()));
}

void parser::check_cluster_advertise(const cluster_config& cfg) const {
  if (!cfg.advertise.empty() || !is_wildcard_host(cfg.listen_host))
    return;
  fail(line("cluster.advertise", "cluster.listen"), "cluster.advertise",
       "required when cluster.listen is a wildcard address ("
         + quote(render_host_port(cfg.listen_host, cfg.listen_port))
         + "), which peers cannot connect to: set the host:port peers reach "
           "this node at");
}

void parser::check_cluster_tls(const cluster_tls_config& cfg) const {
  if (!cfg.enabled())
    return;
  std::pair<const char*, const std::string*> files[]
    = {{"cert", &cfg.cert}, {"key", &cfg.key}, {"ca", &cfg.ca}};
  for (auto [key, file] : files) {
    auto path = std::string{"cluster.tls."} + key;
    if (!std::ifstream{*file})
      fail(line(path), path,
           "expected a readable PEM file, got " + quote(*file));
  }
}

void parser::check_thread_pool(const node_config& cfg) const {
  if (cfg.find_pool(cfg.threads.pool) != nullptr)
    return;
  auto msg = "unknown pool " + quote(cfg.threads.pool) + " (expected "
             + one_of(names_of(cfg.pools)) + ")";
  if (!thread_pool_written_)
    msg += "; threads.pool defaults to \"default\", so set threads.pool "
           "or define a pool named \"default\"";
  fail(line("threads.pool", "pools"), "threads.pool", msg);
}

} // namespace

// -- entry points -------------------------------------------------------------

caf::expected<node_config> parse_config(const std::string& yaml,
                                        const std::string& source,
                                        const env_lookup& env) {
  auto root = strict_yaml::load_document(yaml, source);
  if (!root)
    return std::move(root.error());
  try {
    parser p{source, env};
    return p.run(*root);
  } catch (const strict_yaml::error& err) {
    return caf::make_error(ec::config_invalid, err.message);
  } catch (const std::exception& ex) {
    // yaml-cpp may throw while walking odd documents; still one line.
    return caf::make_error(ec::config_invalid,
                           source
                             + ": cannot read the configuration: " + ex.what());
  }
}

namespace {

// Whether the text of a configuration file holds one of the secrets it
// configures as it is (not as a `${VAR}` or a token file).
bool holds_secret(const std::string& text, const node_config& cfg) {
  auto secrets = configured_secrets(cfg);
  return std::any_of(secrets.begin(), secrets.end(), [&](auto& x) {
    return text.find(x) != std::string::npos;
  });
}

} // namespace

caf::expected<node_config> load_config_file(const std::string& path,
                                            const env_lookup& env) {
  auto text = strict_yaml::read_file(path);
  if (!text)
    return std::move(text.error());
  auto cfg = parse_config(*text, path, env);
  if (cfg && holds_secret(*text, *cfg))
    if (auto w = exposed_file_warning("the configuration file", path))
      cfg->warnings.push_back(*w);
  return cfg;
}

} // namespace keel
