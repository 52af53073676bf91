#define CAF_SUITE disk_faults

#include <caf/test/unit_test.hpp>

#include "node_client.hpp"
#include "temp_dir.hpp"
#include "text_checks.hpp"

#include "keel/protocol.hpp"

using namespace keel;
using namespace keel::test;
using namespace std::chrono_literals;
using nlohmann::json;

namespace {

// "slow" answers after 1 s, so faults can be switched on mid-turn.
std::string node_yaml(const temp_dir& dir) {
  return "node:\n  name: disk-test\n  data_dir: " + dir.str()
         + "/data\n"
           "gateway:\n  port: 0\n"
           "logging:\n  level: error\n"
           "chaos:\n  disk: true\n"
           "providers:\n"
           "  - name: script\n    kind: scripted\n"
           "    script:\n"
           "      - match: \"slow\"\n        reply: \"slow answer\"\n"
           "        delay: 1s\n"
           "      - reply: \"answer to {input}\"\n"
           "pools:\n  - name: default\n    chain: [script]\n";
}

struct fixture {
  temp_dir dir{"keel-disk"};
  node_process node{dir.str(), node_yaml(dir)};
  std::unique_ptr<ws_client> ws = connect_client(node.address());

  json disk(bool fail, bool no_space) {
    auto res
      = api_call(node.address(), "POST", "/api/v1/chaos/disk",
                 json{{"fail_writes", fail}, {"no_space", no_space}}.dump());
    CAF_REQUIRE(res);
    return *res;
  }

  // Sends and returns the ack or error frame for `id`.
  json send(const std::string& thread, const std::string& id,
            const std::string& text) {
    CAF_REQUIRE(!ws->send_text(protocol::send_frame(thread, id, text)));
    auto answer = receive_until(*ws, [&](auto& j) {
      return (j["type"] == "ack" || j["type"] == "error") && j["id"] == id;
    });
    CAF_REQUIRE(answer);
    return *answer;
  }

  json history(const std::string& thread) {
    auto entries = read_history(*ws, thread);
    CAF_REQUIRE(entries);
    return *entries;
  }
};

} // namespace

CAF_TEST_FIXTURE_SCOPE(disk_fault_tests, fixture)

CAF_TEST(a failed write is never acknowledged and a resend succeeds) {
  // (Each frame is held in a variable: CAF's check macros bind a reference
  // to their argument, which must outlive the statement.)
  auto first = send("t", "m1", "first");
  CAF_REQUIRE_EQUAL(first["type"], "ack");
  auto state = disk(true, true);
  CAF_CHECK_EQUAL(state["fail_writes"], true);
  auto refused = send("t", "m2", "second");
  CAF_CHECK_EQUAL(refused["type"], "error");
  CAF_CHECK_EQUAL(refused["code"], "storage_io");
  auto message = refused["message"].get<std::string>();
  CAF_CHECK(message.find("space") != std::string::npos);
  auto new_thread = send("new-thread", "n1", "hello");
  CAF_CHECK_EQUAL(new_thread["type"], "error");
  state = disk(false, false);
  CAF_CHECK_GREATER(state["failed_writes"].get<uint64_t>(), 0u);
  // Nothing of m2 was stored: the resend is new, not a duplicate.
  auto ack = send("t", "m2", "second");
  CAF_REQUIRE_EQUAL(ack["type"], "ack");
  CAF_CHECK_EQUAL(ack["duplicate"], false);
  auto reply = receive_until(*ws, [](auto& j) {
    return j["type"] == "reply" && j["id"] == "m2";
  });
  CAF_CHECK(reply);
}

CAF_TEST(a failed commit tells the thread and the turn is retried) {
  auto ack = send("u", "m1", "slow please");
  CAF_REQUIRE_EQUAL(ack["type"], "ack");
  auto seq = ack["seq"].get<uint64_t>();
  // The provider answers after 1 s; its commit then fails.
  disk(true, false);
  auto notice = receive_until(
    *ws,
    [](auto& j) { return j["type"] == "status" && j["state"] == "retrying"; },
    10s);
  CAF_REQUIRE(notice);
  CAF_CHECK(
    (*notice)["detail"].get<std::string>().find("storing the answer failed")
    != std::string::npos);
  disk(false, false);
  auto reply = receive_until(
    *ws, [](auto& j) { return j["type"] == "reply" && j["id"] == "m1"; }, 20s);
  CAF_REQUIRE(reply);
  CAF_CHECK_EQUAL((*reply)["text"], "slow answer");
  CAF_CHECK_EQUAL(outcomes_by_seq(history("u"))[seq], 1);
  CAF_REQUIRE_EQUAL(node.stop(), 0);
  CAF_CHECK_EQUAL(data_violations(dir.str() + "/data"), "");
}

CAF_TEST(chaos switches are refused when fault injection is off) {
  temp_dir other{"keel-disk-off"};
  node_process plain{other.str(),
                     slow_echo_yaml("plain", other.str() + "/data", "0s")};
  auto res = http_request(plain.address(), "POST", "/api/v1/chaos/disk",
                          R"({"fail_writes": true})");
  CAF_REQUIRE(res);
  CAF_CHECK_EQUAL(res->status, 403u);
  auto j = nlohmann::json::parse(res->body);
  CAF_CHECK_EQUAL(j["code"], "forbidden");
  KEEL_CHECK_CONTAINS(j["message"].get<std::string>(), "chaos.disk");
  CAF_CHECK_EQUAL(plain.stop(), 0);
}

CAF_TEST_FIXTURE_SCOPE_END()
