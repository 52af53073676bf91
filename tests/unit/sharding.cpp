#define CAF_SUITE sharding
#include <caf/test/unit_test.hpp>

#include "keel/shard_table.hpp"
#include "keel/sharding.hpp"

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

using namespace keel;

namespace {

constexpr uint32_t shard_count = 256;

using assignment = std::vector<std::string>;

std::map<std::string, size_t> counts_of(const assignment& owners) {
  std::map<std::string, size_t> result;
  for (auto& owner : owners)
    ++result[owner];
  return result;
}

/// How the shards moved from one assignment to the next.
struct move_count {
  /// Shards that changed owner.
  size_t moved = 0;
  /// Shards that moved between two nodes present both times: neither from
  /// a removed node nor onto an added one.
  size_t between_old_nodes = 0;
};

move_count count_moves(const assignment& before, const assignment& after,
                       const std::string& changed_node) {
  move_count result;
  for (size_t shard = 0; shard < before.size(); ++shard) {
    if (before[shard] == after[shard])
      continue;
    ++result.moved;
    if (before[shard] != changed_node && after[shard] != changed_node)
      ++result.between_old_nodes;
  }
  return result;
}

std::vector<std::string> node_names(const std::string& prefix, size_t n) {
  std::vector<std::string> result;
  for (size_t i = 1; i <= n; ++i)
    result.push_back(prefix + std::to_string(i));
  return result;
}

size_t fair_floor(size_t nodes) {
  return shard_count / nodes;
}

size_t fair_ceil(size_t nodes) {
  return (shard_count + nodes - 1) / nodes;
}

} // namespace

CAF_TEST(the root of a thread is its id up to the first dot) {
  CAF_CHECK_EQUAL(std::string{thread_root("support")}, "support");
  CAF_CHECK_EQUAL(std::string{thread_root("support.researcher")}, "support");
  CAF_CHECK_EQUAL(std::string{thread_root("support.researcher.critic")},
                  "support");
  CAF_CHECK_EQUAL(std::string{thread_root(".odd")}, "");
  CAF_CHECK_EQUAL(std::string{thread_root("")}, "");
}

CAF_TEST(shard of is FNV - 1a of the root modulo the shard count) {
  // Published FNV-1a 64-bit values: "" -> 0xcbf29ce484222325,
  // "a" -> 0xaf63dc4c8601ec8c, "foobar" -> 0x85944171f73967e8.
  CAF_CHECK_EQUAL(shard_of("", 256), 0x25u);
  CAF_CHECK_EQUAL(shard_of("a", 256), 0x8cu);
  CAF_CHECK_EQUAL(shard_of("foobar", 65536), 0x67e8u);
  CAF_CHECK_EQUAL(shard_of("foobar.child", 65536), 0x67e8u);
  CAF_CHECK_EQUAL(shard_of("anything", 1), 0u);
}

CAF_TEST(a whole agent tree lives in the shard of its root) {
  for (auto root : {"t1", "support-42", "x"}) {
    auto expected = shard_of(root, shard_count);
    for (auto suffix : {".a", ".a.b", ".researcher.critic.judge", "."})
      CAF_CHECK_EQUAL(shard_of(std::string{root} + suffix, shard_count),
                      expected);
  }
  CAF_CHECK_EQUAL(shard_of("t1.x", 7), shard_of("t1", 7));
}

CAF_TEST(threads spread evenly over the shards) {
  constexpr uint32_t shards = 16;
  constexpr size_t threads = 16000;
  std::vector<size_t> per_shard(shards, 0);
  for (size_t i = 0; i < threads; ++i)
    ++per_shard[shard_of("thread-" + std::to_string(i), shards)];
  auto [lo, hi] = std::minmax_element(per_shard.begin(), per_shard.end());
  CAF_MESSAGE("threads per shard: " << *lo << " to " << *hi);
  // Expected 1000 each; a binomial spread is about 31.
  CAF_CHECK_GREATER(*lo, 850u);
  CAF_CHECK_LESS(*hi, 1150u);
}

CAF_TEST(hrw scores are fixed and differ between nodes) {
  CAF_CHECK_EQUAL(hrw_score(3, "node-1"), hrw_score(3, "node-1"));
  CAF_CHECK_NOT_EQUAL(hrw_score(3, "node-1"), hrw_score(3, "node-2"));
  CAF_CHECK_NOT_EQUAL(hrw_score(3, "node-1"), hrw_score(4, "node-1"));
  // Each of two nodes wins about half the shards on score alone.
  size_t first_wins = 0;
  for (shard_id shard = 0; shard < shard_count; ++shard)
    if (hrw_score(shard, "node-1") > hrw_score(shard, "node-2"))
      ++first_wins;
  CAF_MESSAGE("node-1 outscores node-2 on " << first_wins << " shards");
  CAF_CHECK_GREATER(first_wins, 96u);
  CAF_CHECK_LESS(first_wins, 160u);
}

CAF_TEST(no nodes leave every shard without an owner) {
  auto owners = assign_shards(8, {});
  CAF_REQUIRE_EQUAL(owners.size(), 8u);
  for (auto& owner : owners)
    CAF_CHECK(owner.empty());
  CAF_CHECK(assign_shards(0, {"node-1"}).empty());
}

CAF_TEST(every node gets its fair share within one shard) {
  for (size_t n = 1; n <= 5; ++n) {
    auto nodes = node_names("node-", n);
    auto owners = assign_shards(shard_count, nodes);
    CAF_REQUIRE_EQUAL(owners.size(), shard_count);
    auto counts = counts_of(owners);
    CAF_CHECK_EQUAL(counts.size(), n);
    size_t lo = shard_count;
    size_t hi = 0;
    for (auto& [node, count] : counts) {
      CAF_CHECK(std::find(nodes.begin(), nodes.end(), node) != nodes.end());
      lo = std::min(lo, count);
      hi = std::max(hi, count);
    }
    CAF_MESSAGE(n << " nodes: " << lo << " to " << hi << " shards each");
    CAF_CHECK_LESS_OR_EQUAL(hi - lo, 1u);
    CAF_CHECK_LESS_OR_EQUAL(hi, fair_ceil(n));
    CAF_CHECK_GREATER_OR_EQUAL(lo, fair_floor(n));
  }
}

CAF_TEST(the assignment ignores the order and repetition of node ids) {
  std::vector<std::string> nodes{"node-c", "node-a", "node-e", "node-b",
                                 "node-d"};
  auto expected = assign_shards(shard_count, nodes);
  std::sort(nodes.begin(), nodes.end());
  size_t permutations = 0;
  do {
    CAF_CHECK(assign_shards(shard_count, nodes) == expected);
    ++permutations;
  } while (std::next_permutation(nodes.begin(), nodes.end()));
  CAF_CHECK_EQUAL(permutations, 120u);
  nodes.push_back("node-a");
  nodes.push_back("node-e");
  CAF_CHECK(assign_shards(shard_count, nodes) == expected);
}

// 1 -> 2 -> 3 -> 2 -> 1 nodes with 256 shards. A change must move about
// shards / nodes shards, all onto the added node or off the removed one,
// except a few between the other nodes that keep the counts fair (no fair
// assignment avoids them for every set of nodes): at most 4 per change here.
CAF_TEST(growing and shrinking moves only about a fair share) {
  std::vector<std::vector<std::string>> steps{{"node-1"},
                                              {"node-1", "node-2"},
                                              {"node-1", "node-2", "node-3"},
                                              {"node-1", "node-2"},
                                              {"node-1"}};
  std::vector<std::string> changed{"node-2", "node-3", "node-3", "node-2"};
  for (size_t i = 0; i + 1 < steps.size(); ++i) {
    auto before = assign_shards(shard_count, steps[i]);
    auto after = assign_shards(shard_count, steps[i + 1]);
    auto moves = count_moves(before, after, changed[i]);
    auto larger = std::max(steps[i].size(), steps[i + 1].size());
    auto changed_share = std::max(counts_of(before)[changed[i]],
                                  counts_of(after)[changed[i]]);
    CAF_MESSAGE(steps[i].size()
                << " -> " << steps[i + 1].size() << " nodes: " << moves.moved
                << " moved, " << moves.between_old_nodes
                << " between the other nodes");
    CAF_CHECK_GREATER_OR_EQUAL(changed_share, fair_floor(larger));
    CAF_CHECK_LESS_OR_EQUAL(changed_share, fair_ceil(larger));
    CAF_CHECK_EQUAL(moves.moved, changed_share + moves.between_old_nodes);
    CAF_CHECK_LESS_OR_EQUAL(moves.between_old_nodes, 4u);
  }
}

// The same over 100 sets of node ids, adding or removing one node of 2 to 6
// (the same moves either way), a different one in each set: the changed
// node always gains or loses its fair share; moves between other nodes stay at
// most 20 (8%) per change and 3% of the shards on average.
CAF_TEST(node changes move few shards between the other nodes) {
  size_t changes = 0;
  size_t worst = 0;
  size_t total_between = 0;
  for (size_t set = 0; set < 100; ++set) {
    auto all = node_names("set" + std::to_string(set) + "-node-", 6);
    for (size_t n = 1; n < all.size(); ++n) {
      std::vector<std::string> more(all.begin(), all.begin() + n + 1);
      auto changed_node = more[set % more.size()];
      auto fewer = more;
      fewer.erase(std::find(fewer.begin(), fewer.end(), changed_node));
      auto before = assign_shards(shard_count, fewer);
      auto after = assign_shards(shard_count, more);
      auto moves = count_moves(before, after, changed_node);
      auto share = counts_of(after)[changed_node];
      CAF_CHECK_GREATER_OR_EQUAL(share, fair_floor(more.size()));
      CAF_CHECK_LESS_OR_EQUAL(share, fair_ceil(more.size()));
      CAF_CHECK_EQUAL(moves.moved, share + moves.between_old_nodes);
      worst = std::max(worst, moves.between_old_nodes);
      total_between += moves.between_old_nodes;
      ++changes;
    }
  }
  CAF_MESSAGE(changes << " changes: " << total_between
                      << " moves between other nodes in all, at most " << worst
                      << " in one");
  CAF_CHECK_LESS_OR_EQUAL(worst, 20u);
  CAF_CHECK_LESS_OR_EQUAL(total_between, changes * shard_count * 3 / 100);
}

CAF_TEST(a shard table holds and releases shards and counts its changes) {
  shard_table table{"node-1", 8};
  CAF_CHECK_EQUAL(table.me(), "node-1");
  CAF_CHECK_EQUAL(table.shards(), 8u);
  CAF_CHECK_EQUAL(table.version(), 0u);
  CAF_CHECK(table.held().empty());
  table.hold(3, 7);
  table.hold(1, 2);
  CAF_CHECK_EQUAL(table.version(), 2u);
  CAF_CHECK(table.held() == std::vector<shard_id>({1, 3}));
  CAF_CHECK(table.held_epoch(3) == std::optional<uint64_t>{7});
  CAF_CHECK(table.held_epoch(2) == std::nullopt);
  table.hold(3, 7);
  CAF_CHECK_EQUAL(table.version(), 2u);
  table.hold(3, 8);
  CAF_CHECK(table.held_epoch(3) == std::optional<uint64_t>{8});
  table.release(1);
  table.release(1);
  CAF_CHECK_EQUAL(table.version(), 4u);
  CAF_CHECK(table.release_all() == std::vector<shard_id>({3}));
  CAF_CHECK(table.held().empty());
  CAF_CHECK(table.release_all().empty());
  CAF_CHECK_EQUAL(table.version(), 5u);
}

CAF_TEST(a shard table serves the threads of the shards it holds) {
  shard_table table{"node-1", 16};
  auto shard = table.shard_of("support.researcher");
  CAF_CHECK_EQUAL(shard, shard_of("support", 16));
  CAF_CHECK(!table.serves("support"));
  table.hold(shard, 1);
  CAF_CHECK(table.serves("support"));
  CAF_CHECK(table.serves("support.researcher.critic"));
  table.release(shard);
  CAF_CHECK(!table.serves("support"));
}

CAF_TEST(a shard table records owners and ignores shards out of range) {
  shard_table table{"node-1", 4};
  CAF_CHECK(table.owner(2).node.empty());
  table.set_owner(2, {"node-2", "10.0.0.2:4242", 5});
  CAF_CHECK_EQUAL(table.version(), 1u);
  table.set_owner(2, {"node-2", "10.0.0.2:4242", 5});
  CAF_CHECK_EQUAL(table.version(), 1u);
  auto owner = table.owner(2);
  CAF_CHECK_EQUAL(owner.node, "node-2");
  CAF_CHECK_EQUAL(owner.address, "10.0.0.2:4242");
  CAF_CHECK_EQUAL(owner.epoch, 5u);
  table.hold(4, 1);
  table.set_owner(9, {"node-3", "", 1});
  table.release(4);
  CAF_CHECK_EQUAL(table.version(), 1u);
  CAF_CHECK(table.held_epoch(4) == std::nullopt);
  CAF_CHECK(table.owner(9).node.empty());
  CAF_CHECK_EQUAL(shard_table("node-1", 0).shards(), 1u);
}
