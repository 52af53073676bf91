#pragma once

// The helpers the builders of a conversation's requests and commits share
// across their files (conversation_answer.cpp, conversation_steps.cpp,
// conversation_compaction.cpp). Internal to them.

#include <optional>
#include <string>

#include "keel/conversation_state.hpp"

namespace keel::conversation_builders {

/// The log entry `seq` of `kind` about the message `msg` (its answer, or a
/// step of its turn).
log_entry entry_about(const inbox_entry& msg, seq_t seq, log_kind kind,
                      std::string text, millis now);

/// The context entry of the message the inbox front's turn answers, placed
/// after every entry so far.
context_entry user_context_entry(conversation_state& st);

/// What agent tool call `call` did, in one line (a message to a child joins
/// `commit`'s outbox). None if `call` is no agent tool.
std::optional<std::string> agent_call_note(conversation_state& st,
                                           turn_commit& commit,
                                           const tool_call& call, millis now,
                                           const spawn_outcomes& spawns);

/// The index of the user entry of the message `seq` in `context`, or its
/// size if the message is not there.
size_t user_entry(const context_list& context, seq_t seq);

/// A step commit of the inbox front's turn: the inbox entry stays.
turn_commit step_commit(const conversation_state& st);

/// Counts the model call that answered `reply` (null: none) into `commit`,
/// a commit of the inbox front's turn (conversation_usage.cpp): the
/// session's totals and the turn's part so far, written with the commit;
/// the message's log entry (and, when the commit `ends_turn`, its answer)
/// carries the turn's usage. The commit that ends the turn clears the
/// turn's part.
void count_usage(const conversation_state& st, turn_commit& commit,
                 const completion* reply, bool ends_turn);

} // namespace keel::conversation_builders
