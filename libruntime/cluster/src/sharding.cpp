#include "keel/sharding.hpp"

#include <algorithm>
#include <tuple>

namespace keel {

namespace {

constexpr uint64_t fnv_offset_basis = 14695981039346656037ull;
constexpr uint64_t fnv_prime = 1099511628211ull;

/// FNV-1a, 64 bits: fixed by its definition, so every node (and every build)
/// computes the same shard for a thread.
uint64_t fnv1a_64(std::string_view text) {
  uint64_t hash = fnv_offset_basis;
  for (unsigned char c : text) {
    hash ^= c;
    hash *= fnv_prime;
  }
  return hash;
}

/// The splitmix64 finalizer: spreads every input bit over all output bits,
/// so scores of node ids that differ in one character are unrelated.
uint64_t splitmix64_finalize(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/// One (shard, node) pair of the assignment, with the pair's score.
struct scored_pair {
  uint64_t score;
  shard_id shard;
  uint32_t node; // Index into the sorted node ids.
};

/// Highest score first; ties (practically never) by shard, then node, so
/// the order is total and the result deterministic.
bool higher_pair(const scored_pair& x, const scored_pair& y) {
  if (x.score != y.score)
    return x.score > y.score;
  return std::tie(x.shard, x.node) < std::tie(y.shard, y.node);
}

std::vector<std::string> sorted_unique(std::vector<std::string> nodes) {
  std::sort(nodes.begin(), nodes.end());
  nodes.erase(std::unique(nodes.begin(), nodes.end()), nodes.end());
  return nodes;
}

std::vector<scored_pair>
all_pairs_by_score(uint32_t shards, const std::vector<std::string>& ids) {
  std::vector<scored_pair> pairs;
  pairs.reserve(size_t{shards} * ids.size());
  for (shard_id shard = 0; shard < shards; ++shard)
    for (uint32_t node = 0; node < ids.size(); ++node)
      pairs.push_back({hrw_score(shard, ids[node]), shard, node});
  std::sort(pairs.begin(), pairs.end(), higher_pair);
  return pairs;
}

} // namespace

std::string_view thread_root(std::string_view thread) {
  return thread.substr(0, thread.find('.'));
}

shard_id shard_of(std::string_view thread, uint32_t shards) {
  if (shards == 0)
    return 0;
  return static_cast<shard_id>(fnv1a_64(thread_root(thread)) % shards);
}

uint64_t hrw_score(shard_id shard, std::string_view node) {
  return splitmix64_finalize(fnv1a_64(node) ^ splitmix64_finalize(shard));
}

// Walks all (shard, node) pairs from the highest score down and gives a
// shard to the pair's node unless the shard already has a node or the node
// is full. That makes the result the stable assignment: no shard and node
// both score each other higher than what they got. Every node may take
// floor(shards / nodes) shards, and the first `shards % nodes` nodes to want
// one more may take one more (at most ceil(shards / nodes)), so the counts
// of any two nodes differ by at most one.
//
// A shard can move between two old nodes when a node joins or leaves: no
// assignment that is fair for every set of nodes keeps every shard on its
// node whenever a node is added (such a rule would be a fixed ranking of
// nodes per shard, which cannot bound the counts). Such extra moves are few
// (about 1.5% of the shards per change for 256 shards; the sharding unit
// test measures them).
std::vector<std::string> assign_shards(uint32_t shards,
                                       const std::vector<std::string>& nodes) {
  std::vector<std::string> result(shards);
  auto ids = sorted_unique(nodes);
  if (ids.empty())
    return result;
  const size_t base_share = shards / ids.size();
  size_t extra_slots = shards % ids.size();
  std::vector<size_t> counts(ids.size(), 0);
  std::vector<bool> assigned(shards, false);
  size_t left = shards;
  for (auto& pair : all_pairs_by_score(shards, ids)) {
    if (left == 0)
      break;
    if (assigned[pair.shard] || counts[pair.node] > base_share)
      continue;
    if (counts[pair.node] == base_share) {
      if (extra_slots == 0)
        continue;
      --extra_slots;
    }
    assigned[pair.shard] = true;
    ++counts[pair.node];
    --left;
    result[pair.shard] = ids[pair.node];
  }
  return result;
}

} // namespace keel
