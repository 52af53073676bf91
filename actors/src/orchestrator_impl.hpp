#pragma once

// The orchestrator's parts, shared by its files: routing messages to their
// threads' conversations (orchestrator_routing.cpp), stopping conversations
// (orchestrator_stops.cpp), the agent tree's spawns and cancels
// (orchestrator_tree.cpp), the recovery (orchestrator_recovery.cpp),
// releasing shards and draining the node (orchestrator_release.cpp); the
// behaviour is in orchestrator.cpp, the state's own methods in
// orchestrator_state.cpp. Private to actors/src.

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <caf/all.hpp>
#include <spdlog/spdlog.h>

#include "keel/error.hpp"
#include "keel/logging.hpp"
#include "keel/lookup.hpp"
#include "keel/orchestrator.hpp"
#include "keel/timed_request.hpp"

namespace keel::orchestrator_impl {

using self_ptr = orchestrator_actor::stateful_pointer<orchestrator_state>;

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

// What a cancel of many threads learns once all are closed: the list, or
// the first error.
using cancel_callback
  = std::function<void(caf::expected<std::vector<std::string>>)>;

// -- routing (orchestrator_routing.cpp) ---------------------------------------

/// The current conversations supervisor (monitored); null while it restarts.
caf::actor conversations(self_ptr self);

/// True if another node serves `thread`.
bool elsewhere(self_ptr self, const std::string& thread);

/// Starts the thread's conversation unless it runs; `started` (optional)
/// learns when the supervisor answered.
void ensure_started(self_ptr self, const std::string& thread,
                    std::function<void()> started = nullptr);

/// Runs `work` on the thread's conversation once it is routable.
void when_routable(self_ptr self, const std::string& thread,
                   std::function<void()> work);

/// The answer to new work while the node drains.
caf::error refuse_draining();

/// Routes a message to `thread`'s conversation, or to the thread's owner.
caf::result<accept_result> route(self_ptr self, const std::string& thread,
                                 outbox_entry msg);

// -- stops (orchestrator_stops.cpp) -------------------------------------------

/// A passivating conversation is gone: runs what queued for the thread.
void release(self_ptr self, const std::string& thread);

/// Stops a passivating conversation, then runs what queued meanwhile.
void stop_conversation(self_ptr self, const std::string& thread);

/// Replaces the thread's conversation with one that loads it again.
void stop_stale(self_ptr self, const std::string& thread);

/// A conversation that last saw route `last_seen` asks to stop: true (and
/// stopping it) unless a message was routed to it since.
bool passivate(self_ptr self, const std::string& thread, uint64_t last_seen);

// -- the agent tree (orchestrator_tree.cpp) -----------------------------------

/// Cancels every thread of `subtree` at once; `done` learns the outcome.
void cancel_all(self_ptr self, std::vector<std::string> subtree,
                cancel_callback done);

/// Spawns `child` under `parent` durably, bound to `agent` (empty: the
/// parent's).
caf::result<spawn_result> spawn(self_ptr self, const std::string& parent,
                                const std::string& child,
                                const std::string& agent);

/// Cancels `thread` and its descendants; answers every thread closed.
caf::result<std::vector<std::string>> cancel(self_ptr self,
                                             const std::string& thread);

// -- recovery (orchestrator_recovery.cpp) -------------------------------------

/// Asks persistence for the recovery plan and runs it (retried until it
/// worked).
void recover(self_ptr self);

/// Recovers the threads of `shards`, which this node just came to hold.
void recover_shards(self_ptr self, const std::vector<uint32_t>& shards);

/// The conversations supervisor `lost` died, and every conversation with it.
void conversations_lost(self_ptr self, const caf::actor_addr& lost);

// -- releases and the drain (orchestrator_release.cpp) ------------------------

/// The live conversations of `shards`.
std::vector<std::string> threads_of(self_ptr self,
                                    const std::vector<uint32_t>& shards);

/// Conversations of `shards`, which go to another node, stop.
caf::result<caf::ok_atom> release_shards(self_ptr self,
                                         const std::vector<uint32_t>& shards,
                                         caf::timespan wait);

/// The node drains: new work is refused, every conversation stops.
caf::result<caf::ok_atom> drain(self_ptr self, caf::timespan wait);

/// Checks on release `id` (its timer fired).
void check_release(self_ptr self, uint64_t id);

} // namespace keel::orchestrator_impl
