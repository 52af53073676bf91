#pragma once

// The on-disk part of the recovery on boot (steps 1-4 of the six), run by
// the persistence actor before it serves anything:
// 1. read the session records, 2. rebuild the agent tree, 3. mark ACTIVE
// sessions SUSPENDED (with `recovered_at`, so their next turn carries the
// recovery prompt), 4. scan for undelivered messages (inbox and outbox).
// Steps 5-6 (resume roots, then children with pending messages) are the
// orchestrator's: it starts conversations, which re-run their inboxes and
// re-send their outboxes themselves.

#include <functional>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "keel/error.hpp"
#include "keel/store.hpp"
#include "keel/types.hpp"

namespace keel {

/// The prompt a thread interrupted by a crash gets with its next turn.
constexpr const char* recovery_prompt
  = "The system running this conversation restarted unexpectedly. A turn "
    "in progress may have been lost; answer the latest message again.";

/// Which threads a recovery covers; an empty filter covers all of them.
using thread_filter = std::function<bool(const std::string& thread)>;

/// Commits what is staged on a store: its owner's own flush, which also
/// answers whoever waits on the staged group and counts the outcome.
using store_flush = std::function<caf::error()>;

/// Runs steps 1-4 on `db` (writing step 3 with one synced batch) and plans
/// the rest. `boot` is true for the recovery at process start; otherwise
/// (an orchestrator restart) the plan only lists pending work and nothing is
/// written. In a cluster, `only` limits everything (reads, writes, the
/// plan) to the threads of the shards the node holds: other nodes write
/// the rest. Step 3's batch is committed by `flush` (by `db.flush()` if it
/// is empty): with writes of others staged, their owner's. Fails only if
/// the store cannot be read or written; inconsistent data is reported in
/// `report.problems` and left alone.
caf::expected<recovery_plan> plan_recovery(store& db, bool boot,
                                           const thread_filter& only = {},
                                           const store_flush& flush = {});

/// Renders a report for people (log lines, `keelctl recovery`).
std::string describe(const recovery_report& report);

/// The threads whose session may be ACTIVE on disk, learnt from the
/// session writes of one writer that ran the boot recovery (which left
/// every other session inactive). A write making a session ACTIVE counts at
/// once; one leaving it inactive only once its group is durable, and in
/// order (a dropped group may have left the older ACTIVE record).
class active_sessions {
public:
  /// A write of `thread`'s session joined the pending group.
  void staged(const std::string& thread, bool active);

  /// The pending group was committed (`durable`) or dropped.
  void flushed(bool durable);

  const std::unordered_set<std::string>& threads() const noexcept {
    return maybe_active_;
  }

private:
  std::unordered_set<std::string> maybe_active_;
  std::vector<std::pair<std::string, bool>> pending_;
};

/// A clean stop: marks the ACTIVE sessions among `threads` SUSPENDED in
/// one synced batch (reading those sessions only).
caf::error suspend_sessions(store& db,
                            const std::unordered_set<std::string>& threads);

/// A clean stop: marks every ACTIVE session `only` covers SUSPENDED in one
/// synced batch (reading every session).
caf::error suspend_sessions(store& db, const thread_filter& only);

} // namespace keel
