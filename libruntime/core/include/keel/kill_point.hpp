#pragma once

// Kill points, for fault injection: named places at every persist
// operation where a crash test may kill the node. Unarmed (the default) a
// kill point costs a relaxed atomic increment (its hit counter). Armed with
// `KEEL_KILL_AT=point[:probability[:seed]]` (or keel-node's `--kill-at`), the
// named point kills the process with SIGKILL (exactly what `kill -9` does:
// no destructor, no flush, no handler) each time it is reached with the
// given probability (default 1), drawn from a generator seeded with `seed`
// (default: from the clock). Before dying it writes one line to stderr,
// `keel: kill point <name> fired (hit <n>)`, so the harness knows where.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "keel/error.hpp"

namespace keel {

/// The kill points, in the order a message meets them.
enum class kill_point : uint8_t {
  /// A thread's session exists in memory; its record is not written yet.
  session_created,
  /// The session record is durable; the first provider call has not begun.
  session_written,
  /// A provider call is in flight.
  provider_call,
  /// A provider call completed; its reply is not committed or delivered.
  call_completed,
  /// A message to another thread is in the outbox (durable); it is not in
  /// the target's inbox yet (not marked delivered).
  message_enqueued,
  /// A spawned child's tree link is durable; the spawn is not acknowledged.
  tree_link_written,
  /// A WriteBatch is synced; the writers are not answered yet.
  batch_written,
  /// A model's tool call is durable; its process has not started.
  tool_call_committed,
  /// A tool's process ended; its result is not committed.
  tool_finished,
  /// A compaction's summaries are made; the batch replacing the entries
  /// they summarize is not committed.
  compaction_summarized,
};

/// Every kill point, in declaration order.
const std::vector<kill_point>& all_kill_points();

/// The name of a kill point ("session_created", ...).
const char* to_string(kill_point x);

/// Parses a kill point name.
caf::expected<kill_point> parse_kill_point(std::string_view name);

/// An armed kill point.
struct kill_point_arming {
  kill_point point = kill_point::session_created;
  /// Chance of firing each time the point is reached, in (0, 1].
  double probability = 1.0;
  /// Seed of the generator that draws; 0 = from the clock.
  uint64_t seed = 0;
};

/// Parses `point[:probability[:seed]]`; the error names what is wrong.
caf::expected<kill_point_arming> parse_kill_point_arming(std::string_view spec);

/// Arms a kill point for this process (replacing any earlier arming).
void arm_kill_point(const kill_point_arming& arming);

/// Arms from the environment variable `KEEL_KILL_AT` if it is set; returns
/// an error naming the variable when its value is invalid.
caf::error arm_kill_point_from_env();

/// Disarms (for tests).
void disarm_kill_point();

/// Marks reaching `point`: kills the process if it is armed and the draw
/// says so. Thread-safe.
void reach(kill_point point);

/// How often `point` was reached in this process (armed or not).
uint64_t kill_point_hits(kill_point point);

} // namespace keel
