#pragma once

// The invariant oracle of crash recovery: checks the data of a stopped node.
// `keelctl verify --data-dir DIR` runs it; the crash fuzzer runs it after every
// crash, restart and clean stop. On a cluster's PostgreSQL database,
// `keelctl verify --pg URL` also runs the epoch audit: no row was written by
// a stale owner of its shard.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "keel/error.hpp"
#include "keel/store.hpp"

namespace keel {

/// One broken invariant.
struct violation {
  /// Stable rule name: active_session, bad_record, orphan_child,
  /// dangling_link, tree_cycle, lost_message, duplicate_reply,
  /// answered_but_pending, inbox_without_message, outcome_without_message,
  /// client_id_mismatch, outbox_target_missing, epoch_audit.
  std::string rule;
  /// Where: a thread id, `thread/seq`, `parent -> child` (a cycle:
  /// `a -> b -> a`), for a bad record its key, for the epoch audit
  /// `family/key` (a row of a PostgreSQL table).
  std::string where;
  /// What is wrong, in words.
  std::string what;
};

/// What the epoch audit read.
struct epoch_audit_summary {
  /// Why the audit did not run (no cluster tables, an old layout); empty
  /// if it ran.
  std::string skipped;
  /// Rows stamped by a fenced transaction (a writer), each checked.
  uint64_t rows = 0;
  /// The shards and the (shard, epoch) pairs those rows were written in.
  uint64_t shards = 0;
  uint64_t epochs = 0;
  /// Rows without a writer (`meta`, `health`, or written without a fence:
  /// one node, before the upgrade to layout 2), not checked.
  uint64_t unstamped = 0;
  /// The cluster's shard count and the epochs `keel.shard_history` holds.
  uint64_t cluster_shards = 0;
  uint64_t history = 0;
};

/// What the oracle read and found.
struct verify_report {
  uint64_t sessions = 0;
  uint64_t links = 0;
  uint64_t user_messages = 0;
  uint64_t answered = 0;
  uint64_t pending = 0;
  uint64_t outbox = 0;
  /// Unanswered messages whose inbox entry is in quarantine (not lost: the
  /// bytes are kept, but no turn will answer them).
  uint64_t quarantined_messages = 0;
  /// Records moved to quarantine because they could not be read (not a
  /// violation: the node moved them aside on purpose and started their
  /// threads fresh; an operator may inspect or restore them).
  std::vector<quarantined_record> quarantined;
  std::vector<violation> violations;
  /// The epoch audit's summary; none if it was not asked for (a RocksDB
  /// store).
  std::optional<epoch_audit_summary> epoch_audit;

  bool ok() const noexcept {
    return violations.empty();
  }
};

/// Checks every invariant on `db`:
/// - no session is ACTIVE (a stopped node, after recovery or a clean stop);
/// - every record parses and every session has a valid state;
/// - the agent tree is consistent: every link's ends have sessions, every
///   child's session names the link's parent, every session with a parent
///   has its link, no cycles;
/// - every user message (an acknowledged message) is answered exactly once
///   (one reply or error entry with its seq as `reply_to`) or still in the
///   inbox (or its inbox entry in quarantine), never both, never neither; no
///   two outcomes answer one message;
/// - every reply or error answers a user message of its thread
///   (outcome_without_message) and carries its client id;
/// - every inbox entry has its user log entry; the client id index agrees;
/// - every outbox entry targets a thread with a session and carries the
///   client id `agent_client_id(from, seq)`.
/// Messages from other threads (client ids `agent:...`) follow the same
/// rules as a client's; an error entry counts as an answer. A record that
/// cannot be read is one bad_record violation (naming its key); the other
/// records are still checked.
/// Fails (rather than reporting) only when the store cannot be read at all.
caf::expected<verify_report> verify_store(store& db);

/// The epoch audit of the PostgreSQL database at `pg_url` (a libpq URL,
/// never shown), read in one read-only snapshot. If it holds a cluster's
/// tables, every row a fenced transaction stamped (`writer`, `writer_epoch`,
/// `written_at`; see `keel/pg_store.hpp`) must have been written by the
/// owner of its shard (shard_of its key's thread over the cluster's shards)
/// at that epoch while the epoch lasted:
/// - `keel.shard_history` has the row's (shard, epoch), owned by its writer;
/// - the row was written (its transaction began) before the next epoch of
///   that shard began (the next history row's `at`): the fence holds the
///   shard row FOR SHARE until COMMIT, so a takeover waits for every
///   transaction of the old epoch, and one starting later fails the fence;
/// - a stamped row has an epoch (its transaction was fenced on its shard).
/// Each broken row is one `epoch_audit` violation at `family/key`. A
/// database without cluster tables or of layout 1 (no stamps) is skipped
/// (`epoch_audit.skipped` says why). Sets `report.epoch_audit`; fails only
/// when the database cannot be read.
caf::error audit_epochs(const std::string& pg_url, verify_report& report);

/// The epoch audit's summary line for people (ends in a newline).
std::string render_epoch_audit(const epoch_audit_summary& x);

} // namespace keel
