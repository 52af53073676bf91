#pragma once

// The node's parts, shared by its files: the supervision tree
// (node_tree.cpp), waiting for the database on start (node_database.cpp);
// the node's start and stop are in node.cpp, `run_node` in node_run.cpp.
// Private to actors/src.

#include <memory>

#include "keel/cluster.hpp"
#include "keel/config.hpp"
#include "keel/error.hpp"
#include "keel/persistence.hpp"
#include "keel/shard_table.hpp"
#include "keel/store.hpp"

namespace keel::node_impl {

/// Opens the store `cfg.storage.backend` names; in a cluster the
/// PostgreSQL store fences every write with `shards`.
store_opener make_store_opener(const node_config& cfg,
                               const store_options& opts,
                               std::shared_ptr<const shard_table> shards);

/// The cluster store of `cfg`'s database.
cluster_store_opener cluster_store_of(const node_config& cfg);

/// Waits until the database is ready or `storage.postgres.startup_wait`
/// has passed; sets `stopped` when SIGINT or SIGTERM ends the wait.
caf::error wait_for_database(const node_config& cfg, bool& stopped);

} // namespace keel::node_impl
