#pragma once

// The cluster store (`keel/cluster_store.hpp`) in memory, for tests of the
// cluster policy and the cluster actor: the same compare-and-set rules as
// the PostgreSQL store, on a clock the test moves by hand. One row per node
// (a rejoin replaces it with the new incarnation), one row per shard.
//
// The rules every change checks, as the interface documents them:
//   - an orphan is a shard that is unowned, or whose owner's incarnation is
//     not the node's live (up or draining) one: dead, left or replaced;
//   - claim: an orphan still at `epoch`, claimed by a live incarnation;
//   - request_handoff: at `epoch`, no handoff pending, asked by another
//     node than the owner;
//   - transfer: by the owner's live incarnation at `epoch`, to the node that
//     asked, which must be up with a valid lease;
//   - every change of owner bumps the epoch and clears the handoff.

#include <algorithm>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <caf/timespan.hpp>

#include "keel/cluster_store.hpp"
#include "keel/error.hpp"

namespace keel {

class memory_cluster_store : public cluster_store {
public:
  /// One membership row with what the view does not show.
  struct member_row {
    member info;
    /// The lease runs out when the clock passes it.
    caf::timespan lease_until{0};
    caf::timespan renewed_at{0};
    /// The node's liveness lock is held (its store session lives).
    bool session = false;
  };

  // -- what tests drive -------------------------------------------------------

  /// Moves the store's clock; leases expire once it passes them.
  void advance(caf::timespan dt) {
    now_ += dt;
  }

  caf::timespan now() const {
    return now_;
  }

  /// Ends `node`'s store session: its liveness lock is free (`vanished`).
  void end_session(const std::string& node) {
    if (auto row = find_member(node))
      row->session = false;
  }

  /// See `cluster_view::store_recent`.
  void set_store_recent(bool value) {
    store_recent_ = value;
  }

  // -- what tests check -------------------------------------------------------

  const std::vector<shard_row>& shard_rows() const {
    return shards_;
  }

  const shard_row& shard(shard_id id) const {
    return shards_.at(id);
  }

  /// The row of `node`, if it ever joined.
  std::optional<member_row> member_of(const std::string& node) const {
    auto i = members_.find(node);
    if (i == members_.end())
      return std::nullopt;
    return i->second;
  }

  /// How many shards `node`'s incarnation `inc` owns.
  size_t owned_by(const std::string& node, uint64_t inc) const {
    return static_cast<size_t>(
      std::count_if(shards_.begin(), shards_.end(), [&](const shard_row& x) {
        return x.owner == node && x.owner_incarnation == inc;
      }));
  }

  // -- cluster_store ----------------------------------------------------------

  caf::error prepare(uint32_t shards) override {
    if (shards == 0)
      return caf::make_error(ec::config_invalid,
                             "cluster.shards: must be at least 1");
    if (shards_.empty()) {
      for (shard_id id = 0; id < shards; ++id)
        shards_.push_back(shard_row{id, {}, 0, 0, {}});
      return caf::none;
    }
    if (shards_.size() != shards)
      return caf::make_error(
        ec::config_invalid, "cluster.shards: configured "
                              + std::to_string(shards) + " but the cluster has "
                              + std::to_string(shards_.size()));
    return caf::none;
  }

  caf::expected<uint64_t> join(const std::string& node,
                               const std::string& address,
                               caf::timespan ttl) override {
    auto inc = ++last_incarnation_[node];
    member_row row;
    row.info.node_id = node;
    row.info.incarnation = inc;
    row.info.address = address;
    row.info.state = member_state::up;
    row.lease_until = now_ + ttl;
    row.renewed_at = now_;
    row.session = true;
    members_[node] = std::move(row);
    return inc;
  }

  caf::expected<member_state> renew(const std::string& node, uint64_t inc,
                                    caf::timespan ttl) override {
    auto row = find_member(node);
    if (row == nullptr || row->info.incarnation != inc
        || row->info.state == member_state::dead)
      return member_state::dead;
    if (row->info.state == member_state::left)
      return member_state::left;
    row->lease_until = now_ + ttl;
    row->renewed_at = now_;
    return row->info.state;
  }

  caf::expected<cluster_view> view() override {
    cluster_view result;
    for (auto& [node, row] : members_) {
      auto m = row.info;
      m.lease_expired = now_ > row.lease_until;
      m.since_renewal = std::chrono::duration_cast<std::chrono::milliseconds>(
        now_ - row.renewed_at);
      result.members.push_back(std::move(m));
    }
    result.shards = shards_;
    result.store_recent = store_recent_;
    return result;
  }

  caf::expected<bool> declare_dead(const std::string& node,
                                   uint64_t inc) override {
    auto row = find_member(node);
    if (row == nullptr || row->info.incarnation != inc
        || !is_live(row->info.state))
      return false;
    row->info.state = member_state::dead;
    return true;
  }

  caf::expected<std::vector<std::string>>
  vanished(const std::vector<std::string>& nodes) override {
    std::vector<std::string> result;
    for (auto& node : nodes) {
      auto row = find_member(node);
      if (row == nullptr || !row->session)
        result.push_back(node);
    }
    return result;
  }

  caf::expected<std::optional<uint64_t>> claim(shard_id shard, uint64_t epoch,
                                               const std::string& node,
                                               uint64_t inc) override {
    auto row = find_shard(shard);
    if (row == nullptr || row->epoch != epoch || !orphan(*row)
        || !live_incarnation(node, inc))
      return std::optional<uint64_t>{};
    change_owner(*row, node, inc);
    return std::optional<uint64_t>{row->epoch};
  }

  caf::expected<bool> request_handoff(shard_id shard, uint64_t epoch,
                                      const std::string& node) override {
    auto row = find_shard(shard);
    if (row == nullptr || row->epoch != epoch || !row->handoff_to.empty()
        || row->owner == node)
      return false;
    row->handoff_to = node;
    return true;
  }

  caf::expected<bool> cancel_handoff(shard_id shard, uint64_t epoch) override {
    auto row = find_shard(shard);
    if (row == nullptr || row->epoch != epoch || row->handoff_to.empty())
      return false;
    row->handoff_to.clear();
    return true;
  }

  caf::expected<std::optional<uint64_t>>
  transfer(shard_id shard, uint64_t epoch, const std::string& node,
           uint64_t inc) override {
    auto row = find_shard(shard);
    if (row == nullptr || row->epoch != epoch || row->owner != node
        || row->owner_incarnation != inc || !live_incarnation(node, inc)
        || row->handoff_to.empty())
      return std::optional<uint64_t>{};
    auto target = find_member(row->handoff_to);
    if (target == nullptr || target->info.state != member_state::up
        || now_ > target->lease_until)
      return std::optional<uint64_t>{};
    change_owner(*row, target->info.node_id, target->info.incarnation);
    return std::optional<uint64_t>{row->epoch};
  }

  caf::expected<bool> set_state(const std::string& node,
                                member_state state) override {
    auto row = find_member(node);
    if (row == nullptr || !is_live(row->info.state) || !is_live(state))
      return false;
    row->info.state = state;
    return true;
  }

  caf::expected<bool> leave(const std::string& node, uint64_t inc) override {
    if (!live_incarnation(node, inc) || owned_by(node, inc) > 0)
      return false;
    find_member(node)->info.state = member_state::left;
    return true;
  }

private:
  static bool is_live(member_state state) {
    return state == member_state::up || state == member_state::draining;
  }

  member_row* find_member(const std::string& node) {
    auto i = members_.find(node);
    return i == members_.end() ? nullptr : &i->second;
  }

  shard_row* find_shard(shard_id shard) {
    return shard < shards_.size() ? &shards_[shard] : nullptr;
  }

  bool live_incarnation(const std::string& node, uint64_t inc) {
    auto row = find_member(node);
    return row != nullptr && row->info.incarnation == inc
           && is_live(row->info.state);
  }

  bool orphan(const shard_row& row) {
    return row.owner.empty()
           || !live_incarnation(row.owner, row.owner_incarnation);
  }

  static void change_owner(shard_row& row, const std::string& node,
                           uint64_t inc) {
    row.owner = node;
    row.owner_incarnation = inc;
    row.handoff_to.clear();
    ++row.epoch;
  }

  caf::timespan now_{0};
  bool store_recent_ = false;
  std::map<std::string, member_row> members_;
  std::map<std::string, uint64_t> last_incarnation_;
  std::vector<shard_row> shards_;
};

} // namespace keel
