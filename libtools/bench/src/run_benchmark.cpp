#include <algorithm>
#include <future>
#include <optional>

#include "keel/text.hpp"
#include "keel/tools/bench.hpp"
#include "keel/tools/json_fields.hpp"
#include "keel/tools/ws_client.hpp"
#include "report_format.hpp"

namespace keel::bench {

namespace {

/// Measures the CPU per message of RocksDB's synced writes alone at the
/// load's rate into `result`, or says why not.
void measure_floor(const benchmark_options& opts, report& result,
                   const std::function<void(const std::string&)>& say) {
  result.raw_reason = "measured in flat-out runs only";
  paced_write_options floor_opts;
  floor_opts.dir = opts.raw_opts.dir;
  floor_opts.duration = opts.raw_opts.duration;
  floor_opts.value_bytes = opts.raw_opts.value_bytes;
  floor_opts.rate = opts.load.rate;
  say("measuring RocksDB's CPU floor (" + fixed(floor_opts.rate, 0) + " msg/s, "
      + std::to_string(floor_opts.writes_per_message) + " synced writes each, "
      + detail::seconds_str(floor_opts.duration) + ", in " + floor_opts.dir
      + ")");
  if (auto floor = measure_paced_synced_writes(floor_opts)) {
    result.floor_available = true;
    result.floor = std::move(*floor);
  } else {
    result.floor_reason = keel::render(floor.error());
  }
}

/// Measures RocksDB's raw synced writes the way the load runs: flat out, its
/// synced-write rate; paced, its CPU per message at the load's rate (two
/// synced writes each). Stores the figure in `result`, or says why not.
void measure_raw(const benchmark_options& opts, report& result,
                 const std::function<void(const std::string&)>& say) {
  if (!opts.raw) {
    result.raw_reason = "skipped (--no-raw)";
    result.floor_reason = result.raw_reason;
    return;
  }
  if (opts.load.rate > 0) {
    measure_floor(opts, result, say);
    return;
  }
  result.floor_reason = "measured in paced runs only";
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

/// The node's CPU seconds from its status, taken off the load's I/O thread
/// when the measured phase starts.
class measured_cpu {
public:
  /// Makes `opts` start the reading when its measured phase starts.
  void arm(load_options& opts) {
    opts.on_measure_start = [this, node = opts.node] {
      reading_ = std::async(std::launch::async, [node] {
        auto status = api_call(node, "GET", "/api/v1/status");
        return status ? json_double(*status, {"cpu_seconds"}) : std::nullopt;
      });
    };
  }

  /// Sets the node's CPU figure from the status after the run, when the
  /// status at the start of the measured phase had one.
  void fill(node_figures& node, const nlohmann::json& after) {
    if (!reading_.valid())
      return;
    auto before = reading_.get();
    auto now = json_double(after, {"cpu_seconds"});
    if (!before || !now || *now <= 0)
      return;
    node.cpu_available = true;
    node.cpu_seconds = std::max(*now - *before, 0.0);
  }

private:
  std::future<std::optional<double>> reading_;
};

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
  // The hook captures `cpu`, so the load runs on a copy of the options.
  measured_cpu cpu;
  auto load_opts = result.load_opts;
  cpu.arm(load_opts);
  auto load = run_load(load_opts);
  if (!load)
    return load.error();
  result.load = std::move(*load);
  if (before) {
    if (auto after = api_call(opts.load.node, "GET", "/api/v1/status")) {
      result.node = node_figures_from(*before, *after);
      cpu.fill(result.node, *after);
    } else {
      result.node.reason = keel::render(after.error());
    }
  }
  return result;
}

} // namespace keel::bench
