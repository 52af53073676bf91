#pragma once

// RocksDB's raw synced-write rate on a file system: the ceiling a node's
// durable message rate is measured against (keel-bench reports the ratio).
// It lives beside the store because it is the store's own engine measured
// without Keel around it.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

#include "keel/error.hpp"

namespace keel {

/// What `measure_raw_synced_writes` does.
struct raw_write_options {
  /// Parent folder; a fresh database is created in a new subfolder of it and
  /// removed afterwards. Created when missing.
  std::string dir = "./data-bench-raw";
  /// Number of writer threads, each issuing one synced Put at a time.
  size_t concurrency = 100;
  /// How long to write.
  std::chrono::milliseconds duration{3000};
  /// Size of each value; similar to one stored message record.
  size_t value_bytes = 200;
};

/// The outcome of `measure_raw_synced_writes`.
struct raw_write_result {
  /// The database folder used (already removed).
  std::string path;
  size_t concurrency = 0;
  size_t value_bytes = 0;
  /// Writes completed.
  uint64_t writes = 0;
  /// Wall time of the measurement.
  double seconds = 0;
  /// writes / seconds.
  double writes_per_second = 0;
};

/// Measures how many `WriteOptions.sync = true` Puts per second a fresh
/// RocksDB sustains with `concurrency` concurrent writers (RocksDB groups
/// concurrent writers into one fsync, as Keel's store does).
caf::expected<raw_write_result>
measure_raw_synced_writes(const raw_write_options& opts);

} // namespace keel
