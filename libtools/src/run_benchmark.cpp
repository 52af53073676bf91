#include "keel/text.hpp"
#include "keel/tools/bench.hpp"
#include "keel/tools/json_fields.hpp"
#include "keel/tools/ws_client.hpp"
#include "report_format.hpp"

namespace keel::bench {

namespace {

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
  node.name = json_string(after, "node");
  node.data_dir = json_string(after, "data_dir");
  node.rss_bytes = json_number(after, {"rss_bytes"});
  node.peak_rss_bytes = json_number(after, {"peak_rss_bytes"});
  auto flushes_before = json_number(before, {"store", "flushes"});
  auto flushes_after = json_number(after, {"store", "flushes"});
  node.store_flushes
    = flushes_after >= flushes_before ? flushes_after - flushes_before : 0;
  return node;
}

} // namespace

caf::expected<report> run_benchmark(const benchmark_options& opts) {
  report result;
  result.load_opts = opts.load;
  if (result.load_opts.thread_prefix.empty())
    result.load_opts.thread_prefix = "bench-" + random_hex(6);
  else // Perhaps an earlier run's threads: message ids of this run's own.
    result.load_opts.message_prefix = "c" + random_hex(6) + "-";
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
