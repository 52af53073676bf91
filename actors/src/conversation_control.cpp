#include "keel/conversation_parts.hpp"

#include <algorithm>

#include "keel/protocol.hpp"
#include "keel/text.hpp"

// Cancel, pause and a message's task: requests about the thread that wait
// until no turn runs (cancel, pause) or read what it holds (task).

namespace keel::conversation_parts {

// Finishes a cancel once no turn runs: every pending message is answered
// with a `cancelled` error (one commit each, through the usual path), then
// the session is written CLOSED and the cancels are answered.
void finish_cancel(self_ptr self) {
  auto& st = self->state;
  if (!st.inbox.empty()) {
    st.turn_running = true;
    cancel_turn(self);
    return;
  }
  // Accepts still on their way to the store join the inbox when they land
  // (and drain again): CLOSED must come after their answers, or the commit
  // answering one would write the session back as it was before.
  if (!st.accepting.empty())
    return;
  if (st.extras().cancels.empty())
    return; // Writing CLOSED already.
  auto record = st.session;
  record.state = session_state::closed;
  record.recovered_at = 0;
  request_component(self, names::persistence, st.cfg->storage_timeout,
                    caf::put_atom_v, record, st.tenure)
    .then(
      [self, record](caf::ok_atom) {
        auto& st = self->state;
        st.session = record;
        st.closing = false; // Done: closed() now holds by the session.
        st.answer_cancels({});
        drain(self);
      },
      [self](caf::error& err) {
        // Not durable: the canceller learns and may cancel again; we stay
        // closing (refusing messages) so the retry finds nothing to answer.
        self->state.answer_cancels(err);
      });
}

void answer_pauses(pause_requests& requests, const caf::error& err) {
  for (auto& request : requests)
    if (err)
      request.second.deliver(err);
    else
      request.second.deliver(caf::ok_atom_v);
}

// Writes the pause or resume the latest request asks for, then answers the
// requests it covers and drains on. The session changes in memory first:
// any session write meanwhile (an accept's) carries the same `paused_at`,
// and no turn starts (or commits an older session) until the write ends.
void write_pause(self_ptr self) {
  auto& st = self->state;
  auto& pauses = st.edit_extras().pauses;
  auto batch = std::make_shared<pause_requests>(std::move(pauses));
  pauses.clear();
  if (!st.session_exists || st.session.state == session_state::closed) {
    answer_pauses(*batch, st.session_exists ? caf::make_error(
                            ec::thread_closed,
                            "thread " + st.cfg.thread + " was cancelled")
                                            : st.not_found());
    drain(self);
    return;
  }
  auto before = st.session.paused_at;
  auto paused = batch->back().first;
  auto after = !paused ? 0 : before != 0 ? before : wall_clock_millis();
  st.session.paused_at = after;
  st.turn_running = true;
  request_component(self, names::persistence, st.cfg->storage_timeout,
                    caf::put_atom_v, st.session, st.tenure)
    .then(
      [self, batch](caf::ok_atom) {
        self->state.turn_running = false;
        answer_pauses(*batch, {});
        drain(self);
      },
      [self, batch, before, after](caf::error& err) {
        auto& st = self->state;
        st.turn_running = false;
        if (st.session.paused_at == after)
          st.session.paused_at = before;
        answer_pauses(*batch, err);
        drain(self);
      });
}

// Cancels the thread once no turn runs (see `finish_cancel`); answers at
// once if there is nothing to cancel.
caf::result<caf::ok_atom> cancel(self_ptr self) {
  auto& st = self->state;
  if (st.loaded && !st.session_exists)
    return st.not_found();
  if (st.loaded && !st.closing && st.session.state == session_state::closed)
    return caf::ok_atom_v; // Cancelled before.
  auto rp = self->make_response_promise<caf::ok_atom>();
  st.edit_extras().cancels.push_back(rp);
  st.closing = true;
  if (st.tool_cancel)
    *st.tool_cancel = true; // Its result comes back, then the cancel runs.
  drain(self);
  return rp;
}

// Where message `seq` stands as a task: live while the thread has it in
// its inbox (the running turn's, or queued behind it), else as stored.
caf::result<log_entry> task_of(self_ptr self, seq_t seq) {
  auto& st = self->state;
  auto i = std::find_if(st.inbox.begin(), st.inbox.end(),
                        [seq](auto& x) { return x.seq == seq; });
  if (st.loaded && i != st.inbox.end()) {
    auto entry = message_log_entry(*i);
    if (i == st.inbox.begin() && st.turn_running) {
      entry.task = st.live_task_state();
      entry.attempts = st.attempts;
    }
    return entry;
  }
  auto rp = self->make_response_promise<log_entry>();
  auto missing = caf::make_error(ec::not_found, "thread " + st.cfg.thread
                                                  + " has no message "
                                                  + std::to_string(seq));
  request_component(self, names::persistence, st.cfg->storage_timeout,
                    atom::history_v, st.cfg.thread, seq - 1, uint64_t{1})
    .then(
      [rp, seq, missing](history_page& page) mutable {
        auto& xs = page.entries;
        if (xs.empty() || xs[0].seq != seq || xs[0].kind != log_kind::user)
          rp.deliver(missing);
        else
          rp.deliver(std::move(xs[0]));
      },
      [rp](caf::error& err) mutable { rp.deliver(std::move(err)); });
  return rp;
}

caf::result<caf::ok_atom> pause(self_ptr self, bool paused) {
  auto& st = self->state;
  if (st.loaded && !st.session_exists)
    return st.not_found();
  auto rp = self->make_response_promise<caf::ok_atom>();
  st.edit_extras().pauses.emplace_back(paused, rp);
  drain(self);
  return rp;
}

} // namespace keel::conversation_parts
