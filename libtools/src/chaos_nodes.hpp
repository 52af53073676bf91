#pragma once

// The nodes of a keel-chaos run: their configs, their processes and the
// faults played on them. Private to libtools.

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "keel/endpoint.hpp"
#include "keel/tools/chaos_scenario.hpp"
#include "keel/tools/fault_proxy.hpp"
#include "keel/tools/node_process.hpp"

namespace keel::chaos::detail {

/// The YAML of node `index`: the scenario's config (or the built-in one)
/// with its overrides merged in, its own data folder under `dir`, a port
/// chosen by the system, the chaos endpoints the steps need switched on,
/// and, when `provider_urls` is not empty, one OpenAI provider per URL
/// chained in pool `default` in place of the config's providers. Throws
/// std::runtime_error naming the file when it cannot be read.
std::string node_yaml(const scenario& sc, size_t index, const std::string& dir,
                      const std::vector<std::string>& provider_urls,
                      uint16_t port = 0);

/// The running nodes. The traffic threads read addresses while the step
/// player restarts nodes, so every member is guarded. When the scenario
/// breaks the clients' links, each node keeps one port across restarts and
/// clients reach it through a fault proxy (`link`).
class node_set {
public:
  /// Starts every node under `work_dir`/node-INDEX. Throws
  /// std::runtime_error when one does not start.
  node_set(const scenario& sc, const std::string& node_binary,
           const std::string& work_dir,
           const std::vector<std::string>& provider_urls);

  /// Where clients reach the node (through its proxy, if it has one), with
  /// the client token.
  endpoint address(size_t index) const;

  /// The proxy between the clients and the node (the scenario breaks that
  /// link), else null.
  fault_proxy* link(size_t index) const;

  /// The node's current address with the admin token.
  endpoint admin_address(size_t index) const;

  size_t size() const {
    return nodes_.size();
  }

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

  /// Starts again, unarmed, every node that exited without being asked to;
  /// returns how many did (`armed_deaths` counts those that died armed: a
  /// kill point fired).
  uint64_t restart_exited(uint64_t& armed_deaths);

  /// Starts every node a step killed and none restarted.
  void restart_killed();

  /// SIGTERM to each node and wait; returns whether all exited cleanly.
  bool stop_all();

  /// Each node's data folder.
  std::vector<std::string> data_dirs() const;

private:
  void refresh(size_t index);

  mutable std::mutex mtx_;
  std::vector<std::unique_ptr<node_process>> nodes_;
  std::vector<std::string> dirs_;
  std::vector<endpoint> addresses_;
  std::vector<endpoint> admin_addresses_;
  std::vector<bool> down_;
  std::vector<bool> armed_;
  std::vector<std::unique_ptr<fault_proxy>> links_;
};

} // namespace keel::chaos::detail
