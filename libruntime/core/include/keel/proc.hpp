#pragma once

// What Linux's /proc says about a process: resident memory and CPU time.
// The node reports its own figures in GET /api/v1/status; the benchmarks
// read a node's from outside.

#include <cstdint>
#include <string>

#include "keel/error.hpp"

namespace keel {

/// Resident memory of a process.
struct memory_usage {
  /// Current resident set size (VmRSS).
  uint64_t rss_bytes = 0;
  /// Peak resident set size (VmHWM).
  uint64_t peak_rss_bytes = 0;
};

/// Reads `/proc/PID/status` (`pid` 0 means this process). Fails with
/// `ec::not_found` naming the file when it cannot be read or lacks the
/// fields.
caf::expected<memory_usage> read_memory_usage(int pid = 0);

/// User plus system CPU seconds `pid` has used (`pid` 0 means this process),
/// from `/proc/PID/stat`. Fails with `ec::not_found` naming the file.
caf::expected<double> read_cpu_seconds(int pid = 0);

/// The machine's load averages over 1, 5 and 15 minutes as /proc/loadavg
/// writes them ("0.52 0.58 0.59"); empty when it cannot be read.
std::string read_load_average();

} // namespace keel
