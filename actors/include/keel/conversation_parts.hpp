#pragma once

// The parts of the conversation actor, one concern per file, as the other
// parts call them. Internal to actors/src/conversation*.cpp:
//
//   conversation.cpp              the behaviour: handlers, exit
//   conversation_load.cpp         load, accept and read-back
//   conversation_turn.cpp         the turn: events to the turn module,
//                                 its actions carried out (model calls,
//                                 summaries)
//   conversation_tools.cpp        tool runs (where a tool result goes)
//   conversation_spawn.cpp        child agents spawned before a commit
//   conversation_commit.cpp       commits, their retries and outcomes
//   conversation_outbox.cpp       messages to other threads
//   conversation_control.cpp      cancel, pause, a message's task
//   conversation_passivation.cpp  idle timer and passivation
//
// The state and its builders are in conversation_state.cpp,
// conversation_steps.cpp, conversation_answer.cpp and
// conversation_compaction.cpp; the configuration in
// conversation_settings.cpp.

#include <exception>
#include <string>
#include <utility>

#include <caf/all.hpp>

#include "keel/conversation.hpp"
#include "keel/lookup.hpp"
#include "keel/turn.hpp"

namespace keel::conversation_parts {

using self_ptr = conversation_actor::stateful_pointer<conversation_state>;

// -- conversation_load.cpp ----------------------------------------------------

/// Reads the thread's stored state behind every write we sent: persistence
/// reads see committed data only, so the pending group commits first; both
/// requests take the same way (straight to persistence, or held in order by
/// the root while it restarts).
template <class OnSnapshot, class OnError>
void read_back(self_ptr self, OnSnapshot on_snapshot, OnError on_error) {
  auto& cfg = self->state.cfg;
  request_component(self, names::persistence, cfg->storage_timeout,
                    atom::flush_v)
    .then([] {}, [](caf::error&) {});
  request_component(self, names::persistence, cfg->storage_timeout,
                    atom::load_v, cfg.thread)
    .then(std::move(on_snapshot), std::move(on_error));
}

/// Loads the thread's state from the store.
void load(self_ptr self);
/// Takes a message (from a client or another thread), deferred until
/// loaded.
caf::result<accept_result> receive(self_ptr self, incoming_message msg,
                                   uint64_t route);
/// Reads the stored inbox back after an accept whose outcome is unknown.
void adopt_late_accepts(self_ptr self);

/// Pushes a ready-made frame to the thread's subscribers, if a gateway runs.
inline void publish(self_ptr self, std::string frame) {
  publish_event(self->system(), self->state.cfg.thread, std::move(frame));
}

// -- conversation_turn.cpp ----------------------------------------------------

/// Starts the next turn unless one runs; arms the idle timer when done.
void drain(self_ptr self);
/// The running turn, made when a turn starts.
turn& running_turn(self_ptr self);
/// Carries out the turn's actions in order.
void carry_out(self_ptr self, turn_plan plan);
/// Feeds the turn's step committed: it takes its next step.
void continue_turn(self_ptr self);
/// Publishes a status event about the running turn.
void turn_status(self_ptr self, const std::string& status,
                 const std::string& text = {});

// -- conversation_tools.cpp ---------------------------------------------------

/// Runs `call` as a subprocess on a job thread; its outcome goes to the
/// turn (`tool_finished`).
void run_tool(self_ptr self, const tool_call& call);

// -- conversation_commit.cpp --------------------------------------------------

/// Commits the outcome of the current turn (a step or its answer).
void commit_turn(self_ptr self, turn_commit commit);
/// Ends the turn with a descriptive error in the thread.
void fail_turn(self_ptr self, const std::string& code, const std::string& text,
               const std::string& detail = {});
/// Ends the turn as cancelled with the thread.
void cancel_turn(self_ptr self);
/// Runs the turn again after `commit_retry_delay`.
void retry_turn_later(self_ptr self, const std::string& what,
                      const caf::error& err);
/// The retry of a turn that could not be stored is due.
void retry_turn(self_ptr self);

/// The error boundary: whatever a turn step throws becomes a descriptive
/// error in the thread, and the drain goes on.
template <class F>
void guarded(self_ptr self, F step) {
  try {
    step();
  } catch (const std::exception& e) {
    fail_turn(self, to_string(ec::turn_failed),
              turn_errors::unknown_prefix + std::string{e.what()}
                + turn_errors::unknown_suffix);
  } catch (...) {
    fail_turn(self, to_string(ec::turn_failed),
              turn_errors::unknown_prefix + std::string{"unknown error"}
                + turn_errors::unknown_suffix);
  }
}

/// Gives `event` to the running turn and carries out what it decides,
/// inside the error boundary.
template <class Event>
void feed(self_ptr self, Event&& event) {
  guarded(self, [&] {
    carry_out(self, decide(running_turn(self), std::forward<Event>(event)));
  });
}

// -- conversation_spawn.cpp ---------------------------------------------------

/// Spawns the children `reply` asks for, then commits it (`step`: a tool
/// step, else the turn's answer).
void spawn_then_commit(self_ptr self, completion reply, bool step);

// -- conversation_outbox.cpp --------------------------------------------------

/// Sends every undelivered outbox entry to its target.
void deliver_outbox(self_ptr self);

// -- conversation_control.cpp -------------------------------------------------

/// Cancels the thread once no turn runs.
caf::result<caf::ok_atom> cancel(self_ptr self);
/// Finishes a cancel once no turn runs.
void finish_cancel(self_ptr self);
/// Pauses or resumes the thread once no turn runs.
caf::result<caf::ok_atom> pause(self_ptr self, bool paused);
/// Writes the pause or resume the latest request asks for.
void write_pause(self_ptr self);
using pause_requests = decltype(conversation_extras::pauses);
/// Answers every request of `requests`: with `err`, or done if it is none.
void answer_pauses(pause_requests& requests, const caf::error& err);
/// Where message `seq` stands as a task.
caf::result<log_entry> task_of(self_ptr self, seq_t seq);

// -- conversation_passivation.cpp ---------------------------------------------

/// Records that the thread just became idle (arms the idle timer).
void note_idle(self_ptr self);
/// The thread just became idle: passivates at once if it holds nothing.
void became_idle(self_ptr self);
/// Writes the session as SUSPENDED, then asks the orchestrator to stop us.
void passivate(self_ptr self);
/// Passivates now if idle, else once idle; answers whether it does now.
bool passivate_now(self_ptr self);
/// The idle timer fired.
void idle_timer_fired(self_ptr self);

} // namespace keel::conversation_parts
