#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <limits>
#include <memory>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <caf/actor.hpp>
#include <caf/actor_clock.hpp>
#include <caf/response_promise.hpp>
#include <caf/typed_event_based_actor.hpp>
#include <caf/typed_response_promise.hpp>

#include "keel/actors.hpp"
#include "keel/config.hpp"
#include "keel/deadline_set.hpp"
#include "keel/shard_table.hpp"

namespace keel {

/// Configuration of the orchestrator.
struct orchestrator_config {
  /// Resume threads with unanswered messages right after starting.
  bool recover_on_start = true;
  /// Timeout of requests to the conversations supervisor.
  caf::timespan request_timeout = std::chrono::seconds{30};
  /// Conversations a recovery starts at once: more would only queue (tens
  /// of thousands of requests in flight cost the actor clock quadratic time
  /// and starve the conversations already running).
  size_t resume_batch = 256;
  /// Conversations live at once (`threads.max_live`): before one more
  /// starts, the idlest live one is asked to passivate.
  size_t max_live = std::numeric_limits<size_t>::max();
  /// Live conversations asked in turn, idlest first, before a new one
  /// starts anyway (all of them busy).
  size_t eviction_tries = 4;
  /// In a cluster, the node's shard table: a request for a thread of a
  /// shard this node does not hold goes to its owner through the peers
  /// actor. Null on a single node.
  std::shared_ptr<const shard_table> shards;
};

/// A thread as the orchestrator sees it.
struct thread_entry {
  /// Route sequence number of the last message routed to the thread.
  uint64_t routed = 0;
  /// `routed` when the conversation last reported a (re)start: messages up
  /// to here may have been lost with an earlier incarnation.
  uint64_t floor = 0;
  /// True from our request to start the conversation until its incarnation
  /// reports: what is routed meanwhile follows the start through the
  /// supervisor and reaches that incarnation, so its report leaves `floor`
  /// alone (else it could passivate under a message it has yet to read).
  bool starting = false;
  /// True while the conversation is being stopped (passivation), or, for a
  /// thread whose conversation has not started, while room is made for it
  /// under `max_live`: work for it queues meanwhile.
  bool stopping = false;
  /// True once the conversation agreed to passivate to make room (or is
  /// being asked): no longer counted as live, not asked again.
  bool evicting = false;
  /// Work that arrived while stopping (messages, cancels), run once the
  /// conversation is gone.
  std::vector<std::function<void()>> queued;
  /// In a cluster, the tenure of the thread's shard (`shard_table::tenure`)
  /// when its conversation started; 0 on a single node.
  uint64_t tenure = 0;
};

/// Conversations being stopped because their shards go to another node, or
/// because the node drains.
struct shard_release {
  std::vector<std::string> threads;
  caf::typed_response_promise<caf::ok_atom> rp;
  /// When the conversations still running are stopped, idle or not (on
  /// the actor clock).
  caf::actor_clock::time_point deadline;
  /// Checks done so far (busy conversations passivate on their own once
  /// idle; they are asked again only now and then, should one have
  /// restarted and forgotten).
  uint32_t checks = 0;
  /// A drain of the node: every conversation stops, also those started
  /// after it began.
  bool whole_node = false;
};

/// State of the orchestrator.
struct orchestrator_state {
  static inline const char* name = "keel.orchestrator";

  using thread_map = std::unordered_map<std::string, thread_entry>;

  orchestrator_config cfg;
  /// Threads with a running (or stopping) conversation. An entry's
  /// `routed`, `stopping` and `evicting` change only through `update`, and
  /// entries come and go only through `add`, `update`, `erase` and
  /// `take_all`: those keep `live` in step.
  thread_map threads;
  /// The live conversations (neither stopping nor evicting) by `routed`,
  /// least recently routed first: `at_live_limit` and `idlest` answer from
  /// it without a scan of `threads` (one scan per new conversation made a
  /// recovery of 100,000 threads quadratic).
  std::set<std::pair<uint64_t, std::string>> live;
  /// The conversations supervisor incarnation we route through (monitored:
  /// its conversations die with it, and with them our routing table).
  caf::actor conversations;
  /// The last incarnation seen going down: still registered until its
  /// supervisor hears of it, and never to be watched again.
  caf::actor_addr lost_conversations;
  /// Requests answered later (a route waiting for a passivating
  /// conversation, a spawn, a cancel), by hold id; answered with an error
  /// if the orchestrator stops first, so no caller waits for its timeout.
  std::unordered_map<uint64_t, caf::response_promise> held;
  /// The deadlines of the requests this actor waits on (one timer for all,
  /// none on the actor clock per request: see `timed_request`).
  deadline_set deadlines;
  uint64_t last_hold = 0;
  /// Conversations stopped for being idle since this actor started.
  uint64_t passivations = 0;
  /// Conversations that agreed to passivate to make room under
  /// `cfg.max_live` since this actor started.
  uint64_t evictions = 0;
  /// True once the recovery after the start has run (see `atom::health`).
  bool recovered = false;
  /// True once the node drains before a stop: no new work is taken.
  bool draining = false;
  /// Shard releases under way, by id.
  std::unordered_map<uint64_t, shard_release> releases;
  uint64_t last_release = 0;
  /// Conversations to stop, in order, and how many stops the conversations
  /// supervisor has not answered yet (at most `max_stops_in_flight`).
  std::deque<std::string> stop_queue;
  size_t stops_in_flight = 0;

  /// Keeps `rp` until `take` or `fail_held`; returns its hold id.
  uint64_t hold(caf::response_promise rp);
  /// Removes and returns a held promise (an empty one if already failed).
  caf::response_promise take(uint64_t id);
  /// Answers every held request with `err`.
  void fail_held(const caf::error& err);

  /// The thread's conversation (re)started: messages routed so far may
  /// have been lost with an earlier incarnation.
  void restarted(const std::string& thread);

  /// The tenure a conversation of `thread` starting now gets (0 on a
  /// single node).
  uint64_t tenure_of(const std::string& thread) const;

  /// True if the thread's shard left this node since its conversation
  /// started (perhaps to come back): the conversation's view may miss what
  /// another node stored, and none of its writes can commit.
  bool stale(const std::string& thread, const thread_entry& entry) const;

  /// True if a conversation that last saw route `last_seen` has nothing in
  /// flight and may stop.
  bool may_passivate(const thread_entry& entry, uint64_t last_seen) const;

  /// Adds an entry for `thread` (live, nothing routed) unless it has one;
  /// returns its entry.
  thread_entry& add(const std::string& thread);

  /// Changes the entry of `thread` (added first if it has none) through
  /// `change(entry)`; returns the entry.
  template <class Change>
  thread_entry& update(const std::string& thread, Change&& change) {
    auto& entry = add(thread);
    forget(thread, entry);
    change(entry);
    remember(thread, entry);
    return entry;
  }

  /// Removes the entry at `i`.
  void erase(thread_map::iterator i);

  /// Removes and returns every entry.
  thread_map take_all();

  /// True if `cfg.max_live` conversations are live (neither stopping nor
  /// making room).
  bool at_live_limit() const;

  /// The live conversation routed to least recently, other than `thread`
  /// and those in `skip`; empty if there is none.
  std::string idlest(const std::string& thread,
                     const std::vector<std::string>& skip) const;

private:
  void forget(const std::string& thread, const thread_entry& entry);
  void remember(const std::string& thread, const thread_entry& entry);
};

/// Routes threads to conversations. Conversations are children of the
/// conversations supervisor; every message goes through it (`forward`), so
/// it reaches the current incarnation or waits for the restarting one. The
/// orchestrator starts conversations on demand and stops them when they
/// passivate.
orchestrator_actor::behavior_type
orchestrator(orchestrator_actor::stateful_pointer<orchestrator_state> self,
             orchestrator_config cfg);

} // namespace keel
