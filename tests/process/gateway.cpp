#define CAF_SUITE gateway

#include <caf/test/unit_test.hpp>

#include "node_client.hpp"
#include "temp_dir.hpp"
#include "text_checks.hpp"

#include "keel/protocol.hpp"

using namespace keel;
using namespace keel::test;

namespace {

std::string node_yaml(const temp_dir& dir, const std::string& extra = "") {
  return "node:\n  name: gw-test\n  data_dir: " + dir.str()
         + "/data\ngateway:\n  port: 0\n  max_frame_bytes: 65536\n"
           "  max_text_bytes: 1024\n"
         + extra + "chaos:\n  kill: true\nlogging:\n  level: warn\n";
}

struct fixture {
  temp_dir dir{"keel-gw"};
  node_process node{dir.str(), node_yaml(dir)};
};

// Expects an error frame with `code`, then proves the connection still works.
void expect_error_and_alive(ws_client& client, const std::string& code) {
  auto err = receive_until(client,
                           [](auto& j) { return j["type"] == "error"; });
  CAF_REQUIRE(err);
  CAF_CHECK_EQUAL((*err)["code"], code);
  CAF_CHECK(!(*err)["message"].get<std::string>().empty());
  CAF_REQUIRE(!client.send_text(protocol::ping_frame("alive")));
  auto pong = receive_until(client,
                            [](auto& j) { return j["type"] == "pong"; });
  CAF_REQUIRE(pong);
  CAF_CHECK_EQUAL((*pong)["id"], "alive");
}

} // namespace

CAF_TEST_FIXTURE_SCOPE(gateway_tests, fixture)

CAF_TEST(healthz answers over plain HTTP) {
  auto res = http_request(node.address(), "GET", "/healthz");
  CAF_REQUIRE(res);
  CAF_CHECK_EQUAL(res->status, 200u);
}

CAF_TEST(a message is acknowledged then answered) {
  auto client = connect_client(node.address());
  CAF_REQUIRE(!client->send_text(protocol::send_frame("t1", "m1", "hi")));
  auto ack = receive_until(*client, [](auto& j) { return j["type"] == "ack"; });
  CAF_REQUIRE(ack);
  CAF_CHECK_EQUAL((*ack)["id"], "m1");
  CAF_CHECK_EQUAL((*ack)["seq"], 1);
  auto reply = receive_until(*client,
                             [](auto& j) { return j["type"] == "reply"; });
  CAF_REQUIRE(reply);
  CAF_CHECK_EQUAL((*reply)["text"], "echo: hi");
  CAF_CHECK_EQUAL((*reply)["id"], "m1");
  CAF_REQUIRE(
    !client->send_text(protocol::history_request_frame("t1", "h1", 0, 10)));
  auto hist = receive_until(*client,
                            [](auto& j) { return j["type"] == "history"; });
  CAF_REQUIRE(hist);
  CAF_CHECK_EQUAL((*hist)["entries"].size(), 2u);
}

CAF_TEST(a subscriber sees the events of messages other clients send) {
  auto watcher = connect_client(node.address());
  CAF_REQUIRE(!watcher->send_text(protocol::subscribe_frame("shared", "s1")));
  auto confirmed = receive_until(*watcher, [](auto& j) {
    return j["type"] == "subscribed";
  });
  CAF_REQUIRE(confirmed);
  CAF_CHECK_EQUAL((*confirmed)["subscribed"], true);
  auto sender = connect_client(node.address());
  CAF_REQUIRE(!sender->send_text(protocol::send_frame("shared", "m1", "hey")));
  auto reply = receive_until(*watcher,
                             [](auto& j) { return j["type"] == "reply"; });
  CAF_REQUIRE(reply);
  CAF_CHECK_EQUAL((*reply)["text"], "echo: hey");
  CAF_REQUIRE(!watcher->send_text(protocol::unsubscribe_frame("shared", "s2")));
  auto left = receive_until(*watcher,
                            [](auto& j) { return j["type"] == "subscribed"; });
  CAF_REQUIRE(left);
  CAF_CHECK_EQUAL((*left)["subscribed"], false);
}

CAF_TEST(api fields of the wrong type get 400 naming the field) {
  struct bad_case {
    const char* target;
    const char* body;
    const char* field;
  };
  bad_case cases[] = {
    {"/api/v1/kill", R"({"path":"/no-such-actor","reason":42})", "'reason'"},
    {"/api/v1/kill", R"({"path":"/no-such-actor","reason":null})", "'reason'"},
    {"/api/v1/kill", R"({"path":7})", "'path'"},
    {"/api/v1/kill", R"({"reason":"x"})", "'path'"},
    {"/api/v1/kill", R"(["path"])", "JSON object"},
  };
  for (auto& c : cases) {
    auto res = http_request(node.address(), "POST", c.target, c.body);
    CAF_REQUIRE(res);
    CAF_CHECK_EQUAL(res->status, 400u);
    auto j = nlohmann::json::parse(res->body);
    CAF_CHECK_EQUAL(j["code"], "bad_request");
    KEEL_CHECK_CONTAINS(j["message"].get<std::string>(), c.field);
  }
  // The bridge survived every one of them.
  CAF_CHECK(api_call(node.address(), "GET", "/api/v1/status"));
}

CAF_TEST(subscriptions survive a restart of the gateway bridge) {
  auto watcher = connect_client(node.address());
  CAF_REQUIRE(!watcher->send_text(protocol::subscribe_frame("kept", "s1")));
  CAF_REQUIRE(
    receive_until(*watcher, [](auto& j) { return j["type"] == "subscribed"; }));
  auto killed = api_call(node.address(), "POST", "/api/v1/kill",
                         R"({"path":"/gateway","reason":"test"})");
  CAF_REQUIRE(killed);
  // The bridge is back once the API answers through it again. A request
  // that reached the dying bridge is never answered (the gateway answers 504
  // after 10 s), so each try gives up after a second.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds{20};
  while (!api_call(node.address(), "GET", "/api/v1/status", {},
                   std::chrono::seconds{1}))
    CAF_REQUIRE(std::chrono::steady_clock::now() < deadline);
  // A status answer may still come from the dying bridge, and a frame sent
  // to it is lost unanswered: like any client, resend (same id) until the
  // message is acknowledged.
  auto sender = connect_client(node.address());
  std::optional<nlohmann::json> ack;
  for (int attempt = 0; !ack && attempt < 10; ++attempt) {
    CAF_REQUIRE(
      !sender->send_text(protocol::send_frame("kept", "m1", "still")));
    ack = receive_until(
      *sender, [](auto& j) { return j["type"] == "ack"; },
      std::chrono::seconds{2});
  }
  CAF_REQUIRE(ack);
  auto reply = receive_until(*watcher,
                             [](auto& j) { return j["type"] == "reply"; });
  CAF_REQUIRE(reply);
  CAF_CHECK_EQUAL((*reply)["text"], "echo: still");
}

CAF_TEST(
  every kind of bad frame gets an error and the connection stays usable) {
  auto client = connect_client(node.address());
  struct bad_case {
    std::string payload;
    std::string code;
  };
  std::vector<bad_case> cases{
    {"{not json", "bad_json"},
    {"[1,2,3]", "bad_frame"},
    {R"({"type":"dance"})", "unknown_type"},
    {R"({"type":"send","thread":"t","text":"x"})", "missing_field"},
    {R"({"type":"send","thread":42,"id":"a","text":"x"})", "wrong_type"},
    {R"({"type":"send","thread":"bad/id","id":"a","text":"x"})", "bad_value"},
    {R"({"type":"send","thread":"t","id":"a","text":")" + std::string(2000, 'x')
       + R"("})",
     "too_large"},
    {R"({"type":"send","thread":"t","id":"a","text":"\udc00"})",
     "invalid_utf8"},
  };
  for (auto& c : cases) {
    CAF_MESSAGE("bad frame: " << c.payload.substr(0, 60));
    CAF_REQUIRE(!client->send_text(c.payload));
    expect_error_and_alive(*client, c.code);
  }
  CAF_MESSAGE("binary frame");
  CAF_REQUIRE(!client->send_binary("\x01\x02\xff"));
  expect_error_and_alive(*client, "binary_frame");
}

// On a node taking frames of 1 KiB at most, so the oversized frame leaves
// the client in one write, before the node closes the connection (a frame
// past 64 KiB could still be in the client's write when the node's close
// reset the connection).
CAF_TEST(an oversized frame closes the connection with 1009) {
  temp_dir small{"keel-gw-small"};
  node_process small_node{small.str(),
                          "node:\n  name: gw-small\n  data_dir: " + small.str()
                            + "/data\ngateway:\n  port: 0\n"
                              "  max_frame_bytes: 1024\n"
                              "  max_text_bytes: 512\nlogging:\n  level: "
                              "warn\n"};
  auto client = connect_client(small_node.address());
  CAF_REQUIRE(!client->send_text(std::string(2000, 'x')));
  auto next = client->receive();
  CAF_CHECK(!next);
  CAF_CHECK_EQUAL(client->close_code(), std::optional<uint16_t>{1009});
  // The node is unaffected.
  auto other = connect_client(small_node.address());
  CAF_CHECK(!other->send_text(protocol::ping_frame("p")));
  CAF_CHECK(receive_until(*other, [](auto& j) { return j["type"] == "pong"; }));
}

CAF_TEST(invalid UTF
         - 8 in a text frame closes with 1007 as RFC 6455 requires) {
  auto client = connect_client(node.address());
  CAF_REQUIRE(!client->send_text("{\"type\":\"ping\",\"id\":\"\xff\xfe\"}"));
  auto next = client->receive();
  CAF_CHECK(!next);
  CAF_CHECK_EQUAL(client->close_code(), std::optional<uint16_t>{1007});
}

CAF_TEST_FIXTURE_SCOPE_END()

CAF_TEST(a configured token refuses upgrades without it) {
  temp_dir dir{"keel-gw-token"};
  node_process node{dir.str(), node_yaml(dir, "  token: s3cret\n")};
  auto ep = node.address();
  CAF_CHECK_EQUAL(ep.token, "s3cret");
  auto good = ws_client::connect(ep);
  CAF_CHECK(good);
  auto missing = ep;
  missing.token.clear();
  auto refused = ws_client::connect(missing);
  CAF_REQUIRE(!refused);
  CAF_CHECK_EQUAL(refused.error(), ec::unauthorized);
  auto wrong = ep;
  wrong.token = "nope";
  CAF_CHECK(!ws_client::connect(wrong));
  // Without an admin token, the admin API of a loopback gateway takes the
  // client token (tests/process/security.cpp covers the admin token).
  auto status = http_request(missing, "GET", "/api/v1/status");
  CAF_REQUIRE(status);
  CAF_CHECK_EQUAL(status->status, 401u);
  auto ok = http_request(ep, "GET", "/api/v1/status");
  CAF_REQUIRE(ok);
  CAF_CHECK_EQUAL(ok->status, 200u);
}
