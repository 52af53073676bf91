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
// CAF_CHECK_FAILED names caf::term unqualified.
using caf::term;

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

// The node and a greeted client. A node that does not start (a broken
// build) is a failed check naming why, and each test then ends at once:
// the suite reports instead of aborting. Helpers that cannot go on do the
// same (a failed check, an empty frame).
struct fixture {
  temp_dir dir{"keel-disk"};
  std::unique_ptr<node_process> node;
  std::unique_ptr<ws_client> ws;

  fixture() {
    try {
      node = std::make_unique<node_process>(dir.str(), node_yaml(dir));
      ws = connect_client(node->address());
    } catch (const std::exception& e) {
      CAF_CHECK_FAILED(
        "the node did not start or greet a client: " << e.what());
    }
  }

  bool started() const {
    return ws != nullptr;
  }

  json disk(bool fail, bool no_space) {
    auto res
      = api_call(node->address(), "POST", "/api/v1/chaos/disk",
                 json{{"fail_writes", fail}, {"no_space", no_space}}.dump());
    if (!res) {
      CAF_CHECK_FAILED(
        "POST /api/v1/chaos/disk failed: " << render(res.error()));
      return json::object();
    }
    return *res;
  }

  // Sends and returns the ack or error frame for `id` (an empty object if
  // none came).
  json send(const std::string& thread, const std::string& id,
            const std::string& text) {
    if (auto err = ws->send_text(protocol::send_frame(thread, id, text))) {
      CAF_CHECK_FAILED("cannot send " << id << ": " << render(err));
      return json::object();
    }
    auto answer = receive_until(*ws, [&](auto& j) {
      return (j["type"] == "ack" || j["type"] == "error") && j["id"] == id;
    });
    if (!answer) {
      CAF_CHECK_FAILED("no ack or error for " << id << " within 10 s");
      return json::object();
    }
    return *answer;
  }

  // Whether `frame` acknowledges `id`; if not, a failed check shows what
  // came instead.
  static bool acked(const json& frame, const std::string& id) {
    if (frame.value("type", "") == "ack")
      return true;
    CAF_CHECK_FAILED(id << " was not acknowledged: " << frame.dump());
    return false;
  }

  // The frame `pred` picks within `timeout`, or a failed check naming
  // `what`.
  template <class Pred>
  std::optional<json> expect(const std::string& what, Pred pred,
                             std::chrono::milliseconds timeout = 10s) {
    auto frame = receive_until(*ws, pred, timeout);
    if (!frame)
      CAF_CHECK_FAILED("no " << what << " within " << timeout.count() << " ms");
    return frame;
  }

  json history(const std::string& thread) {
    auto entries = read_history(*ws, thread);
    if (!entries) {
      CAF_CHECK_FAILED("no history of " << thread);
      return json::array();
    }
    return *entries;
  }
};

} // namespace

CAF_TEST_FIXTURE_SCOPE(disk_fault_tests, fixture)

CAF_TEST(a failed write is never acknowledged and a resend succeeds) {
  if (!started())
    return;
  // (Each frame is held in a variable: CAF's check macros bind a reference
  // to their argument, which must outlive the statement.)
  auto first = send("t", "m1", "first");
  if (!acked(first, "m1"))
    return;
  auto state = disk(true, true);
  CAF_CHECK_EQUAL(state.value("fail_writes", false), true);
  auto refused = send("t", "m2", "second");
  CAF_CHECK_EQUAL(refused.value("type", ""), "error");
  CAF_CHECK_EQUAL(refused.value("code", ""), "storage_io");
  KEEL_CHECK_CONTAINS(refused.value("message", ""), "space");
  auto new_thread = send("new-thread", "n1", "hello");
  CAF_CHECK_EQUAL(new_thread.value("type", ""), "error");
  state = disk(false, false);
  CAF_CHECK_GREATER(state.value("failed_writes", uint64_t{0}), 0u);
  // Nothing of m2 was stored: the resend is new, not a duplicate.
  auto ack = send("t", "m2", "second");
  if (!acked(ack, "m2"))
    return;
  CAF_CHECK_EQUAL(ack.value("duplicate", true), false);
  expect("reply to m2",
         [](auto& j) { return j["type"] == "reply" && j["id"] == "m2"; });
}

CAF_TEST(a failed commit tells the thread and the turn is retried) {
  if (!started())
    return;
  auto ack = send("u", "m1", "slow please");
  if (!acked(ack, "m1"))
    return;
  auto seq = ack.value("seq", uint64_t{0});
  // The provider answers after 1 s; its commit then fails.
  disk(true, false);
  auto notice = expect(
    "retrying status",
    [](auto& j) { return j["type"] == "status" && j["state"] == "retrying"; },
    10s);
  if (!notice)
    return;
  KEEL_CHECK_CONTAINS(notice->value("detail", ""), "storing the answer failed");
  disk(false, false);
  auto reply = expect(
    "reply to m1",
    [](auto& j) { return j["type"] == "reply" && j["id"] == "m1"; }, 20s);
  if (!reply)
    return;
  CAF_CHECK_EQUAL(reply->value("text", ""), "slow answer");
  CAF_CHECK_EQUAL(outcomes_by_seq(history("u"))[seq], 1);
  auto stopped = node->stop();
  CAF_CHECK_EQUAL(stopped, 0);
  if (stopped == 0)
    CAF_CHECK_EQUAL(data_violations(dir.str() + "/data"), "");
}

CAF_TEST(chaos switches are refused when fault injection is off) {
  temp_dir other{"keel-disk-off"};
  std::unique_ptr<node_process> plain;
  try {
    plain = std::make_unique<node_process>(
      other.str(), slow_echo_yaml("plain", other.str() + "/data", "0s"));
  } catch (const std::exception& e) {
    CAF_CHECK_FAILED(
      "the node without fault injection did not start: " << e.what());
    return;
  }
  auto res = http_request(plain->address(), "POST", "/api/v1/chaos/disk",
                          R"({"fail_writes": true})");
  if (!res) {
    CAF_CHECK_FAILED("POST /api/v1/chaos/disk failed: " << render(res.error()));
    return;
  }
  CAF_CHECK_EQUAL(res->status, 403u);
  auto j = nlohmann::json::parse(res->body, nullptr, false);
  if (!j.is_object()) {
    CAF_CHECK_FAILED("the refusal is no JSON object: " << res->body);
    return;
  }
  CAF_CHECK_EQUAL(j.value("code", ""), "forbidden");
  KEEL_CHECK_CONTAINS(j.value("message", ""), "chaos.disk");
  CAF_CHECK_EQUAL(plain->stop(), 0);
}

CAF_TEST_FIXTURE_SCOPE_END()
