#pragma once

// The node's view of shard ownership, shared (thread-safe) between the
// cluster actor that maintains it, the store's write fence, the
// orchestrator (which routes by it) and the gateway bridge (status).

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "keel/error.hpp"
#include "keel/sharding.hpp"

namespace keel {

/// The tenure of a writer that loaded its view while the node held the
/// shard at no epoch: no write of it ever commits.
constexpr uint64_t no_tenure = UINT64_MAX;

/// Who owns a shard, as last read from the cluster store.
struct shard_owner {
  /// Node id; empty if nobody owns it (its owner died, unclaimed).
  std::string node;
  /// Where the owner's peers reach it (host:port of its middleman).
  std::string address;
  /// The ownership epoch: bumped on every change of owner.
  uint64_t epoch = 0;
};

/// Ownership as the node knows it. Two parts with different guarantees:
/// `held` shards are those this node may write, at the epoch it claimed
/// them at (the store's fence checks the epoch in every write transaction,
/// so a stale entry here costs a refused write, never a wrong one); the
/// owners of all shards are a routing hint that may lag the store.
class shard_table {
public:
  /// A table of `shards` shards (0 counts as 1), none held, owners unknown.
  shard_table(std::string me, uint32_t shards);

  /// This node's id.
  const std::string& me() const {
    return me_;
  }

  uint32_t shards() const {
    return shards_;
  }

  shard_id shard_of(std::string_view thread) const {
    return keel::shard_of(thread, shards_);
  }

  /// The epoch this node holds `shard` at; none if it may not write it
  /// (not its shard, being handed over, or the node fenced itself).
  std::optional<uint64_t> held_epoch(shard_id shard) const;

  /// The tenure a writer that loads `thread` now has: the epoch this node
  /// holds the thread's shard at, or `no_tenure`. A view loaded under a
  /// tenure stays current only while the node holds the shard at that
  /// epoch: once the shard left, even if it came back, the other owner may
  /// have written the thread.
  uint64_t tenure(std::string_view thread) const;

  /// `not_owner` (naming both epochs) unless this node holds `thread`'s
  /// shard at `tenure`; none for a `tenure` of 0 (a write that rests on no
  /// loaded view, fenced at whatever epoch the node holds).
  caf::error check_tenure(std::string_view thread, uint64_t tenure) const;

  /// Whether this node serves `thread` now: holds its shard and is not
  /// handing it over. New requests for a thread it does not serve go to
  /// the owner; writes are fenced by `held_epoch` alone.
  bool serves(std::string_view thread) const;

  /// The last known owner of `shard`.
  shard_owner owner(shard_id shard) const;

  // The mutators below ignore a shard out of range.

  /// Starts holding `shard` at `epoch` (after the claim committed).
  void hold(shard_id shard, uint64_t epoch);

  /// Stops serving `shard` but keeps holding it: running turns may still
  /// commit while the node hands it over. `hold` or `release` end it.
  void retire(shard_id shard);

  /// Stops holding `shard` (before handing it over or once lost).
  void release(shard_id shard);

  /// Stops holding every shard; returns those it held.
  std::vector<shard_id> release_all();

  /// Records the owner of `shard` as read from the store.
  void set_owner(shard_id shard, shard_owner owner);

  /// The shards held now, ascending.
  std::vector<shard_id> held() const;

  /// Increases on every change (a call that changes nothing leaves it);
  /// readers cache by it.
  uint64_t version() const;

private:
  std::string me_;
  uint32_t shards_;
  mutable std::mutex mtx_;
  std::vector<std::optional<uint64_t>> held_;
  std::vector<bool> retiring_;
  std::vector<shard_owner> owners_;
  uint64_t version_ = 0;
};

} // namespace keel
