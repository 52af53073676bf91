#include "keel/conversation_parts.hpp"

// Messages to other threads: durable in the outbox with the commit that
// made them, delivered through the orchestrator until a target took each
// (or the dead letters did).

namespace keel::conversation_parts {

namespace {

// Schedules one redelivery of the outbox after a failed delivery.
void schedule_redelivery(self_ptr self) {
  auto& st = self->state;
  if (st.redeliver_armed)
    return;
  st.redeliver_armed = true;
  self->delayed_send(self, st.cfg->commit_retry_delay, atom::redeliver_v);
}

// An outbox entry reached its target (or the dead letters): forget it.
void delivered(self_ptr self, seq_t seq) {
  auto& st = self->state;
  auto& extras = st.edit_extras();
  extras.outbox.erase(seq);
  extras.delivering.erase(seq);
  if (st.idle())
    note_idle(self);
}

// A delivery of outbox entry `seq` failed for now: it goes out again with
// the next redelivery.
void deliver_later(self_ptr self, seq_t seq) {
  self->state.edit_extras().delivering.erase(seq);
  schedule_redelivery(self);
}

// The target of `entry` refused it: for good (cancelled, gone) the entry
// moves to the dead-letter queue, which retries it on its schedule; else it
// is retried here.
void delivery_failed(self_ptr self, const outbox_entry& entry,
                     const caf::error& err) {
  auto seq = entry.seq;
  if (err != ec::thread_closed && err != ec::not_found) {
    deliver_later(self, seq);
    return;
  }
  request_component(self, names::dead_letters, self->state.cfg->storage_timeout,
                    caf::put_atom_v, entry, render(err), self->state.tenure)
    .then([self, seq](caf::ok_atom) { delivered(self, seq); },
          [self, seq](caf::error&) { deliver_later(self, seq); });
}

} // namespace

// Sends every undelivered outbox entry to its target through the
// orchestrator; the target's accept removes it from our outbox on disk in
// the same write.
void deliver_outbox(self_ptr self) {
  auto& st = self->state;
  if (!st.extras_)
    return;
  for (auto& [seq, entry] : st.extras_->outbox) {
    if (!st.extras_->delivering.insert(seq).second)
      continue;
    request_component(self, names::orchestrator, st.cfg->storage_timeout,
                      atom::deliver_v, entry)
      .then([self, seq = seq](accept_result&) { delivered(self, seq); },
            [self, entry = entry](caf::error& err) {
              delivery_failed(self, entry, err);
            });
  }
}

} // namespace keel::conversation_parts
