#define CAF_SUITE gateway_front

// The gateway's front door against real keel-node processes: the Host
// check on every path, the admin API of a loopback node without an admin
// token, WebSocket control frames under the rate limit, the HTTP parser's
// refusals, and connections that never authenticate.

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <caf/test/unit_test.hpp>

#include <boost/beast/websocket.hpp>

#include "node_client.hpp"
#include "raw_http.hpp"
#include "temp_dir.hpp"
#include "text_checks.hpp"

#include "keel/protocol.hpp"

using namespace keel;
using namespace keel::test;
using namespace std::chrono_literals;

namespace {

namespace websocket = boost::beast::websocket;

constexpr auto client_token = "client-5e2d71";
constexpr auto admin_token = "admin-93a0c4";

/// A node on loopback with a client token, `gateway` appended to its
/// gateway section (the admin token unless `admin` is false).
std::string node_yaml(const temp_dir& dir, const std::string& gateway = {},
                      bool admin = true) {
  return "node:\n  name: front\n  data_dir: " + dir.str()
         + "/data\ngateway:\n  port: 0\n  token: " + client_token + "\n"
         + (admin ? std::string{"  admin_token: "} + admin_token + "\n" : "")
         + gateway
         + "providers:\n  - name: echo\n    kind: echo\n"
           "pools:\n  - name: default\n    chain: [echo]\n"
           "logging:\n  level: info\n";
}

/// A greeted WebSocket of Beast's own, which can send control frames.
struct raw_ws {
  boost::asio::io_context ioc;
  websocket::stream<beast::tcp_stream> ws{ioc};

  explicit raw_ws(const endpoint& ep) {
    beast::get_lowest_layer(ws).connect(
      tcp::endpoint{boost::asio::ip::make_address(ep.host), ep.port});
    ws.set_option(
      websocket::stream_base::decorator([](websocket::request_type& req) {
        req.set(http::field::authorization,
                std::string{"Bearer "} + client_token);
      }));
    ws.handshake(to_string(ep), "/ws");
    beast::flat_buffer hello;
    ws.read(hello);
  }

  /// Reads (and drops) frames until the stream ends; `timed_out` when it
  /// is still open after `timeout`.
  beast::error_code read_until_closed(std::chrono::seconds timeout) {
    beast::error_code result = boost::asio::error::timed_out;
    beast::flat_buffer buf;
    std::function<void()> next = [&] {
      ws.async_read(buf, [&](beast::error_code err, size_t) {
        if (err) {
          result = err;
          return;
        }
        buf.clear();
        next();
      });
    };
    next();
    ioc.restart();
    ioc.run_for(timeout);
    return result;
  }
};

} // namespace

CAF_TEST(every path checks the host name) {
  temp_dir dir{"keel-front-host"};
  node_process node{dir.str(), node_yaml(dir)};
  auto ep = node.address();
  auto evil = api_headers(ep);
  evil["Host"] = "evil.example";
  for (auto target : {"/healthz", "/readyz", "/", "/app.js", "/nope"}) {
    auto res = raw_request(ep, "GET", target, evil);
    CAF_MESSAGE(target << " with Host evil.example: " << res.status);
    CAF_CHECK_EQUAL(res.status, 421u);
    KEEL_CHECK_CONTAINS(message_of(res), "evil.example");
  }
  CAF_CHECK_EQUAL(raw_request(ep, "GET", "/healthz", api_headers(ep)).status,
                  200u);
  CAF_CHECK_EQUAL(raw_request(ep, "GET", "/", api_headers(ep)).status, 200u);
  CAF_CHECK_EQUAL(node.stop(), 0);
}

CAF_TEST(a loopback node without an admin token wants the client token) {
  temp_dir dir{"keel-front-admin"};
  node_process node{dir.str(), node_yaml(dir, {}, false)};
  auto ep = node.address();
  auto none = raw_request(ep, "GET", "/api/v1/status", api_headers(ep));
  CAF_MESSAGE("admin API without a token: " << none.status);
  CAF_CHECK_EQUAL(none.status, 401u);
  CAF_CHECK_EQUAL(
    raw_request(ep, "GET", "/api/v1/status", api_headers(ep, "wrong")).status,
    401u);
  CAF_CHECK_EQUAL(raw_request(ep, "GET", "/metrics", api_headers(ep)).status,
                  401u);
  auto client = raw_request(ep, "GET", "/api/v1/status",
                            api_headers(ep, client_token));
  CAF_CHECK_EQUAL(client.status, 200u);
  // keelctl falls back to the client token when it has no admin token.
  auto status = keelctl_at(ep, {"--token", client_token, "status"});
  CAF_CHECK_EQUAL(status.exit_code, 0);
  CAF_CHECK_EQUAL(node.stop(), 0);
  KEEL_CHECK_CONTAINS(node.stderr_text(), "gateway.admin_token is not set");
}

CAF_TEST(websocket pings beyond the rate limit close the connection) {
  temp_dir dir{"keel-front-ping"};
  node_process node{dir.str(), node_yaml(dir, "  rate_limit:\n"
                                              "    per_second: 20\n"
                                              "    burst: 20\n")};
  raw_ws flooder{node.address()};
  beast::error_code err;
  size_t sent = 0;
  for (; sent < 500 && !err; ++sent)
    flooder.ws.ping({}, err);
  // Beast answers pings while it reads: read until the node closes.
  err = flooder.read_until_closed(5s);
  CAF_MESSAGE(sent << " pings sent; the read ended with: " << err.message()
                   << ", close code " << flooder.ws.reason().code);
  CAF_CHECK(err == websocket::error::closed);
  CAF_CHECK_EQUAL(flooder.ws.reason().code,
                  static_cast<uint16_t>(websocket::close_code::policy_error));
  // A client within the limit keeps its connection.
  raw_ws quiet{node.address()};
  for (int i = 0; i < 5; ++i)
    quiet.ws.ping({});
  auto client = connect_client(node.address());
  CAF_REQUIRE(!client->send_text(protocol::ping_frame("after")));
  CAF_CHECK(receive_until(*client, [](auto& j) {
    return j["type"] == "pong" && j["id"] == "after";
  }));
  auto status = api_call(node.admin_address(), "GET", "/api/v1/status");
  CAF_REQUIRE(status);
  CAF_CHECK_GREATER((*status)["gateway"]["rate_limited_frames"].get<uint64_t>(),
                    0u);
  CAF_CHECK_EQUAL(node.stop(), 0);
}
