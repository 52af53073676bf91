#pragma once

// What the WebSocket and the HTTP load generators share: when messages are
// sent and which are measured, and the counts every run reports.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace keel::bench {

/// When messages are sent and which are measured; the same for both loads.
struct traffic_options {
  /// Target total rate in messages per second (open loop: sending does not
  /// wait for answers); 0 sends flat out, keeping a window in flight.
  double rate = 0;
  /// When non-zero, the measured phase sends exactly this many messages;
  /// otherwise it lasts `duration`.
  uint64_t messages = 0;
  /// Length of the measured phase when `messages` is 0.
  std::chrono::milliseconds duration{10000};
  /// Traffic before the measured phase; checked but not measured.
  std::chrono::milliseconds warmup{2000};
  /// After sending stops, how long to wait for missing answers; also, while
  /// sending, how long without any outcome before the run gives up on a
  /// server that stopped answering.
  std::chrono::milliseconds drain_timeout{10000};
  /// Bytes of text per message.
  size_t text_bytes = 64;
};

/// The counts both loads report. Counts cover warmup and measured messages
/// (for the HTTP load: calls); throughput covers the measured phase only.
struct traffic_result {
  /// Messages sent (calls started).
  uint64_t sent = 0;
  /// Messages answered by a reply (calls that returned a completion).
  uint64_t answered = 0;
  /// Messages answered by an error (calls that failed).
  uint64_t errors = 0;
  /// Messages sent in the measured phase.
  uint64_t measured_sent = 0;
  /// Measured messages answered by a reply.
  uint64_t measured_answered = 0;
  /// From the start of the measured phase to its last outcome.
  double measured_seconds = 0;
  /// measured_answered / measured_seconds.
  double answered_per_second = 0;
  /// The first few failures, for diagnosis.
  std::vector<std::string> error_samples;
  /// CPU time (user + system) this process spent during the run, all its
  /// threads included.
  double client_cpu_seconds = 0;
};

} // namespace keel::bench
