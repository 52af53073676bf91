#include "key_table.hpp"

#include <cmath>

#include "config_schema.hpp"

namespace keel::config_detail {

std::string render_size(uint64_t x) {
  constexpr std::pair<const char*, uint64_t> units[]
    = {{"GiB", uint64_t{1} << 30},
       {"MiB", uint64_t{1} << 20},
       {"KiB", uint64_t{1} << 10}};
  for (auto [name, factor] : units)
    if (x > 0 && x % factor == 0)
      return std::to_string(x / factor) + name;
  return std::to_string(x);
}

std::string render_bound(size_t x) {
  return x < (size_t{1} << 20) ? std::to_string(x) : render_size(x);
}

std::string render_bound(double x) {
  if (x == std::floor(x) && std::fabs(x) < 1e15)
    return std::to_string(static_cast<int64_t>(x));
  return strict_yaml::render_number(x);
}

std::string code(const std::string& x) {
  return x.empty() ? "`\"\"`" : "`" + x + "`";
}

std::string render_names(const std::vector<std::string>& xs) {
  std::string result = "[";
  for (size_t i = 0; i < xs.size(); ++i)
    result += (i > 0 ? ", " : "") + xs[i];
  return result + "]";
}

std::string describe_bounds(const duration_bounds& x) {
  if (x.at_most.count() > 0)
    return "duration "
           + (x.at_least.count() > 0 ? render_duration(x.at_least) : "0") + ".."
           + render_duration(x.at_most);
  if (x.at_least.count() > 0)
    return "duration >= " + render_duration(x.at_least);
  return x.positive ? "duration > 0" : "duration >= 0";
}

void check_duration(const reader& r, int line, const std::string& path,
                    const duration_bounds& bounds, caf::timespan value) {
  if (value < bounds.at_least)
    r.fail(line, path,
           "expected at least " + render_duration(bounds.at_least) + ", got "
             + render_duration(value));
  if (bounds.at_most.count() > 0 && value > bounds.at_most)
    r.fail(line, path,
           "expected at most " + render_duration(bounds.at_most) + ", got "
             + render_duration(value));
}

} // namespace keel::config_detail

namespace keel {

namespace {

/// Describes the keys of the list items and mappings nested in providers,
/// pools and tools.
void describe_lists(std::vector<config_key>& out) {
  using namespace config_detail;
  provider_keys().describe(out, "providers[]", provider_config{});
  http_provider_keys().describe(out, "providers[]", provider_config{});
  model_param_keys().describe(out, "providers[]", provider_config{}.params);
  script_step_keys().describe(out, "providers[].script[]", scripted_step{});
  pool_keys().describe(out, "pools[]", pool_config{});
  pool_retry_keys().describe(out, "pools[].retry", pool_config{});
  breaker_keys().describe(out, "pools[].breaker", breaker_config{});
  tool_keys().describe(out, "tools[]", tool_config{});
  tool_limit_keys().describe(out, "tools[].limits", tool_limits{});
}

void describe_runtime(std::vector<config_key>& out, const node_config& d) {
  using namespace config_detail;
  thread_keys().describe(out, "threads", d.threads);
  guard_keys().describe(out, "threads.guard", d.threads.guard);
  compaction_keys().describe(out, "threads.compaction", d.threads);
  agent_keys().describe(out, "threads.agents", d.threads.agents);
  agent_definition_keys().describe(out, "agents[]", threads_agent(d));
  agent_model_keys().describe(out, "agents[].model", model_params{});
  agent_execution_keys().describe(out, "agents[].execution", threads_agent(d));
  agent_retry_keys().describe(out, "agents[].execution.retry", pool_config{});
  agent_breaker_keys().describe(out, "agents[].execution.breaker",
                                breaker_config{});
  supervisor_keys().describe(out, "supervision.NAME", supervisor_settings{});
  backoff_keys().describe(out, "supervision.NAME.backoff", backoff_config{});
  logging_keys().describe(out, "logging", d.logging);
  shutdown_keys().describe(out, "shutdown", d.shutdown);
  storage_keys().describe(out, "storage", d.storage);
  rocksdb_keys().describe(out, "storage.rocksdb", d.storage.rocksdb);
  postgres_keys().describe(out, "storage.postgres", d.storage.postgres);
  cluster_keys().describe(out, "cluster", d.cluster);
  cluster_tls_keys().describe(out, "cluster.tls", d.cluster.tls);
  chaos_keys().describe(out, "chaos", d.chaos);
  owner_keys().describe(out, "owner", d.owner);
  delivery_keys().describe(out, "delivery", d.delivery);
  dead_letter_keys().describe(out, "delivery.dead_letters",
                              d.delivery.dead_letters);
  channel_keys().describe(out, "delivery.channels[]", channel_config{});
  channel_retry_keys().describe(out, "delivery.channels[].retry",
                                channel_retry_preset(channel_kind::webhook));
}

} // namespace

std::vector<config_key> config_keys() {
  using namespace config_detail;
  auto d = default_config();
  std::vector<config_key> out;
  node_keys().describe(out, "node", d);
  gateway_keys().describe(out, "gateway", d.gateway);
  rate_limit_keys().describe(out, "gateway.rate_limit", d.gateway.rate_limit);
  gateway_tls_keys().describe(out, "gateway.tls", d.gateway.tls);
  compat_keys().describe(out, "gateway.compat", d.gateway.compat);
  describe_lists(out);
  describe_runtime(out, d);
  return out;
}

} // namespace keel
