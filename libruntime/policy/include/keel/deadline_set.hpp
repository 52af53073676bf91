#pragma once

// The deadlines of one actor's outstanding work (requests waiting for an
// answer, calls with a time budget), kept so that one timer serves all of
// them. CAF gives every timed request its own entry on the actor clock: a
// wake-up of the clock's thread when it is set, another when it fires
// (long after most answers came), and the entry's memory until then. Here
// an answered request leaves the set at once, and the owner keeps a single
// timer armed at the earliest deadline: the set says when that timer must
// move. A pure data structure: the caller passes the time by its own clock.

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <unordered_map>
#include <vector>

namespace keel {

class deadline_set {
public:
  using time_point = std::chrono::steady_clock::time_point;

  /// What a deadline guards: the owner decides what expiry means per kind.
  enum class kind : uint8_t {
    /// An answer to the request with this response id.
    response,
    /// Some other work of the owner's, by the owner's own id.
    work,
  };

  struct entry {
    kind what;
    uint64_t id;
  };

  /// Adds a deadline (replacing one of the same kind and id). Returns true
  /// if the owner must arm its timer at `at`: nothing armed, or `at` comes
  /// before the armed time.
  bool add(kind what, uint64_t id, time_point at);

  /// Drops a deadline (its work is done); nothing if there is none.
  void remove(kind what, uint64_t id);

  /// Called when the owner's timer fires at `now`: removes and returns the
  /// entries due at `now` (earliest first) and forgets the armed time if it
  /// has passed. Then `rearm()` says whether a timer is needed again.
  std::vector<entry> expire(time_point now);

  /// After `expire`: the time to arm a timer at, if a deadline is left and
  /// no timer armed at or before it; records it as armed.
  std::optional<time_point> rearm();

  size_t size() const noexcept {
    return by_key_.size();
  }

  bool empty() const noexcept {
    return by_key_.empty();
  }

private:
  using key = std::pair<uint8_t, uint64_t>;
  struct key_hash {
    size_t operator()(const key& k) const noexcept {
      return std::hash<uint64_t>{}(k.second * 2 + k.first);
    }
  };
  using schedule = std::multimap<time_point, entry>;

  schedule by_time_;
  std::unordered_map<key, schedule::iterator, key_hash> by_key_;
  std::optional<time_point> armed_;
};

} // namespace keel
