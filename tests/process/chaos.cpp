#define CAF_SUITE chaos

// keel-chaos end to end: a short scenario with actor kills, a kill -9 and a
// restart, a pause and a disk fault must hold every invariant; runs whose
// record is tampered with must fail naming the rule; a bad scenario is
// refused naming the key.

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

bool has(const std::string& str, const std::string& part) {
  return str.find(part) != std::string::npos;
}

/// Five seconds of traffic with one fault of each kind a single node has,
/// its provider calls going to two fault servers.
const char* smoke_scenario = R"(name: smoke
providers:
  fault_servers: 2
traffic:
  connections: 2
  threads: 6
  rate: 30
  duration: 5s
  answer_timeout: 30s
steps:
  - {at: 500ms, kill_actor: /persistence}
  - {at: 1s, kill_actor: /conversations/t1}
  - {at: 1500ms, kill_node: 0}
  - {at: 2s, restart_node: 0}
  - {at: 3s, pause_node: 0, for: 500ms}
  - {at: 4s, disk_fault: eio, for: 300ms}
  - {at: 2500ms, provider_fault: "503", for: 500ms}
  - {at: 3700ms, kill_point: batch_written, probability: 0.2}
)";

command_result run_chaos(const temp_dir& dir, const std::string& yaml,
                         std::vector<std::string> extra = {}) {
  auto path = dir.str() + "/scenario.yaml";
  std::ofstream{path} << yaml;
  std::vector<std::string> argv{tool_binary("keel-chaos"),
                                path,
                                "--work-dir",
                                dir.str() + "/work",
                                "--json",
                                dir.str() + "/report.json",
                                "--html",
                                dir.str() + "/timeline.html"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  return run_command(argv, std::chrono::seconds{120});
}

} // namespace

CAF_TEST(a scenario with every single node fault holds every invariant) {
  temp_dir dir{"keel-chaos"};
  auto res = run_chaos(dir, smoke_scenario);
  CAF_MESSAGE(res.out);
  if (res.exit_code != 0)
    CAF_MESSAGE(res.err);
  CAF_CHECK_EQUAL(res.exit_code, 0);
  CAF_CHECK(has(res.out, "every invariant held"));
  auto report = json::parse(read_text_file(dir.str() + "/report.json"));
  auto& msgs = report["messages"];
  CAF_CHECK_GREATER(msgs["acknowledged"].get<uint64_t>(), 50u);
  CAF_CHECK_EQUAL(msgs["lost"], 0);
  CAF_CHECK_EQUAL(msgs["duplicated"], 0);
  CAF_CHECK_EQUAL(msgs["outcomes"], msgs["acknowledged"]);
  // Eight steps, three of which end later.
  CAF_CHECK_EQUAL(report["steps"].size(), 11u);
  for (auto& step : report["steps"])
    CAF_CHECK_EQUAL(step["error"], "");
  CAF_CHECK_GREATER(report["reconnects"].get<uint64_t>(), 0u);
  CAF_CHECK_GREATER(report["recovery"]["samples"].get<uint64_t>(), 0u);
  auto page = read_text_file(dir.str() + "/timeline.html");
  CAF_CHECK(has(page, "<svg"));
  CAF_CHECK(has(page, "kill_node 0"));
}

CAF_TEST(a tampered record is reported as a violation) {
  for (auto [sabotage, rule] : {std::pair{"lost", "LOST"},
                                {"duplicate", "DUPLICATE"},
                                {"order", "ORDER"}}) {
    temp_dir dir{"keel-chaos"};
    auto res = run_chaos(dir, R"(traffic:
  connections: 1
  threads: 2
  rate: 20
  duration: 1s
steps: []
)",
                         {"--sabotage", sabotage, "--quiet"});
    CAF_MESSAGE(sabotage << ": " << res.out);
    CAF_CHECK_EQUAL(res.exit_code, 1);
    CAF_CHECK(has(res.out, "VIOLATED"));
    CAF_CHECK(has(res.out, std::string{"  "} + rule + ": "));
  }
}

CAF_TEST(a bad scenario is refused naming the key) {
  temp_dir dir{"keel-chaos"};
  auto res = run_chaos(dir, "traffic: {duration: 2s}\nsteps:\n"
                            "  - {at: 1s, kill_actor: persistence}\n");
  CAF_CHECK_EQUAL(res.exit_code, 2);
  CAF_MESSAGE(res.err);
  CAF_CHECK(has(res.err, "steps[0].kill_actor: expected an actor path"));
}

CAF_TEST(a kill point that fires at once is a kill point death) {
  temp_dir dir{"keel-chaos"};
  // At probability 1 the point fires at the first batch the armed node
  // writes: during its recovery (before it listens, when threads were
  // ACTIVE at the kill) or with the next message; both are kill point
  // deaths, after which the node runs unarmed.
  auto res = run_chaos(dir, R"(traffic:
  connections: 2
  threads: 4
  rate: 20
  duration: 4s
steps:
  - {at: 2s, kill_point: batch_written}
)",
                       {"--quiet"});
  CAF_MESSAGE(res.out);
  CAF_CHECK_EQUAL(res.exit_code, 0);
  auto report = json::parse(read_text_file(dir.str() + "/report.json"));
  CAF_CHECK_EQUAL(report["kill_point_deaths"], 1);
  CAF_CHECK_EQUAL(report["unplanned_exits"], 0);
  CAF_CHECK_EQUAL(report["steps"][0]["error"], "");
  CAF_CHECK_EQUAL(report["messages"]["lost"], 0);
}
