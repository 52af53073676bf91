#pragma once

// The nodes of a keel-chaos run: their configs, their processes and the
// faults played on them. Private to libtools.

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "keel/endpoint.hpp"
#include "keel/tools/chaos_scenario.hpp"
#include "keel/tools/node_process.hpp"

namespace keel::chaos::detail {

/// The YAML of node `index`: the scenario's config (or the built-in one)
/// with its overrides merged in, its own data folder under `dir`, a port
/// chosen by the system, and the chaos endpoints the steps need switched
/// on. Throws std::runtime_error naming the file when it cannot be read.
std::string node_yaml(const scenario& sc, size_t index, const std::string& dir);

/// The running nodes. The traffic threads read addresses while the step
/// player restarts nodes, so every member is guarded.
class node_set {
public:
  /// Starts every node under `work_dir`/node-INDEX. Throws
  /// std::runtime_error when one does not start.
  node_set(const scenario& sc, const std::string& node_binary,
           const std::string& work_dir);

  /// The node's current address with the client token.
  endpoint address(size_t index) const;

  /// The node's current address with the admin token.
  endpoint admin_address(size_t index) const;

  size_t size() const {
    return nodes_.size();
  }

  void kill9(size_t index);
  void restart(size_t index);
  void pause(size_t index);
  void resume(size_t index);

  /// Starts again every node that exited without being asked to; returns
  /// how many did.
  uint64_t restart_exited();

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
};

} // namespace keel::chaos::detail
