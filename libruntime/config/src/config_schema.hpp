#pragma once

// The names and value rules of the node configuration that its key tables
// (config_keys.cpp) and its readers (config_parser.cpp and the files beside
// it) share.

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "keel/config.hpp"
#include "keel/provider_policy.hpp"
#include "key_table.hpp"

namespace keel::config_detail {

// -- names --------------------------------------------------------------------

inline constexpr const char* top_level_keys[]
  = {"node",    "gateway", "providers",   "pools",   "tools",
     "threads", "agents",  "supervision", "logging", "shutdown",
     "storage", "cluster", "chaos",       "owner",   "delivery"};

inline constexpr const char* tls_versions[] = {"1.2", "1.3"};

inline constexpr const char* provider_kinds[] = {"echo", "scripted", "openai",
                                                 "anthropic"};

/// The openai wire's spellings of the output limit.
inline constexpr const char* token_limit_fields[] = {"max_completion_tokens",
                                                     "max_tokens"};
inline constexpr const char* channel_kinds[] = {"webhook", "telegram"};

/// The keys of `owner.notices`: the kinds of notice, each a dedup window.
inline constexpr const char* notice_kind_names[]
  = {"all_models_failed",    "credits_exhausted",     "channel_unhealthy",
     "tool_disabled",        "dead_letter_abandoned", "agent_stuck",
     "dead_letters_pending", "provider_unauthorized"};

inline constexpr const char* telegram_parse_modes[] = {"Markdown", "MarkdownV2",
                                                       "HTML", ""};

/// The provider error classes a scripted step may fail with and a pool's
/// cooldowns name: `error_class`'s own names.
inline constexpr const auto& failure_classes = error_class_names;

/// Tools the runtime itself gives threads; `tools[]` cannot take their names.
inline constexpr const char* builtin_tools[] = {"spawn_agent", "message_agent"};

/// What tool names look like, for messages (the providers' function names).
inline constexpr const char* tool_name_expected
  = "1 to 64 characters from A-Z, a-z, 0-9, '_' and '-'";

/// Smallest `providers[].context_window` (besides 0, "from the table").
inline constexpr int64_t min_context_window = 1024;

inline constexpr const char* log_formats[] = {"text", "json"};

inline constexpr const char* log_levels[] = {"trace", "debug", "info",
                                             "warn",  "error", "off"};

inline constexpr const char* storage_backends[] = {"rocksdb", "postgres"};

inline constexpr const char* scheduler_policies[] = {"sharing", "stealing"};

/// Shortest `cluster.token` accepted when the cluster is on.
inline constexpr size_t min_cluster_token_size = 16;

/// `cluster.lease_ttl` must cover this many heartbeats.
inline constexpr int64_t heartbeats_per_lease = 3;

inline constexpr const char* supervisor_names[] = {"root", "providers",
                                                   "conversations"};

/// Upper bound of `max_restarts` and `buffer`: far beyond any sane value,
/// low enough that a typo of a few extra digits is caught.
inline constexpr int64_t supervision_limit = 1'000'000;

/// What node names and cluster node ids look like, for messages.
inline constexpr const char* id_expected
  = "1 to 64 characters from A-Z, a-z, 0-9, '.', '_' and '-'";

// -- value rules --------------------------------------------------------------

/// Whether `x` is a valid node name or cluster node id (`id_expected`).
bool is_valid_id(const std::string& x);

/// Whether `x` is 1 to 64 characters of [A-Za-z0-9_-]: a tool or channel
/// name (`tool_name_expected`).
bool is_plain_name(const std::string& x);

/// Whether `x` is a valid environment variable name: letters, digits and
/// `_`, not starting with a digit.
bool is_valid_env_name(const std::string& x);

/// Whether the file at `path` can be opened for reading.
bool is_readable_file(const std::string& path);

/// An address written "host:port" or, for IPv6, "[address]:port".
struct host_port {
  /// The host name or address, without brackets.
  std::string host;
  uint16_t port = 0;
};

/// What `parse_host_port` accepts, for messages.
inline constexpr const char* host_port_expected
  = "host:port with a port in 1..65535 (IPv6 in brackets, as in "
    "[::1]:7701)";

/// Parses "host:port" (a host name or IPv4 address of A-Z, a-z, 0-9, '.',
/// '_' and '-') or "[IPv6]:port", with a port in 1..65535.
std::optional<host_port> parse_host_port(std::string_view text);

/// Renders `host` and `port` as `parse_host_port` reads them back.
std::string render_host_port(const std::string& host, uint16_t port);

/// The names of `xs` (providers, pools, tools), in order.
template <class T>
std::vector<std::string> names_of(const std::vector<T>& xs) {
  std::vector<std::string> result;
  for (auto& x : xs)
    result.push_back(x.name);
  return result;
}

// -- the key tables -----------------------------------------------------------

/// Bounds of duration keys.
inline constexpr duration_bounds positive_duration{true};
inline constexpr duration_bounds any_duration{};
inline constexpr duration_bounds at_least_1ms{false,
                                              std::chrono::milliseconds{1}};

/// The upper bound of counts that have none.
inline constexpr auto unbounded = strict_yaml::no_limit;

/// Adds the keys of a retry backoff (`base_delay`, `multiplier`,
/// `max_delay`, `jitter`) filling the retry_policy `policy` returns.
template <class Owner, class Policy>
void add_backoff_delays(key_table<Owner>& t, Policy policy) {
  auto field = [policy](auto member) {
    return [policy, member](auto& x) -> auto& {
      return std::invoke(policy, x).*member;
    };
  };
  t.duration("base_delay", duration_bounds{}, field(&retry_policy::base_delay),
             "Delay after the first failed attempt.")
    .number("multiplier", 1.0, 100.0, field(&retry_policy::multiplier),
            "Growth of the delay per further attempt.")
    .duration("max_delay", duration_bounds{}, field(&retry_policy::max_delay),
              "Upper bound of a computed delay, jitter included.")
    .number("jitter", 0.0, 1.0, field(&retry_policy::jitter),
            "The delay is drawn from d * [1 - jitter, 1 + jitter].");
}

const key_table<node_config>& node_keys();
const key_table<gateway_config>& gateway_keys();
const key_table<rate_limit_config>& rate_limit_keys();
const key_table<tls_config>& gateway_tls_keys();
const key_table<compat_config>& compat_keys();
const key_table<provider_config>& provider_keys();
/// The keys only HTTP providers (openai, anthropic) take.
const key_table<provider_config>& http_provider_keys();
/// The model parameters of a provider (its own keys) and of an agent (its
/// `model:` mapping).
const key_table<model_params>& model_param_keys();
/// `model_param_keys` with every default its provider's, for `agents[].model`.
const key_table<model_params>& agent_model_keys();
const key_table<scripted_step>& script_step_keys();
const key_table<pool_config>& pool_keys();
const key_table<pool_config>& pool_retry_keys();
const key_table<breaker_config>& breaker_keys();
const key_table<tool_config>& tool_keys();
const key_table<tool_limits>& tool_limit_keys();
const key_table<thread_defaults>& thread_keys();
const key_table<guard_limits>& guard_keys();
const key_table<thread_defaults>& compaction_keys();
const key_table<agent_limits>& agent_keys();
const key_table<agent_config>& agent_definition_keys();
const key_table<agent_config>& agent_execution_keys();
const key_table<pool_config>& agent_retry_keys();
const key_table<breaker_config>& agent_breaker_keys();
const key_table<supervisor_settings>& supervisor_keys();
const key_table<backoff_config>& backoff_keys();
const key_table<logging_config>& logging_keys();
const key_table<shutdown_config>& shutdown_keys();
const key_table<storage_config>& storage_keys();
const key_table<rocksdb_config>& rocksdb_keys();
const key_table<postgres_config>& postgres_keys();
const key_table<cluster_config>& cluster_keys();
const key_table<cluster_tls_config>& cluster_tls_keys();
const key_table<chaos_config>& chaos_keys();
const key_table<owner_config>& owner_keys();
const key_table<delivery_config>& delivery_keys();
const key_table<dead_letter_schedule>& dead_letter_keys();
const key_table<channel_config>& channel_keys();
const key_table<channel_retry>& channel_retry_keys();

} // namespace keel::config_detail
