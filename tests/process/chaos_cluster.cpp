#define CAF_SUITE chaos_cluster

// keel-chaos on a cluster, in short versions of the shipped cluster
// scenarios (config/chaos/cluster-*.yaml, played in full by
// stress.chaos_cluster): nodes joining, killed, paused past their lease,
// cut from their peers and drained under traffic; the database restarted;
// a handoff during long turns. Every run must hold every invariant, and
// report the cluster's figures.

#include <caf/test/unit_test.hpp>

#include <fstream>

#include <nlohmann/json.hpp>

#include "temp_dir.hpp"

#include "keel/tools/node_process.hpp"
#include "keel/tools/process.hpp"

using namespace keel;
using namespace keel::test;
using nlohmann::json;

namespace {

/// Plays `yaml` and returns its JSON report (null when there is none).
json run_chaos(const temp_dir& dir, const std::string& yaml) {
  auto path = dir.str() + "/scenario.yaml";
  std::ofstream{path} << yaml;
  auto res
    = run_command({tool_binary("keel-chaos"), path, "--work-dir",
                   dir.str() + "/work", "--json", dir.str() + "/report.json"},
                  std::chrono::seconds{180});
  CAF_MESSAGE(res.out);
  if (res.exit_code != 0)
    CAF_MESSAGE(res.err);
  CAF_CHECK_EQUAL(res.exit_code, 0);
  return json::parse(read_text_file(dir.str() + "/report.json"), nullptr,
                     false);
}

/// Every message acknowledged was answered exactly once, nothing lost, and
/// the database's invariants hold.
void check_clean(const json& report) {
  CAF_REQUIRE(report.is_object());
  CAF_CHECK_EQUAL(report["clean"], true);
  auto& msgs = report["messages"];
  CAF_CHECK_GREATER(msgs["acknowledged"].get<uint64_t>(), 30u);
  CAF_CHECK_EQUAL(msgs["lost"], 0);
  CAF_CHECK_EQUAL(msgs["duplicated"], 0);
  CAF_CHECK_EQUAL(msgs["outcomes"], msgs["acknowledged"]);
  for (auto& step : report["steps"])
    CAF_CHECK_EQUAL(step["error"], "");
  CAF_CHECK_EQUAL(report["cluster"]["verify"]["exit_code"], 0);
  CAF_CHECK_GREATER(report["throughput"]["answered_per_s"].get<double>(), 1.0);
}

/// Whether every rebalance window of `report` settled.
bool all_settled(const json& report) {
  for (auto& w : report["cluster"]["rebalances"])
    if (w["settled_after_ms"].get<int64_t>() < 0)
      return false;
  return true;
}

} // namespace

CAF_TEST(a cluster survives a join a kill a pause a peer cut and a drain) {
  temp_dir dir{"keel-chaos-cluster"};
  auto report = run_chaos(dir, R"(name: cluster-smoke
nodes: {count: 3, initially: 2, cluster: true}
traffic:
  connections: 3
  threads: 12
  rate: 30
  duration: 10s
  ack_timeout: 2s
steps:
  - {at: 1s, start_node: 2}
  - {at: 2500ms, kill_node: 0}
  - {at: 3500ms, restart_node: 0}
  - {at: 4500ms, pause_node: 1, for: 3s}
  - {at: 8s, link_fault: reset, for: 500ms, link: peers, node: 2}
  - {at: 9s, drain_node: 2}
)");
  check_clean(report);
  auto& c = report["cluster"];
  CAF_CHECK_EQUAL(c["nodes"], 3);
  // The paused node was declared dead, exited with 75 and was restarted.
  CAF_CHECK_EQUAL(c["declared_dead_exits"], 1);
  CAF_REQUIRE_EQUAL(c["failovers"].size(), 2u);
  CAF_CHECK_EQUAL(c["failovers"][0]["node"], "n1");
  CAF_CHECK_EQUAL(c["failovers"][1]["step"], "pause_node");
  CAF_CHECK_GREATER(c["failover"]["samples"].get<uint64_t>(), 0u);
  // The join, the restart and the drain.
  CAF_CHECK_EQUAL(c["rebalances"].size(), 3u);
  CAF_CHECK(all_settled(report));
  CAF_CHECK_GREATER(c["latency"]["steady"]["samples"].get<uint64_t>(), 0u);
}

CAF_TEST(a database restart declares nobody dead and loses nothing) {
  temp_dir dir{"keel-chaos-cluster"};
  auto report = run_chaos(dir, R"(name: cluster-db-restart-short
nodes: {count: 2, cluster: true}
traffic:
  connections: 2
  threads: 8
  rate: 20
  duration: 8s
steps:
  - {at: 1500ms, restart_db: stop, for: 1500ms}
  - {at: 4500ms, link_fault: delay, delay: 100ms, for: 1s, link: database, node: 1}
  - {at: 6s, restart_db: kill9, for: 1s}
)");
  check_clean(report);
  auto& c = report["cluster"];
  CAF_CHECK_EQUAL(c["declared_dead_exits"], 0);
  CAF_CHECK_EQUAL(c["counters"]["declared_dead"], 0);
  CAF_CHECK_EQUAL(report["unplanned_exits"], 0);
}

CAF_TEST(a handoff during long turns commits one reply per message) {
  temp_dir dir{"keel-chaos-cluster"};
  auto report = run_chaos(dir, R"(name: cluster-long-turn-short
nodes:
  count: 2
  initially: 1
  slow_delay: 3s
  cluster: {handoff_timeout: 300ms}
traffic:
  connections: 2
  threads: 8
  rate: 16
  duration: 7s
  slow_every: 17
steps:
  - {at: 2500ms, start_node: 1}
  - {at: 5s, drain_node: 1}
)");
  check_clean(report);
  auto& c = report["cluster"];
  CAF_CHECK_EQUAL(c["rebalances"].size(), 2u);
  CAF_CHECK(all_settled(report));
  CAF_CHECK_GREATER(c["counters"]["handed_over"].get<uint64_t>(), 0u);
}
