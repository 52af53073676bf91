#define CAF_SUITE supervision

#include <atomic>
#include <condition_variable>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include <caf/test/unit_test.hpp>

#include "node_client.hpp"
#include "temp_dir.hpp"

#include "keel/protocol.hpp"

using namespace keel;
using namespace keel::test;
using namespace std::chrono_literals;

namespace {

std::string node_yaml(const temp_dir& dir) {
  // Five kills within seconds: more than the default intensity allows.
  return slow_echo_yaml("sup-test", dir.str() + "/data", "2ms",
                        "supervision:\n"
                        "  root:\n    max_restarts: 20\n"
                        "  conversations:\n    max_restarts: 1000\n"
                        "chaos:\n  kill: true\n"
                        "logging:\n  level: warn\n");
}

/// Acknowledged messages, recorded outside the node.
struct ack_log {
  std::mutex mtx;
  std::condition_variable grew;
  std::map<std::string, std::set<std::string>> acked;
  size_t count = 0;

  void add(const std::string& thread, const std::string& id) {
    std::lock_guard<std::mutex> guard{mtx};
    if (acked[thread].insert(id).second)
      ++count;
    grew.notify_all();
  }

  bool wait_for(size_t n, std::chrono::seconds timeout) {
    std::unique_lock<std::mutex> guard{mtx};
    return grew.wait_for(guard, timeout, [&] { return count >= n; });
  }
};

// Sends messages one after another like a careful client: a message that
// gets an error or no ack is resent with the same id (at most 20 times), on
// a new connection if the old one broke.
void client_loop(endpoint ep, int client, ack_log& log,
                 std::atomic<bool>& stop) {
  std::unique_ptr<ws_client> ws;
  for (int i = 0; !stop; ++i) {
    auto thread = "c" + std::to_string(client) + "-t" + std::to_string(i % 4);
    auto id = "m" + std::to_string(i);
    for (int attempt = 0; attempt < 20 && !stop; ++attempt) {
      try {
        if (!ws)
          ws = connect_client(ep);
      } catch (...) {
        continue;
      }
      if (ws->send_text(protocol::send_frame(thread, id, "msg " + id))) {
        ws.reset();
        continue;
      }
      auto answer = receive_until(
        *ws,
        [&](auto& j) {
          return (j["type"] == "ack" || j["type"] == "error")
                 && j.value("id", "") == id && !j.contains("reply_to");
        },
        10s);
      if (answer && (*answer)["type"] == "ack") {
        log.add(thread, id);
        break;
      }
      if (!answer)
        ws.reset();
    }
  }
}

nlohmann::json tree_of(const node_process& node) {
  auto tree = api_call(node.address(), "GET", "/api/v1/tree");
  CAF_REQUIRE(tree);
  return (*tree)["tree"];
}

const nlohmann::json* child(const nlohmann::json& parent,
                            const std::string& id) {
  for (auto& c : parent["children"])
    if (c["id"] == id)
      return &c;
  return nullptr;
}

/// Waits until every acknowledged message has exactly one outcome (reply or
/// error) in its thread; fails naming any lost, doubly answered or (after
/// 60 s) unanswered message. Returns the error entries per thread.
std::map<std::string, size_t> expect_one_outcome_each(node_process& node,
                                                      ack_log& log) {
  std::map<std::string, size_t> errors;
  auto ws = connect_client(node.address());
  auto deadline = std::chrono::steady_clock::now() + 60s;
  for (auto& [thread, ids] : log.acked) {
    for (;;) {
      auto entries = read_history(*ws, thread);
      CAF_REQUIRE(entries);
      std::map<std::string, uint64_t> seq_of;
      std::map<uint64_t, int> outcomes;
      errors[thread] = 0;
      for (auto& e : *entries) {
        if (e["kind"] == "user")
          seq_of[e["client_id"]] = e["seq"];
        else
          ++outcomes[e["reply_to"].get<uint64_t>()];
        errors[thread] += e["kind"] == "error" ? 1 : 0;
      }
      size_t answered = 0;
      std::string unanswered;
      for (auto& id : ids) {
        auto i = seq_of.find(id);
        CAF_REQUIRE(i != seq_of.end()); // Acknowledged, so never lost.
        CAF_REQUIRE_LESS_OR_EQUAL(outcomes[i->second], 1);
        answered += outcomes[i->second];
        if (outcomes[i->second] == 0)
          unanswered += " " + id;
      }
      if (answered == ids.size())
        break;
      if (std::chrono::steady_clock::now() >= deadline)
        CAF_FAIL(thread << ": never answered:" << unanswered << "\nnode log:\n"
                        << node.stderr_text());
    }
  }
  return errors;
}

/// Three careful clients sending to the node until `stop()` (or the end of
/// the scope, so a failed REQUIRE never leaves a joinable thread behind).
struct traffic {
  ack_log log;
  std::atomic<bool> stopping{false};
  std::vector<std::thread> clients;

  explicit traffic(const endpoint& ep) {
    for (int c = 0; c < 3; ++c)
      clients.emplace_back(client_loop, ep, c, std::ref(log),
                           std::ref(stopping));
  }

  ~traffic() {
    stop();
  }

  void stop() {
    stopping = true;
    for (auto& t : clients)
      if (t.joinable())
        t.join();
  }
};

/// Runs `keelctl kill PATH` against the node; returns its exit code.
int keelctl_kill(const node_process& node, const std::string& path) {
  auto flag = "127.0.0.1:" + std::to_string(node.address().port);
  return run_command({tool_binary("keelctl"), "kill", "--node", flag, path})
    .exit_code;
}

} // namespace

CAF_TEST(the tree shows every component and the node survives killing each) {
  temp_dir dir{"keel-sup"};
  node_process node{dir.str(), node_yaml(dir)};
  auto tree = tree_of(node);
  for (auto id : {"persistence", "providers", "orchestrator", "gateway"}) {
    auto c = child(tree, id);
    CAF_REQUIRE(c != nullptr);
    CAF_CHECK_EQUAL((*c)["state"], "running");
  }
  CAF_REQUIRE(child(tree, "providers") != nullptr);
  CAF_CHECK(child(*child(tree, "providers"), "default") != nullptr);
  traffic load{node.address()};
  auto& log = load.log;
  for (auto path : {"/providers/default", "/persistence", "/orchestrator",
                    "/gateway", "/persistence"}) {
    CAF_REQUIRE(log.wait_for(log.count + 50, 60s));
    CAF_CHECK_EQUAL(keelctl_kill(node, path), 0);
    CAF_MESSAGE("killed " << path << " after " << log.count << " acks");
  }
  // Traffic flows again after the last kill.
  CAF_REQUIRE(log.wait_for(log.count + 50, 60s));
  load.stop();
  CAF_REQUIRE(node.running());
  CAF_CHECK_EQUAL(keelctl_kill(node, "/no/such/actor"), 1);
  tree = tree_of(node);
  CAF_CHECK_GREATER_OR_EQUAL((*child(tree, "persistence"))["restarts"], 2);
  CAF_CHECK_GREATER_OR_EQUAL((*child(tree, "orchestrator"))["restarts"], 1);
  CAF_CHECK_GREATER_OR_EQUAL((*child(tree, "gateway"))["restarts"], 1);
  CAF_CHECK_GREATER_OR_EQUAL(
    (*child(*child(tree, "providers"), "default"))["restarts"], 1);
  // Every acknowledged message has exactly one outcome in its thread.
  expect_one_outcome_each(node, log);
  CAF_CHECK_EQUAL(node.stop(), 0);
}

CAF_TEST(killing one conversation leaves every other thread untouched) {
  temp_dir dir{"keel-sup-conv"};
  node_process node{dir.str(), node_yaml(dir)};
  traffic load{node.address()};
  auto& log = load.log;
  for (int round = 0; round < 5; ++round) {
    CAF_REQUIRE(log.wait_for(log.count + 40, 60s));
    CAF_CHECK_EQUAL(
      keelctl_kill(node, "/conversations/c0-t" + std::to_string(round % 4)), 0);
  }
  CAF_REQUIRE(log.wait_for(log.count + 40, 60s));
  load.stop();
  auto tree = tree_of(node);
  auto convs = child(tree, "conversations");
  CAF_REQUIRE(convs != nullptr);
  uint64_t restarts = 0;
  for (auto& c : (*convs)["children"])
    restarts += c["restarts"].get<uint64_t>();
  CAF_CHECK_GREATER_OR_EQUAL(restarts, 5u);
  // Every acknowledged message of every thread has exactly one outcome,
  // and the threads of the other clients never saw an error.
  for (auto& [thread, errors] : expect_one_outcome_each(node, log))
    if (thread.rfind("c0-", 0) != 0)
      CAF_CHECK_EQUAL(errors, 0u);
  CAF_CHECK_EQUAL(node.stop(), 0);
}
