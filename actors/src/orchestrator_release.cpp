// The orchestrator's releases: conversations of shards that go to another
// node stop, and the whole node's when it drains.

#include "orchestrator_impl.hpp"

#include <algorithm>
#include <memory>

namespace keel::orchestrator_impl {

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

namespace {

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

} // namespace

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

} // namespace keel::orchestrator_impl
