#pragma once

// The cluster side of a keel-chaos run: the PostgreSQL server the nodes
// share and the proxies that break their links (`cluster_rig`), and what the
// runner watches while it plays the steps (`cluster_watch`): which threads a
// node owned before it died, when a membership change settled, the nodes'
// counters, and the figures computed from them. Private to libtools.

#include <chrono>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "chaos_nodes.hpp"
#include "chaos_traffic.hpp"
#include "keel/tools/chaos_run.hpp"
#include "keel/tools/chaos_scenario.hpp"
#include "keel/tools/fault_proxy.hpp"
#include "keel/tools/pg_server.hpp"

namespace keel::chaos::detail {

/// The PostgreSQL server of a cluster run, in a temporary folder of its own
/// (as root the server runs as `postgres`, which must reach the folder: a
/// --work-dir under /root would not do), and a fault proxy per node for
/// each link the scenario breaks: the node's database connections
/// (`database`) and the other nodes' links to its peer port (`peers`).
class cluster_rig {
public:
  /// Starts the server. Throws std::runtime_error when it cannot.
  explicit cluster_rig(const scenario& sc);

  /// Stops the server and removes its folder, unless `keep` was called.
  ~cluster_rig();

  cluster_rig(const cluster_rig&) = delete;
  cluster_rig& operator=(const cluster_rig&) = delete;

  /// The database's URL, straight to the server (for keelctl).
  std::string url() const;

  /// Where each node finds the database and its peers find it.
  const std::vector<node_wiring>& wiring() const {
    return wiring_;
  }

  /// The proxy of `link` ("database" or "peers") of node `index`; null
  /// when the scenario does not break that link.
  fault_proxy* link(const std::string& link, size_t index) const;

  pg_server& server() {
    return *pg_;
  }

  /// Keeps the server's folder (a failed run) and says where it is.
  std::string keep();

private:
  std::string dir_;
  bool keep_ = false;
  std::unique_ptr<pg_server> pg_;
  std::vector<std::unique_ptr<fault_proxy>> database_links_;
  std::vector<std::unique_ptr<fault_proxy>> peer_links_;
  std::vector<node_wiring> wiring_;
};

/// A time span of the run, from the start of the traffic.
using run_span
  = std::pair<std::chrono::milliseconds, std::chrono::milliseconds>;

/// What the runner learns from the cluster while it plays the steps; the
/// step player's thread only.
class cluster_watch {
public:
  cluster_watch(const scenario& sc, const node_set& nodes);

  /// GET /api/v1/cluster on node `index`; null when it does not answer.
  nlohmann::json view(size_t index) const;

  /// The traffic's threads whose shard node `index` owns now, as it (or,
  /// should it not answer, another node) sees the cluster.
  std::vector<std::string> threads_of(size_t index) const;

  /// Node `index` died at `at` (`how`: the step) owning `threads`.
  void died(size_t index, const std::string& how, std::chrono::milliseconds at,
            std::vector<std::string> threads);

  /// The membership changed at `at` (`step` says how): a rebalance window
  /// opens until the cluster settles.
  void rebalance(const std::string& step, std::chrono::milliseconds at);

  /// While a window is open, at most every 250 ms: asks a running node
  /// for its view and closes the open windows once it is settled.
  void poll(std::chrono::milliseconds now);

  /// Whether a rebalance window is open.
  bool rebalancing() const;

  /// Reads the counters of the running nodes (call before they stop).
  void read_counters(cluster_report& out) const;

  /// Fills the failover, rebalance and latency figures of `out` from the
  /// answers the clients saw; `disturbed` are the other fault steps'
  /// spans, kept out of the steady state; `end` is the end of the run.
  void figures(const std::vector<answer_sample>& answers,
               const std::vector<run_span>& disturbed,
               std::chrono::milliseconds end, cluster_report& out) const;

private:
  /// The ids of the nodes that run and are not paused: the members a
  /// settled cluster has.
  std::set<std::string> expected_members() const;

  struct death {
    failover_figures figures;
    std::vector<std::string> threads;
  };

  const scenario& sc_;
  const node_set& nodes_;
  std::vector<death> deaths_;
  std::vector<rebalance_window> windows_;
  std::chrono::milliseconds last_poll_{-1000000};
};

} // namespace keel::chaos::detail
