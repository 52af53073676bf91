// The orchestrator's routing: a message to its thread's conversation
// (started on demand, room made for it under `max_live`), or to the node
// that owns the thread.

#include "orchestrator_impl.hpp"

#include <atomic>

namespace keel::orchestrator_impl {

// The current conversations supervisor, monitored from the first time we
// see an incarnation (see the down handler).
caf::actor conversations(self_ptr self) {
  auto sup = lookup<caf::actor>(self->system(), names::conversations);
  if (sup && sup.address() == self->state.lost_conversations)
    return {};
  if (sup && sup != self->state.conversations) {
    self->monitor(sup);
    self->state.conversations = sup;
  }
  return sup;
}

// True if another node serves `thread` (this one does not hold its shard).
bool elsewhere(self_ptr self, const std::string& thread) {
  auto& shards = self->state.cfg.shards;
  return shards != nullptr && !shards->serves(thread);
}

// Starts the thread's conversation unless it runs; `started` (optional)
// learns when the supervisor answered. An `already exists` answer is fine:
// the supervisor kept it (e.g. across our own restart).
void ensure_started(self_ptr self, const std::string& thread,
                    std::function<void()> started) {
  auto done = [started] {
    if (started)
      started();
  };
  if (self->state.threads.count(thread) > 0) {
    done();
    return;
  }
  auto sup = conversations(self);
  if (!sup) {
    done(); // The forward that follows fails and tells the sender.
    return;
  }
  auto& entry = self->state.add(thread);
  entry.tenure = self->state.tenure_of(thread);
  entry.starting = true;
  timed_request(self, sup, self->state.cfg.request_timeout, atom::start_child_v,
                thread, caf::make_message())
    .then([done](const caf::actor&) { done(); },
          [self, thread, done](caf::error& err) {
            // No incarnation of ours starts: the one there reports as a
            // restart.
            auto& threads = self->state.threads;
            if (auto i = threads.find(thread); i != threads.end())
              i->second.starting = false;
            log_scope scope{log_component::orchestrator, thread};
            if (err != ec::conflict)
              spdlog::warn("cannot start conversation {}: {}", thread,
                           render(err));
            done();
          });
}

namespace {

// Makes room for `thread` under `max_live`: asks the idlest live
// conversation to passivate (through the idle timeout's path, so nothing
// acknowledged is lost and its races are handled there); one that is busy
// declines and the next idlest is asked, up to `eviction_tries` of them.
// Then `thread` starts with the work queued for it. While every live
// conversation is busy the limit is passed; idle ones passivate later.
void make_room(self_ptr self, const std::string& thread,
               std::vector<std::string> declined) {
  auto& st = self->state;
  auto victim = st.idlest(thread, declined);
  auto sup = conversations(self);
  if (victim.empty() || !sup || declined.size() >= st.cfg.eviction_tries) {
    release(self, thread);
    return;
  }
  st.update(victim, [](thread_entry& entry) { entry.evicting = true; });
  auto declined_by = [self, thread, victim, declined]() mutable {
    if (self->state.threads.count(victim) > 0)
      self->state.update(victim,
                         [](thread_entry& entry) { entry.evicting = false; });
    declined.push_back(victim);
    make_room(self, thread, std::move(declined));
  };
  timed_request(self, sup, st.cfg.request_timeout, atom::forward_v, victim,
                caf::make_message(atom::passivate_v))
    .then(
      [self, thread, declined_by](bool passivating) mutable {
        if (!passivating) {
          declined_by();
          return;
        }
        ++self->state.evictions;
        release(self, thread);
      },
      [declined_by](caf::error&) mutable { declined_by(); });
}

} // namespace

// Runs `work` on the thread's conversation: now, or once a passivating
// conversation is gone (the work then starts a new one), or, for a new
// conversation at `max_live`, once room is made for it.
void when_routable(self_ptr self, const std::string& thread,
                   std::function<void()> work) {
  auto i = self->state.threads.find(thread);
  if (i != self->state.threads.end() && self->state.stale(thread, i->second))
    stop_stale(self, thread);
  if (i != self->state.threads.end() && i->second.stopping) {
    i->second.queued.push_back(std::move(work));
    return;
  }
  if (i == self->state.threads.end() && self->state.at_live_limit()) {
    // Work for it queues until `make_room` is done.
    self->state.update(thread, [&work](thread_entry& entry) {
      entry.stopping = true;
      entry.queued.push_back(std::move(work));
    });
    make_room(self, thread, {});
    return;
  }
  ensure_started(self, thread);
  work();
}

namespace {

// Returns the next route sequence number. They increase across orchestrator
// incarnations: a conversation asking to passivate names the last one it
// got, perhaps from an earlier incarnation, and a restarted orchestrator
// counting from zero again would take that for its own latest route and
// stop the conversation under a message in flight.
uint64_t next_route_seq() {
  static std::atomic<uint64_t> last{0};
  return ++last;
}

// Hands a message to the thread's conversation through its supervisor; the
// conversation answers the original requester directly. A message from a
// client has an empty `from`; one from another thread is its outbox entry.
void forward(self_ptr self, caf::response_promise& rp,
             const std::string& thread, outbox_entry msg) {
  auto sup = conversations(self);
  if (!sup) {
    rp.deliver(caf::make_error(ec::unavailable,
                               "the conversations supervisor is restarting; "
                               "resend with the same id"));
    return;
  }
  auto seq = next_route_seq();
  self->state.update(thread, [seq](thread_entry& entry) {
    entry.routed = seq;
    entry.evicting = false; // Work came: it stays unless it passivates.
  });
  if (msg.from.empty())
    rp.delegate(sup, atom::forward_v, thread,
                caf::make_message(atom::accept_v, std::move(msg.client_id),
                                  std::move(msg.text), std::move(msg.agent),
                                  seq));
  else
    rp.delegate(sup, atom::forward_v, thread,
                caf::make_message(atom::deliver_v, std::move(msg), seq));
}

} // namespace

// The answer to new work while the node drains.
caf::error refuse_draining() {
  return caf::make_error(ec::draining,
                         "the node is stopping and takes no new work; send "
                         "again to another node or after its restart");
}

// Routes a message to `thread` (see `forward`), once it is routable.
caf::result<accept_result> route(self_ptr self, const std::string& thread,
                                 outbox_entry msg) {
  if (elsewhere(self, thread))
    return to_owner<accept_result>(
      self, thread,
      msg.from.empty()
        ? caf::make_message(atom::route_v, thread, std::move(msg.client_id),
                            std::move(msg.text), std::move(msg.agent))
        : caf::make_message(atom::deliver_v, std::move(msg)));
  // While draining, clients' messages are refused; messages between threads
  // still flow, so that agents waiting on each other finish (the drain
  // waits for the conversations they start, too).
  if (self->state.draining && msg.from.empty())
    return refuse_draining();
  auto rp = self->make_response_promise<accept_result>();
  auto id = self->state.hold(rp);
  when_routable(self, thread,
                [self, id, thread, msg = std::move(msg)]() mutable {
                  auto rp = self->state.take(id);
                  if (rp.pending())
                    forward(self, rp, thread, std::move(msg));
                });
  return rp;
}

} // namespace keel::orchestrator_impl
