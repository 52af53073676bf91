#include "keel/conversation_parts.hpp"

#include "keel/text.hpp"

// Child agents: the spawns a reply asks for are made durable (through the
// orchestrator, like a client's spawn) before the step or answer that asked
// commits.

namespace keel::conversation_parts {

// Spawns the children the reply asks for that the thread does not have yet,
// each durably (session record and tree link, through the orchestrator like
// a client's spawn) before the step or answer that asked commits; then
// commits it (`step`: a tool step, else the turn's answer). A spawn refused
// for good (the id is another thread's) becomes a note; any other failure
// runs the turn again later.
void spawn_then_commit(self_ptr self, completion reply, bool step) {
  struct progress {
    completion reply;
    spawn_outcomes outcomes;
    size_t pending;
    caf::error retry;
  };
  auto commit = [self, step](const completion& reply,
                             const spawn_outcomes& outcomes) {
    guarded(self, [&] {
      auto& st = self->state;
      auto now = wall_clock_millis();
      commit_turn(self, step ? st.make_call_step(reply, now, outcomes)
                             : st.make_reply_commit(reply, now, outcomes));
    });
  };
  self->state.notices.clear(); // A turn run again notices anew.
  spawn_outcomes outcomes;
  auto wanted = self->state.new_children(reply, outcomes);
  if (wanted.empty()) {
    commit(reply, outcomes);
    return;
  }
  auto state = std::make_shared<progress>(
    progress{std::move(reply), std::move(outcomes), wanted.size(), {}});
  auto finish = [self, state, commit] {
    if (--state->pending > 0)
      return;
    if (self->state.closing)
      cancel_turn(self);
    else if (state->retry)
      retry_turn_later(self, "spawning a child agent failed", state->retry);
    else
      commit(state->reply, state->outcomes);
  };
  auto& st = self->state;
  for (auto& wish : wanted) {
    auto& child = wish.first;
    request_component(self, names::orchestrator, st.cfg->storage_timeout,
                      atom::spawn_v, st.cfg.thread, child, wish.second)
      .then(
        [self, state, child, finish](spawn_result&) {
          self->state.edit_extras().children.insert(child);
          state->outcomes.created.insert(child);
          finish();
        },
        [self, state, child, finish](caf::error& err) {
          if (err == ec::agent_limit)
            self->state.notices.push_back({"agent_limit", error_message(err)});
          if (err == ec::conflict || err == ec::thread_closed
              || err == ec::not_found || err == ec::thread_limit
              || err == ec::agent_limit || err == ec::unknown_agent)
            state->outcomes.refused.emplace(child, error_message(err));
          else if (!state->retry)
            state->retry = std::move(err);
          finish();
        });
  }
}

} // namespace keel::conversation_parts
