#include "keel/tools/latency.hpp"

#include <algorithm>
#include <cmath>

namespace keel::bench {

void latency_recorder::record(std::chrono::nanoseconds latency) {
  samples_.push_back(std::max<int64_t>(latency.count(), 0));
  sorted_ = false;
}

void latency_recorder::sort() {
  if (!sorted_) {
    std::sort(samples_.begin(), samples_.end());
    sorted_ = true;
  }
}

int64_t latency_recorder::percentile(double q) {
  if (samples_.empty())
    return 0;
  sort();
  q = std::clamp(q, 0.0, 1.0);
  // Nearest rank: the smallest sample with at least q of all at or below it.
  auto rank = static_cast<size_t>(std::ceil(q * samples_.size()));
  return samples_[rank == 0 ? 0 : rank - 1];
}

latency_summary latency_recorder::summary() {
  latency_summary result;
  result.count = samples_.size();
  if (samples_.empty())
    return result;
  auto ms = [](int64_t ns) { return static_cast<double>(ns) / 1e6; };
  result.p50 = ms(percentile(0.50));
  result.p90 = ms(percentile(0.90));
  result.p99 = ms(percentile(0.99));
  result.max = ms(samples_.back());
  double sum = 0;
  for (auto x : samples_)
    sum += static_cast<double>(x);
  result.mean = ms(static_cast<int64_t>(sum / samples_.size()));
  return result;
}

} // namespace keel::bench
