#pragma once

// The invariant oracle of crash recovery: checks the data of a stopped node.
// `keelctl verify --data-dir DIR` runs it; the crash fuzzer runs it after every
// crash, restart and clean stop.

#include <cstdint>
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
  /// client_id_mismatch, outbox_target_missing.
  std::string rule;
  /// Where: a thread id, `thread/seq`, `parent -> child` (a cycle:
  /// `a -> b -> a`), or for a bad record its key.
  std::string where;
  /// What is wrong, in words.
  std::string what;
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

} // namespace keel
