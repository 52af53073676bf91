#pragma once

// What a node does next in the cluster, decided from one view of the
// cluster store. Pure: unit tests drive it with views they build. Moves
// are pulled, never pushed: a node claims orphans and asks owners for the
// shards it should have; an owner only ever gives a shard to a node that
// asked for it. So a live owner is never stolen from.

#include <cstdint>
#include <string>
#include <vector>

#include "keel/cluster_store.hpp"

namespace keel {

/// The node deciding.
struct cluster_self {
  std::string node_id;
  uint64_t incarnation = 0;
  /// The shards the node holds (writes) now, ascending.
  std::vector<shard_id> held;
};

struct shard_claim {
  shard_id shard;
  uint64_t epoch;
};

struct shard_transfer {
  shard_id shard;
  uint64_t epoch;
  std::string to;
};

/// One round of decisions.
struct cluster_plan {
  /// Incarnations to declare dead: up or draining with an expired lease
  /// (none while the store is recent: see `cluster_view::store_recent`).
  std::vector<member> declare_dead;
  /// Orphan shards this node should own (it is their desired owner among
  /// the up members), at the epoch seen.
  std::vector<shard_claim> claims;
  /// Shards owned by another live node that should be this node's: ask
  /// for them, at most `batch` pending at once.
  std::vector<shard_claim> handoff_requests;
  /// Shards of this node that a live, up node asked for: hand them over.
  std::vector<shard_transfer> transfers;
  /// Pending handoffs of this node's shards to nodes no longer up:
  /// clear them.
  std::vector<shard_claim> stale_handoffs;
  /// Shards the view says this node owns but it does not hold: hold them
  /// at that epoch (and recover them).
  std::vector<shard_claim> gained;
  /// Shards this node holds that the view gives to another owner or
  /// epoch: stop serving them at once.
  std::vector<shard_id> lost;
};

/// The up members with a valid lease, plus `me` if it is up: the nodes
/// shards are assigned to.
std::vector<std::string> candidate_owners(const cluster_view& view,
                                          const std::string& me);

/// Decides the next round for `self` (whose own state is in `view`).
/// `batch` bounds the handoff requests pending to this node. Only an up
/// `self` claims and asks for shards; a draining one still hands its shards
/// over. If `self`'s incarnation is not up or draining in `view` (dead,
/// left, replaced, absent), the plan only loses every held shard.
cluster_plan plan_cluster(const cluster_view& view, const cluster_self& self,
                          uint32_t batch);

} // namespace keel
