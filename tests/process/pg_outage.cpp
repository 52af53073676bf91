#define CAF_SUITE pg_outage

// A node on PostgreSQL while its database goes away: stopped, or killed
// with SIGKILL mid-traffic. Writes fail like disk faults (never
// acknowledged, the thread told `retrying`), and once the server is back
// the same node process carries on and has lost nothing.

#include <caf/test/unit_test.hpp>

#include <atomic>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <thread>

#include "node_client.hpp"
#include "temp_dir.hpp"

#include "keel/protocol.hpp"
#include "keel/tools/pg_server.hpp"

using namespace keel;
using namespace keel::test;
using namespace std::chrono_literals;
using nlohmann::json;

namespace {

// "slow" answers after 1 s, so the database can go away mid-turn. A
// start waits up to 2 minutes for the database.
std::string node_yaml(const temp_dir& dir, const std::string& url,
                      const std::string& log_level = "error") {
  return "node:\n  name: pg-outage\n  data_dir: " + dir.str()
         + "/data\n"
           "gateway:\n  port: 0\n  rate_limit:\n    per_second: 0\n"
           "logging:\n  level: "
         + log_level
         + "\n"
           "storage:\n  backend: postgres\n  postgres:\n    url: \""
         + url
         + "\"\n    statement_timeout: 5s\n    startup_wait: 2m\n"
           "providers:\n"
           "  - name: script\n    kind: scripted\n"
           "    script:\n"
           "      - match: \"slow\"\n        reply: \"slow answer\"\n"
           "        delay: 1s\n"
           "      - reply: \"answer to {input}\"\n"
           "pools:\n  - name: default\n    chain: [script]\n";
}

// Sends and returns the ack or error frame for `id`, or none if the
// connection broke. No test macros: client threads call it.
std::optional<json> answer_to(ws_client& client, const std::string& thread,
                              const std::string& id, const std::string& text) {
  if (client.send_text(protocol::send_frame(thread, id, text)))
    return std::nullopt;
  return receive_until(client, [&](auto& j) {
    return (j["type"] == "ack" || j["type"] == "error") && j["id"] == id;
  });
}

struct fixture {
  temp_dir dir{"keel-pg-outage"};
  // A folder of its own: as root the server runs as `postgres`, which
  // gets this folder and nothing else.
  temp_dir pg_dir{"keel-pg"};
  pg_server pg{pg_dir.str()};
  node_process node{dir.str(), node_yaml(dir, pg.url())};
  std::unique_ptr<ws_client> ws = connect_client(node.address());

  // Sends and returns the ack or error frame for `id`.
  json send(const std::string& thread, const std::string& id,
            const std::string& text) {
    auto answer = answer_to(*ws, thread, id, text);
    CAF_REQUIRE(answer);
    return *answer;
  }

  // Stops the node and the server, then starts the node again, logging
  // warnings, and waits until it says it waits for the database.
  void launch_with_database_down() {
    CAF_REQUIRE_EQUAL(node.stop(), 0);
    pg.stop();
    std::ofstream{node.config_path()} << node_yaml(dir, pg.url(), "warn");
    node.launch();
    CAF_REQUIRE(poll_until(
      [&] {
        return node.stderr_text().find("the database is not ready")
               != std::string::npos;
      },
      20s, 50ms));
  }

  // The oracle on the node's database.
  std::string violations() {
    auto res
      = run_command({tool_binary("keelctl"), "verify", "--pg", pg.url()});
    return res.exit_code == 0 ? std::string{} : res.out + res.err;
  }
};

} // namespace

CAF_TEST_FIXTURE_SCOPE(pg_outage_tests, fixture)

CAF_TEST(a write while the database is down is never acknowledged) {
  auto first = send("t", "m1", "first");
  CAF_REQUIRE_EQUAL(first["type"], "ack");
  pg.stop();
  auto refused = send("t", "m2", "second");
  CAF_CHECK_EQUAL(refused["type"], "error");
  CAF_CHECK_EQUAL(refused["code"], "storage_io");
  CAF_MESSAGE("refusal: " << refused.dump());
  pg.start();
  // Nothing of m2 was stored: the resend is new, not a duplicate, and the
  // node was not restarted for it.
  auto pid = node.pid();
  auto ack = send("t", "m2", "second");
  CAF_REQUIRE_EQUAL(ack["type"], "ack");
  CAF_CHECK_EQUAL(ack["duplicate"], false);
  auto reply = receive_until(*ws, [](auto& j) {
    return j["type"] == "reply" && j["id"] == "m2";
  });
  CAF_CHECK(reply);
  CAF_CHECK_EQUAL(node.pid(), pid);
}

CAF_TEST(a node started while its database is down waits for it) {
  auto first = send("t", "m1", "first");
  CAF_REQUIRE_EQUAL(first["type"], "ack");
  CAF_REQUIRE(receive_until(*ws, [](auto& j) {
    return j["type"] == "reply" && j["id"] == "m1";
  }));
  launch_with_database_down();
  // The server comes back once the node has found it down and waits.
  pg.start();
  node.await_listening();
  ws = connect_client(node.address());
  auto ack = send("t", "m2", "second");
  CAF_REQUIRE_EQUAL(ack["type"], "ack");
  CAF_CHECK_EQUAL(ack["seq"], 3);
  CAF_CHECK(receive_until(*ws, [](auto& j) {
    return j["type"] == "reply" && j["id"] == "m2"
           && j["text"] == "answer to second";
  }));
  CAF_REQUIRE_EQUAL(node.stop(), 0);
  CAF_CHECK_EQUAL(violations(), "");
}

CAF_TEST(a node waiting for its database stops when told) {
  launch_with_database_down();
  // One SIGTERM ends the wait (its 2 minutes are far from over): a clean
  // stop.
  CAF_CHECK_EQUAL(node.drain_stop(10s), 0);
  CAF_CHECK_EQUAL(node.stderr_text().find("cannot start"), std::string::npos);
}

CAF_TEST(a commit while the database is killed tells the thread and retries) {
  auto ack = send("u", "m1", "slow please");
  CAF_REQUIRE_EQUAL(ack["type"], "ack");
  auto seq = ack["seq"].get<uint64_t>();
  // The provider answers after 1 s; its commit finds no database.
  pg.kill9();
  auto notice = receive_until(
    *ws,
    [](auto& j) { return j["type"] == "status" && j["state"] == "retrying"; },
    10s);
  CAF_REQUIRE(notice);
  CAF_MESSAGE("notice: " << notice->dump());
  pg.start();
  auto reply = receive_until(
    *ws, [](auto& j) { return j["type"] == "reply" && j["id"] == "m1"; }, 30s);
  CAF_REQUIRE(reply);
  CAF_CHECK_EQUAL((*reply)["text"], "slow answer");
  auto entries = read_history(*ws, "u");
  CAF_REQUIRE(entries);
  CAF_CHECK_EQUAL(outcomes_by_seq(*entries)[seq], 1);
  CAF_REQUIRE_EQUAL(node.stop(), 0);
  CAF_CHECK_EQUAL(violations(), "");
}

CAF_TEST(kill - 9 of the database under traffic loses no acknowledged message) {
  // Four clients send without pause; each resends a refused message until
  // it is acknowledged, as a client of Keel must.
  std::mutex mtx;
  std::map<std::string, std::set<std::string>> acked; // thread -> ids
  std::atomic<size_t> count{0};
  std::atomic<size_t> refusals{0};
  std::atomic<bool> stop{false};
  std::atomic<size_t> broken{0};
  auto client = [&](int n) {
    auto conn = connect_client(node.address());
    for (int i = 0; !stop; ++i) {
      auto thread = "c" + std::to_string(n) + "-t" + std::to_string(i % 4);
      auto id = "m" + std::to_string(i);
      for (;;) {
        auto answer = answer_to(*conn, thread, id, "msg " + id);
        if (!answer) {
          ++broken;
          return;
        }
        if ((*answer)["type"] == "ack")
          break;
        ++refusals;
        std::this_thread::sleep_for(50ms); // a client's backoff
      }
      std::lock_guard<std::mutex> guard{mtx};
      acked[thread].insert(id);
      ++count;
    }
  };
  std::vector<std::thread> clients;
  for (int n = 0; n < 4; ++n)
    clients.emplace_back(client, n);
  auto wait_for = [&](size_t n) {
    for (int i = 0; i < 600 && count < n; ++i)
      std::this_thread::sleep_for(50ms);
    return count >= n;
  };
  CAF_REQUIRE(wait_for(100));
  pg.kill9();
  auto at_kill = count.load();
  std::this_thread::sleep_for(1s); // the outage
  pg.start();
  auto pid = node.pid();
  CAF_REQUIRE(wait_for(at_kill + 200));
  stop = true;
  for (auto& x : clients)
    x.join();
  CAF_MESSAGE(count << " acknowledged, " << refusals << " refusals");
  CAF_CHECK_GREATER(refusals.load(), 0u);
  CAF_CHECK_EQUAL(broken.load(), 0u);
  CAF_CHECK_EQUAL(node.pid(), pid);
  // Every acknowledged message is in its thread's log once and answered
  // once.
  for (auto& [thread, ids] : acked) {
    std::map<uint64_t, int> outcomes;
    json entries;
    for (int i = 0; i < 100; ++i) {
      auto read = read_history(*ws, thread);
      CAF_REQUIRE(read);
      entries = *read;
      outcomes = outcomes_by_seq(entries);
      size_t users = 0;
      for (auto& e : entries)
        users += e["kind"] == "user" ? 1 : 0;
      if (outcomes.size() == users)
        break;
      std::this_thread::sleep_for(100ms);
    }
    std::set<std::string> stored;
    for (auto& e : entries)
      if (e["kind"] == "user") {
        CAF_CHECK(stored.insert(e["client_id"].get<std::string>()).second);
        CAF_CHECK_EQUAL(outcomes[e["seq"].get<uint64_t>()], 1);
      }
    for (auto& id : ids)
      if (stored.count(id) == 0)
        CAF_FAIL(thread << "/" << id << ": acknowledged but lost");
  }
  CAF_REQUIRE_EQUAL(node.stop(), 0);
  CAF_CHECK_EQUAL(violations(), "");
}

CAF_TEST_FIXTURE_SCOPE_END()
