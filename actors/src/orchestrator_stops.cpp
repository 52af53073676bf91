// The orchestrator's stops: conversations that passivate or are replaced
// stop through the conversations supervisor, a bounded number at a time,
// and what queued for a thread meanwhile runs once its conversation is gone.

#include "orchestrator_impl.hpp"

namespace keel::orchestrator_impl {

// A passivating conversation is gone (or room was made for a new one): runs
// what queued for the thread meanwhile, in order, on a new conversation.
void release(self_ptr self, const std::string& thread) {
  auto i = self->state.threads.find(thread);
  // Gone with its supervisor (see conversations_lost), perhaps started
  // again since: not ours to release.
  if (i == self->state.threads.end() || !i->second.stopping)
    return;
  auto queued = std::move(i->second.queued);
  self->state.erase(i);
  if (queued.empty())
    return;
  // A thread of a shard this node gave up is not started again here, nor
  // a stopped one while the node drains (what queued for it is refused by
  // its supervisor, or starts it: the drain waits for that one too).
  if (!elsewhere(self, thread) && !self->state.draining)
    ensure_started(self, thread);
  for (auto& work : queued)
    work();
}

namespace {

// At most this many stops wait for the conversations supervisor's answer;
// the rest queue. An actor's pending answers sit in a flat map that CAF
// searches and shifts on every answer, so the 50,000 stops of a drain sent
// at once took quadratic time; CAF's clock, likewise, cancels a request's
// timeout by a linear scan, so stops go without one (the supervisor answers
// once the child is gone, killing it after its shutdown timeout, and should
// it die, its down message ends every stop: `conversations_lost`).
constexpr size_t max_stops_in_flight = 256;

// Sends queued stops while fewer than `max_stops_in_flight` are unanswered;
// each answer releases its thread (running what queued meanwhile).
void stop_next(self_ptr self) {
  auto& st = self->state;
  while (st.stops_in_flight < max_stops_in_flight && !st.stop_queue.empty()) {
    auto thread = std::move(st.stop_queue.front());
    st.stop_queue.pop_front();
    auto sup = conversations(self);
    if (!sup) {
      release(self, thread);
      continue;
    }
    ++st.stops_in_flight;
    auto stopped = [self, thread] {
      --self->state.stops_in_flight;
      release(self, thread);
      stop_next(self);
    };
    self->request(sup, caf::infinite, atom::stop_child_v, thread)
      .then([stopped](caf::ok_atom) { stopped(); },
            [stopped](caf::error&) { stopped(); });
  }
}

} // namespace

// Stops a passivating conversation, then runs what queued meanwhile.
void stop_conversation(self_ptr self, const std::string& thread) {
  self->state.stop_queue.push_back(thread);
  stop_next(self);
}

// Replaces the thread's conversation with one that loads the thread again:
// stopped as a passivation would (if one runs, known to us or not: an
// earlier orchestrator may have started it), then started at once (an
// accept it had in flight may be stored and wants its answer).
void stop_stale(self_ptr self, const std::string& thread) {
  if (self->state.add(thread).stopping)
    return; // Going away: the next one loads the thread anyway.
  self->state.update(thread, [](thread_entry& entry) {
    entry.stopping = true;
    entry.queued.push_back([] {}); // Makes the release start it again.
  });
  stop_conversation(self, thread);
}

// A conversation that last saw route `last_seen` asks to stop: true (and
// stopping it) unless a message was routed to it since.
bool passivate(self_ptr self, const std::string& thread, uint64_t last_seen) {
  // One unknown to us started before we did (we restarted): nothing
  // routed by us.
  auto i = self->state.threads.find(thread);
  if (i != self->state.threads.end()
      && !self->state.may_passivate(i->second, last_seen))
    return false;
  self->state.update(thread,
                     [](thread_entry& entry) { entry.stopping = true; });
  ++self->state.passivations;
  stop_conversation(self, thread);
  return true;
}

} // namespace keel::orchestrator_impl
