#pragma once

// The on-disk part of the recovery on boot (steps 1-4 of the six), run by
// the persistence actor before it serves anything:
// 1. read the session records, 2. rebuild the agent tree, 3. mark ACTIVE
// sessions SUSPENDED (with `recovered_at`, so their next turn carries the
// recovery prompt), 4. scan for undelivered messages (inbox and outbox).
// Steps 5-6 (resume roots, then children with pending messages) are the
// orchestrator's: it starts conversations, which re-run their inboxes and
// re-send their outboxes themselves.

#include <string>

#include "keel/error.hpp"
#include "keel/store.hpp"
#include "keel/types.hpp"

namespace keel {

/// The prompt a thread interrupted by a crash gets with its next turn.
constexpr const char* recovery_prompt
  = "The system running this conversation restarted unexpectedly. A turn "
    "in progress may have been lost; answer the latest message again.";

/// Runs steps 1-4 on `db` (writing step 3 with one synced batch) and plans
/// the rest. `boot` is true for the recovery at process start; otherwise
/// (an orchestrator restart) the plan only lists pending work and nothing is
/// written. Fails only if the store cannot be read or written; inconsistent
/// data is reported in `report.problems` and left alone.
caf::expected<recovery_plan> plan_recovery(store& db, bool boot);

/// Renders a report for people (log lines, `keelctl recovery`).
std::string describe(const recovery_report& report);

} // namespace keel
