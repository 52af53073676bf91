#include "keel/conversation.hpp"

#include <caf/all.hpp>

#include "keel/conversation_parts.hpp"
#include "keel/lookup.hpp"
#include "keel/timed_request.hpp"

// The conversation actor's behaviour: each handler hands its message to the
// part that owns the concern (see keel/conversation_parts.hpp).

namespace keel {

namespace {

using namespace conversation_parts;

// Stopped or killed: senders of accepts and cancels not yet answered learn
// at once that they must resend (a durable accept is then acknowledged as
// a duplicate).
void on_exit(self_ptr self, const caf::exit_msg& msg) {
  auto err = caf::make_error(
    ec::unavailable, "the conversation of thread '" + self->state.cfg.thread
                       + "' stopped; resend with the same id");
  self->state.fail_pending_accepts(err);
  self->state.answer_cancels(err);
  if (auto& extras = self->state.extras_)
    answer_pauses(extras->pauses, err);
  if (self->state.tool_cancel)
    *self->state.tool_cancel = true; // No tool outlives its conversation.
  self->quit(msg.reason);
}

// A client's message, as the conversation takes every message.
incoming_message client_message(std::string& client_id, std::string& text,
                                std::string& agent) {
  incoming_message msg;
  msg.client_id = std::move(client_id);
  msg.text = std::move(text);
  msg.agent = std::move(agent);
  return msg;
}

} // namespace

conversation_actor::behavior_type
conversation(conversation_actor::stateful_pointer<conversation_state> self,
             conversation_config cfg) {
  self->state.cfg = std::move(cfg);
  // Tell the orchestrator an incarnation started: messages routed to an
  // earlier one may have died with it.
  if (auto orch = lookup<orchestrator_actor>(self->system(),
                                             names::orchestrator))
    self->send(orch, atom::started_v, self->state.cfg.thread);
  self->set_exit_handler([self](caf::exit_msg& msg) { on_exit(self, msg); });
  load(self);
  return {
    [self](atom::accept, std::string& client_id, std::string& text,
           std::string& agent, uint64_t route) -> caf::result<accept_result> {
      return receive(self, client_message(client_id, text, agent), route);
    },
    [self](atom::deliver, outbox_entry& msg,
           uint64_t route) -> caf::result<accept_result> {
      return receive(self, std::move(msg), route);
    },
    [self](atom::cancel) { return cancel(self); },
    [self](atom::pause, bool paused) { return pause(self, paused); },
    [self](atom::task, seq_t seq) { return task_of(self, seq); },
    [self](atom::redeliver) {
      self->state.redeliver_armed = false;
      deliver_outbox(self);
    },
    [self](atom::spawn, std::string& child) {
      self->state.edit_extras().children.insert(std::move(child));
    },
    [self](atom::drain) { retry_turn(self); },
    [self](atom::readback) { adopt_late_accepts(self); },
    [self](atom::idle) { idle_timer_fired(self); },
    [self](atom::expire) { expire_deadlines(self); },
    [self](atom::passivate) { return passivate_now(self); },
    [self](atom::passivate, atom::drain) {
      self->state.node_draining = true;
      return passivate_now(self);
    },
  };
}

} // namespace keel
