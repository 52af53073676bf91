#pragma once

#include <chrono>
#include <cstddef>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <caf/typed_event_based_actor.hpp>

#include "keel/actors.hpp"
#include "keel/anchored_clock.hpp"
#include "keel/delivery_policy.hpp"
#include "keel/types.hpp"

namespace keel {

/// Configuration of the owner's notifications (see `notifier`).
struct notifier_config {
  /// The channel notices go to (`owner.channel`); empty: they are logged
  /// and listed only.
  std::string channel;
  /// Dedup windows that differ from `default_dedup_window`.
  std::map<notice_kind, std::chrono::milliseconds> windows;
  /// Bounds each store request.
  caf::timespan store_timeout = std::chrono::seconds{30};
  /// Bounds one notice's way to the channel, its retries included.
  caf::timespan send_timeout = std::chrono::minutes{5};
  /// Suppressed counts are written at most this often (a flood of
  /// suppressed notices costs one write per interval, not one each).
  caf::timespan flush_interval = std::chrono::seconds{1};
  /// After a failed read of the stored state, read it again this later.
  caf::timespan reload_after_failure = std::chrono::seconds{5};
  /// The node's secrets (`configured_secrets`): redacted from each notice's
  /// text and error before it is logged, stored or sent.
  std::vector<std::string> secrets;
};

/// State of the owner's notifications: the dedup gate and the latest
/// notice per kind and subject. Its clock is the actor's, anchored to the
/// wall clock (see `anchored_clock`).
struct notifier_state {
  using self_ptr = notifier_actor::stateful_pointer<notifier_state>;

  static inline const char* name = "keel.notifier";

  notifier_config cfg;
  anchored_clock clock;
  notice_gate gate;
  /// The latest notice per `notice_key`, as stored or about to be.
  std::map<std::string, owner_notice> latest;
  /// Keys whose suppressed counts are not stored yet.
  std::set<std::string> unstored;
  /// Notices raised before the stored state was read, at most `max_held`.
  std::vector<owner_notice> held;
  static constexpr size_t max_held = 1000;
  bool loaded = false;
  bool flush_armed = false;

  /// Sets the dedup windows of `cfg`.
  void configure(notifier_config config);

  /// Takes the stored records: the gate remembers every sending that went
  /// out or may have (sent, logged, pending); failed ones do not count.
  /// Returns the pending ones, to send again.
  std::vector<owner_notice> restore(std::vector<owner_notice> stored);

  /// Raises `x` at `now`: returns the notice to store and send if the gate
  /// lets it through, else counts it as suppressed (its key is then
  /// `unstored`) and returns none.
  std::optional<owner_notice> raise(owner_notice x, epoch_ms now);

  /// Records how the sending of `x` ended; a failed one no longer holds
  /// the gate shut. Returns false if a newer notice replaced `x` already.
  bool settle(const owner_notice& x);

  /// Every latest notice, newest first.
  std::vector<owner_notice> listing() const;
};

/// Spawns the owner's notifications. It reads the stored notices first
/// (holding what is raised meanwhile) and sends again those that were
/// under way at a crash, with the same idempotency key.
notifier_actor::behavior_type
notifier(notifier_actor::stateful_pointer<notifier_state> self,
         notifier_config cfg);

} // namespace keel
