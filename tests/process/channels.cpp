#define CAF_SUITE channels

// Outbound channels against a real node: replies reach a webhook (signed)
// and a Telegram-compatible Bot API, through 429s with retry_after, a
// markup the chat cannot parse, 5xx answers and a node killed mid-send; a
// reply no attempt delivered becomes a dead letter an operator's retry
// delivers, also when the node was killed during an earlier retry. The
// receiver is libtools' channel_sink_server, in this process, so it
// outlives the node.

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include <caf/test/unit_test.hpp>

#include <nlohmann/json.hpp>

#include "node_client.hpp"
#include "temp_dir.hpp"
#include "test_store.hpp"
#include "text_checks.hpp"

#include "keel/channel_format.hpp"
#include "keel/protocol.hpp"
#include "keel/tools/channel_sink_server.hpp"

using namespace keel;
using namespace keel::test;
using namespace std::chrono_literals;
using channel_sink::channel_sink_server;
using channel_sink::parse_fault;
using json = nlohmann::json;

namespace {

constexpr const char* secret = "hook-secret";

std::string node_yaml(const temp_dir& dir, const channel_sink_server& sink) {
  auto base = sink.base_url();
  return "node:\n  name: channels-test\n  data_dir: " + dir.str()
         + "/data\ngateway:\n  port: 0\nlogging:\n  level: info\n"
           "delivery:\n"
           "  dead_letters:\n    interval: 1h\n"
           "  channels:\n"
           "    - name: hook\n      kind: webhook\n      url: "
         + base + "/events\n      secret: " + secret
         + "\n      threads: [\"hook-*\"]\n"
           "      retry: {max_attempts: 3, base_delay: 50ms, max_delay: "
           "200ms}\n"
           "      timeout: 5s\n"
           "    - name: tg\n      kind: telegram\n      url: "
         + base
         + "\n      token: \"123:abc\"\n      chat_id: \"42\"\n"
           "      threads: [\"tg-1\"]\n"
         + storage_yaml(dir.str() + "/data");
}

struct fixture {
  channel_sink_server sink{{0, {}, {}, secret}};
  temp_dir dir{"keel-channels"};
  node_process node{dir.str(), node_yaml(dir, sink)};

  // Sends `text` on `thread` and waits for the reply over the WebSocket.
  json answer(const std::string& thread, const std::string& id,
              const std::string& text) {
    auto client = connect_client(node.address());
    CAF_REQUIRE(!client->send_text(protocol::send_frame(thread, id, text)));
    auto reply = receive_until(*client, [&](auto& j) {
      return j["type"] == "reply" && j.value("id", "") == id;
    });
    CAF_REQUIRE(reply);
    return *reply;
  }

  command_result keelctl(const std::vector<std::string>& args) {
    return keelctl_at(node.address(), args);
  }

  json letters() {
    return dead_letters_at(node.address());
  }

  // The dead letters once there are `n` (or after 20 s).
  json letters_once(size_t n) {
    json xs;
    poll_until(
      [&] {
        xs = letters();
        return xs.size() == n;
      },
      20s);
    return xs;
  }
};

} // namespace

CAF_TEST_FIXTURE_SCOPE(channels_tests, fixture)

CAF_TEST(a reply reaches the webhook signed and with its idempotency key) {
  auto reply = answer("hook-1", "m1", "hello");
  CAF_REQUIRE(sink.wait_for_delivered(1, 10s));
  auto got = sink.delivered().at(0);
  CAF_CHECK_EQUAL(got.protocol, "webhook");
  CAF_CHECK_EQUAL(got.target, "/events");
  CAF_CHECK(got.signature_ok);
  CAF_CHECK_EQUAL(got.event, "reply");
  auto seq = reply["seq"].get<seq_t>();
  CAF_CHECK_EQUAL(got.idempotency_key,
                  reply_idempotency_key("hook", "hook-1", seq));
  CAF_CHECK_EQUAL(got.text, reply["text"].get<std::string>());
  auto body = json::parse(got.body);
  CAF_CHECK_EQUAL(body["thread"], "hook-1");
  CAF_CHECK_EQUAL(body["seq"], seq);
  // A thread bound to no channel sends nothing.
  answer("other", "m2", "quiet");
  answer("hook-1", "m3", "again");
  CAF_REQUIRE(sink.wait_for_delivered(2, 10s));
  CAF_CHECK_EQUAL(sink.requests().size(), 2u);
}

CAF_TEST(telegram waits out retry_after and falls back to plain text) {
  sink.push(*parse_fault("429;retry_after=1", nullptr));
  sink.push(*parse_fault("parse_error", nullptr));
  answer("tg-1", "m1", "*bold* words");
  CAF_REQUIRE(sink.wait_for_delivered(1, 15s));
  auto xs = sink.requests();
  CAF_REQUIRE_EQUAL(xs.size(), 3u);
  CAF_CHECK_EQUAL(xs[0].status, 429);
  CAF_CHECK_GREATER_OR_EQUAL(xs[1].at - xs[0].at, 900ms);
  CAF_CHECK_EQUAL(xs[0].parse_mode, "Markdown");
  CAF_CHECK_EQUAL(xs[1].status, 400);
  CAF_CHECK_EQUAL(xs[2].status, 200);
  CAF_CHECK_EQUAL(xs[2].parse_mode, "");
  CAF_CHECK_EQUAL(xs[2].chat_id, "42");
  KEEL_CHECK_CONTAINS(xs[0].text, "*bold*");
  CAF_CHECK(xs[2].text.find('*') == std::string::npos);
  KEEL_CHECK_CONTAINS(xs[2].text, "bold words");
  CAF_CHECK_EQUAL(xs[0].target, "/bot123:abc/sendMessage");
}

CAF_TEST(a reply no attempt delivers is a dead letter an operator retries) {
  sink.set_default(*parse_fault("500", nullptr));
  auto reply = answer("hook-2", "m1", "lost?");
  auto xs = letters_once(1);
  CAF_REQUIRE_EQUAL(xs.size(), 1u);
  CAF_CHECK_EQUAL(sink.requests().size(), 3u);
  CAF_CHECK_EQUAL(xs[0]["status"], "pending");
  CAF_CHECK_EQUAL(xs[0]["channels"], json::array({"hook"}));
  KEEL_CHECK_CONTAINS(xs[0]["reason"].get<std::string>(), "HTTP 500");
  sink.set_default(*parse_fault("ok", nullptr));
  auto id = xs[0]["id"].get<std::string>();
  auto retried = keelctl({"dlq", "retry", id});
  CAF_CHECK_EQUAL(retried.exit_code, 0);
  CAF_REQUIRE(sink.wait_for_delivered(1, 10s));
  auto got = sink.delivered();
  CAF_CHECK_EQUAL(got.at(0).idempotency_key,
                  reply_idempotency_key("hook", "hook-2",
                                        reply["seq"].get<seq_t>()));
  // The retry sends the same event as the first attempts.
  auto first = json::parse(sink.requests().at(0).body);
  auto resent = json::parse(got.at(0).body);
  CAF_CHECK_EQUAL(resent["reply_to"], reply["reply_to"]);
  CAF_CHECK_EQUAL(resent["reply_to"], first["reply_to"]);
  CAF_CHECK_EQUAL(resent["at"], first["at"]);
  auto after = letters();
  CAF_CHECK_EQUAL(after.at(0)["status"], "delivered");
}

CAF_TEST(a node killed during a send delivers the reply after its restart) {
  sink.push(*parse_fault("delay=1500ms", nullptr));
  answer("hook-3", "m1", "survive");
  CAF_REQUIRE(sink.wait_for_requests(1, 10s));
  node.kill9();
  node.start();
  // The restarted node sends it again; a receiver deduplicating by the
  // idempotency key has it once.
  CAF_REQUIRE(sink.wait_for_requests(2, 15s));
  CAF_REQUIRE(sink.wait_for_delivered(1, 10s));
  auto xs = sink.requests();
  CAF_CHECK_EQUAL(xs[0].idempotency_key, xs[1].idempotency_key);
  CAF_CHECK_EQUAL(sink.delivered().size(), 1u);
  CAF_CHECK(letters().empty());
}

CAF_TEST(a node killed during a dead letter retry delivers it after restart) {
  sink.set_default(*parse_fault("500", nullptr));
  auto reply = answer("hook-5", "m1", "late");
  auto xs = letters_once(1);
  CAF_REQUIRE_EQUAL(xs.size(), 1u);
  auto id = xs[0]["id"].get<std::string>();
  sink.set_default(*parse_fault("ok", nullptr));
  sink.push(*parse_fault("delay=2s", nullptr));
  // The operator's retry is under way (the receiver holds it) when the
  // node dies: nothing of it is stored, the letter stays pending.
  std::thread retry{[&] { keelctl({"dlq", "retry", id}); }};
  CAF_REQUIRE(sink.wait_for_requests(4, 10s));
  node.kill9();
  retry.join();
  node.start();
  auto pending = letters();
  CAF_REQUIRE_EQUAL(pending.size(), 1u);
  CAF_CHECK_EQUAL(pending[0]["status"], "pending");
  CAF_CHECK_EQUAL(keelctl({"dlq", "retry", id}).exit_code, 0);
  auto after = letters();
  CAF_CHECK_EQUAL(after.at(0)["status"], "delivered");
  // Every send carried the reply's one key: a receiver deduplicating by it
  // has the reply once, whether or not the cut retry reached it.
  auto sent = sink.requests();
  CAF_REQUIRE_EQUAL(sent.size(), 5u);
  auto key = reply_idempotency_key("hook", "hook-5", reply["seq"].get<seq_t>());
  for (auto& x : sent)
    CAF_CHECK_EQUAL(x.idempotency_key, key);
  CAF_CHECK_EQUAL(sink.delivered().size(), 1u);
}

CAF_TEST(a backlog of replies to a slow channel is not timed out in line) {
  // The client sends at most 16 at once; replies beyond wait their turn
  // without their wait counting against the 5 s timeout of a send.
  constexpr size_t n = 48;
  sink.set_default(*parse_fault("delay=2s", nullptr));
  auto client = connect_client(node.address());
  for (size_t i = 0; i < n; ++i)
    CAF_REQUIRE(!client->send_text(
      protocol::send_frame("hook-7", "m" + std::to_string(i), "x")));
  size_t replies = 0;
  CAF_REQUIRE(receive_until(*client, [&](auto& j) {
    return j["type"] == "reply" && ++replies == n;
  }));
  CAF_REQUIRE(sink.wait_for_delivered(n, 30s));
  CAF_CHECK_EQUAL(sink.requests().size(), n); // not one timed out
  CAF_CHECK(letters().empty());
}

CAF_TEST(a reply delivered before a kill is not sent again after it) {
  answer("hook-4", "m1", "once");
  answer("hook-4", "m2", "twice");
  CAF_REQUIRE(sink.wait_for_delivered(2, 10s));
  // Between the receiver's answer and the store's record of it a kill would
  // send it again (at least once; the key lets the receiver drop it): kill
  // once the store has it.
  CAF_REQUIRE(poll_until(
    [&] {
      auto db = open_node_store(dir.str() + "/data");
      if (!db)
        return false;
      auto pending = (*db)->deliveries();
      return pending && pending->empty();
    },
    10s));
  node.kill9();
  node.start();
  answer("hook-4", "m3", "thrice");
  CAF_REQUIRE(sink.wait_for_delivered(3, 10s));
  auto xs = sink.requests();
  CAF_CHECK_EQUAL(xs.size(), 3u);
  CAF_CHECK_EQUAL(sink.duplicates(), 0u);
}

CAF_TEST_FIXTURE_SCOPE_END()
