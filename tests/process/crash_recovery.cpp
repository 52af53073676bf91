#define CAF_SUITE crash_recovery

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

// A scripted provider with a little latency, so kills land mid-turn too.
std::string node_yaml(const temp_dir& dir) {
  return slow_echo_yaml("crash-test", dir.str() + "/data", "3ms",
                        "logging:\n  level: warn\n");
}

/// What the clients saw acknowledged, kept outside the node.
struct ack_record {
  std::mutex mtx;
  std::condition_variable grew;
  std::map<std::string, std::set<std::string>> acked; // thread -> ids
  std::atomic<size_t> count{0};

  void add(const std::string& thread, const std::string& id) {
    std::lock_guard<std::mutex> guard{mtx};
    acked[thread].insert(id);
    ++count;
    grew.notify_all();
  }

  /// Waits until `n` messages are acknowledged or the timeout passes.
  bool wait_for(size_t n, std::chrono::seconds timeout) {
    std::unique_lock<std::mutex> guard{mtx};
    return grew.wait_for(guard, timeout, [&] { return count >= n; });
  }
};

// Sends messages one after another until the connection breaks or `stop`.
void client_loop(endpoint ep, int client, int round, ack_record& record,
                 std::atomic<bool>& stop) {
  std::unique_ptr<ws_client> ws;
  try {
    ws = connect_client(ep);
  } catch (...) {
    return;
  }
  for (int i = 0; !stop; ++i) {
    auto thread = "c" + std::to_string(client) + "-t" + std::to_string(i % 8);
    auto id = "r" + std::to_string(round) + "-m" + std::to_string(i);
    if (ws->send_text(protocol::send_frame(thread, id, "msg " + id)))
      return;
    auto ack = receive_until(
      *ws, [&](auto& j) { return j["type"] == "ack" && j["id"] == id; }, 5s);
    if (!ack)
      return; // The node died: this message was never acknowledged.
    record.add(thread, id);
  }
}

// Every acknowledged message must have exactly one outcome (reply or error)
// in its thread's history. Returns the violations; empty when all hold.
// Unanswered messages count as pending while `final` is false.
std::vector<std::string> check_outcomes(const endpoint& ep, ack_record& record,
                                        bool final, bool& all_answered) {
  std::vector<std::string> violations;
  all_answered = true;
  auto ws = connect_client(ep);
  for (auto& [thread, ids] : record.acked) {
    auto entries = read_history(*ws, thread);
    CAF_REQUIRE(entries);
    std::map<std::string, uint64_t> seq_of; // client id -> user seq
    std::map<uint64_t, int> outcomes;       // user seq -> outcomes
    for (auto& e : *entries) {
      if (e["kind"] == "user")
        seq_of[e["client_id"]] = e["seq"];
      else
        ++outcomes[e["reply_to"].get<uint64_t>()];
    }
    for (auto& id : ids) {
      auto i = seq_of.find(id);
      if (i == seq_of.end()) {
        violations.push_back(thread + "/" + id + ": acknowledged but lost");
        continue;
      }
      auto n = outcomes[i->second];
      if (n > 1)
        violations.push_back(thread + "/" + id + ": " + std::to_string(n)
                             + " replies");
      if (n == 0) {
        all_answered = false;
        if (final)
          violations.push_back(thread + "/" + id + ": never answered");
      }
    }
  }
  return violations;
}

} // namespace

CAF_TEST(kill - 9 during traffic loses no acknowledged message) {
  temp_dir dir{"keel-crash"};
  node_process node{dir.str(), node_yaml(dir)};
  ack_record record;
  for (int round = 0; round < 5; ++round) {
    std::atomic<bool> stop{false};
    auto target = record.count.load() + 200;
    std::vector<std::thread> clients;
    for (int c = 0; c < 4; ++c)
      clients.emplace_back(client_loop, node.address(), c, round,
                           std::ref(record), std::ref(stop));
    // Kill once enough new messages were acknowledged (an event the clients
    // produce; bounded so a broken node fails the test instead of hanging).
    auto reached = record.wait_for(target, 60s);
    node.kill9();
    stop = true;
    for (auto& t : clients)
      t.join(); // Before any REQUIRE: a joinable thread must not be destroyed.
    CAF_REQUIRE(reached);
    CAF_MESSAGE("round " << round << ": killed after " << record.count
                         << " acknowledged messages");
    node.start();
    // Recovery answers what was still in the inboxes; wait for it.
    bool all_answered = false;
    std::vector<std::string> violations;
    auto until = std::chrono::steady_clock::now() + 60s;
    do {
      violations = check_outcomes(node.address(), record, false, all_answered);
    } while (violations.empty() && !all_answered
             && std::chrono::steady_clock::now() < until);
    violations = check_outcomes(node.address(), record, true, all_answered);
    for (auto& v : violations)
      CAF_ERROR(v);
    CAF_REQUIRE(violations.empty());
  }
  CAF_CHECK_EQUAL(node.stop(), 0);
}
