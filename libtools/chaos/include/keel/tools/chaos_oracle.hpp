#pragma once

// The outside record of what the clients were told, kept outside the nodes,
// and the checks run against the threads' histories: the one oracle of
// keel-chaos (once the traffic is quiet) and of the crash fuzzer (after each
// crash and while it waits for answers). The record is filled from the
// frames the clients receive; the check reads only the record and the
// histories, so tests can tamper with either and see the violation named.

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace keel::chaos {

/// One entry of a thread's history as the `history` frame carries it.
struct history_entry {
  uint64_t seq = 0;
  /// "user", "reply" or "error" (the crash fuzzer's logs also hold "tool"
  /// steps, which the check passes over).
  std::string kind;
  /// The message's client id (for outcomes: the answered message's).
  std::string client_id;
  /// Outcomes: the seq of the answered message; 0 for user messages.
  uint64_t reply_to = 0;
  /// What the entry says, and an error's code. Compared only with outcome
  /// frames recorded with their content (see `record::outcome`).
  std::string text;
  std::string code;
};

/// A "reply" or an "error": an outcome, answering the user message at
/// `reply_to`.
bool is_outcome(const history_entry& e);

/// Reads one entry of a `history` frame's `entries` (the node's stored
/// encoding of a log entry; fields the check does not use, such as `text`,
/// `provider`, `code` and `at`, are not read). False when `j` is not an
/// object, `seq` or `client_id` is missing, a field has the wrong type
/// (`seq` and `reply_to` must be non-negative integers), `kind` is not
/// "user", "reply" or "error", or an outcome ("reply", "error") has no
/// `reply_to` (the node omits it only when it is 0, for user messages).
bool from_json(const nlohmann::json& j, history_entry& out);

/// What the clients know of one message they sent.
struct sent_message {
  std::string thread;
  std::string id;
  /// Acknowledged: the message is durable at `seq` (the first ack's seq).
  bool acked = false;
  uint64_t seq = 0;
  /// The seqs of later acks for this id that named another seq than `seq`,
  /// each once, in the order they arrived: every ack of one id must name the
  /// same seq, and `check` reports each of these as MISPLACED.
  std::vector<uint64_t> conflicting_acks;
  /// Refused with an error frame (no `reply_to`) naming `refusal` (the
  /// first refusal's code): the message must not be stored.
  std::string refusal;
  /// Outcome frames (`reply` or `error` with `reply_to`) received for it,
  /// as their seqs, in the order they arrived (a frame received twice is
  /// listed twice).
  std::vector<uint64_t> outcomes_seen;
  /// What the outcome frames recorded with their content showed, by seq
  /// (the first of each seq): the history's entry there must show the same.
  std::map<uint64_t, history_entry> outcomes_seen_as;
  /// A message the node added itself (`record::adopt`), not a client's.
  bool own = false;
};

/// The record of every message sent. Not thread-safe: each traffic client
/// keeps its own and `merge` joins them (thread ids never overlap between
/// clients).
class record {
public:
  /// A send left the client (again, for a resend: the same message, whose
  /// entry is kept as it is); its outcome is unknown until an ack or a
  /// refusal arrives.
  void sent(const std::string& thread, const std::string& id);

  /// A message the node added itself (such as a child's outcome forwarded
  /// to its parent), found in a history or answered live: recorded like a
  /// send of unknown outcome (an id known already is kept as it is), but
  /// not held to ORDER, which the node's own messages need not keep.
  void adopt(const std::string& thread, const std::string& id);

  /// An ack for `id` at `seq`. Returns false (and records nothing) for an
  /// ack of an id never sent. A repeated ack (a resend's) at the same seq
  /// changes nothing; one at another seq keeps the first seq and adds the
  /// new one to `conflicting_acks`.
  bool acked(const std::string& thread, const std::string& id, uint64_t seq);

  /// An error frame without `reply_to` for `id`. Only for refusals that
  /// mean the message is not stored (such as `thread_closed`), not for
  /// those that ask for a resend (`unavailable`, `storage_io`): `check`
  /// reports a refused message that is stored. The first code is kept; a
  /// refusal for an id never sent is ignored.
  void refused(const std::string& thread, const std::string& id,
               const std::string& code);

  /// An outcome frame: `reply` or `error` with `reply_to`, at `seq`,
  /// answering client id `id`. Ignored for an id never sent (another
  /// client's message, or one the node added itself).
  void outcome(const std::string& thread, const std::string& id, uint64_t seq);

  /// An outcome frame as `seen` shows it (at `seen.seq`: its kind,
  /// `reply_to`, a reply's text, an error's code), recorded as the other
  /// overload does; `check` also compares it with the history's entry.
  void outcome(const std::string& thread, const std::string& id,
               const history_entry& seen);

  /// Adds every message of `other`. A message both records know is
  /// combined as if this record had also received the other's frames: its
  /// ack is taken as a later ack (so a different seq is a conflicting ack),
  /// the first refusal code is kept, and the other's outcome seqs that this
  /// record lacks are appended.
  void merge(const record& other);

  /// Thread -> client id -> what is known; ids in each thread sorted.
  const std::map<std::string, std::map<std::string, sent_message>>&
  threads() const {
    return threads_;
  }

  /// For tests of the oracle: direct access.
  std::map<std::string, std::map<std::string, sent_message>>& threads() {
    return threads_;
  }

  /// Counts.
  uint64_t messages() const;
  uint64_t acknowledged() const;
  /// Sent, never acknowledged nor refused (the connection died first).
  uint64_t unknown() const;

private:
  std::map<std::string, std::map<std::string, sent_message>> threads_;
};

/// One broken rule.
struct violation {
  /// LOST, DUPLICATE, UNANSWERED, ORDER, STORED_REFUSED, MISPLACED,
  /// UNEXPECTED (an outcome seen live that the history does not hold).
  std::string rule;
  /// One line naming the thread, the message and the seqs, without the
  /// rule, which goes in front of it when shown: `LOST: ` + `t3/m17 was
  /// acknowledged at seq 12 and is not in the history`.
  std::string text;
  /// Entries after the end of the history could still mend it (UNANSWERED;
  /// UNEXPECTED of an outcome after the history's last entry): a check of
  /// histories read only so far, such as the crash fuzzer's while it waits
  /// for answers, holds these back.
  bool beyond_history = false;
};

/// Checks the record against the full histories of its threads (thread ->
/// entries in seq order; a thread of the record missing there has an empty
/// history), once nothing is in flight. A message is stored where a "user"
/// entry carries its client id (the first such entry is its seq); its
/// outcomes are the "reply" and "error" entries whose `reply_to` is one of
/// its stored seqs. Entries of client ids the record does not know (other
/// clients', the node's own) are ignored and never make a check fail.
/// - LOST: an acknowledged message is not in its thread's history;
/// - MISPLACED: it is stored at another seq than its ack said, or two acks
///   of it named different seqs;
/// - DUPLICATE: a client id is stored twice as a user message, or a stored
///   message has more than one outcome;
/// - UNANSWERED: a stored message (acknowledged or of unknown outcome) has
///   no outcome;
/// - ORDER: a thread's outcomes answer its messages out of order (the first
///   outcome seqs must increase with the seqs they answer; the first
///   inversion of each thread is reported; adopted messages aside);
/// - STORED_REFUSED: a refused message is stored;
/// - UNEXPECTED: an outcome frame seen live is not in the history at its
///   seq, answering that message (and showing what the frame showed, for
///   one recorded with its content).
/// Messages of unknown outcome that were never stored are fine: the client
/// never learned they were accepted. Violations come thread by thread (in
/// the record's order), message by message, ORDER last in each thread.
std::vector<violation>
check(const record& rec,
      const std::map<std::string, std::vector<history_entry>>& histories);

} // namespace keel::chaos
