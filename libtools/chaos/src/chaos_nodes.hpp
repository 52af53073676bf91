#pragma once

// The nodes of a keel-chaos run: their configs, their processes and the
// faults played on them. Private to libtools.

#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "keel/endpoint.hpp"
#include "keel/tools/chaos_scenario.hpp"
#include "keel/tools/fault_proxy.hpp"
#include "keel/tools/node_process.hpp"

namespace keel::chaos::detail {

/// Where a cluster node finds the database and its peers find it.
struct node_wiring {
  /// The node's `storage.postgres.url` (through its database proxy, if the
  /// scenario breaks that link).
  std::string database_url;
  /// `cluster.listen` is 127.0.0.1:listen_port; `cluster.advertise` is
  /// 127.0.0.1:advertise_port (a proxy's port when the scenario breaks the
  /// peers' links to the node, else the listen port).
  uint16_t listen_port = 0;
  uint16_t advertise_port = 0;
};

/// The YAML of node `index`: the scenario's config (or the built-in one)
/// with its overrides merged in, its own data folder under `dir`, a port
/// chosen by the system, the chaos endpoints the steps need switched on,
/// and, when `provider_urls` is not empty, one OpenAI provider per URL
/// chained in pool `default` in place of the config's providers. With
/// `wiring` the node joins the scenario's cluster (id `node_id(index)`,
/// PostgreSQL storage, the scenario's cluster timings under the overrides).
/// Throws std::runtime_error naming the file when it cannot be read.
std::string node_yaml(const scenario& sc, size_t index, const std::string& dir,
                      const std::vector<std::string>& provider_urls,
                      uint16_t port = 0, const node_wiring* wiring = nullptr);

/// The running nodes. The traffic threads read addresses while the step
/// player restarts nodes, so every member is guarded. When the scenario
/// breaks the clients' links, each node keeps one port across restarts and
/// clients reach it through a fault proxy (`link`). A node beyond
/// `nodes.initially` is started by `start`; a drained one is stopped by
/// `stop` and may be started again.
class node_set {
public:
  /// Starts the first `nodes.initially` nodes under `work_dir`/node-INDEX;
  /// `wiring` has one entry per node in a cluster, else none. Throws
  /// std::runtime_error when one does not start.
  node_set(const scenario& sc, const std::string& node_binary,
           const std::string& work_dir,
           const std::vector<std::string>& provider_urls,
           std::vector<node_wiring> wiring = {});

  /// Where clients reach the node (through its proxy, if it has one), with
  /// the client token.
  endpoint address(size_t index) const;

  /// The proxy between the clients and the node (the scenario breaks that
  /// link), else null.
  fault_proxy* link(size_t index) const;

  /// The node's current address with the admin token.
  endpoint admin_address(size_t index) const;

  size_t size() const {
    return states_.size();
  }

  /// Whether the nodes form a cluster (clients may use any of them).
  bool cluster() const {
    return cluster_;
  }

  /// Whether the node was started and neither killed nor stopped since
  /// (it may be paused, or have just exited on its own).
  bool serving(size_t index) const;

  /// Whether the node serves and is not paused.
  bool responsive(size_t index) const;

  /// A responsive node other than `except` (the first after it), or
  /// nullopt.
  std::optional<size_t> another(size_t except) const;

  /// The first responsive node, or nullopt.
  std::optional<size_t> first_responsive() const;

  void kill9(size_t index);
  /// kill -9 and start again with `--kill-at spec`. Returns false when the
  /// point fired while the node was still starting (its recovery reaches
  /// the points too); the node is then started unarmed.
  bool arm(size_t index, const std::string& spec);
  /// kill -9 and start again unarmed every node still armed.
  void disarm_all();
  void restart(size_t index);
  void pause(size_t index);
  void resume(size_t index);

  /// Starts a node that does not run (never started, or stopped).
  void start(size_t index);

  /// SIGTERM to the node and wait; returns its exit code (-1 when it had to
  /// be killed). It does not run afterwards until `start`.
  int stop(size_t index);

  /// What `restart_exited` found.
  struct exits {
    /// Exits nobody asked for (the node stopped itself).
    uint64_t unplanned = 0;
    /// Deaths of armed nodes (a kill point fired).
    uint64_t armed = 0;
    /// Exits with code 75: a cluster node that found itself declared dead.
    uint64_t declared_dead = 0;
  };

  /// Starts again, unarmed, every serving node that exited without being
  /// asked to, as a service manager would, and adds what it found to `out`.
  void restart_exited(exits& out);

  /// Starts every node a step killed and none restarted.
  void restart_killed();

  /// SIGTERM to each running node and wait; returns whether all exited
  /// cleanly.
  bool stop_all();

  /// Each node's data folder.
  std::vector<std::string> data_dirs() const;

private:
  /// Where a node is.
  enum class node_state { idle, running, killed };

  void refresh(size_t index);
  /// Starts node `index` (creating its process the first time); the
  /// caller holds `mtx_`.
  void launch(size_t index);

  mutable std::mutex mtx_;
  std::string node_binary_;
  bool cluster_ = false;
  /// One config per node, written when the node first starts.
  std::vector<std::string> yamls_;
  std::vector<std::string> homes_;
  /// Null until the node first starts.
  std::vector<std::unique_ptr<node_process>> nodes_;
  std::vector<std::string> dirs_;
  std::vector<endpoint> addresses_;
  std::vector<endpoint> admin_addresses_;
  std::vector<node_state> states_;
  std::vector<bool> paused_;
  std::vector<bool> armed_;
  std::vector<std::unique_ptr<fault_proxy>> links_;
};

} // namespace keel::chaos::detail
