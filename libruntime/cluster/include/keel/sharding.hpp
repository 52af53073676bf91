#pragma once

// Which shard a thread lives in, and which node should own each shard.
// Pure functions: every node computes the same answers from the same
// inputs, so nodes agree on a placement without talking to each other.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace keel {

using shard_id = uint32_t;

/// The root of a thread id: the id up to its first '.'. Children spawned by
/// models are named `parent.name`, so a whole agent tree has one root and
/// lives in one shard (spawns, cancels and deliveries inside a tree stay on
/// one node, under one fence).
std::string_view thread_root(std::string_view thread);

/// The shard of `thread`: FNV-1a of its root, modulo `shards` (> 0).
shard_id shard_of(std::string_view thread, uint32_t shards);

/// The rendezvous (highest random weight) score of `node` for `shard`:
/// the node with the highest score is the shard's first choice.
uint64_t hrw_score(shard_id shard, std::string_view node);

/// The desired owner of every shard among `nodes` (ids, in any order,
/// repeats ignored): each shard goes to its highest-scoring node that holds
/// fewer than its fair share, taking (shard, node) pairs from the highest
/// score down. Every node gets floor(shards / nodes) or ceil(shards / nodes)
/// shards. Deterministic. Adding a node moves its fair share onto it,
/// removing one moves its shards off it, plus a few moves between the other
/// nodes that keep the counts fair (no fair rule avoids them for every set
/// of nodes; about 1.5% of 256 shards per change on average). Empty strings
/// if `nodes` is empty.
std::vector<std::string> assign_shards(uint32_t shards,
                                       const std::vector<std::string>& nodes);

} // namespace keel
