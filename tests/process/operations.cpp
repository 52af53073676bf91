#define CAF_SUITE operations

#include <caf/test/unit_test.hpp>

#include <csignal>
#include <future>

#include "node_client.hpp"
#include "temp_dir.hpp"

#include "keel/tools/bench_recovery.hpp"

using namespace keel;
using namespace keel::test;
using namespace std::chrono_literals;

namespace {

using steady = std::chrono::steady_clock;

/// A node whose scripted provider answers "think" after `think_delay`,
/// fails "busy" (overloaded) and answers anything else at once.
std::string ops_yaml(const temp_dir& dir, const std::string& think_delay,
                     const std::string& drain_timeout,
                     const std::string& extra = {}) {
  return "node:\n  name: ops-test\n  data_dir: " + dir.str()
         + "/data\ngateway:\n  port: 0\n  admin_token: adm1n\n"
           "  rate_limit:\n    per_second: 0\n"
           "providers:\n  - name: ops\n    kind: scripted\n    script:\n"
           "      - match: think\n        delay: "
         + think_delay
         + "\n        reply: \"thought about {input}\"\n"
           "      - match: busy\n        fail: overloaded\n"
           "      - reply: \"answer to {input}\"\n"
           "pools:\n  - name: default\n    chain: [ops]\n"
           "    max_attempts: 2\n    retry:\n      base_delay: 10ms\n"
           "shutdown:\n  drain_timeout: "
         + drain_timeout + "\nlogging:\n  level: warn\n" + extra;
}

/// The status code and `status` field of a probe.
std::pair<unsigned, std::string> probe(const endpoint& ep,
                                       const std::string& path) {
  auto res = http_request(ep, "GET", path, {}, 2s);
  if (!res)
    return {0, render(res.error())};
  auto body = nlohmann::json::parse(res->body, nullptr, false);
  return {res->status, body.is_object() ? body.value("status", "") : ""};
}

/// Asks `path` until it answers `status` (each answer is an event: the
/// node's state changed or not yet), up to 10 s; returns the last answer.
std::pair<unsigned, std::string>
await_probe(const endpoint& ep, const std::string& path, unsigned status) {
  auto deadline = steady::now() + 10s;
  auto last = probe(ep, path);
  while (last.first != status && steady::now() < deadline)
    last = probe(ep, path);
  return last;
}

/// Sends `text` to `thread` and waits for its ack; returns the seq.
uint64_t send_acked(ws_client& client, const std::string& thread,
                    const std::string& id, const std::string& text) {
  auto err = client.send_text(protocol::send_frame(thread, id, text));
  if (err)
    CAF_FAIL("cannot send: " << render(err));
  auto ack = receive_until(client, [&](auto& j) {
    return j["type"] == "ack" && j["id"] == id;
  });
  if (!ack)
    CAF_FAIL("no ack for " << id);
  return (*ack)["seq"].template get<uint64_t>();
}

/// The value of the first series in a Prometheus exposition whose line
/// starts with `name` and contains each of `labels`; -1 if there is none.
double series(const std::string& text, const std::string& name,
              const std::vector<std::string>& labels = {}) {
  std::istringstream in{text};
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(name, 0) != 0
        || (line.size() > name.size() && line[name.size()] != ' '
            && line[name.size()] != '{'))
      continue;
    bool all = true;
    for (auto& label : labels)
      all = all && line.find(label) != std::string::npos;
    if (all)
      return std::stod(line.substr(line.rfind(' ') + 1));
  }
  return -1;
}

struct fixture {
  temp_dir dir{"keel-ops"};

  /// The node's metrics, scraped with the admin token.
  std::string scrape(node_process& node) {
    auto res = http_request(node.admin_address(), "GET", "/metrics");
    if (!res || res->status != 200)
      CAF_FAIL("cannot scrape /metrics");
    return res->body;
  }
};

} // namespace

CAF_TEST_FIXTURE_SCOPE(operations_tests, fixture)

CAF_TEST(a drain lets the turn under way finish and refuses new work) {
  node_process node{dir.str(), ops_yaml(dir, "1500ms", "20s")};
  auto ep = node.address();
  auto client = connect_client(ep);
  CAF_CHECK_EQUAL(probe(ep, "/readyz").first, 200u);
  send_acked(*client, "t1", "m1", "think hard");
  auto stopped = std::async(std::launch::async,
                            [&node] { return node.drain_stop(); });
  CAF_CHECK_EQUAL(await_probe(ep, "/readyz", 503).second, "draining");
  CAF_CHECK_EQUAL(probe(ep, "/healthz").first, 200u);
  // New work is refused, with its id, on the open connection...
  CAF_REQUIRE(!client->send_text(protocol::send_frame("t1", "m2", "more")));
  auto refused = receive_until(*client, [](auto& j) {
    return j["type"] == "error" && j["id"] == "m2";
  });
  CAF_REQUIRE(refused);
  CAF_CHECK_EQUAL((*refused)["code"], "draining");
  // ... and new connections are not taken.
  CAF_CHECK(!ws_client::connect(ep, "/ws", 2s));
  // The turn under way answers before the node closes the connection.
  auto reply = receive_until(*client, [](auto& j) {
    return j["type"] == "reply" && j["reply_to"] == 1;
  });
  CAF_REQUIRE(reply);
  CAF_CHECK_EQUAL((*reply)["text"], "thought about think hard");
  CAF_CHECK(!receive_until(
    *client, [](auto&) { return false; }, 10s));
  CAF_CHECK_EQUAL(client->close_code().value_or(0), 1001);
  CAF_CHECK_EQUAL(stopped.get(), 0);
  // Answered once: the restart has nothing to run again.
  node.start();
  auto again = connect_client(node.address());
  auto entries = read_history(*again, "t1");
  CAF_REQUIRE(entries);
  CAF_CHECK_EQUAL(outcomes_by_seq(*entries), (std::map<uint64_t, int>{{1, 1}}));
  CAF_CHECK_EQUAL(count_text(*entries, "reply", "thought about"), 1u);
  // The drain stopped t1 without writing its session; the stop marked it
  // SUSPENDED, so the restart's recovery found no ACTIVE session.
  auto recovery = http_request(node.admin_address(), "GET", "/api/v1/recovery");
  CAF_REQUIRE(recovery);
  auto report = nlohmann::json::parse(recovery->body);
  CAF_CHECK_EQUAL(report["sessions"].get<uint64_t>(), 1u);
  CAF_CHECK_EQUAL(report["suspended"].get<uint64_t>(), 0u);
}

CAF_TEST(a turn outliving the drain timeout is answered after the restart) {
  node_process node{dir.str(), ops_yaml(dir, "4s", "300ms")};
  auto client = connect_client(node.address());
  send_acked(*client, "t1", "m1", "think long");
  auto start = steady::now();
  CAF_CHECK_EQUAL(node.drain_stop(), 0);
  // Stopped at the drain timeout, not at the end of the turn.
  CAF_CHECK_LESS(steady::now() - start, 3s);
  node.start();
  auto again = connect_client(node.address());
  CAF_REQUIRE(!again->send_text(protocol::subscribe_frame("t1")));
  auto entries = read_history(*again, "t1");
  CAF_REQUIRE(entries);
  if (count_text(*entries, "reply", "thought about") == 0)
    CAF_CHECK(receive_until(*again, [](auto& j) {
      return j["type"] == "reply" && j["reply_to"] == 1;
    }));
  entries = read_history(*again, "t1");
  CAF_REQUIRE(entries);
  CAF_CHECK_EQUAL(outcomes_by_seq(*entries), (std::map<uint64_t, int>{{1, 1}}));
}

CAF_TEST(a second termination signal stops at once and loses nothing) {
  node_process node{dir.str(), ops_yaml(dir, "4s", "30s")};
  auto ep = node.address();
  auto client = connect_client(ep);
  send_acked(*client, "t1", "m1", "think long");
  ::kill(node.pid(), SIGTERM);
  CAF_CHECK_EQUAL(await_probe(ep, "/readyz", 503).second, "draining");
  auto start = steady::now();
  CAF_CHECK_EQUAL(node.drain_stop(), 0); // The second SIGTERM.
  CAF_CHECK_LESS(steady::now() - start, 3s);
  node.start();
  auto again = connect_client(node.address());
  CAF_REQUIRE(!again->send_text(protocol::subscribe_frame("t1")));
  CAF_CHECK(receive_until(
    *again, [](auto& j) { return j["type"] == "reply" && j["reply_to"] == 1; },
    15s));
}

CAF_TEST(metrics move with traffic and failures) {
  node_process node{dir.str(),
                    ops_yaml(dir, "10ms", "5s", "chaos:\n  kill: true\n")};
  auto anonymous = http_request(node.address(), "GET", "/metrics");
  CAF_REQUIRE(anonymous);
  CAF_CHECK_EQUAL(anonymous->status, 401u);
  auto client = connect_client(node.address());
  for (auto thread : {"t1", "t2", "t3"}) {
    send_acked(*client, thread, std::string{"m-"} + thread, "hello");
    CAF_REQUIRE(receive_until(*client, [&](auto& j) {
      return j["type"] == "reply" && j["thread"] == thread;
    }));
  }
  send_acked(*client, "t4", "m-t4", "busy now");
  auto failed = receive_until(*client, [](auto& j) {
    return j["type"] == "error" && j["thread"] == "t4";
  });
  CAF_REQUIRE(failed);
  auto code = (*failed)["code"].get<std::string>();
  auto text = scrape(node);
  CAF_CHECK_EQUAL(series(text, "keel_messages_accepted_total"), 4);
  CAF_CHECK_EQUAL(series(text, "keel_messages_answered_total"), 3);
  CAF_CHECK_EQUAL(
    series(text, "keel_messages_failed_total", {"code=\"" + code + "\""}), 1);
  CAF_CHECK_EQUAL(series(text, "keel_ack_latency_seconds_count"), 4);
  CAF_CHECK_EQUAL(series(text, "keel_reply_latency_seconds_count"), 4);
  CAF_CHECK_GREATER(series(text, "keel_store_flush_seconds_count"), 0);
  CAF_CHECK_EQUAL(series(text, "keel_provider_calls_total",
                         {"provider=\"ops\"", "outcome=\"ok\""}),
                  3);
  CAF_CHECK_EQUAL(series(text, "keel_provider_calls_total",
                         {"error_class=\"overloaded\"", "outcome=\"failed\""}),
                  2);
  CAF_CHECK_GREATER_OR_EQUAL(
    series(text, "keel_provider_breaker_state", {"provider=\"ops\""}), 0);
  CAF_CHECK_EQUAL(series(text, "keel_threads_stored"), 4);
  CAF_CHECK_EQUAL(series(text, "keel_gateway_connections"), 1);
  CAF_CHECK_EQUAL(series(text, "keel_ready"), 1);
  CAF_CHECK_EQUAL(series(text, "keel_draining"), 0);
  CAF_CHECK_EQUAL(series(text, "keel_supervisor_restarts_total"), -1);
  auto kill = http_request(node.admin_address(), "POST", "/api/v1/kill",
                           R"({"path":"/orchestrator"})");
  CAF_REQUIRE(kill);
  CAF_CHECK_EQUAL(kill->status, 200u);
  text = scrape(node);
  CAF_CHECK_EQUAL(
    series(text, "keel_supervisor_restarts_total", {"supervisor=\"root\""}), 1);
}

CAF_TEST(a node is not ready until its recovery ran) {
  // 10,000 threads with a pending message: resuming them takes the
  // orchestrator far longer than the node takes to say it listens.
  bench::populate_options pop;
  pop.db_dir = dir.str() + "/data/db";
  pop.threads = 20000;
  pop.pending_fraction = 0.5;
  pop.turns = 1;
  CAF_REQUIRE(bench::populate_crashed_store(pop));
  node_process node{dir.str(), ops_yaml(dir, "10ms", "5s")};
  auto ep = node.address();
  auto first = probe(ep, "/readyz");
  CAF_CHECK_EQUAL(first, std::make_pair(503u, std::string{"not_ready"}));
  CAF_CHECK_EQUAL(await_probe(ep, "/readyz", 200).second, "ready");
  auto report = http_request(node.admin_address(), "GET", "/api/v1/recovery");
  CAF_REQUIRE(report);
  auto j = nlohmann::json::parse(report->body);
  auto resumed = j.value("roots_resumed", uint64_t{0})
                 + j.value("children_resumed", uint64_t{0});
  CAF_CHECK_EQUAL(resumed, 10000u);
}

CAF_TEST(readiness follows the store) {
  node_process node{dir.str(),
                    ops_yaml(dir, "10ms", "5s", "chaos:\n  disk: true\n")};
  auto ep = node.address();
  auto admin = node.admin_address();
  auto disk = [&](bool fail) {
    auto res = http_request(admin, "POST", "/api/v1/chaos/disk",
                            fail ? R"({"fail_writes":true})"
                                 : R"({"fail_writes":false})");
    CAF_REQUIRE(res);
    CAF_REQUIRE_EQUAL(res->status, 200u);
  };
  auto client = connect_client(ep);
  disk(true);
  CAF_REQUIRE(!client->send_text(protocol::send_frame("t1", "m1", "hello")));
  CAF_CHECK(receive_until(*client, [](auto& j) {
    return j["type"] == "error" && j["id"] == "m1";
  }));
  CAF_CHECK_EQUAL(await_probe(ep, "/readyz", 503).second, "not_ready");
  CAF_CHECK_EQUAL(probe(ep, "/healthz").first, 200u);
  // Unready while the store still fails, though the node probes it.
  auto failed_flushes = [&] {
    auto metrics = http_request(admin, "GET", "/metrics");
    CAF_REQUIRE(metrics);
    return series(metrics->body, "keel_store_flush_failures_total");
  };
  auto before = failed_flushes();
  auto deadline = steady::now() + 10s;
  bool ready_seen = false;
  while (failed_flushes() < before + 1 && steady::now() < deadline)
    ready_seen = ready_seen || probe(ep, "/readyz").first == 200u;
  CAF_CHECK(!ready_seen);
  CAF_CHECK_GREATER_OR_EQUAL(failed_flushes(), before + 1);
  // Ready again once the store writes, before any client writes: an unready
  // node may get no traffic.
  disk(false);
  CAF_CHECK_EQUAL(await_probe(ep, "/readyz", 200).second, "ready");
  send_acked(*client, "t1", "m2", "hello again");
}

CAF_TEST_FIXTURE_SCOPE_END()
