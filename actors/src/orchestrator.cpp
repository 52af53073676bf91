#include "keel/orchestrator.hpp"

#include <algorithm>
#include <atomic>
#include <thread>
#include <utility>

#include <caf/all.hpp>
#include <spdlog/spdlog.h>

#include "keel/error.hpp"
#include "keel/kill_point.hpp"
#include "keel/logging.hpp"
#include "keel/lookup.hpp"
#include "keel/recovery.hpp"
#include "keel/text.hpp"
#include "keel/timed_request.hpp"

namespace keel {

bool orchestrator_state::may_passivate(const thread_entry& entry,
                                       uint64_t last_seen) const {
  return !entry.stopping
         && (last_seen >= entry.routed || entry.floor >= entry.routed);
}

void orchestrator_state::restarted(const std::string& thread) {
  auto i = threads.find(thread);
  if (i == threads.end())
    return;
  if (std::exchange(i->second.starting, false))
    return; // The one we started: nothing routed to it was lost.
  i->second.floor = i->second.routed;
}

uint64_t orchestrator_state::tenure_of(const std::string& thread) const {
  return cfg.shards ? cfg.shards->tenure(thread) : 0;
}

bool orchestrator_state::stale(const std::string& thread,
                               const thread_entry& entry) const {
  return cfg.shards && !entry.stopping && entry.tenure != tenure_of(thread);
}

thread_entry& orchestrator_state::add(const std::string& thread) {
  auto [i, added] = threads.try_emplace(thread);
  if (added)
    remember(thread, i->second);
  return i->second;
}

void orchestrator_state::erase(thread_map::iterator i) {
  forget(i->first, i->second);
  threads.erase(i);
}

orchestrator_state::thread_map orchestrator_state::take_all() {
  live.clear();
  auto result = std::move(threads);
  threads.clear();
  return result;
}

void orchestrator_state::forget(const std::string& thread,
                                const thread_entry& entry) {
  if (!entry.stopping && !entry.evicting)
    live.erase({entry.routed, thread});
}

void orchestrator_state::remember(const std::string& thread,
                                  const thread_entry& entry) {
  if (!entry.stopping && !entry.evicting)
    live.emplace(entry.routed, thread);
}

bool orchestrator_state::at_live_limit() const {
  return live.size() >= cfg.max_live;
}

std::string
orchestrator_state::idlest(const std::string& thread,
                           const std::vector<std::string>& skip) const {
  for (auto& [routed, id] : live)
    if (id != thread && std::find(skip.begin(), skip.end(), id) == skip.end())
      return id;
  return {};
}

uint64_t orchestrator_state::hold(caf::response_promise rp) {
  auto id = ++last_hold;
  held.emplace(id, std::move(rp));
  return id;
}

caf::response_promise orchestrator_state::take(uint64_t id) {
  auto i = held.find(id);
  if (i == held.end())
    return {};
  auto rp = std::move(i->second);
  held.erase(i);
  return rp;
}

void orchestrator_state::fail_held(const caf::error& err) {
  auto all = std::move(held);
  held.clear();
  for (auto& entry : all)
    entry.second.deliver(err);
}

namespace {

using self_ptr = orchestrator_actor::stateful_pointer<orchestrator_state>;

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

// Hands a request for another node's thread to the peers actor, which
// sends it to the owner and answers with the owner's answer. The peers
// actor's own requests (it believed this node served the thread) are
// refused instead, so that it sends them on to the owner.
template <class Result>
caf::result<Result>
to_owner(self_ptr self, const std::string& thread, caf::message req) {
  auto peers = lookup<caf::actor>(self->system(), names::peers);
  auto& table = *self->state.cfg.shards;
  // The peers actor's own attempts, and a peer's request handed over here
  // (it keeps the peer as sender), go back as not_owner: their sender
  // resends to the owner.
  auto& sender = self->current_sender();
  if (!peers || sender == peers
      || (sender != nullptr && sender->node() != self->node()))
    return caf::make_error(ec::not_owner,
                           "node " + table.me() + " does not serve thread "
                             + thread + " (shard "
                             + std::to_string(table.shard_of(thread)) + ")");
  auto rp = self->make_response_promise<Result>();
  caf::response_promise untyped = rp;
  untyped.delegate(peers, atom::forward_v, thread, std::move(req));
  return rp;
}

// Answers the held request `id`, unless it was failed meanwhile.
template <class... Ts>
void answer(self_ptr self, uint64_t id, Ts&&... xs) {
  auto rp = self->state.take(id);
  if (rp.pending())
    rp.deliver(std::forward<Ts>(xs)...);
}

// Starts the thread's conversation unless it runs; `started` (optional)
// learns when the supervisor answered. An `already exists` answer is fine:
// the supervisor kept it (e.g. across our own restart).
void ensure_started(self_ptr self, const std::string& thread,
                    std::function<void()> started = nullptr) {
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

void release(self_ptr self, const std::string& thread);

void stop_stale(self_ptr self, const std::string& thread);

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
                                  std::move(msg.text), seq));
  else
    rp.delegate(sup, atom::forward_v, thread,
                caf::make_message(atom::deliver_v, std::move(msg), seq));
}

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
      msg.from.empty() ? caf::make_message(
        atom::route_v, thread, std::move(msg.client_id), std::move(msg.text))
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

// Tells a running conversation of the parent about its new child (one that
// starts later reads its children from the store).
void tell_parent(self_ptr self, const spawn_result& spawned) {
  auto i = self->state.threads.find(spawned.parent);
  auto sup = conversations(self);
  if (i == self->state.threads.end() || i->second.stopping || !sup)
    return;
  caf::anon_send(sup, atom::forward_v, spawned.parent,
                 caf::make_message(atom::spawn_v, spawned.child));
}

// Cancels every thread of `subtree` (all at once); calls `done` with the
// list once all are closed, or with the first error.
using cancel_callback
  = std::function<void(caf::expected<std::vector<std::string>>)>;

// A `cancel_all` under way: `done` is called once, with every thread or
// with the first error.
struct cancel_progress {
  size_t pending;
  bool finished = false;
  std::vector<std::string> threads;
  cancel_callback done;

  void closed_one() {
    if (--pending == 0 && !finished) {
      finished = true;
      done(threads);
    }
  }

  void fail(caf::error err) {
    if (!finished) {
      finished = true;
      done(std::move(err));
    }
  }
};

// Cancels one thread of a `cancel_all` through its conversation.
void cancel_one(self_ptr self, const std::shared_ptr<cancel_progress>& state,
                const std::string& thread) {
  auto sup = conversations(self);
  if (!sup) {
    state->fail(caf::make_error(ec::unavailable,
                                "the conversations supervisor is "
                                "restarting; cancel again"));
    return;
  }
  timed_request(self, sup, self->state.cfg.request_timeout, atom::forward_v,
                thread, caf::make_message(atom::cancel_v))
    .then([state](caf::ok_atom) { state->closed_one(); },
          [state](caf::error& err) { state->fail(std::move(err)); });
}

void cancel_all(self_ptr self, std::vector<std::string> subtree,
                cancel_callback done) {
  auto state = std::make_shared<cancel_progress>(
    cancel_progress{subtree.size(), false, subtree, std::move(done)});
  for (auto& thread : subtree)
    when_routable(self, thread,
                  [self, state, thread] { cancel_one(self, state, thread); });
}

// Cancels `thread` and its descendants, `closed` being the ones closed so
// far; calls `done` with all of them, or with the first error. The subtree
// is read again once the threads read so far are closed: a child spawned
// while the cancel ran (before its parent was CLOSED on disk) is cancelled
// too. Once its parent is CLOSED no child can be spawned under it, so the
// rounds end.
void cancel_tree(self_ptr self, const std::string& thread,
                 std::vector<std::string> closed, cancel_callback done);

// One round of `cancel_tree`: cancels the threads of `subtree` not closed
// yet, then reads the subtree again; done once a round finds none.
void cancel_round(self_ptr self, const std::string& thread,
                  std::vector<std::string>& closed,
                  const std::vector<std::string>& subtree,
                  cancel_callback& done) {
  std::vector<std::string> fresh;
  for (auto& t : subtree)
    if (std::find(closed.begin(), closed.end(), t) == closed.end())
      fresh.push_back(t);
  if (fresh.empty()) {
    done(std::move(closed));
    return;
  }
  cancel_all(self, fresh,
             [self, thread, closed, fresh,
              done](caf::expected<std::vector<std::string>> result) {
               if (!result) {
                 done(std::move(result.error()));
                 return;
               }
               auto all = closed;
               all.insert(all.end(), fresh.begin(), fresh.end());
               cancel_tree(self, thread, std::move(all), done);
             });
}

void cancel_tree(self_ptr self, const std::string& thread,
                 std::vector<std::string> closed, cancel_callback done) {
  auto db = lookup<persistence_actor>(self->system(), names::persistence);
  if (!db) {
    done(caf::make_error(ec::unavailable,
                         "persistence is restarting; cancel again"));
    return;
  }
  timed_request(self, db, self->state.cfg.request_timeout, atom::subtree_v,
                thread)
    .then(
      [self, thread, closed, done](std::vector<std::string>& subtree) mutable {
        cancel_round(self, thread, closed, subtree, done);
      },
      [done](caf::error& err) { done(std::move(err)); });
}

// A recovery step starting conversations, `cfg.resume_batch` at a time.
struct resume_progress {
  std::vector<std::string> threads;
  std::function<void(uint64_t)> done;
  size_t next = 0;
  size_t in_flight = 0;
  size_t finished = 0;
  /// True while `resume_more` runs: a start answered at once must not
  /// recurse into it (a long recovery would overflow the stack).
  bool pumping = false;
};

void resume_more(self_ptr self, std::shared_ptr<resume_progress> p) {
  if (p->pumping)
    return;
  p->pumping = true;
  auto batch = std::max<size_t>(1, self->state.cfg.resume_batch);
  while (p->in_flight < batch && p->next < p->threads.size()) {
    ++p->in_flight;
    ensure_started(self, p->threads[p->next++], [self, p] {
      --p->in_flight;
      if (++p->finished == p->threads.size())
        p->done(p->threads.size());
      else
        resume_more(self, p);
    });
  }
  p->pumping = false;
}

// Starts `threads` (a recovery step) and calls `done` with the count once
// the supervisor answered for all of them.
void resume_all(self_ptr self, std::vector<std::string> threads,
                std::function<void(uint64_t)> done) {
  if (threads.empty()) {
    done(0);
    return;
  }
  auto p = std::make_shared<resume_progress>();
  p->threads = std::move(threads);
  p->done = std::move(done);
  resume_more(self, p);
}

using steady = std::chrono::steady_clock;

int64_t micros_since(steady::time_point start) {
  return std::chrono::duration_cast<std::chrono::microseconds>(steady::now()
                                                               - start)
    .count();
}

// Stores the report of the recovery on boot (best effort: logged if not).
void store_report(self_ptr self, const recovery_report& report) {
  log_scope scope{log_component::orchestrator};
  spdlog::info("{}", describe(report));
  if (auto db = lookup<persistence_actor>(self->system(), names::persistence))
    timed_request(self, db, self->state.cfg.request_timeout, caf::put_atom_v,
                  report)
      .then([](caf::ok_atom) {},
            [](caf::error& err) {
              log_scope scope{log_component::orchestrator};
              spdlog::warn("cannot store the recovery report: {}", render(err));
            });
}

// The last steps of the recovery, once every thread with pending work is
// resumed: finishes the interrupted cancels; stores the boot report.
void finish_recovery(self_ptr self, recovery_plan& plan) {
  for (auto& thread : plan.cancels)
    cancel_all(self, {thread}, [thread](auto result) {
      log_scope scope{log_component::orchestrator, thread};
      if (!result)
        spdlog::warn("cannot finish cancelling {}: {}", thread,
                     render(result.error()));
    });
  plan.report.finished_at = wall_clock_millis();
  self->state.recovered = true;
  if (plan.boot)
    store_report(self, plan.report);
}

// Step 6 of the recovery: resumes the children, then finishes.
void resume_children(self_ptr self, std::shared_ptr<recovery_plan> plan) {
  auto start = steady::now();
  resume_all(self, plan->children, [self, plan, start](uint64_t children) {
    plan->report.children_resumed = children;
    plan->report.steps.push_back(
      recovery_step{"resume_children", children, micros_since(start)});
    finish_recovery(self, *plan);
  });
}

// Steps 5-6 of the recovery (roots, then children), then the interrupted
// cancels; stores the boot recovery's report.
void resume(self_ptr self, recovery_plan plan) {
  auto shared = std::make_shared<recovery_plan>(std::move(plan));
  auto start = steady::now();
  resume_all(self, shared->roots, [self, shared, start](uint64_t roots) {
    shared->report.roots_resumed = roots;
    shared->report.steps.push_back(
      recovery_step{"resume_roots", roots, micros_since(start)});
    resume_children(self, shared);
  });
}

// The conversations supervisor died, and every conversation with it: the
// routing table is void. Work queued behind a passivation is routed again
// (to the new incarnation, or refused as `unavailable` until it runs), and
// the threads with unanswered messages are started again once it runs.
void conversations_lost(self_ptr self, const caf::actor_addr& lost) {
  log_scope scope{log_component::orchestrator};
  spdlog::warn("the conversations supervisor stopped; resuming the threads "
               "with pending work once it runs again");
  self->state.conversations = caf::actor{};
  self->state.lost_conversations = lost;
  auto threads = self->state.take_all();
  for (auto& [thread, entry] : threads) {
    if (entry.queued.empty())
      continue;
    ensure_started(self, thread);
    for (auto& work : entry.queued)
      work();
  }
  self->send(self, atom::recover_v);
}

// Spawns `child` under `parent` durably, then restarts a conversation of
// the child that began before the spawn and tells the parent's one.
caf::result<spawn_result> spawn(self_ptr self, const std::string& parent,
                                const std::string& child) {
  // An agent tree lives in one shard, under one fence: a child of another
  // root would be written unfenced on its own shard.
  if (self->state.cfg.shards && thread_root(child) != thread_root(parent))
    return caf::make_error(ec::conflict,
                           "in a cluster a child agent's id must start with "
                           "its parent's root ('"
                             + std::string{thread_root(parent)}
                             + ".'): an agent tree lives in one shard");
  // Staged (and fenced) under the parent: its owner spawns.
  if (elsewhere(self, parent))
    return to_owner<spawn_result>(
      self, parent, caf::make_message(atom::spawn_v, parent, child));
  if (self->state.draining)
    return refuse_draining();
  auto db = lookup<persistence_actor>(self->system(), names::persistence);
  if (!db)
    return caf::make_error(ec::unavailable,
                           "persistence is restarting; spawn again");
  auto rp = self->make_response_promise<spawn_result>();
  auto id = self->state.hold(rp);
  timed_request(self, db, self->state.cfg.request_timeout, atom::spawn_v,
                parent, child)
    .then(
      [self, id](spawn_result& result) {
        // The link is durable; the spawn is not acknowledged yet.
        reach(kill_point::tree_link_written);
        // A conversation that began before its thread was spawned (a
        // cancel or message that found nothing) knows no session: the
        // child gets one that loads its session.
        if (result.created) {
          stop_stale(self, result.child);
          tell_parent(self, result);
        }
        answer(self, id, std::move(result));
      },
      [self, id](caf::error& err) { answer(self, id, std::move(err)); });
  return rp;
}

// Cancels `thread` and its descendants; answers every thread closed.
caf::result<std::vector<std::string>> cancel(self_ptr self,
                                             const std::string& thread) {
  if (elsewhere(self, thread))
    return to_owner<std::vector<std::string>>(
      self, thread, caf::make_message(atom::cancel_v, thread));
  auto rp = self->make_response_promise<std::vector<std::string>>();
  auto id = self->state.hold(rp);
  cancel_tree(self, thread, {}, [self, id](auto result) {
    if (result)
      answer(self, id, std::move(*result));
    else
      answer(self, id, std::move(result.error()));
  });
  return rp;
}

// Asks `thread`'s conversation (started for it if it is not live) `req`
// and answers its answer; in a cluster the thread's owner is asked
// `owner_req` instead.
template <class Result>
caf::result<Result> ask_conversation(self_ptr self, const std::string& thread,
                                     caf::message owner_req, caf::message req) {
  if (elsewhere(self, thread))
    return to_owner<Result>(self, thread, std::move(owner_req));
  auto rp = self->make_response_promise<Result>();
  auto id = self->state.hold(rp);
  when_routable(self, thread, [self, id, thread, req] {
    auto sup = conversations(self);
    if (!sup) {
      answer(self, id,
             caf::make_error(ec::unavailable, "the conversations supervisor "
                                              "is restarting; try again"));
      return;
    }
    timed_request(self, sup, self->state.cfg.request_timeout, atom::forward_v,
                  thread, req)
      .then([self, id](Result& x) { answer(self, id, std::move(x)); },
            [self, id](caf::error& err) { answer(self, id, std::move(err)); });
  });
  return rp;
}

// The conversations: live, passivated and evicted so far.
caf::result<uint64_t, uint64_t, uint64_t> counts(self_ptr self) {
  auto& st = self->state;
  return caf::make_result(uint64_t{st.threads.size()}, st.passivations,
                          st.evictions);
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

// Asks persistence for the recovery plan and runs it; retried every second
// until persistence and the conversations supervisor both run and a plan
// comes back (resuming starts conversations under the supervisor).
void recover(self_ptr self) {
  auto db = lookup<persistence_actor>(self->system(), names::persistence);
  if (!db || !conversations(self)) {
    self->delayed_send(self, std::chrono::seconds{1}, atom::recover_v);
    return;
  }
  timed_request(self, db, std::chrono::seconds{60}, atom::recover_v)
    .then([self](recovery_plan& plan) { resume(self, std::move(plan)); },
          [self](caf::error& err) {
            // Pending work stays unanswered until a plan runs: retry.
            log_scope scope{log_component::orchestrator};
            spdlog::error("cannot plan the recovery (retrying in 1 s): {}",
                          render(err));
            self->delayed_send(self, std::chrono::seconds{1}, atom::recover_v);
          });
}

// -- cluster ------------------------------------------------------------------

// The live conversations of `shards`.
std::vector<std::string> threads_of(self_ptr self,
                                    const std::vector<uint32_t>& shards) {
  auto& table = *self->state.cfg.shards;
  std::vector<std::string> result;
  for (auto& entry : self->state.threads)
    if (std::find(shards.begin(), shards.end(), table.shard_of(entry.first))
        != shards.end())
      result.push_back(entry.first);
  return result;
}

// Recovers the threads of `shards`, which this node just came to hold, and
// resumes those with pending work; retried every second until it worked.
// Conversations of them still running from an earlier tenure (the shard
// left and came back before they stopped) are replaced first.
void recover_shards(self_ptr self, const std::vector<uint32_t>& shards) {
  for (auto& thread : threads_of(self, shards))
    if (auto i = self->state.threads.find(thread);
        i != self->state.threads.end() && self->state.stale(thread, i->second))
      stop_stale(self, thread);
  auto db = lookup<persistence_actor>(self->system(), names::persistence);
  if (!db || !conversations(self)) {
    self->delayed_send(self, std::chrono::seconds{1}, atom::recover_v, shards);
    return;
  }
  timed_request(self, db, std::chrono::seconds{60}, atom::recover_v, shards)
    .then([self](recovery_plan& plan) { resume(self, std::move(plan)); },
          [self, shards](caf::error& err) {
            log_scope scope{log_component::orchestrator};
            spdlog::error("cannot recover {} shards (retrying in 1 s): {}",
                          shards.size(), render(err));
            self->delayed_send(self, std::chrono::seconds{1}, atom::recover_v,
                               shards);
          });
}

// Stops `threads` (those passivating already finish on their own); `rp`
// gets ok once every one of them is gone.
void stop_threads(self_ptr self, const std::vector<std::string>& threads,
                  caf::typed_response_promise<caf::ok_atom> rp) {
  auto left = std::make_shared<size_t>(threads.size() + 1);
  auto gone = [rp, left]() mutable {
    if (--*left == 0)
      rp.deliver(caf::ok_atom_v);
  };
  for (auto& thread : threads) {
    auto i = self->state.threads.find(thread);
    if (i == self->state.threads.end()) {
      gone();
      continue;
    }
    i->second.queued.push_back(gone);
    if (!i->second.stopping) {
      self->state.update(thread,
                         [](thread_entry& entry) { entry.stopping = true; });
      stop_conversation(self, thread);
    }
  }
  gone();
}

// Asks each of `threads` to passivate: an idle one writes its session
// SUSPENDED (unless the node drains: its stop does) and stops; a busy one
// declines and is asked again. The answers do not matter (whoever stops
// tells us through `passivate`), so they go nowhere: no request per thread
// waits on our clock.
void ask_to_passivate(self_ptr self, const std::vector<std::string>& threads,
                      bool node_draining) {
  auto sup = conversations(self);
  if (!sup)
    return;
  auto ask = node_draining ? caf::make_message(atom::passivate_v, atom::drain_v)
                           : caf::make_message(atom::passivate_v);
  for (auto& thread : threads)
    caf::anon_send(sup, atom::forward_v, thread, ask);
}

constexpr auto release_check = std::chrono::milliseconds{100};

/// Every this many checks, the conversations still running are asked again.
constexpr uint32_t release_reask = 10;

// Every thread with a conversation (running or stopping).
std::vector<std::string> live_threads(self_ptr self) {
  std::vector<std::string> result;
  result.reserve(self->state.threads.size());
  for (auto& entry : self->state.threads)
    result.push_back(entry.first);
  return result;
}

// `threads` stop: idle ones at once, busy ones once idle or after `wait`.
// Answers once all are gone.
caf::result<caf::ok_atom>
release_threads(self_ptr self, std::vector<std::string> threads,
                caf::timespan wait, bool whole_node = false) {
  if (threads.empty())
    return caf::ok_atom_v;
  auto rp = self->make_response_promise<caf::ok_atom>();
  if (wait <= caf::timespan{0}) {
    stop_threads(self, threads, rp);
    return rp;
  }
  auto id = ++self->state.last_release;
  self->state.releases.emplace(
    id, shard_release{threads, rp, self->clock().now() + wait, 0, whole_node});
  ask_to_passivate(self, threads, whole_node);
  self->delayed_send(self, release_check, atom::release_v, id);
  return rp;
}

// Conversations of `shards`, which go to another node, stop (see
// `release_threads`).
caf::result<caf::ok_atom> release_shards(self_ptr self,
                                         const std::vector<uint32_t>& shards,
                                         caf::timespan wait) {
  return release_threads(self, threads_of(self, shards), wait);
}

// The node drains: new work is refused from now on, and every conversation
// stops once idle, or after `wait`.
caf::result<caf::ok_atom> drain(self_ptr self, caf::timespan wait) {
  self->state.draining = true;
  return release_threads(self, live_threads(self), wait, true);
}

// Checks on release `id`: done once its conversations are gone; those
// still running are stopped once its time is up, else asked again.
void check_release(self_ptr self, uint64_t id) {
  auto i = self->state.releases.find(id);
  if (i == self->state.releases.end())
    return;
  std::vector<std::string> left;
  if (i->second.whole_node) {
    // A drain waits for every conversation, also those started since it
    // began (a recovery, a message between threads, an operator's request).
    left = live_threads(self);
  } else {
    for (auto& thread : i->second.threads)
      if (self->state.threads.count(thread) > 0)
        left.push_back(thread);
  }
  if (left.empty() || self->clock().now() >= i->second.deadline) {
    auto rp = i->second.rp;
    self->state.releases.erase(i);
    stop_threads(self, left, rp);
    return;
  }
  i->second.threads = left;
  if (++i->second.checks % release_reask == 0) {
    std::vector<std::string> idle_candidates;
    for (auto& thread : left)
      if (!self->state.threads.at(thread).stopping)
        idle_candidates.push_back(thread);
    ask_to_passivate(self, idle_candidates, i->second.whole_node);
  }
  self->delayed_send(self, release_check, atom::release_v, id);
}

// Stopped or killed: whoever waits for a held request or a release (a
// drain) learns now; a conversations supervisor gone: its threads are no
// longer routed to.
void set_handlers(self_ptr self) {
  self->set_exit_handler([self](caf::exit_msg& msg) {
    auto err = caf::make_error(ec::unavailable, "the orchestrator stopped; "
                                                "resend with the same id");
    self->state.fail_held(err);
    for (auto& entry : self->state.releases)
      entry.second.rp.deliver(err);
    self->state.releases.clear();
    self->quit(msg.reason);
  });
  self->set_down_handler([self](caf::down_msg& msg) {
    // We monitor nothing but conversations supervisors. An older
    // incarnation's down may come after we saw the new one: the table may
    // hold threads of either, so it goes all the same.
    if (msg.source)
      conversations_lost(self, msg.source);
  });
}

} // namespace

orchestrator_actor::behavior_type orchestrator(self_ptr self,
                                               orchestrator_config cfg) {
  self->state.cfg = std::move(cfg);
  if (self->state.cfg.recover_on_start)
    self->send(self, atom::recover_v);
  else // Watch the supervisor from the start.
    conversations(self);
  set_handlers(self);
  return {
    [self](atom::route, const std::string& thread, std::string& client_id,
           std::string& text) {
      outbox_entry msg;
      msg.client_id = std::move(client_id);
      msg.text = std::move(text);
      return route(self, thread, std::move(msg));
    },
    [self](atom::deliver, outbox_entry& msg) {
      auto target = msg.to;
      return route(self, target, std::move(msg));
    },
    [self](atom::spawn, const std::string& parent, const std::string& child) {
      return spawn(self, parent, child);
    },
    [self](atom::cancel, const std::string& thread) {
      return cancel(self, thread);
    },
    [self](atom::pause, const std::string& thread, bool paused) {
      return ask_conversation<caf::ok_atom>(
        self, thread, caf::make_message(atom::pause_v, thread, paused),
        caf::make_message(atom::pause_v, paused));
    },
    [self](atom::task, const std::string& thread, seq_t seq) {
      return ask_conversation<log_entry>(
        self, thread, caf::make_message(atom::task_v, thread, seq),
        caf::make_message(atom::task_v, seq));
    },
    [self](atom::passivate, const std::string& thread, uint64_t last_seen) {
      return passivate(self, thread, last_seen);
    },
    [self](atom::started, const std::string& thread) {
      self->state.restarted(thread);
    },
    [self](atom::stats) { return counts(self); },
    [self](atom::health) { return self->state.recovered; },
    [self](atom::drain, caf::timespan wait) { return drain(self, wait); },
    [](atom::wedge, caf::timespan duration) {
      // Chaos only (the gateway asks it with chaos.kill on): blocks this
      // worker on purpose, as a deadlocked handler would.
      std::this_thread::sleep_for(duration);
    },
    [self](atom::recover) { recover(self); },
    [self](atom::expire) { expire_deadlines(self); },
    [self](atom::recover, const std::vector<uint32_t>& shards) {
      recover_shards(self, shards);
    },
    [self](atom::release, const std::vector<uint32_t>& shards,
           caf::timespan wait) { return release_shards(self, shards, wait); },
    [self](atom::release, uint64_t id) { check_release(self, id); },
  };
}

} // namespace keel
