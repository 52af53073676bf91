#define CAF_SUITE subscription_cap

#include <caf/test/unit_test.hpp>

#include "node_client.hpp"
#include "temp_dir.hpp"

#include "keel/protocol.hpp"

using namespace keel;
using namespace keel::test;
using nlohmann::json;

namespace {

/// The default `gateway.max_subscriptions_per_connection`.
constexpr int cap = 1000;

// A node with the default cap (and no rate limit: the test subscribes to
// a thousand threads at once).
std::string node_yaml(const temp_dir& dir) {
  return "node:\n  name: subscription-test\n  data_dir: " + dir.str()
         + "/data\n"
           "gateway:\n  port: 0\n  rate_limit:\n    per_second: 0\n"
           "providers:\n"
           "  - name: echo\n    kind: scripted\n"
           "    script:\n      - reply: \"answer to {input}\"\n"
           "pools:\n  - name: default\n    chain: [echo]\n";
}

// Sends `frame` and returns the answer carrying `id`.
json answer(ws_client& ws, const std::string& frame, const std::string& id) {
  CAF_REQUIRE(!ws.send_text(frame));
  auto res = receive_until(ws, [&](auto& j) {
    return j["id"] == id
           && (j["type"] == "subscribed" || j["type"] == "ack"
               || j["type"] == "error");
  });
  CAF_REQUIRE(res);
  return *res;
}

} // namespace

CAF_TEST(subscriptions beyond the cap are refused with a clear error) {
  temp_dir dir{"keel-subscriptions"};
  node_process node{dir.str(), node_yaml(dir)};
  auto ws = connect_client(node.address());
  int subscribed = 0;
  for (int i = 0; i < cap; ++i) {
    auto id = "s" + std::to_string(i);
    auto res
      = answer(*ws, protocol::subscribe_frame("t" + std::to_string(i), id), id);
    subscribed += res["type"] == "subscribed" ? 1 : 0;
  }
  CAF_CHECK_EQUAL(subscribed, cap);
  auto refused = answer(*ws, protocol::subscribe_frame("t-over", "s-over"),
                        "s-over");
  CAF_CHECK_EQUAL(refused["type"], "error");
  CAF_CHECK_EQUAL(refused["code"], "subscription_limit");
  CAF_CHECK_EQUAL(refused["thread"], "t-over");
  CAF_CHECK(refused.value("message", std::string{})
              .find("gateway.max_subscriptions_per_connection")
            != std::string::npos);
  // A message is never refused for the threads its connection follows: a
  // send to one thread more is acknowledged (and follows it).
  auto send = answer(*ws, protocol::send_frame("t-new", "m1", "hi"), "m1");
  CAF_CHECK_EQUAL(send["type"], "ack");
  auto followed = answer(*ws, protocol::send_frame("t0", "m2", "hi"), "m2");
  CAF_CHECK_EQUAL(followed["type"], "ack");
  // Subscribing again to a followed thread is fine, and unsubscribing
  // frees a place (the send made the connection follow one past the cap).
  auto again = answer(*ws, protocol::subscribe_frame("t1", "s6"), "s6");
  CAF_CHECK_EQUAL(again["type"], "subscribed");
  auto over = answer(*ws, protocol::subscribe_frame("t-over", "s8"), "s8");
  CAF_CHECK_EQUAL(over["code"], "subscription_limit");
  for (auto thread : {"t-new", "t2"}) {
    auto gone = answer(*ws, protocol::unsubscribe_frame(thread, "u1"), "u1");
    CAF_CHECK_EQUAL(gone["subscribed"], false);
  }
  auto freed = answer(*ws, protocol::subscribe_frame("t-over", "s7"), "s7");
  CAF_CHECK_EQUAL(freed["type"], "subscribed");
  // Another connection has its own cap.
  auto other = connect_client(node.address());
  auto fresh = answer(*other, protocol::subscribe_frame("t-over", "o1"), "o1");
  CAF_CHECK_EQUAL(fresh["type"], "subscribed");
  CAF_CHECK_EQUAL(node.stop(), 0);
}
