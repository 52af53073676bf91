#pragma once

// keel-bench's run against a node: the load (keel/tools/ws_load.hpp), the
// node's own figures before and after it, and RocksDB's raw synced writes
// for comparison (flat out their rate, paced their CPU per message); the report
// as JSON, as a table and as a row of the results table in docs/benchmarks.md.
// Also includes the other load generator, the client and /proc's figures, so
// that one include gives a caller every benchmark building block. RocksDB and
// Boost.Beast stay out of these headers.

#include <cstdint>
#include <functional>
#include <string>

#include <nlohmann/json.hpp>

#include "keel/config.hpp"
#include "keel/error.hpp"
#include "keel/proc.hpp"
#include "keel/raw_write_probe.hpp"
#include "keel/tools/http_load.hpp"
#include "keel/tools/latency.hpp"
#include "keel/tools/traffic.hpp"
#include "keel/tools/ws_client.hpp"
#include "keel/tools/ws_load.hpp"

namespace keel::bench {

/// Figures taken from the node's `GET /api/v1/status`.
struct node_figures {
  /// False when the status endpoint could not be read.
  bool available = false;
  /// Why not, when not available.
  std::string reason;
  std::string name;
  uint64_t rss_bytes = 0;
  uint64_t peak_rss_bytes = 0;
  /// Store flushes (synced WriteBatches) during the load.
  uint64_t store_flushes = 0;
  std::string data_dir;
  /// False when the node's status has no `cpu_seconds` (an older node) or
  /// it could not be read at the start of the measured phase.
  bool cpu_available = false;
  /// CPU seconds (user + system) the node used from the start of the
  /// measured phase to the end of the run (the drain included).
  double cpu_seconds = 0;
};

/// One keel-bench run.
struct report {
  load_options load_opts;
  load_result load;
  node_figures node;
  /// False when the raw measurement was skipped or failed.
  bool raw_available = false;
  /// Why not, when not available.
  std::string raw_reason;
  raw_write_result raw;
  /// False when the paced measurement (paced runs only) was skipped or
  /// failed.
  bool floor_available = false;
  /// Why not, when not available.
  std::string floor_reason;
  /// RocksDB's synced writes alone at the load's rate.
  paced_write_result floor;

  /// answered msgs/s / raw synced writes/s, or 0 without a raw figure.
  double durable_ratio() const noexcept;

  /// The node's CPU per message / the floor's, or a negative value
  /// without both.
  double floor_ratio() const noexcept;

  /// Milliseconds of node CPU per measured answered message, or a negative
  /// value without a CPU figure or an answered message.
  double node_cpu_ms_per_message() const noexcept;
};

/// The report as JSON (for scripts).
nlohmann::json to_json(const report& x);

/// The report as a readable table.
std::string render(const report& x);

/// The header of the results table in docs/benchmarks.md (two lines).
std::string markdown_header();

/// The report as one row of that table, `label` naming the scenario.
std::string markdown_row(const report& x, const std::string& label);

/// What `run_benchmark` does.
struct benchmark_options {
  /// The load.
  load_options load;
  /// Measure RocksDB's raw synced writes before the load: flat out their
  /// rate, paced (`load.rate`) their CPU per message at that rate.
  bool raw = true;
  /// Where and how long; `concurrency` is set to the number of connections
  /// (flat out).
  raw_write_options raw_opts;
  /// When set, called with a line saying what the run does next.
  std::function<void(const std::string&)> progress;
};

/// One whole keel-bench run: reads the node's status, measures the raw
/// synced writes, drives the load, reads the status again. Fails when
/// the node cannot be reached or refuses the token; a missing status
/// endpoint or a failed raw measurement only leave those figures out.
caf::expected<report> run_benchmark(const benchmark_options& opts);

} // namespace keel::bench
