#include "keel/conversation_parts.hpp"

#include <spdlog/spdlog.h>

#include "keel/logging.hpp"

// Idle timer and passivation: an idle thread asks the orchestrator to stop
// it (its supervisor then does), after writing its session SUSPENDED.

namespace keel::conversation_parts {

namespace {

// Asks the orchestrator to stop us, naming `route`, the last route we had
// seen when we became idle. If it agrees, our supervisor stops us; if a
// message was routed to us since, we stay.
void ask_to_stop(self_ptr self, uint64_t route) {
  request_component(self, names::orchestrator, self->state.cfg->storage_timeout,
                    atom::passivate_v, self->state.cfg.thread, route)
    .then(
      [self, route](bool stopping) {
        if (stopping)
          return;
        auto& st = self->state;
        st.passivation.reset();
        // Refused for a message routed after `route`: one handled since
        // (a refused send of a thread without session) may ask again.
        if (st.idle() && st.last_route != route)
          became_idle(self);
        else if (st.idle())
          note_idle(self);
      },
      [self](caf::error&) {
        self->state.passivation.reset();
        if (self->state.idle())
          note_idle(self);
      });
}

// The SUSPENDED write of a passivation that began at `route` is durable.
// A message that came meanwhile (routed, accepting or accepted) rewrote the
// session as ACTIVE after it and keeps us: the in-memory session stays
// ACTIVE and we do not ask to stop. Otherwise we ask, naming `route`.
void suspended(self_ptr self, const session_record& record, uint64_t route) {
  auto& st = self->state;
  if (st.last_route != route || !st.idle() || st.session_active) {
    st.passivation.reset();
    if (st.idle())
      note_idle(self);
    return;
  }
  st.session.state = record.state;
  ask_to_stop(self, route);
}

} // namespace

void note_idle(self_ptr self) {
  auto& st = self->state;
  if (st.passivate_when_idle) {
    st.passivate_when_idle = false;
    passivate(self);
    return;
  }
  st.idle_since = self->clock().now();
  if (st.idle_timer_armed)
    return;
  st.idle_timer_armed = true;
  self->delayed_send(self, st.cfg->idle_timeout, atom::idle_v);
}

// The thread just became idle. One without a session (a cancel, pause or
// refused first message of a thread that does not exist) holds nothing:
// it asks to stop now rather than after `idle_timeout`, so requests for
// unknown threads leave no live conversations. Only when idle: an accept
// in flight (a new thread's first message) keeps it. A refused ask falls
// back to the idle timer.
void became_idle(self_ptr self) {
  auto& st = self->state;
  if (!st.session_exists && !st.passivation) {
    passivate(self);
    return;
  }
  note_idle(self);
}

// Writes the session as SUSPENDED (a CLOSED one stays CLOSED; while the node
// drains, nothing), then asks the orchestrator to stop us.
void passivate(self_ptr self) {
  auto& st = self->state;
  auto route = st.last_route;
  st.passivation = route;
  if (!st.session_exists || st.node_draining) {
    // Nothing on disk (a cancel of an unknown thread, a first message that
    // was not stored), or the node's stop suspends it: nothing to write,
    // and nothing to wait for either.
    ask_to_stop(self, route);
    return;
  }
  auto record = st.session;
  if (record.state != session_state::closed)
    record.state = session_state::suspended;
  st.session_active = false;
  request_component(self, names::persistence, st.cfg->storage_timeout,
                    caf::put_atom_v, record, st.tenure)
    .then(
      [self, record, route](caf::ok_atom) { suspended(self, record, route); },
      [self, route](caf::error& err) {
        // The shard left this node since we loaded: no write of ours
        // can commit any more, and its next owner's recovery suspended
        // the session. Nothing keeps us.
        if (err == ec::not_owner) {
          ask_to_stop(self, route);
          return;
        }
        log_scope scope{log_component::conversation, self->state.cfg.thread};
        self->state.passivation.reset();
        spdlog::warn("thread {}: cannot suspend: {}", self->state.cfg.thread,
                     render(err));
        if (self->state.idle())
          note_idle(self);
      });
}

// The orchestrator needs room under `threads.max_live`, or releases the
// thread: passivates now, through the same path as the idle timer, if
// nothing is pending, else as soon as nothing is; answers whether it does
// now.
bool passivate_now(self_ptr self) {
  auto& st = self->state;
  if (!st.idle()) {
    st.passivate_when_idle = true;
    return false;
  }
  if (st.passivation != st.last_route)
    passivate(self);
  return true;
}

// The idle timer fired: passivates if the thread has been idle for the
// whole `idle_timeout`, else waits for the rest of it.
void idle_timer_fired(self_ptr self) {
  auto& st = self->state;
  st.idle_timer_armed = false;
  if (!st.idle())
    return; // Busy again: the next idle moment arms a new timer.
  auto idle_for = self->clock().now() - st.idle_since;
  if (idle_for < st.cfg->idle_timeout) {
    st.idle_timer_armed = true;
    self->delayed_send(self, st.cfg->idle_timeout - idle_for, atom::idle_v);
    return;
  }
  passivate(self);
}

} // namespace keel::conversation_parts
