#pragma once

#include <memory>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/timespan.hpp>

#include "keel/component_registry.hpp"
#include "keel/config.hpp"
#include "keel/metrics.hpp"

namespace keel {

/// The actor system configuration of every Keel process and test: registers
/// Keel's message types and error category once.
class system_config : public caf::actor_system_config {
public:
  system_config();

  /// Loads CAF's network layer (cluster nodes only; before the actor
  /// system starts): heartbeats every `heartbeat` on every link to a peer,
  /// and a link silent for `timeout` is dropped (its requests fail). With
  /// `tls` (cluster.tls) links between nodes are TLS with certificates
  /// checked both ways against `tls.ca`.
  void load_middleman(caf::timespan heartbeat, caf::timespan timeout,
                      const cluster_tls_config& tls);

  /// Sets up what `cfg` asks of the actor system (before it starts): the
  /// scheduler (`node.scheduler`, `node.workers`), and CAF's network layer
  /// for a cluster node.
  void configure_node(const node_config& cfg);

  /// The node's metrics: one set per actor system, so that each node (and
  /// each test) counts its own.
  std::shared_ptr<node_metrics> metrics = std::make_shared<node_metrics>();

  /// The node's named components (see component_registry.hpp).
  std::shared_ptr<component_registry> components
    = std::make_shared<component_registry>();
};

/// The scheduler's worker threads for `node.workers`: `configured`, or for
/// 0 one per core, at least 2 (so that one long handler never stalls every
/// other actor).
size_t scheduler_workers(size_t configured);

/// Messages an actor handles in one run on a worker under
/// `node.scheduler: sharing` (CAF's default has no bound).
constexpr size_t sharing_max_throughput = 64;

/// The metrics of the node running on `sys` (whose configuration is always
/// a `keel::system_config`).
inline node_metrics& metrics_of(caf::actor_system& sys) {
  return *static_cast<const system_config&>(sys.config()).metrics;
}

/// The named components of the node running on `sys`.
inline component_registry& components_of(caf::actor_system& sys) {
  return *static_cast<const system_config&>(sys.config()).components;
}

} // namespace keel
