#pragma once

// Latency percentiles for the load generators and their reports.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace keel::bench {

/// Percentiles of a set of latencies, in milliseconds.
struct latency_summary {
  uint64_t count = 0;
  double p50 = 0;
  double p90 = 0;
  double p99 = 0;
  double max = 0;
  double mean = 0;
};

/// Collects latency samples and answers exact (nearest-rank) percentiles.
/// Keeps every sample: a benchmark run records at most a few million.
class latency_recorder {
public:
  /// Adds one sample.
  void record(std::chrono::nanoseconds latency);

  /// Number of samples.
  size_t count() const noexcept {
    return samples_.size();
  }

  /// Returns the nearest-rank percentile `q` (0 < q <= 1) in nanoseconds, or
  /// 0 when there are no samples.
  int64_t percentile(double q);

  /// Returns the summary in milliseconds.
  latency_summary summary();

private:
  void sort();

  std::vector<int64_t> samples_;
  bool sorted_ = true;
};

} // namespace keel::bench
