#include "keel/conversation_parts.hpp"

#include <spdlog/spdlog.h>

#include "keel/logging.hpp"
#include "keel/protocol.hpp"

// Load, accept and read-back: the thread's state comes in from the store,
// and each message is appended durably before it joins the inbox.

namespace keel::conversation_parts {

namespace {

// Answers the sender of accept `seq` unless its promise was already failed
// (the actor is going down).
template <class Result>
void answer_accept(self_ptr self, seq_t seq, Result&& result) {
  auto& accepting = self->state.accepting;
  auto i = accepting.find(seq);
  if (i == accepting.end())
    return;
  auto promise = std::move(i->second);
  accepting.erase(i);
  promise.deliver(std::forward<Result>(result));
}

// Accept `seq` is durable (or was a duplicate, durable before): a new
// message joins the inbox; its sender learns.
void accepted(self_ptr self, seq_t seq, inbox_entry& entry, bool wrote_session,
              accept_result& res) {
  auto& st = self->state;
  if (wrote_session) {
    st.session_exists = true;
    st.session_active = true;
  }
  if (!res.duplicate)
    st.inbox.push_back(std::move(entry));
  else
    adopt_late_accepts(self);
  answer_accept(self, seq, res);
  drain(self);
}

// Appends a message durably; the promise is answered once it is synced.
void accept(self_ptr self, caf::typed_response_promise<accept_result> rp,
            incoming_message msg) {
  auto& st = self->state;
  if (auto err = st.refusal(msg)) {
    rp.deliver(std::move(err));
    return;
  }
  auto req = st.make_accept_request(std::move(msg));
  auto seq = req.entry.seq;
  st.accepting.emplace(seq, rp);
  request_component(self, names::persistence, st.cfg->storage_timeout,
                    atom::accept_v, req)
    .then(
      [self, seq, entry = req.entry,
       wrote_session = req.create_session](accept_result& res) mutable {
        accepted(self, seq, entry, wrote_session, res);
      },
      [self, seq](caf::error& err) {
        // Refused before anything was staged: it cannot land later.
        auto refused = err == ec::thread_limit;
        answer_accept(self, seq, std::move(err));
        if (!refused) {
          self->state.unsure_accepts = true;
          adopt_late_accepts(self);
        }
        drain(self);
      });
}

// The thread's state is in: cancels of a thread that never existed are
// answered, deferred accepts run, the outbox goes out, the drain starts.
void loaded(self_ptr self, thread_snapshot& snapshot) {
  auto& st = self->state;
  if (snapshot.quarantined)
    publish(self, protocol::status_frame(st.cfg.thread, "", 0, "history_reset",
                                         turn_errors::history_reset));
  st.restore(std::move(snapshot));
  if (st.closing && !st.session_exists) {
    // A cancel of a thread that never existed.
    st.closing = false;
    st.answer_cancels(st.not_found());
  }
  auto deferred = std::move(st.deferred);
  st.deferred.clear();
  for (auto& d : deferred)
    accept(self, d.promise, std::move(d.msg));
  deliver_outbox(self);
  drain(self);
}

// The thread cannot be loaded: whoever waits learns why; the actor quits.
void load_failed(self_ptr self, const caf::error& err) {
  for (auto& d : self->state.deferred)
    d.promise.deliver(err);
  self->state.deferred.clear();
  self->state.answer_cancels(err);
  if (auto& extras = self->state.extras_)
    answer_pauses(extras->pauses, err);
  self->quit(err);
}

} // namespace

// After an accept failed (or timed out: it may land later), reads the
// stored inbox back and adopts what the live inbox lacks, so a message that
// landed late is answered in order and its resend (acknowledged as a
// duplicate) is not left waiting. A failed read back is tried again after
// `commit_retry_delay` (and with the next duplicate accept) until one
// succeeds; meanwhile no turn starts and the thread does not passivate.
void adopt_late_accepts(self_ptr self) {
  auto& st = self->state;
  if (!st.unsure_accepts || st.reading_back)
    return;
  st.reading_back = true;
  read_back(
    self,
    [self](thread_snapshot& snapshot) {
      auto& st = self->state;
      st.reading_back = false;
      st.unsure_accepts = false;
      st.adopt_late_accepts(snapshot.inbox);
      drain(self);
    },
    [self](caf::error& err) {
      auto& st = self->state;
      log_scope scope{log_component::conversation, st.cfg.thread};
      spdlog::warn("thread {}: reading the inbox back failed: {}",
                   st.cfg.thread, render(err));
      st.reading_back = false;
      self->delayed_send(self, st.cfg->commit_retry_delay, atom::readback_v);
    });
}

// Loads the thread's state from the store.
void load(self_ptr self) {
  auto& st = self->state;
  // Before the read: the view must hold everything stored before the
  // tenure began.
  st.tenure = st.cfg.shards ? st.cfg.shards->tenure(st.cfg.thread) : 0;
  // A write of an earlier incarnation (killed before persistence answered
  // it) may still be staged: a load before its commit would hand out its
  // seq again. `read_back` reads behind every write an earlier incarnation
  // sent.
  read_back(
    self, [self](thread_snapshot& snapshot) { loaded(self, snapshot); },
    [self](caf::error& err) { load_failed(self, err); });
}

// Takes a message (from a client or another thread), deferred until loaded.
caf::result<accept_result> receive(self_ptr self, incoming_message msg,
                                   uint64_t route) {
  auto& st = self->state;
  st.last_route = route;
  st.passivate_when_idle = false; // Wanted again: asked anew if need be.
  auto rp = self->make_response_promise<accept_result>();
  if (!st.loaded) {
    st.deferred.push_back({rp, std::move(msg)});
    return rp;
  }
  accept(self, rp, std::move(msg));
  if (st.idle()) // Refused at once: nothing is in flight.
    became_idle(self);
  return rp;
}

} // namespace keel::conversation_parts
