#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <caf/actor_clock.hpp>
#include <caf/expected.hpp>
#include <caf/typed_event_based_actor.hpp>

#include "keel/actors.hpp"
#include "keel/anchored_clock.hpp"
#include "keel/delivery_policy.hpp"
#include "keel/types.hpp"

namespace keel {

/// Configuration of the dead-letter queue (see `dead_letter_queue_actor`).
struct dead_letter_queue_config {
  /// When letters are retried and abandoned (`delivery.dead_letters`).
  dead_letter_schedule schedule;
  /// How long one retry may take (the target's accept) before it counts as
  /// failed; also bounds each store request.
  caf::timespan attempt_timeout = std::chrono::seconds{30};
  /// Look for due letters every interval even when none is known: in a
  /// cluster, where letters of threads the node comes to serve were
  /// written (and scheduled) by other nodes. On a single node every letter
  /// passes through the queue, which then keeps a timer only while one is
  /// pending.
  bool poll = false;
};

/// The schedule of `x` as the delivery policy sees it. A record written
/// before the schedule existed (pending, none due) is due one interval
/// after it was written.
dead_letter_timing timing_of(const dead_letter& x,
                             const dead_letter_schedule& schedule);

/// `x` with the schedule `t`.
void apply_timing(dead_letter& x, const dead_letter_timing& t);

/// A new dead letter: `entry` failed for good with `reason` at `now`, its
/// first retry one interval later.
dead_letter make_dead_letter(const outbox_entry& entry, std::string reason,
                             const dead_letter_schedule& schedule,
                             epoch_ms now);

/// What a retry of a dead letter did: delivered, or why not.
struct retry_result {
  bool delivered = false;
  std::string error;
};

/// `x` after a retry at `now` (`scheduled`: by the schedule, else an
/// operator's) ended with `result`: delivered, pending again, or abandoned
/// once a scheduled retry was its last. An operator's retry that fails
/// leaves the schedule as it was. The retry is recorded in `x.events`.
dead_letter after_retry(dead_letter x, const dead_letter_schedule& schedule,
                        bool scheduled, const retry_result& result,
                        epoch_ms now);

/// `x` dropped by an operator at `now`, for `reason`.
dead_letter after_drop(dead_letter x, const std::string& reason, epoch_ms now);

/// State of the dead-letter queue. Its clock is the actor's (the test
/// clock in deterministic tests), anchored to the wall clock at start, so
/// stored times and timers agree.
struct dead_letter_queue_state {
  using self_ptr
    = dead_letter_queue_actor::stateful_pointer<dead_letter_queue_state>;

  static inline const char* name = "keel.dead_letter_queue";

  dead_letter_queue_config cfg;
  /// Stored times, read off the actor's clock.
  anchored_clock clock;
  /// Letters (by id) with a retry or an update under way: nothing else
  /// touches them until it is done.
  std::set<std::string> busy;
  /// A scheduled round is running.
  bool round_running = false;
  /// A round became due while one ran: the next runs at once.
  bool rerun = false;
  /// The time of the pending round's timer; none if no timer is armed.
  std::optional<epoch_ms> next_round;

  /// The letters of a round at `now`: due, not busy, at most a batch,
  /// earliest due first.
  std::vector<dead_letter> pick_due(std::vector<dead_letter> letters,
                                    epoch_ms now) const;

  /// Letter `from/seq` of `letters` for an operator's action: not_found if
  /// there is none; conflict if it is delivered or dropped, or busy.
  caf::expected<dead_letter> actionable(std::vector<dead_letter>& letters,
                                        const std::string& from,
                                        seq_t seq) const;

  /// When the round after one at `now` that saw `letters` runs: at the
  /// earliest retry due among them after now, with `cfg.poll` one interval
  /// from now at the latest; none if nothing is due later.
  std::optional<epoch_ms>
  next_round_after(const std::vector<dead_letter>& letters, epoch_ms now) const;
};

/// Spawns the dead-letter queue: it writes every new dead letter with its
/// schedule, retries the node's pending ones when they are due (a round
/// of at most `schedule.batch`; in a cluster only letters from threads
/// the node serves), abandons a letter after its last retry, and carries
/// out operators' retries and drops, each recorded in the letter.
dead_letter_queue_actor::behavior_type dead_letter_queue(
  dead_letter_queue_actor::stateful_pointer<dead_letter_queue_state> self,
  dead_letter_queue_config cfg);

} // namespace keel
