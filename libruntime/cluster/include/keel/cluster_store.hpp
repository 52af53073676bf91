#pragma once

// The cluster's shared state, kept where the data lives (PostgreSQL): the
// members with their leases, and one row per shard naming its owner and
// ownership epoch. Every change is a compare-and-set on that state, so
// nodes never need to agree among themselves: the store decides.
//
// Safety does not rest on this interface's views (they may be stale): it
// rests on the epoch, which every change of owner bumps and which the
// store's write fence checks inside every data transaction.

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <caf/timespan.hpp>

#include "keel/error.hpp"
#include "keel/sharding.hpp"

namespace keel {

/// A member's state in the membership table.
enum class member_state : uint8_t {
  /// Serving; a candidate owner of shards.
  up,
  /// Handing its shards away (`keelctl drain`); its gateway still serves.
  draining,
  /// Declared dead (its lease ran out, or its store session ended): its
  /// shards are orphans. Final for that incarnation: it must exit.
  dead,
  /// Stopped cleanly after handing every shard away.
  left,
};

/// "up", "draining", "dead", "left".
const char* to_string(member_state x);

/// One row of the membership table.
struct member {
  std::string node_id;
  /// Increases each time the node (re)joins.
  uint64_t incarnation = 0;
  /// host:port of its middleman.
  std::string address;
  member_state state = member_state::up;
  /// By the store's clock: the lease ran out.
  bool lease_expired = false;
  /// How long ago (store's clock) the lease was last renewed.
  std::chrono::milliseconds since_renewal{0};
};

/// One row of the shard table.
struct shard_row {
  shard_id shard = 0;
  /// Empty if unowned.
  std::string owner;
  uint64_t owner_incarnation = 0;
  uint64_t epoch = 0;
  /// A node that asked for the shard (rebalance, drain); empty if none.
  std::string handoff_to;
};

/// Everything the cluster policy decides on.
struct cluster_view {
  std::vector<member> members;
  /// Every shard, ascending.
  std::vector<shard_row> shards;
  /// The store (re)started less than a lease ago: an expired lease then
  /// proves nothing (nobody could renew while it was down).
  bool store_recent = false;
};

/// The cluster store. Not thread-safe: one owner (the cluster actor).
class cluster_store {
public:
  virtual ~cluster_store();

  /// Creates the cluster's tables with `shards` unowned shards, or checks
  /// that the existing cluster has that many; a mismatch fails with
  /// `ec::config_invalid` naming both counts.
  virtual caf::error prepare(uint32_t shards) = 0;

  /// Joins (or rejoins) as a new incarnation in state `up` with a lease of
  /// `ttl`; returns the incarnation. Also takes the node's liveness lock,
  /// held as long as this store's session lives (see `vanished`).
  virtual caf::expected<uint64_t>
  join(const std::string& node, const std::string& address, caf::timespan ttl)
    = 0;

  /// Renews the lease of `node`'s incarnation `inc` to `ttl` from now;
  /// returns its state, or `dead` if it was declared dead or a newer
  /// incarnation joined (the caller must stop serving and exit).
  virtual caf::expected<member_state>
  renew(const std::string& node, uint64_t inc, caf::timespan ttl) = 0;

  /// Reads members and shards.
  virtual caf::expected<cluster_view> view() = 0;

  /// Declares `node`'s incarnation `inc` dead unless it already is (or a
  /// newer incarnation joined); true if this call did it.
  virtual caf::expected<bool>
  declare_dead(const std::string& node, uint64_t inc) = 0;

  /// Of `nodes`, those whose liveness lock is free: their store session
  /// ended (the process died), long before their lease runs out.
  virtual caf::expected<std::vector<std::string>>
  vanished(const std::vector<std::string>& nodes) = 0;

  /// Claims an orphan `shard` (unowned, or its owner's incarnation is
  /// dead) that is still at `epoch`: owner := `node`/`inc`, epoch + 1,
  /// handoff cleared. Returns the new epoch; none if the shard changed or
  /// its owner lives (never steals from a live owner).
  virtual caf::expected<std::optional<uint64_t>>
  claim(shard_id shard, uint64_t epoch, const std::string& node, uint64_t inc)
    = 0;

  /// Asks for `shard` (at `epoch`) to be handed to `node`; false if it
  /// changed or another handoff is pending.
  virtual caf::expected<bool>
  request_handoff(shard_id shard, uint64_t epoch, const std::string& node) = 0;

  /// Clears a pending handoff of `shard` at `epoch`.
  virtual caf::expected<bool> cancel_handoff(shard_id shard, uint64_t epoch)
    = 0;

  /// The owner (`node`/`inc`, holding `shard` at `epoch`) hands it to the
  /// node that asked for it, if that node is up: owner := it, epoch + 1.
  /// Returns the new epoch; none if anything changed.
  virtual caf::expected<std::optional<uint64_t>>
  transfer(shard_id shard, uint64_t epoch, const std::string& node,
           uint64_t inc)
    = 0;

  /// Sets the state of `node`'s live incarnation (`up` or `draining`);
  /// false if it has none.
  virtual caf::expected<bool>
  set_state(const std::string& node, member_state state) = 0;

  /// Leaves cleanly (state `left`) if `node`/`inc` owns no shard; false
  /// otherwise.
  virtual caf::expected<bool> leave(const std::string& node, uint64_t inc) = 0;
};

} // namespace keel
