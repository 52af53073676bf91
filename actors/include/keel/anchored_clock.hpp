#pragma once

#include <chrono>

#include <caf/actor_clock.hpp>

#include "keel/delivery_policy.hpp"
#include "keel/text.hpp"

namespace keel {

/// Wall-clock milliseconds read off an actor's clock (the test clock in
/// deterministic tests), anchored to the wall clock once: the times an
/// actor stores and the timers it arms agree.
struct anchored_clock {
  epoch_ms wall_at_start = 0;
  caf::actor_clock::time_point clock_at_start;

  /// Anchors to the wall clock now.
  void anchor(const caf::actor_clock& clock) {
    wall_at_start = wall_clock_millis();
    clock_at_start = clock.now();
  }

  /// Milliseconds since the epoch, by `clock`.
  epoch_ms now(const caf::actor_clock& clock) const {
    auto since = clock.now() - clock_at_start;
    return wall_at_start
           + std::chrono::duration_cast<std::chrono::milliseconds>(since)
               .count();
  }
};

} // namespace keel
