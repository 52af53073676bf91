#include "keel/cluster_policy.hpp"

#include <algorithm>

#include "keel/sharding.hpp"

namespace keel {

namespace {

bool is_live_state(member_state state) {
  return state == member_state::up || state == member_state::draining;
}

/// Up with a lease the store still counts: may receive shards.
bool is_serving(const member& m) {
  return m.state == member_state::up && !m.lease_expired;
}

/// The facts of one view the decisions below share.
class view_facts {
public:
  view_facts(const cluster_view& view, const cluster_self& self)
    : view_(view), self_(self) {
    for (auto& m : view.members)
      if (m.node_id == self.node_id && m.incarnation == self.incarnation)
        self_row_ = &m;
  }

  /// Our incarnation is up or draining: we may act at all.
  bool self_live() const {
    return self_row_ != nullptr && is_live_state(self_row_->state);
  }

  /// Our incarnation is up: we may take shards.
  bool self_up() const {
    return self_row_ != nullptr && self_row_->state == member_state::up;
  }

  /// The view gives `row` to our incarnation.
  bool owned_by_self(const shard_row& row) const {
    return row.owner == self_.node_id
           && row.owner_incarnation == self_.incarnation;
  }

  /// No live incarnation owns `row`: the owner is empty, or its incarnation
  /// is dead, left or replaced by a newer one.
  bool orphan(const shard_row& row) const {
    if (row.owner.empty())
      return true;
    return std::none_of(view_.members.begin(), view_.members.end(),
                        [&](const member& m) {
                          return m.node_id == row.owner
                                 && m.incarnation == row.owner_incarnation
                                 && is_live_state(m.state);
                        });
  }

  /// `node` is up with a valid lease (whatever its incarnation).
  bool serving(const std::string& node) const {
    return std::any_of(view_.members.begin(), view_.members.end(),
                       [&](const member& m) {
                         return m.node_id == node && is_serving(m);
                       });
  }

private:
  const cluster_view& view_;
  const cluster_self& self_;
  const member* self_row_ = nullptr;
};

bool holds(const cluster_self& self, shard_id shard) {
  return std::find(self.held.begin(), self.held.end(), shard)
         != self.held.end();
}

std::vector<member> expired_members(const cluster_view& view,
                                    const cluster_self& self) {
  std::vector<member> result;
  if (view.store_recent)
    return result;
  for (auto& m : view.members)
    if (m.node_id != self.node_id && is_live_state(m.state) && m.lease_expired)
      result.push_back(m);
  return result;
}

void plan_takeovers(const cluster_view& view, const cluster_self& self,
                    const view_facts& facts, uint32_t batch,
                    cluster_plan& plan) {
  auto desired = assign_shards(static_cast<uint32_t>(view.shards.size()),
                               candidate_owners(view, self.node_id));
  auto wanted = [&](const shard_row& row) {
    return row.shard < desired.size() && desired[row.shard] == self.node_id;
  };
  auto pending = static_cast<uint32_t>(std::count_if(
    view.shards.begin(), view.shards.end(),
    [&](const shard_row& row) { return row.handoff_to == self.node_id; }));
  uint32_t budget = batch > pending ? batch - pending : 0;
  for (auto& row : view.shards) {
    if (!wanted(row) || facts.owned_by_self(row))
      continue;
    if (facts.orphan(row)) {
      plan.claims.push_back({row.shard, row.epoch});
    } else if (row.owner != self.node_id && row.handoff_to.empty()
               && budget > 0) {
      plan.handoff_requests.push_back({row.shard, row.epoch});
      --budget;
    }
  }
}

void plan_own_shards(const cluster_view& view, const cluster_self& self,
                     const view_facts& facts, cluster_plan& plan) {
  for (auto& row : view.shards) {
    if (!facts.owned_by_self(row))
      continue;
    if (!holds(self, row.shard))
      plan.gained.push_back({row.shard, row.epoch});
    if (row.handoff_to.empty())
      continue;
    if (row.handoff_to != self.node_id && facts.serving(row.handoff_to))
      plan.transfers.push_back({row.shard, row.epoch, row.handoff_to});
    else
      plan.stale_handoffs.push_back({row.shard, row.epoch});
  }
}

std::vector<shard_id> lost_shards(const cluster_view& view,
                                  const cluster_self& self,
                                  const view_facts& facts) {
  if (!facts.self_live())
    return self.held;
  std::vector<shard_id> result;
  for (auto shard : self.held) {
    auto row
      = std::find_if(view.shards.begin(), view.shards.end(),
                     [&](const shard_row& x) { return x.shard == shard; });
    if (row == view.shards.end() || !facts.owned_by_self(*row))
      result.push_back(shard);
  }
  return result;
}

} // namespace

std::vector<std::string> candidate_owners(const cluster_view& view,
                                          const std::string& me) {
  std::vector<std::string> result;
  for (auto& m : view.members)
    if (is_serving(m) || (m.node_id == me && m.state == member_state::up))
      result.push_back(m.node_id);
  std::sort(result.begin(), result.end());
  result.erase(std::unique(result.begin(), result.end()), result.end());
  return result;
}

cluster_plan plan_cluster(const cluster_view& view, const cluster_self& self,
                          uint32_t batch) {
  cluster_plan plan;
  view_facts facts{view, self};
  plan.lost = lost_shards(view, self, facts);
  if (!facts.self_live())
    return plan;
  plan.declare_dead = expired_members(view, self);
  if (facts.self_up())
    plan_takeovers(view, self, facts, batch, plan);
  plan_own_shards(view, self, facts, plan);
  return plan;
}

} // namespace keel
