#define CAF_SUITE cluster_policy
#include <caf/test/unit_test.hpp>

#include "keel/cluster_policy.hpp"

#include <algorithm>
#include <chrono>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "memory_cluster_store.hpp"

using namespace keel;
using namespace std::chrono_literals;

namespace {

constexpr uint32_t sim_shards = 32;
constexpr uint32_t sim_batch = 4;
constexpr caf::timespan sim_ttl = std::chrono::seconds{10};
constexpr caf::timespan sim_tick = std::chrono::seconds{1};

template <class T>
T value_of(caf::expected<T> x) {
  CAF_REQUIRE(x);
  return std::move(*x);
}

/// One simulated node: what its cluster actor would keep.
struct sim_node {
  std::string id;
  uint64_t incarnation = 0;
  /// Shard -> the epoch the node writes it at.
  std::map<shard_id, uint64_t> held;
  /// The process runs: it renews its lease and plans every round. A node
  /// that stopped keeps its last `held` (a stale view the fence must beat).
  bool running = true;

  cluster_self self() const {
    cluster_self result;
    result.node_id = id;
    result.incarnation = incarnation;
    for (auto& [shard, epoch] : held)
      result.held.push_back(shard);
    return result;
  }
};

/// The nodes of a cluster on one memory store, moved in rounds: each round
/// the clock moves a second, running nodes renew their lease, then each
/// running node reads a view, plans and applies its plan. After every
/// change of the store the fence invariant is checked.
class cluster_sim {
public:
  memory_cluster_store store;
  std::map<std::string, sim_node> nodes;
  /// Every plan made, by node: tests check what a node did or never did.
  std::map<std::string, std::vector<cluster_plan>> plans;
  /// The most handoffs ever pending to one node at once.
  size_t max_pending = 0;
  /// Each time a node declared another dead: the dead node's id.
  std::vector<std::string> deaths;

  cluster_sim() {
    CAF_REQUIRE(!store.prepare(sim_shards));
  }

  sim_node& join(const std::string& id) {
    auto& node = nodes[id];
    node.id = id;
    node.incarnation = value_of(store.join(id, id + ":4242", sim_ttl));
    node.held.clear();
    node.running = true;
    return node;
  }

  /// Runs rounds until one changes nothing; returns how many ran.
  size_t settle(size_t max_rounds = 100) {
    for (size_t i = 1; i <= max_rounds; ++i)
      if (!round())
        return i;
    CAF_FAIL("the cluster did not settle in " << max_rounds << " rounds");
    return max_rounds;
  }

  /// One round; true if the store (shards or member states) or a node's
  /// holdings changed.
  bool round() {
    store.advance(sim_tick);
    for (auto& [id, node] : nodes)
      if (node.running)
        renew(node);
    auto before = snapshot();
    for (auto& [id, node] : nodes)
      if (node.running)
        step(node);
    return snapshot() != before;
  }

  /// Reads a view, plans, applies the plan; returns the plan.
  cluster_plan step(sim_node& node) {
    auto view = value_of(store.view());
    auto plan = plan_cluster(view, node.self(), sim_batch);
    plans[node.id].push_back(plan);
    apply(node, plan);
    check_pending_handoffs();
    return plan;
  }

  /// The shards owned by `id`'s current incarnation in the store.
  size_t owned(const std::string& id) {
    return store.owned_by(id, nodes.at(id).incarnation);
  }

  /// Every running node holds exactly the shards the store gives it, at the
  /// store's epochs.
  void check_holdings_match_store() {
    for (auto& [id, node] : nodes) {
      if (!node.running)
        continue;
      std::map<shard_id, uint64_t> owned;
      for (auto& row : store.shard_rows())
        if (row.owner == id && row.owner_incarnation == node.incarnation)
          owned.emplace(row.shard, row.epoch);
      CAF_CHECK(node.held == owned);
    }
  }

  /// The store's owners match the fair assignment among `ids`.
  void check_assignment(const std::vector<std::string>& ids) {
    auto desired = assign_shards(sim_shards, ids);
    for (auto& row : store.shard_rows())
      CAF_CHECK_EQUAL(row.owner, desired[row.shard]);
  }

private:
  using snapshot_t = std::tuple<std::vector<std::string>,
                                std::vector<std::map<shard_id, uint64_t>>>;

  void renew(sim_node& node) {
    auto state = value_of(store.renew(node.id, node.incarnation, sim_ttl));
    if (state == member_state::dead)
      node.running = false; // It would exit; its `held` stays stale.
  }

  void apply(sim_node& node, const cluster_plan& plan) {
    for (auto shard : plan.lost)
      node.held.erase(shard);
    for (auto& x : plan.gained)
      node.held[x.shard] = x.epoch;
    check_fence();
    for (auto& x : plan.transfers) {
      // Stop writing first: the new owner's epoch must find no writer.
      node.held.erase(x.shard);
      value_of(store.transfer(x.shard, x.epoch, node.id, node.incarnation));
      check_fence();
    }
    for (auto& x : plan.stale_handoffs)
      value_of(store.cancel_handoff(x.shard, x.epoch));
    for (auto& m : plan.declare_dead)
      if (value_of(store.declare_dead(m.node_id, m.incarnation)))
        deaths.push_back(m.node_id);
    for (auto& x : plan.claims) {
      auto epoch
        = value_of(store.claim(x.shard, x.epoch, node.id, node.incarnation));
      if (epoch)
        node.held[x.shard] = *epoch;
      check_fence();
    }
    for (auto& x : plan.handoff_requests)
      value_of(store.request_handoff(x.shard, x.epoch, node.id));
  }

  /// The fence invariant: two nodes holding one shard hold it at different
  /// epochs, and only the store's owner can hold it at the store's epoch
  /// (so at most one of them passes the write fence).
  void check_fence() {
    for (auto& row : store.shard_rows()) {
      std::set<uint64_t> epochs;
      size_t holders = 0;
      for (auto& [id, node] : nodes) {
        auto i = node.held.find(row.shard);
        if (i == node.held.end())
          continue;
        ++holders;
        epochs.insert(i->second);
        if (i->second == row.epoch)
          CAF_CHECK(row.owner == node.id
                    && row.owner_incarnation == node.incarnation);
      }
      CAF_CHECK_EQUAL(epochs.size(), holders);
    }
  }

  void check_pending_handoffs() {
    std::map<std::string, size_t> pending;
    for (auto& row : store.shard_rows())
      if (!row.handoff_to.empty())
        max_pending = std::max(max_pending, ++pending[row.handoff_to]);
    CAF_CHECK_LESS_OR_EQUAL(max_pending, sim_batch);
  }

  snapshot_t snapshot() {
    snapshot_t result;
    for (auto& row : store.shard_rows())
      std::get<0>(result).push_back(
        row.owner + "/" + std::to_string(row.owner_incarnation) + "/"
        + std::to_string(row.epoch) + "/" + row.handoff_to);
    for (auto& m : value_of(store.view()).members)
      std::get<0>(result).push_back(m.node_id + "/"
                                    + std::to_string(m.incarnation) + "/"
                                    + to_string(m.state));
    for (auto& [id, node] : nodes)
      std::get<1>(result).push_back(node.held);
    return result;
  }
};

template <class Plans, class Pred>
bool any_plan(const Plans& plans, Pred pred) {
  return std::any_of(plans.begin(), plans.end(), pred);
}

/// A cluster of `ids` that joined one after the other, each settled.
void start_cluster(cluster_sim& sim, const std::vector<std::string>& ids) {
  for (auto& id : ids) {
    sim.join(id);
    sim.settle();
  }
  sim.check_holdings_match_store();
  sim.check_assignment(ids);
}

member make_member(std::string id, uint64_t inc, member_state state,
                   bool expired = false) {
  member m;
  m.node_id = std::move(id);
  m.incarnation = inc;
  m.address = m.node_id + ":4242";
  m.state = state;
  m.lease_expired = expired;
  return m;
}

shard_row make_shard(shard_id shard, std::string owner, uint64_t inc,
                     uint64_t epoch, std::string handoff_to = {}) {
  return shard_row{shard, std::move(owner), inc, epoch, std::move(handoff_to)};
}

} // namespace

// -- the memory store's compare-and-set rules ---------------------------------

CAF_TEST(the store keeps its shard count and names both counts otherwise) {
  memory_cluster_store store;
  CAF_CHECK(!store.prepare(8));
  CAF_CHECK(!store.prepare(8));
  CAF_CHECK_EQUAL(store.shard_rows().size(), 8u);
  auto err = store.prepare(16);
  CAF_CHECK_EQUAL(err, ec::config_invalid);
  auto text = error_message(err);
  CAF_CHECK_NOT_EQUAL(text.find("16"), std::string::npos);
  CAF_CHECK_NOT_EQUAL(text.find("8"), std::string::npos);
}

CAF_TEST(a claim at a wrong epoch or of a live owner shard fails) {
  memory_cluster_store store;
  CAF_REQUIRE(!store.prepare(4));
  auto a = value_of(store.join("a", "a:1", sim_ttl));
  auto b = value_of(store.join("b", "b:1", sim_ttl));
  CAF_CHECK(!value_of(store.claim(0, 1, "a", a)));
  CAF_CHECK(value_of(store.claim(0, 0, "a", a)) == std::optional<uint64_t>{1});
  CAF_CHECK_EQUAL(store.shard(0).owner, "a");
  // The owner lives: no epoch lets another node take the shard.
  CAF_CHECK(!value_of(store.claim(0, 1, "b", b)));
  CAF_CHECK(!value_of(store.claim(0, 0, "b", b)));
  CAF_CHECK_EQUAL(store.shard(0).owner, "a");
  CAF_CHECK_EQUAL(store.shard(0).epoch, 1u);
  // Nor does a stale incarnation claim anything.
  CAF_CHECK(!value_of(store.claim(1, 0, "b", b + 1)));
}

CAF_TEST(only the owner transfers and only to the up node that asked) {
  memory_cluster_store store;
  CAF_REQUIRE(!store.prepare(2));
  auto a = value_of(store.join("a", "a:1", sim_ttl));
  auto b = value_of(store.join("b", "b:1", sim_ttl));
  CAF_REQUIRE(value_of(store.claim(0, 0, "a", a)));
  // Nothing asked yet.
  CAF_CHECK(!value_of(store.transfer(0, 1, "a", a)));
  CAF_CHECK(!value_of(store.request_handoff(0, 1, "a")));
  CAF_CHECK(!value_of(store.request_handoff(0, 0, "b")));
  CAF_CHECK(value_of(store.request_handoff(0, 1, "b")));
  CAF_CHECK(!value_of(store.request_handoff(0, 1, "c")));
  CAF_CHECK(!value_of(store.transfer(0, 1, "b", b)));
  CAF_CHECK(!value_of(store.transfer(0, 1, "a", a + 1)));
  CAF_CHECK(!value_of(store.transfer(0, 0, "a", a)));
  CAF_CHECK_EQUAL(store.shard(0).owner, "a");
  CAF_CHECK(value_of(store.transfer(0, 1, "a", a))
            == std::optional<uint64_t>{2});
  auto row = store.shard(0);
  CAF_CHECK_EQUAL(row.owner, "b");
  CAF_CHECK_EQUAL(row.owner_incarnation, b);
  CAF_CHECK_EQUAL(row.epoch, 2u);
  CAF_CHECK(row.handoff_to.empty());
}

CAF_TEST(a transfer to a node whose lease ran out fails) {
  memory_cluster_store store;
  CAF_REQUIRE(!store.prepare(1));
  auto a = value_of(store.join("a", "a:1", sim_ttl));
  value_of(store.join("b", "b:1", sim_ttl));
  CAF_REQUIRE(value_of(store.claim(0, 0, "a", a)));
  CAF_REQUIRE(value_of(store.request_handoff(0, 1, "b")));
  store.advance(sim_ttl + 1s);
  CAF_CHECK_EQUAL(value_of(store.renew("a", a, sim_ttl)), member_state::up);
  CAF_CHECK(!value_of(store.transfer(0, 1, "a", a)));
  CAF_CHECK(!value_of(store.cancel_handoff(0, 0)));
  CAF_CHECK(value_of(store.cancel_handoff(0, 1)));
  CAF_CHECK(!value_of(store.cancel_handoff(0, 1)));
  CAF_CHECK_EQUAL(store.shard(0).owner, "a");
}

CAF_TEST(a node declared dead renews as dead and cannot act) {
  memory_cluster_store store;
  CAF_REQUIRE(!store.prepare(1));
  auto a = value_of(store.join("a", "a:1", sim_ttl));
  CAF_CHECK(value_of(store.declare_dead("a", a)));
  CAF_CHECK(!value_of(store.declare_dead("a", a)));
  CAF_CHECK_EQUAL(value_of(store.renew("a", a, sim_ttl)), member_state::dead);
  CAF_CHECK(!value_of(store.set_state("a", member_state::up)));
  CAF_CHECK(!value_of(store.claim(0, 0, "a", a)));
  CAF_CHECK(!value_of(store.leave("a", a)));
  auto row = store.member_of("a");
  CAF_REQUIRE(row);
  CAF_CHECK_EQUAL(row->info.state, member_state::dead);
}

CAF_TEST(a rejoin is a higher incarnation and orphans the old shards) {
  memory_cluster_store store;
  CAF_REQUIRE(!store.prepare(2));
  auto first = value_of(store.join("a", "a:1", sim_ttl));
  CAF_REQUIRE(value_of(store.claim(0, 0, "a", first)));
  auto second = value_of(store.join("a", "a:1", sim_ttl));
  CAF_CHECK_GREATER(second, first);
  CAF_CHECK_EQUAL(value_of(store.renew("a", first, sim_ttl)),
                  member_state::dead);
  CAF_CHECK(!value_of(store.declare_dead("a", first)));
  // The old incarnation may no longer hand its shard over ...
  value_of(store.join("b", "b:1", sim_ttl));
  CAF_REQUIRE(value_of(store.request_handoff(0, 1, "b")));
  CAF_CHECK(!value_of(store.transfer(0, 1, "a", first)));
  // ... the shard is an orphan: the policy plans to claim it, and it can.
  auto view = value_of(store.view());
  cluster_self self{"a", second, {}};
  auto desired = assign_shards(2, {"a", "b"});
  auto plan = plan_cluster(view, self, sim_batch);
  auto claims_shard_0
    = std::any_of(plan.claims.begin(), plan.claims.end(),
                  [](const shard_claim& x) { return x.shard == 0; });
  CAF_CHECK_EQUAL(claims_shard_0, desired[0] == "a");
  CAF_CHECK(plan.gained.empty());
  auto claimer = desired[0];
  auto inc = claimer == "a" ? second : store.member_of("b")->info.incarnation;
  CAF_CHECK(value_of(store.claim(0, 1, claimer, inc))
            == std::optional<uint64_t>{2});
}

CAF_TEST(vanished names the nodes whose session ended) {
  memory_cluster_store store;
  CAF_REQUIRE(!store.prepare(1));
  value_of(store.join("a", "a:1", sim_ttl));
  value_of(store.join("b", "b:1", sim_ttl));
  CAF_CHECK(value_of(store.vanished({"a", "b"})).empty());
  store.end_session("b");
  CAF_CHECK(value_of(store.vanished({"a", "b"}))
            == std::vector<std::string>{"b"});
  CAF_CHECK(value_of(store.vanished({"never-joined"}))
            == std::vector<std::string>{"never-joined"});
}

CAF_TEST(states move between up and draining and leave needs no shards) {
  memory_cluster_store store;
  CAF_REQUIRE(!store.prepare(1));
  auto a = value_of(store.join("a", "a:1", sim_ttl));
  CAF_REQUIRE(value_of(store.claim(0, 0, "a", a)));
  CAF_CHECK(value_of(store.set_state("a", member_state::draining)));
  CAF_CHECK_EQUAL(value_of(store.renew("a", a, sim_ttl)),
                  member_state::draining);
  CAF_CHECK(!value_of(store.set_state("a", member_state::left)));
  CAF_CHECK(!value_of(store.set_state("nobody", member_state::up)));
  CAF_CHECK(!value_of(store.leave("a", a)));
  auto b = value_of(store.join("b", "b:1", sim_ttl));
  CAF_REQUIRE(value_of(store.request_handoff(0, 1, "b")));
  CAF_REQUIRE(value_of(store.transfer(0, 1, "a", a)));
  CAF_CHECK(value_of(store.leave("a", a)));
  CAF_CHECK_EQUAL(value_of(store.renew("a", a, sim_ttl)), member_state::left);
  CAF_CHECK_EQUAL(store.owned_by("b", b), 1u);
}

// -- plans from views built by hand -------------------------------------------

CAF_TEST(candidates are up members with a lease and self while up) {
  cluster_view view;
  view.members = {make_member("a", 1, member_state::up),
                  make_member("b", 1, member_state::up, true),
                  make_member("c", 1, member_state::draining),
                  make_member("d", 1, member_state::dead),
                  make_member("e", 1, member_state::left)};
  CAF_CHECK(candidate_owners(view, "x") == std::vector<std::string>{"a"});
  CAF_CHECK(candidate_owners(view, "b")
            == (std::vector<std::string>{"a", "b"}));
  CAF_CHECK(candidate_owners(view, "c") == std::vector<std::string>{"a"});
}

CAF_TEST(a node loses shards the view gives to another owner or incarnation) {
  cluster_view view;
  view.members = {make_member("a", 2, member_state::up),
                  make_member("b", 1, member_state::up)};
  view.shards = {make_shard(0, "a", 2, 5), make_shard(1, "b", 1, 3),
                 make_shard(2, "a", 1, 4), make_shard(3, "a", 2, 9)};
  cluster_self self{"a", 2, {0, 1, 2}};
  auto plan = plan_cluster(view, self, sim_batch);
  CAF_CHECK(plan.lost == (std::vector<shard_id>{1, 2}));
  CAF_REQUIRE_EQUAL(plan.gained.size(), 1u);
  CAF_CHECK_EQUAL(plan.gained[0].shard, 3u);
  CAF_CHECK_EQUAL(plan.gained[0].epoch, 9u);
}

CAF_TEST(a node that is not live loses everything and does nothing else) {
  for (auto state : {member_state::dead, member_state::left}) {
    cluster_view view;
    view.members = {make_member("a", 1, state),
                    make_member("b", 1, member_state::up, true)};
    view.shards = {make_shard(0, "a", 1, 1), make_shard(1, "", 0, 0, "a")};
    auto plan = plan_cluster(view, cluster_self{"a", 1, {0}}, sim_batch);
    CAF_CHECK(plan.lost == std::vector<shard_id>{0});
    CAF_CHECK(plan.declare_dead.empty());
    CAF_CHECK(plan.claims.empty());
    CAF_CHECK(plan.gained.empty());
    CAF_CHECK(plan.stale_handoffs.empty());
  }
  // A newer incarnation of the same node joined: the old one is done too.
  cluster_view view;
  view.members = {make_member("a", 2, member_state::up)};
  view.shards = {make_shard(0, "a", 1, 1)};
  auto plan = plan_cluster(view, cluster_self{"a", 1, {0}}, sim_batch);
  CAF_CHECK(plan.lost == std::vector<shard_id>{0});
  CAF_CHECK(plan.claims.empty());
}

CAF_TEST(handoff requests fill the batch minus those already pending) {
  cluster_view view;
  view.members = {make_member("a", 1, member_state::up),
                  make_member("b", 1, member_state::up)};
  auto desired = assign_shards(sim_shards, {"a", "b"});
  for (shard_id shard = 0; shard < sim_shards; ++shard)
    view.shards.push_back(make_shard(shard, "a", 1, 1));
  std::vector<shard_id> mine;
  for (shard_id shard = 0; shard < sim_shards; ++shard)
    if (desired[shard] == "b")
      mine.push_back(shard);
  CAF_REQUIRE_GREATER(mine.size(), 3u);
  view.shards[mine[2]].handoff_to = "b";
  auto plan = plan_cluster(view, cluster_self{"b", 1, {}}, 3);
  CAF_CHECK(plan.claims.empty());
  CAF_REQUIRE_EQUAL(plan.handoff_requests.size(), 2u);
  CAF_CHECK_EQUAL(plan.handoff_requests[0].shard, mine[0]);
  CAF_CHECK_EQUAL(plan.handoff_requests[1].shard, mine[1]);
  // A draining node asks for nothing.
  view.members[1].state = member_state::draining;
  CAF_CHECK(
    plan_cluster(view, cluster_self{"b", 1, {}}, 3).handoff_requests.empty());
}

// -- the cluster simulation ---------------------------------------------------

CAF_TEST(a single node claims every shard and then rests) {
  cluster_sim sim;
  sim.join("a");
  auto plan = sim.step(sim.nodes.at("a"));
  CAF_CHECK_EQUAL(plan.claims.size(), sim_shards);
  CAF_CHECK_EQUAL(sim.owned("a"), sim_shards);
  CAF_CHECK_EQUAL(sim.nodes.at("a").held.size(), sim_shards);
  sim.check_holdings_match_store();
  CAF_CHECK_EQUAL(sim.settle(), 1u);
  for (auto& row : sim.store.shard_rows())
    CAF_CHECK_EQUAL(row.epoch, 1u);
}

CAF_TEST(a joining node gets its fair share by handoffs in batches) {
  cluster_sim sim;
  start_cluster(sim, {"a"});
  sim.join("b");
  auto rounds = sim.settle();
  CAF_MESSAGE("b got its share in " << rounds << " rounds");
  sim.check_holdings_match_store();
  sim.check_assignment({"a", "b"});
  CAF_CHECK_EQUAL(sim.owned("a"), sim_shards / 2);
  CAF_CHECK_EQUAL(sim.owned("b"), sim_shards / 2);
  CAF_CHECK_EQUAL(sim.max_pending, sim_batch);
  CAF_CHECK_GREATER_OR_EQUAL(rounds, sim_shards / 2 / sim_batch);
  // b never claimed: every shard had a live owner.
  CAF_CHECK(!any_plan(sim.plans["b"],
                      [](const cluster_plan& p) { return !p.claims.empty(); }));
  sim.join("c");
  sim.settle();
  sim.check_holdings_match_store();
  sim.check_assignment({"a", "b", "c"});
  for (auto id : {"a", "b", "c"}) {
    CAF_CHECK_GREATER_OR_EQUAL(sim.owned(id), sim_shards / 3);
    CAF_CHECK_LESS_OR_EQUAL(sim.owned(id), sim_shards / 3 + 1);
  }
  CAF_CHECK(sim.deaths.empty());
}

CAF_TEST(an expired lease leads to a death and claims by the survivors) {
  cluster_sim sim;
  start_cluster(sim, {"a", "b", "c"});
  auto& c = sim.nodes.at("c");
  auto c_shards = c.held;
  c.running = false;
  for (int i = 0; i < 10; ++i)
    sim.round();
  CAF_CHECK(sim.deaths.empty());
  sim.settle();
  CAF_CHECK(sim.deaths == std::vector<std::string>{"c"});
  auto c_row = sim.store.member_of("c");
  CAF_REQUIRE(c_row);
  CAF_CHECK_EQUAL(c_row->info.state, member_state::dead);
  sim.check_holdings_match_store();
  sim.check_assignment({"a", "b"});
  CAF_CHECK_EQUAL(sim.owned("a") + sim.owned("b"), sim_shards);
  // Every shard c held moved on by a claim at a higher epoch.
  for (auto& [shard, epoch] : c_shards)
    CAF_CHECK_GREATER(sim.store.shard(shard).epoch, epoch);
  CAF_CHECK_EQUAL(value_of(sim.store.renew("c", c.incarnation, sim_ttl)),
                  member_state::dead);
}

CAF_TEST(a recent store declares nobody dead) {
  cluster_sim sim;
  start_cluster(sim, {"a", "b"});
  sim.nodes.at("b").running = false;
  sim.store.set_store_recent(true);
  auto plans_before = sim.plans["a"].size();
  for (int i = 0; i < 30; ++i)
    sim.round();
  CAF_CHECK(sim.deaths.empty());
  CAF_CHECK_EQUAL(sim.owned("b"), sim_shards / 2);
  std::vector<cluster_plan> recent_plans(sim.plans["a"].begin() + plans_before,
                                         sim.plans["a"].end());
  CAF_CHECK(!any_plan(recent_plans, [](const cluster_plan& p) {
    return !p.declare_dead.empty() || !p.claims.empty();
  }));
  sim.store.set_store_recent(false);
  sim.settle();
  CAF_CHECK(sim.deaths == std::vector<std::string>{"b"});
  CAF_CHECK_EQUAL(sim.owned("a"), sim_shards);
}

CAF_TEST(a draining node hands every shard away and can leave) {
  cluster_sim sim;
  start_cluster(sim, {"a", "b", "c"});
  CAF_REQUIRE(value_of(sim.store.set_state("c", member_state::draining)));
  auto plans_before = sim.plans["c"].size();
  sim.settle();
  auto& c = sim.nodes.at("c");
  CAF_CHECK_EQUAL(sim.owned("c"), 0u);
  CAF_CHECK(c.held.empty());
  sim.check_holdings_match_store();
  sim.check_assignment({"a", "b"});
  std::vector<cluster_plan> draining_plans(
    sim.plans["c"].begin() + plans_before, sim.plans["c"].end());
  CAF_CHECK(!any_plan(draining_plans, [](const cluster_plan& p) {
    return !p.claims.empty() || !p.handoff_requests.empty();
  }));
  CAF_CHECK(any_plan(draining_plans, [](const cluster_plan& p) {
    return !p.transfers.empty();
  }));
  CAF_CHECK(value_of(sim.store.leave("c", c.incarnation)));
  CAF_CHECK(sim.deaths.empty());
}

CAF_TEST(a handoff to a node that died is cleared and never carried out) {
  cluster_sim sim;
  start_cluster(sim, {"a"});
  auto& b = sim.join("b");
  sim.step(b);
  std::vector<shard_id> asked;
  for (auto& row : sim.store.shard_rows())
    if (row.handoff_to == "b")
      asked.push_back(row.shard);
  CAF_CHECK_EQUAL(asked.size(), sim_batch);
  b.running = false;
  sim.store.advance(sim_ttl + 1s);
  auto plan = sim.step(sim.nodes.at("a"));
  CAF_CHECK(plan.transfers.empty());
  CAF_CHECK_EQUAL(plan.stale_handoffs.size(), sim_batch);
  CAF_REQUIRE_EQUAL(plan.declare_dead.size(), 1u);
  CAF_CHECK_EQUAL(plan.declare_dead[0].node_id, "b");
  for (auto& row : sim.store.shard_rows()) {
    CAF_CHECK(row.handoff_to.empty());
    CAF_CHECK_EQUAL(row.owner, "a");
  }
  sim.settle();
  CAF_CHECK_EQUAL(sim.owned("a"), sim_shards);
}

CAF_TEST(a node that rejoins gets its share back without a double holder) {
  cluster_sim sim;
  start_cluster(sim, {"a", "b"});
  // b restarts: a new incarnation; the old one's shards are orphans at once
  // (no lease to wait for), and the fence check runs on every claim.
  auto old_b = sim.nodes.at("b");
  old_b.running = false; // The old process, still holding its shards.
  sim.nodes.emplace("b (old incarnation)", old_b);
  auto old_incarnation = old_b.incarnation;
  sim.join("b");
  CAF_CHECK_GREATER(sim.nodes.at("b").incarnation, old_incarnation);
  sim.settle();
  sim.check_holdings_match_store();
  sim.check_assignment({"a", "b"});
  CAF_CHECK(sim.deaths.empty());
  CAF_CHECK(any_plan(sim.plans["b"],
                     [](const cluster_plan& p) { return !p.claims.empty(); }));
}
