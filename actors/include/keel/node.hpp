#pragma once

#include <memory>

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>

#include "keel/config.hpp"
#include "keel/error.hpp"
#include "keel/health_monitor.hpp"
#include "keel/llm_client.hpp"
#include "keel/shard_table.hpp"
#include "keel/supervisor.hpp"
#include "keel/ws_server.hpp"

namespace keel {

/// The root supervisor's children in start order: persistence (its
/// database in `data_dir/db`), the providers supervisor (one child per
/// pool; HTTP providers on `io`, which may be null when none is configured),
/// the conversations supervisor (one conversation per thread, started on
/// demand), the orchestrator and, if `server` is set, the gateway bridge,
/// with the `supervision.root`, `.providers` and `.conversations` settings.
/// All are registered under `keel::names`.
///
/// `shards` is the node's shard table in a cluster: persistence fences its
/// writes with it, conversations hold their tenure in it and the
/// orchestrator routes by it. With `cluster.enabled` the peers and cluster
/// actors, which keep it, join the tree (and a null `shards` is made here).
caf::expected<supervisor_config>
root_spec(const node_config& cfg, std::shared_ptr<ws_server> server,
          bool detached_persistence, std::shared_ptr<http_io> io,
          std::shared_ptr<shard_table> shards = nullptr);

/// A running node: the supervision tree and the gateway server.
class node {
public:
  /// Starts the gateway server and the supervision tree, and waits until the
  /// store is open. Fails with the reason (cannot bind, cannot open the
  /// database, ...) after stopping whatever had started. Null when SIGINT
  /// or SIGTERM (blocked in the calling thread, as `run_node` does) came
  /// while it waited for PostgreSQL to answer: nothing had started yet.
  static caf::expected<std::unique_ptr<node>> start(caf::actor_system& sys,
                                                    const node_config& cfg);

  ~node();

  /// The gateway's bound port.
  uint16_t port() const;

  /// The root supervisor.
  const caf::actor& root() const;

  /// Drains before a stop: the gateway refuses new work and `/readyz`
  /// answers 503, the service manager hears `STOPPING=1`, and each
  /// conversation stops once its turns are done, those still busy after
  /// `wait` at once. Returns when all are gone.
  void drain(caf::timespan wait);

  /// Stops the tree (children in reverse start order) and the server, and
  /// waits for the root supervisor to finish.
  void stop();

private:
  node(caf::actor_system& sys, std::shared_ptr<ws_server> server,
       std::shared_ptr<http_io> io, caf::actor root);

  caf::actor_system& sys_;
  std::shared_ptr<ws_server> server_;
  /// I/O threads of HTTP providers; null if there are none.
  std::shared_ptr<http_io> io_;
  caf::actor root_;
  /// Checks the tree while the node runs (see `health_monitor`).
  std::unique_ptr<health_monitor> health_;
};

/// Runs a node until SIGINT or SIGTERM (exit code 0) or until its root
/// supervisor gives up (exit code 1). Prints `keel-node: listening on
/// HOST:PORT` once ready.
int run_node(const node_config& cfg);

} // namespace keel
