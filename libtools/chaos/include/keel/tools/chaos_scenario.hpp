#pragma once

// A keel-chaos scenario: the nodes to start, the traffic to send them and
// the timed fault steps, read from YAML as strictly as a node config
// (unknown keys are errors naming the key path and line).

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "keel/error.hpp"

namespace keel::chaos {

/// What a step does.
enum class action : uint8_t {
  /// POST /api/v1/kill for `path` (once, or every `every` until `until`).
  kill_actor,
  /// SIGKILL the node; it stays down until a `restart_node` step.
  kill_node,
  /// Start a killed node again (on the same data folder).
  restart_node,
  /// SIGSTOP the node, SIGCONT it after `lasting`.
  pause_node,
  /// Injected disk write failures (`disk_error`) for `lasting`, through
  /// POST /api/v1/chaos/disk.
  disk_fault,
  /// Fault server `server` answers every request with `fault_spec` for
  /// `lasting`, then normally again.
  provider_fault,
  /// kill -9 the node and start it again with `kill_point_name` armed
  /// (`--kill-at`); once the point fires the node is started unarmed.
  kill_point,
  /// The TCP link between the clients and node `node` (`link` "clients"),
  /// or between the nodes and fault server `server` ("provider"), breaks
  /// as `link_mode` says ("delay" by `link_delay`, "blackhole", "reset")
  /// for `lasting`, through a fault proxy. In a cluster also "database"
  /// (node `node`'s PostgreSQL connections) and "peers" (the other nodes'
  /// links to node `node`'s peer port).
  link_fault,
  /// Cluster: starts node `node`, which was not running (declared beyond
  /// `nodes.initially`, or drained); it joins and takes its share.
  start_node,
  /// Cluster: POST /api/v1/cluster/drain for node `node` on another running
  /// node, waits until it holds no shard, then stops it with SIGTERM.
  drain_node,
  /// Cluster: stops the PostgreSQL server (`db_mode` "stop": a fast
  /// shutdown, "kill9": SIGKILL to the postmaster) and starts it again
  /// after `lasting`.
  restart_db,
};

/// The step's key in a scenario file ("kill_actor", ...).
const char* to_string(action x);

/// One timed step.
struct step {
  /// From the start of the traffic.
  std::chrono::milliseconds at{0};
  action what = action::kill_actor;
  /// Index of the node it acts on.
  size_t node = 0;
  /// kill_actor: the actor's path, e.g. "/persistence".
  std::string path;
  /// kill_actor: repeat this often (0: once) ...
  std::chrono::milliseconds every{0};
  /// ... up to this time from the start (0: the end of the traffic).
  std::chrono::milliseconds until{0};
  /// pause_node, disk_fault: how long the fault lasts.
  std::chrono::milliseconds lasting{0};
  /// disk_fault: "eio" or "enospc".
  std::string disk_error;
  /// provider_fault: the fault server's SPEC (e.g. "status=429;retry_after=2")
  /// and which server (0: the pool's first provider, 1: its backup).
  std::string fault_spec;
  size_t server = 0;
  /// kill_point: the point's name and the chance it fires when reached.
  std::string kill_point_name;
  double probability = 1.0;
  /// link_fault: which link, the mode, and the delay for "delay".
  std::string link = "clients";
  std::string link_mode;
  std::chrono::milliseconds link_delay{0};
  /// restart_db: "stop" or "kill9".
  std::string db_mode;
  /// Where the step is in the file, for messages: its line and its index
  /// in `steps`.
  int line = 0;
  size_t index = 0;
};

/// What `x` does in one line, e.g. "kill_actor /persistence every 500 ms on
/// node 0" (without its time).
std::string to_string(const step& x);

/// The cluster the nodes form (`nodes.cluster`): timings short enough for
/// a test, every node on one PostgreSQL server keel-chaos starts.
struct cluster_spec {
  bool enabled = false;
  uint32_t shards = 32;
  std::chrono::milliseconds heartbeat{200};
  std::chrono::milliseconds lease_ttl{1000};
  std::chrono::milliseconds route_timeout{8000};
  std::chrono::milliseconds handoff_timeout{1000};
  size_t rebalance_batch = 4;
};

/// The cluster id of node `index`: "n1" for node 0, "n2" for node 1, ...
std::string node_id(size_t index);

/// The nodes a scenario starts.
struct node_spec {
  size_t count = 1;
  /// The nodes running from the start (0 .. initially - 1); the others
  /// join a cluster with `start_node`.
  size_t initially = 1;
  /// A node config to start from (absolute path); empty for the built-in
  /// one (a scripted provider answering after `provider_delay`).
  std::string config_file;
  /// A YAML mapping merged over the config, key by key ("" for none).
  std::string overrides;
  /// The built-in config's provider latency.
  std::chrono::milliseconds provider_delay{5};
  /// The built-in config's latency for the messages the traffic marks slow
  /// (`traffic.slow_every`); 0: none are.
  std::chrono::milliseconds slow_delay{0};
  cluster_spec cluster;
};

/// The providers of the built-in node config.
struct provider_spec {
  /// 0: the built-in scripted provider. 1 or 2: that many OpenAI-compatible
  /// fault servers started by keel-chaos, chained in the nodes' pool
  /// `default` (the second is the first one's failover), replacing the
  /// config's providers and pools.
  size_t fault_servers = 0;
};

/// What the clients send.
struct traffic_spec {
  /// WebSocket connections, spread over the nodes.
  size_t connections = 4;
  /// Threads, spread over the connections; each thread belongs to one
  /// connection, which sends it one message at a time.
  size_t threads = 16;
  /// Messages per second, all connections together.
  double rate = 20;
  size_t message_bytes = 64;
  /// How long messages are sent.
  std::chrono::milliseconds duration{10000};
  /// A send without an ack this long makes its client drop the connection,
  /// reconnect and resend, as a real client gives up on a silent node.
  std::chrono::milliseconds ack_timeout{5000};
  /// After the traffic and the last step, how long every acknowledged
  /// message may take to be answered.
  std::chrono::milliseconds answer_timeout{60000};
  /// Every `slow_every`-th message of each connection is a slow one (its
  /// text starts with `slow_marker`), answered after `nodes.slow_delay`;
  /// 0: none.
  size_t slow_every = 0;
};

/// The text that makes the built-in provider answer after
/// `nodes.slow_delay`.
constexpr const char* slow_marker = "slow turn";

struct scenario {
  std::string name;
  /// The file it was read from.
  std::string source;
  uint64_t seed = 1;
  node_spec nodes;
  provider_spec providers;
  traffic_spec traffic;
  /// In the order of `at`.
  std::vector<step> steps;

  /// Whether a step needs the node's kill or disk chaos endpoint.
  bool uses(action x) const;

  /// Whether a link_fault step breaks `link` ("clients", "provider",
  /// "database" or "peers").
  bool breaks_link(const std::string& link) const;

  bool cluster() const {
    return nodes.cluster.enabled;
  }
};

/// Parses scenario YAML; `source` names it in messages and relative paths
/// (`nodes.config`) are resolved against `base_dir`. Fails with
/// `ec::config_invalid` and one line "SOURCE:LINE: KEY.PATH: problem".
caf::expected<scenario> parse_scenario(const std::string& yaml,
                                       const std::string& source,
                                       const std::string& base_dir);

/// Reads and parses a scenario file.
caf::expected<scenario> load_scenario(const std::string& path);

} // namespace keel::chaos
