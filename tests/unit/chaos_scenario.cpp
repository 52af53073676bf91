#define CAF_SUITE chaos_scenario

#include <caf/test/unit_test.hpp>

#include <cstdlib>
#include <filesystem>

#include "keel/tools/chaos_scenario.hpp"

using namespace keel;
using namespace keel::chaos;
using namespace std::chrono_literals;

namespace {

std::string parse_error(const std::string& yaml) {
  auto sc = parse_scenario(yaml, "s.yaml", "/base");
  return sc ? std::string{"none"} : error_message(sc.error());
}

const char* minimal = "traffic:\n  duration: 10s\nsteps:\n";

} // namespace

CAF_TEST(a scenario reads nodes traffic and steps in time order) {
  auto sc = parse_scenario(R"(name: demo
seed: 7
nodes:
  count: 2
  config: nodes/a.yaml
  overrides:
    threads: {idle_timeout: 200ms}
traffic:
  connections: 2
  threads: 8
  rate: 12.5
  message_bytes: 1KiB
  duration: 10s
  answer_timeout: 30s
steps:
  - {at: 5s, pause_node: 1, for: 2s}
  - {at: 1s, kill_actor: /persistence, every: 500ms, until: 3s}
  - {at: 6s, disk_fault: enospc, for: 1s, node: 0}
  - {at: 7s, kill_node: 0}
  - {at: 8s, restart_node: 0}
)",
                           "s.yaml", "/base");
  CAF_REQUIRE(sc);
  CAF_CHECK_EQUAL(sc->name, "demo");
  CAF_CHECK_EQUAL(sc->seed, 7u);
  CAF_CHECK_EQUAL(sc->nodes.count, 2u);
  CAF_CHECK_EQUAL(sc->nodes.config_file, "/base/nodes/a.yaml");
  CAF_CHECK(sc->nodes.overrides.find("idle_timeout") != std::string::npos);
  CAF_CHECK_EQUAL(sc->traffic.threads, 8u);
  CAF_CHECK_EQUAL(sc->traffic.rate, 12.5);
  CAF_CHECK_EQUAL(sc->traffic.message_bytes, 1024u);
  CAF_REQUIRE_EQUAL(sc->steps.size(), 5u);
  auto& kill = sc->steps[0];
  CAF_CHECK(kill.what == action::kill_actor);
  CAF_CHECK_EQUAL(kill.path, "/persistence");
  CAF_CHECK_EQUAL(kill.every.count(), 500);
  CAF_CHECK_EQUAL(to_string(kill),
                  "kill_actor /persistence every 500 ms until 3s on node 0");
  CAF_CHECK(sc->steps[1].what == action::pause_node);
  CAF_CHECK_EQUAL(sc->steps[1].node, 1u);
  CAF_CHECK_EQUAL(sc->steps[1].lasting.count(), 2000);
  CAF_CHECK_EQUAL(sc->steps[2].disk_error, "enospc");
  CAF_CHECK(sc->uses(action::disk_fault));
}

CAF_TEST(link faults name their link and mode) {
  auto sc = parse_scenario(R"(providers: {fault_servers: 2}
traffic: {duration: 10s}
steps:
  - {at: 1s, link_fault: delay, delay: 300ms, for: 2s}
  - {at: 4s, link_fault: reset, for: 1s, link: provider, server: 1}
)",
                           "s.yaml", "/base");
  CAF_REQUIRE(sc);
  CAF_CHECK(sc->breaks_link("clients"));
  CAF_CHECK(sc->breaks_link("provider"));
  CAF_CHECK_EQUAL(to_string(sc->steps[0]),
                  "link_fault delay 300 ms for 2s on the link from the "
                  "clients to node 0");
  CAF_CHECK_EQUAL(to_string(sc->steps[1]),
                  "link_fault reset for 1s on the link to fault server 1");
  CAF_CHECK_EQUAL(parse_error(std::string{minimal}
                              + "  - {at: 1s, link_fault: delay, for: 1s}\n"),
                  "s.yaml:4: steps[0].delay: missing required key (expected "
                  "the delay added to each chunk, e.g. 200ms)");
  CAF_CHECK_EQUAL(parse_error(std::string{minimal}
                              + "  - {at: 1s, link_fault: cut, for: 1s}\n"),
                  "s.yaml:4: steps[0].link_fault: unknown value \"cut\" "
                  "(expected delay, blackhole or reset)");
  CAF_CHECK_EQUAL(parse_error(std::string{minimal}
                              + "  - {at: 1s, link_fault: reset, for: 1s, "
                                "link: provider}\n"),
                  "s.yaml:4: steps[0].link: a provider link needs fault "
                  "servers (set providers.fault_servers to 1 or 2)");
}

CAF_TEST(provider faults and kill points are read with their options) {
  auto sc = parse_scenario(R"(providers: {fault_servers: 2}
traffic: {duration: 10s}
steps:
  - {at: 1s, provider_fault: "status=429;retry_after=2", for: 3s, server: 1}
  - {at: 2s, kill_point: batch_written, probability: 0.25}
)",
                           "s.yaml", "/base");
  CAF_REQUIRE(sc);
  CAF_CHECK_EQUAL(sc->providers.fault_servers, 2u);
  CAF_REQUIRE_EQUAL(sc->steps.size(), 2u);
  CAF_CHECK_EQUAL(sc->steps[0].fault_spec, "status=429;retry_after=2");
  CAF_CHECK_EQUAL(sc->steps[0].server, 1u);
  CAF_CHECK_EQUAL(sc->steps[0].lasting.count(), 3000);
  CAF_CHECK_EQUAL(sc->steps[1].kill_point_name, "batch_written");
  CAF_CHECK_EQUAL(sc->steps[1].probability, 0.25);
  CAF_CHECK_EQUAL(to_string(sc->steps[1]),
                  "kill_point batch_written (probability 0.250) on node 0");
}

CAF_TEST(scenario errors name the key path and line) {
  CAF_CHECK_EQUAL(parse_error("trafic: {}\nsteps: []\n"),
                  "s.yaml:1: trafic: unknown key (did you mean traffic?)");
  CAF_CHECK_EQUAL(
    parse_error(std::string{minimal} + "  - {at: 1s, kil_node: 0}\n"),
    "s.yaml:4: steps[0].kil_node: unknown key (did you mean "
    "kill_node?)");
  CAF_CHECK_EQUAL(parse_error(std::string{minimal} + "  - {at: 1s}\n"),
                  "s.yaml:4: steps[0].at: a step needs one action: "
                  "kill_actor, kill_node, restart_node, pause_node, "
                  "disk_fault, provider_fault, kill_point, link_fault, "
                  "start_node, drain_node or restart_db");
  CAF_CHECK_EQUAL(parse_error(std::string{minimal}
                              + "  - {at: 1s, kill_node: 0, pause_node: 0}\n"),
                  "s.yaml:4: steps[0].pause_node: a step has one action, not "
                  "kill_node and pause_node");
  CAF_CHECK_EQUAL(
    parse_error(std::string{minimal} + "  - {at: 11s, kill_node: 0}\n"),
    "s.yaml:4: steps[0].at: after the end of the traffic "
    "(traffic.duration is 10s)");
  CAF_CHECK_EQUAL(
    parse_error(std::string{minimal} + "  - {at: 1s, kill_node: 1}\n"),
    "s.yaml:4: steps[0].kill_node: expected an integer in 0..0, "
    "got \"1\"");
  CAF_CHECK_EQUAL(
    parse_error(std::string{minimal} + "  - {at: 1s, restart_node: 0}\n"),
    "s.yaml:4: steps[0].restart_node: node 0 is not down then "
    "(restart_node follows a kill_node of it)");
  CAF_CHECK_EQUAL(
    parse_error(std::string{minimal} + "  - {at: 1s, pause_node: 0}\n"),
    "s.yaml:4: steps[0].for: missing required key (expected how "
    "long the fault lasts)");
  CAF_CHECK_EQUAL(parse_error(std::string{minimal}
                              + "  - {at: 1s, kill_node: 0, every: 1s}\n"),
                  "s.yaml:4: steps[0].every: only a kill_actor step takes "
                  "every");
  CAF_CHECK_EQUAL(parse_error(std::string{minimal}
                              + "  - {at: 1s, disk_fault: full, for: 1s}\n"),
                  "s.yaml:4: steps[0].disk_fault: unknown value \"full\" "
                  "(expected eio or enospc)");
  CAF_CHECK_EQUAL(parse_error("traffic: {connections: 8, threads: 4}\n"
                              "steps: []\n"),
                  "s.yaml:1: traffic.threads: fewer threads (4) than "
                  "connections (8): every connection sends to threads of "
                  "its own");
  CAF_CHECK_EQUAL(parse_error(std::string{minimal}
                              + "  - {at: 1s, provider_fault: \"503\", "
                                "for: 1s}\n"),
                  "s.yaml:4: steps[0].provider_fault: needs fault servers "
                  "(set providers.fault_servers to 1 or 2)");
  CAF_CHECK_EQUAL(parse_error("providers: {fault_servers: 1}\n"
                              + std::string{minimal}
                              + "  - {at: 1s, provider_fault: \"status=abc\", "
                                "for: 1s}\n"),
                  "s.yaml:5: steps[0].provider_fault: bad fault 'status=abc': "
                  "status needs a number");
  CAF_CHECK_EQUAL(parse_error(std::string{minimal}
                              + "  - {at: 1s, kill_point: batch_writen}\n"),
                  "s.yaml:4: steps[0].kill_point: unknown kill point "
                  "'batch_writen' (known: session_created, session_written, "
                  "provider_call, call_completed, message_enqueued, "
                  "tree_link_written, batch_written, tool_call_committed, "
                  "tool_finished, compaction_summarized)");
  CAF_CHECK_EQUAL(
    parse_error(std::string{minimal} + "  - {at: 1s, kill_node: 0, for: 1s}\n"),
    "s.yaml:4: steps[0].for: a kill_node step takes no for");
  CAF_CHECK_EQUAL(parse_error("steps: [\n"),
                  "s.yaml:2: YAML syntax error: end of sequence flow not "
                  "found");
}

CAF_TEST(a cluster scenario reads its nodes timings and cluster steps) {
  auto sc = parse_scenario(R"(nodes:
  count: 3
  initially: 1
  cluster:
    shards: 16
    heartbeat: 100ms
    lease_ttl: 500ms
    route_timeout: 4s
    handoff_timeout: 0s
    rebalance_batch: 2
traffic: {duration: 20s}
steps:
  - {at: 1s, start_node: 1}
  - {at: 2s, start_node: 2}
  - {at: 3s, link_fault: blackhole, for: 1s, link: database, node: 1}
  - {at: 5s, link_fault: reset, for: 1s, link: peers, node: 2}
  - {at: 7s, restart_db: kill9, for: 2s}
  - {at: 10s, pause_node: 1, for: 1s}
  - {at: 12s, drain_node: 2}
  - {at: 14s, drain_node: 1}
  - {at: 16s, start_node: 2}
)",
                           "s.yaml", "/base");
  CAF_REQUIRE(sc);
  CAF_CHECK(sc->cluster());
  CAF_CHECK_EQUAL(sc->nodes.count, 3u);
  CAF_CHECK_EQUAL(sc->nodes.initially, 1u);
  auto& c = sc->nodes.cluster;
  CAF_CHECK_EQUAL(c.shards, 16u);
  CAF_CHECK_EQUAL(c.heartbeat.count(), 100);
  CAF_CHECK_EQUAL(c.lease_ttl.count(), 500);
  CAF_CHECK_EQUAL(c.route_timeout.count(), 4000);
  CAF_CHECK_EQUAL(c.handoff_timeout.count(), 0);
  CAF_CHECK_EQUAL(c.rebalance_batch, 2u);
  CAF_REQUIRE_EQUAL(sc->steps.size(), 9u);
  CAF_CHECK(sc->steps[0].what == action::start_node);
  CAF_CHECK_EQUAL(sc->steps[1].node, 2u);
  CAF_CHECK(sc->breaks_link("database"));
  CAF_CHECK(sc->breaks_link("peers"));
  CAF_CHECK(!sc->breaks_link("clients"));
  CAF_CHECK_EQUAL(to_string(sc->steps[0]), "start_node 1");
  CAF_CHECK_EQUAL(to_string(sc->steps[2]),
                  "link_fault blackhole for 1s on the link from node 1 to "
                  "the database");
  CAF_CHECK_EQUAL(to_string(sc->steps[3]),
                  "link_fault reset for 1s on the links from the other "
                  "nodes to node 2");
  CAF_CHECK(sc->steps[4].what == action::restart_db);
  CAF_CHECK_EQUAL(sc->steps[4].db_mode, "kill9");
  CAF_CHECK_EQUAL(sc->steps[4].lasting.count(), 2000);
  CAF_CHECK_EQUAL(to_string(sc->steps[4]), "restart_db kill9 for 2s");
  CAF_CHECK_EQUAL(to_string(sc->steps[6]), "drain_node 2");
  CAF_CHECK_EQUAL(node_id(0), "n1");
  CAF_CHECK_EQUAL(node_id(2), "n3");
}

CAF_TEST(cluster true takes the test timings and every node starts) {
  auto sc = parse_scenario(R"(nodes: {count: 2, cluster: true}
traffic: {duration: 5s}
steps: []
)",
                           "s.yaml", "/base");
  CAF_REQUIRE(sc);
  CAF_CHECK(sc->cluster());
  CAF_CHECK_EQUAL(sc->nodes.initially, 2u);
  CAF_CHECK_EQUAL(sc->nodes.cluster.shards, 32u);
  CAF_CHECK_EQUAL(sc->nodes.cluster.heartbeat.count(), 200);
  CAF_CHECK_EQUAL(sc->nodes.cluster.lease_ttl.count(), 1000);
  CAF_CHECK_EQUAL(sc->nodes.cluster.route_timeout.count(), 8000);
  auto off = parse_scenario("nodes: {count: 2, cluster: false}\nsteps: []\n",
                            "s.yaml", "/base");
  CAF_REQUIRE(off);
  CAF_CHECK(!off->cluster());
}

CAF_TEST(slow turns need a delay and a share of the messages) {
  auto sc = parse_scenario(R"(nodes: {slow_delay: 20s}
traffic: {duration: 5s, slow_every: 10}
steps: []
)",
                           "s.yaml", "/base");
  CAF_REQUIRE(sc);
  CAF_CHECK_EQUAL(sc->nodes.slow_delay.count(), 20000);
  CAF_CHECK_EQUAL(sc->traffic.slow_every, 10u);
  CAF_CHECK_EQUAL(parse_error("traffic: {slow_every: 10}\nsteps: []\n"),
                  "s.yaml:1: traffic.slow_every: slow messages need "
                  "nodes.slow_delay (how long the built-in provider takes "
                  "to answer them)");
  CAF_CHECK_EQUAL(parse_error("nodes: {slow_delay: 2s}\nsteps: []\n"),
                  "s.yaml:1: nodes.slow_delay: no message is slow: set "
                  "traffic.slow_every");
  CAF_CHECK_EQUAL(parse_error("nodes: {slow_delay: 2s}\n"
                              "providers: {fault_servers: 1}\n"
                              "traffic: {slow_every: 3}\nsteps: []\n"),
                  "s.yaml:1: nodes.slow_delay: only the built-in provider "
                  "answers slowly (no nodes.config, no "
                  "providers.fault_servers)");
}

CAF_TEST(cluster errors name the key path and line) {
  const std::string cluster = "nodes: {count: 2, cluster: true}\n"
                              "traffic: {duration: 10s}\nsteps:\n";
  const std::string late = "nodes: {count: 2, initially: 1, cluster: true}\n"
                           "traffic: {duration: 10s}\nsteps:\n";
  CAF_CHECK_EQUAL(parse_error("nodes: {count: 2, initially: 1}\nsteps: []\n"),
                  "s.yaml:1: nodes.initially: nodes that are not running at "
                  "first join a cluster with start_node: set nodes.cluster");
  CAF_CHECK_EQUAL(parse_error("nodes: {count: 2, initially: 3, cluster: "
                              "true}\nsteps: []\n"),
                  "s.yaml:1: nodes.initially: expected an integer in 1..2, "
                  "got \"3\"");
  CAF_CHECK_EQUAL(parse_error("nodes:\n  cluster: {shard: 4}\nsteps: []\n"),
                  "s.yaml:2: nodes.cluster.shard: unknown key (did you mean "
                  "shards?)");
  CAF_CHECK_EQUAL(parse_error("nodes:\n  cluster: {heartbeat: 500ms, "
                              "lease_ttl: 1s}\nsteps: []\n"),
                  "s.yaml:2: nodes.cluster.lease_ttl: at least 3 heartbeats "
                  "(1.5s)");
  CAF_CHECK_EQUAL(parse_error("nodes:\n  cluster: {route_timeout: 50ms}\n"
                              "steps: []\n"),
                  "s.yaml:2: nodes.cluster.route_timeout: at least 100 ms");
  CAF_CHECK_EQUAL(
    parse_error(std::string{minimal} + "  - {at: 1s, start_node: 0}\n"),
    "s.yaml:4: steps[0].start_node: needs a cluster (set "
    "nodes.cluster)");
  CAF_CHECK_EQUAL(parse_error(std::string{minimal}
                              + "  - {at: 1s, restart_db: stop, for: 1s}\n"),
                  "s.yaml:4: steps[0].restart_db: needs a cluster (set "
                  "nodes.cluster)");
  CAF_CHECK_EQUAL(parse_error(std::string{minimal}
                              + "  - {at: 1s, link_fault: reset, for: 1s, "
                                "link: database}\n"),
                  "s.yaml:4: steps[0].link: needs a cluster (set "
                  "nodes.cluster)");
  CAF_CHECK_EQUAL(parse_error(cluster + "  - {at: 1s, start_node: 1}\n"),
                  "s.yaml:4: steps[0].start_node: node 1 is already running "
                  "then (start_node starts a node beyond nodes.initially, "
                  "or a drained one)");
  CAF_CHECK_EQUAL(parse_error(late + "  - {at: 1s, kill_node: 1}\n"),
                  "s.yaml:4: steps[0].kill_node: node 1 is not running then "
                  "(not started yet, or drained)");
  CAF_CHECK_EQUAL(parse_error(late + "  - {at: 1s, drain_node: 0}\n"),
                  "s.yaml:4: steps[0].drain_node: node 0 is the last running "
                  "node then: nobody would take its shards");
  CAF_CHECK_EQUAL(parse_error(cluster + "  - {at: 1s, drain_node: 1}\n"
                              + "  - {at: 2s, pause_node: 1, for: 1s}\n"),
                  "s.yaml:5: steps[1].pause_node: node 1 is not running then "
                  "(not started yet, or drained)");
  CAF_CHECK_EQUAL(parse_error(cluster + "  - {at: 1s, kill_node: 1}\n"
                              + "  - {at: 2s, start_node: 1}\n"),
                  "s.yaml:5: steps[1].start_node: node 1 is down then "
                  "(killed: restart_node starts it again)");
  CAF_CHECK_EQUAL(parse_error(cluster
                              + "  - {at: 1s, restart_db: stop, node: 1, "
                                "for: 1s}\n"),
                  "s.yaml:4: steps[0].node: restart_db acts on the database "
                  "every node shares, not on a node");
  CAF_CHECK_EQUAL(parse_error(cluster
                              + "  - {at: 1s, restart_db: crash, "
                                "for: 1s}\n"),
                  "s.yaml:4: steps[0].restart_db: unknown value \"crash\" "
                  "(expected stop or kill9)");
  CAF_CHECK_EQUAL(parse_error(cluster + "  - {at: 1s, restart_db: stop}\n"),
                  "s.yaml:4: steps[0].for: missing required key (expected "
                  "how long the fault lasts)");
  CAF_CHECK_EQUAL(
    parse_error(cluster + "  - {at: 1s, disk_fault: eio, for: 1s}\n"),
    "s.yaml:4: steps[0].disk_fault: cluster nodes keep their "
    "data in PostgreSQL, not on their disk (break the node's "
    "link to the database instead: link_fault with link: "
    "database)");
  CAF_CHECK_EQUAL(parse_error(cluster
                              + "  - {at: 1s, link_fault: reset, for: 1s, "
                                "link: peers, server: 0}\n"),
                  "s.yaml:4: steps[0].server: a link to peers is chosen by "
                  "node, not server");
}

CAF_TEST(every shipped scenario is valid) {
  auto root = std::getenv("KEEL_SOURCE_DIR");
  CAF_REQUIRE(root != nullptr);
  size_t count = 0;
  for (auto& entry : std::filesystem::directory_iterator{std::string{root}
                                                         + "/config/chaos"}) {
    ++count;
    auto sc = load_scenario(entry.path().string());
    CAF_MESSAGE(entry.path()
                << ": " << (sc ? "valid" : error_message(sc.error())));
    CAF_CHECK(sc);
  }
  CAF_CHECK_GREATER_OR_EQUAL(count, 2u);
}
