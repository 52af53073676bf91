#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include <caf/actor.hpp>
#include <caf/actor_clock.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/response_promise.hpp>

#include "keel/actors.hpp"
#include "keel/shard_table.hpp"

namespace keel {

/// Configuration of the peers actor (see `peers_actor` in actors.hpp).
struct peers_config {
  std::shared_ptr<const shard_table> shards;
  /// The cluster token every message between nodes carries.
  std::string token;
  /// Links to peers are TLS (cluster.tls).
  bool tls = false;
  /// How long a request for another node's thread may take in all (its
  /// resends included) before it is answered `unavailable`.
  caf::timespan route_timeout = std::chrono::seconds{5};
  /// How long one attempt waits for the owner's answer before it is sent
  /// again (to the owner the shard table names then).
  caf::timespan attempt_timeout = std::chrono::seconds{2};
  /// Pause before a resend after the owner refused (moved, not served yet).
  caf::timespan retry_pause = std::chrono::milliseconds{100};
  /// How often the owners of threads with registered interest are checked.
  caf::timespan interest_check = std::chrono::seconds{1};
};

/// One request for another node's thread, waiting or in flight.
struct peer_request {
  /// Sends one attempt to the owner's peers actor (`peer`) or, once this
  /// node serves the thread, to its own orchestrator (`peer` invalid);
  /// `retry` is called if the attempt failed in a way a resend may fix,
  /// `done` once the request is answered.
  std::function<void(const caf::actor& peer, std::function<void()> retry,
                     std::function<void()> done)>
    attempt;
  /// Answers the request with an error (its time ran out).
  std::function<void(caf::error)> fail;
  /// By the actor's clock (the test clock in deterministic tests).
  caf::actor_clock::time_point deadline;
  /// The attempt under way (see `peers_state::last_attempt`): what an
  /// earlier attempt reports late (an answer, a failure) moves nothing on.
  uint64_t attempt_id = 0;
  /// The peers actor the attempt under way went to; none if it went to
  /// this node's orchestrator or is not sent yet. When that peer goes
  /// down the request goes again at once: its answer will never come.
  caf::actor_addr sent_to;
};

/// A link to another node's peers actor.
struct peer_link {
  /// Valid once connected.
  caf::actor handle;
  bool connecting = false;
  /// Waiting for the connection: called with the handle (invalid on
  /// failure).
  std::vector<std::function<void(const caf::actor&)>> waiting;
};

/// State of the peers actor.
struct peers_state {
  static inline const char* name = "keel.peers";

  peers_config cfg;
  /// Requests for other nodes' threads, per thread, in arrival order; the
  /// first is in flight.
  std::unordered_map<std::string, std::deque<peer_request>> queues;
  /// Links to peers by address (host:port).
  std::map<std::string, peer_link> links;
  /// Peers actors of the other nodes whose clients follow a thread served
  /// here (they hand its events to their bridges).
  std::unordered_map<std::string, std::set<caf::actor>> interested;
  /// Threads of other nodes this node's bridge registered interest in, with
  /// the owner (node and epoch) it registered with.
  std::unordered_map<std::string, shard_owner> registered;
  /// Ids of attempts (`peer_request::attempt_id`), increasing.
  uint64_t last_attempt = 0;
  /// Counters for the status page.
  uint64_t forwarded = 0;
  uint64_t resent = 0;
  uint64_t timed_out = 0;
};

/// The node's door for its peers: see `peers_actor`.
caf::behavior peers(caf::stateful_actor<peers_state>* self, peers_config cfg);

} // namespace keel
