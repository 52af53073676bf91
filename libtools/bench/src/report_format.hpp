#pragma once

// The pieces the benchmark reports share: latency figures as JSON and as
// text, the rows of a readable table, and how a run's length reads. Private
// to libtools.

#include <chrono>
#include <ostream>
#include <string>

#include <nlohmann/json.hpp>

#include "keel/tools/latency.hpp"
#include "keel/tools/traffic.hpp"
#include "keel/tools/ws_load.hpp"

namespace keel::bench::detail {

/// A latency summary as the JSON reports show it (milliseconds).
nlohmann::json latency_json(const latency_summary& x);

/// A duration in seconds with one decimal ("2.5 s").
std::string seconds_str(std::chrono::milliseconds x);

/// Percentiles on one line ("p50 1.00 ms   p90 ..."), or "no samples".
std::string latency_line(const latency_summary& x);

/// One line of a readable report: the label in a column of 15.
void table_row(std::ostream& out, const char* label, const std::string& value);

/// How long the measured phase is ("10.0 s measured", "500 measured
/// messages").
std::string length_str(const traffic_options& o);

/// The traffic options as the JSON reports show them: `rate` (or "flat
/// out"), `window`, `messages`, `duration_s`, `warmup_s`, `text_bytes`.
nlohmann::json traffic_json(const traffic_options& o, size_t window);

/// Adds what both JSON reports show of a run's counts: `clean`,
/// `measured_seconds`, `answered_per_second`, `client_cpu_seconds`,
/// `error_samples`.
void add_traffic_json(nlohmann::json& j, const traffic_result& x, bool clean);

/// Today's date in UTC, "YYYY-MM-DD" (the first cell of a results row).
std::string utc_date();

/// The error samples, one row each.
void sample_rows(std::ostream& out, const traffic_result& x);

/// A WebSocket run's counts as the JSON reports show them (`sent`, `acked`,
/// `answered`, the failures of each kind, the measured phase's counts).
nlohmann::json messages_json(const load_result& l);

} // namespace keel::bench::detail
