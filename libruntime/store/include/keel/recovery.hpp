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

/// Runs steps 1-4 on `db` (writing step 3 with one synced batch) and plans
/// the rest. `boot` is true for the recovery at process start; otherwise
/// (an orchestrator restart) the plan only lists pending work and nothing is
/// written. In a cluster, `only` limits everything (reads, writes, the
/// plan) to the threads of the shards the node holds: other nodes write
/// the rest. Fails only if the store cannot be read or written;
/// inconsistent data is reported in `report.problems` and left alone.
caf::expected<recovery_plan> plan_recovery(store& db, bool boot,
                                           const thread_filter& only = {});

/// Renders a report for people (log lines, `keelctl recovery`).
std::string describe(const recovery_report& report);

} // namespace keel
