#define CAF_SUITE tool_containment

#include <caf/test/unit_test.hpp>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "node_client.hpp"
#include "temp_dir.hpp"
#include "test_store.hpp"
#include "text_checks.hpp"

#include "keel/protocol.hpp"

using namespace keel;
using namespace keel::test;
using namespace std::chrono_literals;
using nlohmann::json;

namespace {

// Tools whose descendants leave their session (setsid), that show their
// resource limits, and that hold until released; a scripted model that
// calls the one the message names.
std::string containment_yaml(const temp_dir& dir) {
  auto d = dir.str();
  return "node:\n  name: containment-test\n  data_dir: " + d
         + "/data\n"
           "gateway:\n  port: 0\n  rate_limit:\n    per_second: 0\n"
           "logging:\n  level: warn\n"
           "tools:\n"
           "  - name: escape\n"
           "    description: Leaves a daemon behind and exits.\n"
           "    command: [sh, -c, 'setsid sleep 300 & echo $! > "
         + d
         + "/escaped.pid']\n"
           "  - name: stuck\n"
           "    description: Waits for a daemon of its own.\n"
           "    command: [sh, -c, 'setsid sleep 300 & echo $! > "
         + d
         + "/stuck.pid; wait']\n"
           "    timeout: 1s\n    grace: 100ms\n"
           "  - name: limits\n"
           "    description: Shows its resource limits.\n"
           "    command: [cat, /proc/self/limits]\n"
           "  - name: tight\n"
           "    description: Shows its own, tighter, limits.\n"
           "    command: [cat, /proc/self/limits]\n"
           "    limits: {memory: 256MiB, cpu_time: 1500ms, open_files: 64, "
           "processes: 50, file_size: 1MiB}\n"
           "  - name: hold\n"
           "    description: Runs until released.\n"
           "    command: [sh, -c, 'touch "
         + d + "/started.$$$$; while [ ! -e " + d
         + "/release ]; do sleep 0.02; done; echo released']\n"
           "threads:\n  tools: [escape, stuck, limits, tight, hold]\n"
           "  max_concurrent_tools: 2\n"
           "providers:\n"
           "  - name: tool-script\n    kind: scripted\n    script:\n"
           "      - {match: 'run escape', reply: '', tool: {name: escape, "
           "arguments: '{}'}}\n"
           "      - {match: 'run stuck', reply: '', tool: {name: stuck, "
           "arguments: '{}'}}\n"
           "      - {match: 'run limits', reply: '', tool: {name: limits, "
           "arguments: '{}'}}\n"
           "      - {match: 'run tight', reply: '', tool: {name: tight, "
           "arguments: '{}'}}\n"
           "      - {match: 'run hold', reply: '', tool: {name: hold, "
           "arguments: '{}'}}\n"
           "      - reply: 'tool said: {input}'\n"
           "pools:\n  - name: default\n    chain: [tool-script]\n"
         + storage_yaml(d + "/data");
}

// True if process `pid` is gone (or a zombie nobody reaped yet).
bool process_gone(pid_t pid) {
  if (::kill(pid, 0) != 0)
    return true;
  auto stat = read_text_file("/proc/" + std::to_string(pid) + "/stat");
  auto end = stat.rfind(')');
  return end != std::string::npos && end + 2 < stat.size()
         && stat[end + 2] == 'Z';
}

// The pid written to `path`; the process is killed at the end of the test
// whatever happens (it must not outlive a failing test either).
struct pid_file {
  explicit pid_file(const std::string& path) {
    auto text = read_text_file(path);
    if (!text.empty())
      pid = static_cast<pid_t>(std::stol(text));
  }
  ~pid_file() {
    if (pid > 0)
      ::kill(pid, SIGKILL);
  }
  pid_t pid = -1;
};

// The soft limit named `name` ("Max open files") in /proc/PID/limits text.
std::string soft_limit(const std::string& limits, const std::string& name) {
  auto at = limits.find(name);
  if (at == std::string::npos)
    return "(no " + name + ")";
  std::istringstream line{limits.substr(at + name.size())};
  std::string value;
  line >> value;
  return value;
}

struct fixture {
  temp_dir dir{"keel-containment"};
  node_process node{dir.str(), containment_yaml(dir)};

  json ask(ws_client& ws, const std::string& thread, const std::string& text) {
    CAF_REQUIRE(!ws.send_text(protocol::send_frame(thread, "m1", text)));
    return answer(ws, thread);
  }

  static json answer(ws_client& ws, const std::string& thread) {
    auto reply = receive_until(
      ws,
      [&](auto& j) {
        return (j["type"] == "reply" || j["type"] == "error")
               && j["thread"] == thread;
      },
      30s);
    CAF_REQUIRE(reply);
    return *reply;
  }

  json status() {
    auto body = api_call(node.address(), "GET", "/api/v1/status");
    CAF_REQUIRE(body);
    return *body;
  }

  size_t started_holds() const {
    size_t n = 0;
    for (auto& entry : std::filesystem::directory_iterator{dir.str()})
      n += entry.path().filename().string().rfind("started.", 0) == 0;
    return n;
  }
};

} // namespace

CAF_TEST_FIXTURE_SCOPE(tool_containment_tests, fixture)

CAF_TEST(a daemon a tool left in a session of its own ends with the run) {
  auto ws = connect_client(node.address());
  auto reply = ask(*ws, "c1", "run escape");
  CAF_CHECK_EQUAL(reply["type"], "reply");
  pid_file daemon{dir.str() + "/escaped.pid"};
  CAF_REQUIRE(daemon.pid > 0);
  CAF_CHECK(process_gone(daemon.pid));
}

CAF_TEST(a daemon of a tool past its timeout is killed with it) {
  auto ws = connect_client(node.address());
  auto reply = ask(*ws, "c2", "run stuck");
  CAF_CHECK_EQUAL(reply["type"], "reply");
  KEEL_CHECK_CONTAINS(reply["text"].get<std::string>(), "timed out");
  pid_file daemon{dir.str() + "/stuck.pid"};
  CAF_REQUIRE(daemon.pid > 0);
  CAF_CHECK(process_gone(daemon.pid));
}

CAF_TEST(a tool runs under the default resource limits) {
  auto ws = connect_client(node.address());
  auto limits = ask(*ws, "c3", "run limits")["text"].get<std::string>();
  CAF_CHECK_EQUAL(soft_limit(limits, "Max open files"), "1024");
  CAF_CHECK_EQUAL(soft_limit(limits, "Max processes"), "1024");
  CAF_CHECK_EQUAL(soft_limit(limits, "Max cpu time"), "600");
  CAF_CHECK_EQUAL(soft_limit(limits, "Max address space"), "4294967296");
  CAF_CHECK_EQUAL(soft_limit(limits, "Max file size"), "1073741824");
}

CAF_TEST(a tool runs under the limits configured for it) {
  auto ws = connect_client(node.address());
  auto limits = ask(*ws, "c4", "run tight")["text"].get<std::string>();
  CAF_CHECK_EQUAL(soft_limit(limits, "Max open files"), "64");
  CAF_CHECK_EQUAL(soft_limit(limits, "Max processes"), "50");
  CAF_CHECK_EQUAL(soft_limit(limits, "Max cpu time"), "2");
  CAF_CHECK_EQUAL(soft_limit(limits, "Max address space"), "268435456");
  CAF_CHECK_EQUAL(soft_limit(limits, "Max file size"), "1048576");
}

CAF_TEST(tool calls past max_concurrent_tools wait their turn) {
  std::vector<std::unique_ptr<ws_client>> clients;
  for (int i = 0; i < 4; ++i) {
    clients.push_back(connect_client(node.address()));
    auto thread = "h" + std::to_string(i);
    CAF_REQUIRE(!clients.back()->send_text(
      protocol::send_frame(thread, "m1", "run hold")));
  }
  // Two run, two wait (bounded: each call reaches the runner in ms). A
  // slot is counted before its process writes its mark, so wait for both.
  auto deadline = std::chrono::steady_clock::now() + 20s;
  auto tools = status()["tools"];
  while ((tools["running"] != 2 || tools["waiting"] != 2 || started_holds() < 2)
         && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(20ms);
    tools = status()["tools"];
  }
  CAF_CHECK_EQUAL(tools.dump(),
                  R"({"max_concurrent":2,"running":2,"waiting":2})");
  CAF_CHECK_EQUAL(started_holds(), 2u);
  std::ofstream{dir.str() + "/release"} << "go";
  for (int i = 0; i < 4; ++i) {
    auto reply = answer(*clients[i], "h" + std::to_string(i));
    KEEL_CHECK_CONTAINS(reply["text"].get<std::string>(), "released");
  }
  CAF_CHECK_EQUAL(started_holds(), 4u);
  auto after = status();
  CAF_CHECK_EQUAL(after["tools"]["running"], 0);
  if (after["tools"]["running"] != 0)
    CAF_MESSAGE(after.dump());
}

CAF_TEST_FIXTURE_SCOPE_END()
