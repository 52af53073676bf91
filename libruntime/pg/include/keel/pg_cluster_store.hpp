#pragma once

// The cluster store (`keel/cluster_store.hpp`) in the PostgreSQL database
// the nodes share: tables `keel.cluster` (the shard count, fixed at
// creation), `keel.nodes` (membership and leases, measured by the
// database's clock), `keel.shards` (owner, epoch, pending handoff) and
// `keel.shard_history` (every change of owner, for audits), and the
// function `keel.fence` the store's write transactions call. Every change
// is one statement whose WHERE clause is the compare-and-set.
//
// A node's liveness lock is a session advisory lock on its own connection:
// when the process dies its session ends and the lock is free at once, so
// `vanished` sees a crash in well under a lease. Its key is the two-int
// form (class 0x6b65656c, "keel"; FNV-1a of the node id), a key space apart
// from the bigint key that serializes schema creation.
//
// Beyond the interface: a claim also needs the claiming incarnation to be
// `up` (a node declared dead, or draining, claims nothing); `set_state`
// takes `up` or `draining` only (`ec::config_invalid` otherwise). Errors
// are `ec::storage_io` naming the operation ("cannot renew the lease of
// n1: ..."), `ec::connection_failed` when (re)connecting fails, and
// `ec::conflict` when another live session holds the node's liveness lock.

#include <chrono>
#include <memory>
#include <string>

#include "keel/cluster_store.hpp"

namespace keel {

struct pg_cluster_options {
  /// A libpq URI or conninfo string; never shown in messages.
  std::string url;
  /// The server cancels a statement running longer; the connection gives
  /// up on a server that stays silent 500 ms beyond it.
  std::chrono::milliseconds statement_timeout{std::chrono::seconds{5}};
  std::chrono::milliseconds connect_timeout{std::chrono::seconds{5}};
};

/// Connects (one connection; reconnects on next use after it broke; a
/// reconnect re-takes the liveness lock of the node that joined).
caf::expected<std::unique_ptr<cluster_store>>
open_pg_cluster_store(const pg_cluster_options& opts);

} // namespace keel
