// The orchestrator's agent tree: spawning children and cancelling subtrees.

#include "orchestrator_impl.hpp"

#include <algorithm>
#include <memory>

#include "keel/kill_point.hpp"
#include "keel/sharding.hpp"

namespace keel::orchestrator_impl {

namespace {

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

} // namespace

// Cancels every thread of `subtree` (all at once); calls `done` with the
// list once all are closed, or with the first error.
void cancel_all(self_ptr self, std::vector<std::string> subtree,
                cancel_callback done) {
  auto state = std::make_shared<cancel_progress>(
    cancel_progress{subtree.size(), false, subtree, std::move(done)});
  for (auto& thread : subtree)
    when_routable(self, thread,
                  [self, state, thread] { cancel_one(self, state, thread); });
}

namespace {

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

} // namespace

// Spawns `child` under `parent` durably, then restarts a conversation of
// the child that began before the spawn and tells the parent's one.
caf::result<spawn_result> spawn(self_ptr self, const std::string& parent,
                                const std::string& child,
                                const std::string& agent) {
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
      self, parent, caf::make_message(atom::spawn_v, parent, child, agent));
  if (self->state.draining)
    return refuse_draining();
  auto db = lookup<persistence_actor>(self->system(), names::persistence);
  if (!db)
    return caf::make_error(ec::unavailable,
                           "persistence is restarting; spawn again");
  auto rp = self->make_response_promise<spawn_result>();
  auto id = self->state.hold(rp);
  timed_request(self, db, self->state.cfg.request_timeout, atom::spawn_v,
                parent, child, agent)
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

} // namespace keel::orchestrator_impl
