#pragma once

// RocksDB's raw synced writes on a file system, without Keel around them:
// flat out, the ceiling a node's durable message rate is measured against;
// paced, the floor of a node's CPU per message at a given rate (keel-bench
// reports the ratio to each). It lives beside the store because it is the
// store's own engine measured alone.

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

/// What `measure_paced_synced_writes` does.
struct paced_write_options {
  /// Parent folder, as in `raw_write_options`.
  std::string dir = "./data-bench-raw";
  /// Messages per second; each message wakes the writing thread once.
  double rate = 1000;
  /// Synced Puts per message, one after the other: 2 stands for a
  /// message's acceptance and its turn's commit, the least a node writes
  /// durably for a message.
  size_t writes_per_message = 2;
  /// How long to write.
  std::chrono::milliseconds duration{3000};
  /// Size of each value.
  size_t value_bytes = 200;
};

/// The outcome of `measure_paced_synced_writes`.
struct paced_write_result {
  /// The database folder used (already removed).
  std::string path;
  double rate = 0;
  size_t writes_per_message = 0;
  size_t value_bytes = 0;
  /// Messages written.
  uint64_t messages = 0;
  /// Wall time of the measurement.
  double seconds = 0;
  /// CPU seconds (user + system) this process used meanwhile.
  double cpu_seconds = 0;

  /// Messages per second reached (below `rate` when the writes could not
  /// keep the pace).
  double reached_rate() const noexcept {
    return seconds > 0 ? static_cast<double>(messages) / seconds : 0;
  }

  /// Milliseconds of CPU per message, or 0 without a message.
  double cpu_ms_per_message() const noexcept {
    return messages > 0 ? cpu_seconds * 1000.0 / static_cast<double>(messages)
                        : 0;
  }
};

/// Measures the CPU a fresh RocksDB costs per message at `rate` messages a
/// second when one thread, woken for each message, makes its synced Puts and
/// nothing else, for `duration` (a disk that cannot keep the pace writes
/// fewer messages; `messages / seconds` is the rate reached): the floor under a
/// node's CPU per message at that rate on this machine (a node also reads
/// frames, runs actors and answers). The process must do nothing else
/// meanwhile, since its whole CPU is counted.
caf::expected<paced_write_result>
measure_paced_synced_writes(const paced_write_options& opts);

} // namespace keel
