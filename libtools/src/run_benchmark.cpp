#include <initializer_list>

#include "keel/text.hpp"
#include "keel/tools/bench.hpp"
#include "keel/tools/ws_client.hpp"
#include "report_format.hpp"

namespace keel::bench {

namespace {

uint64_t get_u64(const nlohmann::json& j,
                 std::initializer_list<const char*> path) {
  const nlohmann::json* cur = &j;
  for (auto key : path) {
    if (!cur->is_object())
      return 0;
    auto i = cur->find(key);
    if (i == cur->end())
      return 0;
    cur = &*i;
  }
  return cur->is_number_unsigned() || cur->is_number_integer()
           ? cur->get<uint64_t>()
           : 0;
}

std::string get_str(const nlohmann::json& j, const char* key) {
  auto i = j.find(key);
  return i != j.end() && i->is_string() ? i->get<std::string>() : std::string{};
}

/// Measures RocksDB's raw synced-write rate into `result`, or says why not.
void measure_raw(const benchmark_options& opts, report& result,
                 const std::function<void(const std::string&)>& say) {
  if (!opts.raw) {
    result.raw_reason = "skipped (--no-raw)";
    return;
  }
  auto raw_opts = opts.raw_opts;
  raw_opts.concurrency = opts.load.connections;
  say("measuring RocksDB's raw synced-write rate ("
      + detail::seconds_str(raw_opts.duration) + ", "
      + std::to_string(raw_opts.concurrency) + " writers, in " + raw_opts.dir
      + ")");
  if (auto raw = measure_raw_synced_writes(raw_opts)) {
    result.raw_available = true;
    result.raw = std::move(*raw);
  } else {
    result.raw_reason = keel::render(raw.error());
  }
}

/// The node's figures from its status after the load (`after`) and before
/// it (`before`).
node_figures node_figures_from(const nlohmann::json& before,
                               const nlohmann::json& after) {
  node_figures node;
  node.available = true;
  node.name = get_str(after, "node");
  node.data_dir = get_str(after, "data_dir");
  node.rss_bytes = get_u64(after, {"rss_bytes"});
  node.peak_rss_bytes = get_u64(after, {"peak_rss_bytes"});
  auto flushes_before = get_u64(before, {"store", "flushes"});
  auto flushes_after = get_u64(after, {"store", "flushes"});
  node.store_flushes = flushes_after >= flushes_before
                         ? flushes_after - flushes_before
                         : 0;
  return node;
}

} // namespace

caf::expected<report> run_benchmark(const benchmark_options& opts) {
  report result;
  result.load_opts = opts.load;
  if (result.load_opts.thread_prefix.empty())
    result.load_opts.thread_prefix = "bench-" + random_hex(6);
  // Reaching the node (and the token) is checked before anything else.
  auto before = api_call(opts.load.node, "GET", "/api/v1/status");
  if (!before) {
    const auto& err = before.error();
    if (err == ec::connection_failed || err == ec::unauthorized
        || err == ec::timeout)
      return err;
    result.node.reason = keel::render(before.error());
  }
  auto say = [&](const std::string& line) {
    if (opts.progress)
      opts.progress(line);
  };
  measure_raw(opts, result, say);
  say("driving the node: " + std::to_string(opts.load.connections)
      + " connections, " + std::to_string(opts.load.threads) + " threads, "
      + (opts.load.rate > 0 ? fixed(opts.load.rate, 0) + " msg/s"
                            : std::string{"flat out"}));
  auto load = run_load(result.load_opts);
  if (!load)
    return load.error();
  result.load = std::move(*load);
  if (before) {
    if (auto after = api_call(opts.load.node, "GET", "/api/v1/status"))
      result.node = node_figures_from(*before, *after);
    else
      result.node.reason = keel::render(after.error());
  }
  return result;
}

} // namespace keel::bench
