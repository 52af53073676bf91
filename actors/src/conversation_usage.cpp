#include "keel/conversation_builders.hpp"

#include "keel/call_usage.hpp"

// The tokens a turn's model calls took, counted into the commits that store
// what the calls produced: the session's running totals, the turn's part so
// far, and the message's log entry, all in the commit's one batch.

namespace keel::conversation_builders {

void count_usage(const conversation_state& st, turn_commit& commit,
                 const completion* reply, bool ends_turn) {
  usage_count call;
  if (reply != nullptr)
    call = call_usage(*reply);
  auto turn = st.session.turn_usage;
  if (call.model_calls == 0 && (!ends_turn || turn.model_calls == 0))
    return;
  if (!commit.write_session) {
    commit.write_session = true;
    commit.session = st.session;
  }
  turn += call;
  commit.session.usage += call;
  commit.session.turn_usage = ends_turn ? usage_count{} : turn;
  // The message's entry (its task) and, once the turn ends, its answer.
  for (auto& entry : commit.log)
    if (entry.kind == log_kind::user
          ? entry.seq == commit.inbox_seq
          : ends_turn && entry.kind != log_kind::tool)
      entry.usage = turn;
}

} // namespace keel::conversation_builders
