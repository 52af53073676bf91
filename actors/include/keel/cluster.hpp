#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <set>
#include <string>

#include <caf/typed_event_based_actor.hpp>

#include "keel/actors.hpp"
#include "keel/cluster_policy.hpp"
#include "keel/cluster_store.hpp"
#include "keel/config.hpp"
#include "keel/shard_table.hpp"

namespace keel {

/// Opens a connection to the cluster store.
using cluster_store_opener
  = std::function<caf::expected<std::unique_ptr<cluster_store>>()>;

/// Configuration of the cluster actor.
struct cluster_actor_config {
  cluster_config cluster;
  cluster_store_opener open_store;
  /// The node's shard table (also read by the store's fence, the
  /// orchestrator and the peers actor).
  std::shared_ptr<shard_table> shards;
  /// Called once this node finds itself declared dead (or replaced by a
  /// newer incarnation): it must stop serving at once. The node exits the
  /// process with code 75 so that its service manager restarts it.
  std::function<void(const std::string& why)> declared_dead;
};

/// State of the cluster actor: one round every heartbeat (`tick`).
struct cluster_state {
  using self_ptr = cluster_actor::stateful_pointer<cluster_state>;
  using steady = std::chrono::steady_clock;

  static inline const char* name = "keel.cluster";

  explicit cluster_state(self_ptr self);

  self_ptr self;
  cluster_actor_config cfg;
  std::unique_ptr<cluster_store> db;
  /// 0 until joined.
  uint64_t incarnation = 0;
  /// When the last successful renewal was sent: the lease runs out one
  /// `lease_ttl` after it at the latest, whatever the store's clock says.
  steady::time_point renewed{};
  /// Since when renewing has worked without a break: until it has for a
  /// lease, this node declares nobody dead (after a database outage the
  /// others need that long to renew again).
  steady::time_point connected_since{};
  /// True while renewing fails (it failed last time).
  bool disconnected = true;
  /// True while the node stopped serving because it could not renew.
  bool self_fenced = false;
  /// Shards released locally whose transfer is under way.
  std::set<shard_id> handing_over;
  /// The last view read, for the status page.
  cluster_view last_view;
  member_state own_state = member_state::up;
  cluster_status counters;

  /// One round: join if needed, renew the lease, read the tables, act.
  void tick();

  /// The status page's figures.
  cluster_status status() const;

  /// Sets `node` draining; refuses the last up member unless `force`.
  caf::result<std::string> drain(const std::string& node, bool force);

  /// Clean stop: leaves the membership if it owns no shard.
  void leave();

private:
  bool ensure_joined();
  bool renew();
  void fence_self(const std::string& why);
  /// Declares dead the members whose lease ran out or whose store session
  /// ended; true if it declared any.
  bool bury(const cluster_view& view);
  void act(const cluster_view& view);
  void claim(const std::vector<shard_claim>& claims,
             std::vector<uint32_t>& gained);
  void hand_over(const shard_transfer& transfer);
  void finish_handover(const shard_transfer& transfer);
  void publish_owners(const cluster_view& view);
  void recover(std::vector<uint32_t> shards);
  void release(std::vector<uint32_t> shards);
};

/// Keeps the node in the cluster: see `cluster_actor`.
cluster_actor::behavior_type
cluster(cluster_actor::stateful_pointer<cluster_state> self,
        cluster_actor_config cfg);

} // namespace keel
