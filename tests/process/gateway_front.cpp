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

namespace {

/// Sends `GET /healthz` on `sock` (kept open) and returns the status, 0
/// when the node closed the connection instead.
unsigned probe_on(tcp::socket& sock, const endpoint& ep) {
  auto req = "GET /healthz HTTP/1.1\r\nHost: " + to_string(ep) + "\r\n\r\n";
  beast::error_code err;
  boost::asio::write(sock, boost::asio::buffer(req), err);
  beast::flat_buffer buf;
  http::response<http::string_body> res;
  http::read(sock, buf, res, err);
  return err ? 0 : res.result_int();
}

/// How many of `socks` the node closed within `timeout` (each).
size_t count_closed(std::vector<std::unique_ptr<tcp::socket>>& socks,
                    std::chrono::milliseconds timeout) {
  size_t n = 0;
  for (auto& sock : socks)
    n += closed_by_peer(*sock, timeout) ? 1 : 0;
  return n;
}

} // namespace

// Only keys 951794d knows, so the same test runs against its node.
CAF_TEST(idle sockets and keep alive probes do not hold every slot) {
  temp_dir dir{"keel-front-slots"};
  node_process node{dir.str(), node_yaml(dir, "  max_connections: 50\n")};
  auto ep = node.address();
  boost::asio::io_context ioc;
  // Keep-alive probes beyond max_connections are answered, and stay open.
  std::vector<std::unique_ptr<tcp::socket>> probes;
  size_t answered = 0;
  for (int i = 0; i < 60; ++i) {
    probes.push_back(idle_socket(ioc, ep));
    answered += probe_on(*probes.back(), ep) == 200 ? 1 : 0;
  }
  CAF_MESSAGE(answered << " of 60 keep-alive probes answered");
  CAF_CHECK_EQUAL(answered, 60u);
  // 150 idle sockets from this address: the oldest beyond 100 are closed.
  std::vector<std::unique_ptr<tcp::socket>> idle;
  for (int i = 0; i < 150; ++i)
    idle.push_back(idle_socket(ioc, ep));
  // A client and a probe from the same address are still answered.
  std::unique_ptr<ws_client> client;
  try {
    client = connect_client(ep);
  } catch (const std::exception& e) {
    CAF_MESSAGE("the client was refused: " << e.what());
  }
  CAF_CHECK(client != nullptr);
  auto health = raw_request(ep, "GET", "/healthz", api_headers(ep));
  CAF_MESSAGE("/healthz: " << health.status);
  CAF_CHECK_EQUAL(health.status, 200u);
  auto closed = count_closed(probes, 200ms) + count_closed(idle, 200ms);
  CAF_MESSAGE(closed << " of 210 probe and idle sockets closed by the node");
  CAF_CHECK_GREATER_OR_EQUAL(closed, 110u);
  if (client) {
    CAF_REQUIRE(!client->send_text(protocol::ping_frame("p")));
    CAF_CHECK(receive_until(*client, [](auto& j) {
      return j["type"] == "pong" && j["id"] == "p";
    }));
  }
  CAF_CHECK_EQUAL(node.stop(), 0);
}

CAF_TEST(the unauthenticated budget closes the oldest and idle ones expire) {
  temp_dir dir{"keel-front-budget"};
  node_process node{dir.str(),
                    node_yaml(dir, "  max_unauthenticated: 20\n"
                                   "  max_unauthenticated_per_address: 10\n"
                                   "  header_timeout: 2s\n")};
  auto ep = node.address();
  boost::asio::io_context ioc;
  auto start = std::chrono::steady_clock::now();
  std::vector<std::unique_ptr<tcp::socket>> a;
  std::vector<std::unique_ptr<tcp::socket>> b;
  for (int i = 0; i < 10; ++i)
    a.push_back(idle_socket(ioc, ep, "127.0.0.2"));
  for (int i = 0; i < 10; ++i)
    b.push_back(idle_socket(ioc, ep, "127.0.0.3"));
  // The budget is full: one more closes the oldest of all.
  auto c = idle_socket(ioc, ep, "127.0.0.4");
  CAF_CHECK(closed_by_peer(*a[0], 500ms));
  // An address at its cap: one more closes that address's oldest.
  b.push_back(idle_socket(ioc, ep, "127.0.0.3"));
  CAF_CHECK(closed_by_peer(*b[0], 500ms));
  CAF_CHECK(!closed_by_peer(*a[1], 50ms));
  CAF_CHECK(!closed_by_peer(*b[1], 50ms));
  // An authenticated client leaves the budget and keeps its connection.
  auto client = connect_client(ep);
  // Sockets that send nothing go after header_timeout.
  std::vector<std::unique_ptr<tcp::socket>> rest;
  for (size_t i = 2; i < a.size(); ++i)
    rest.push_back(std::move(a[i]));
  for (size_t i = 2; i < b.size(); ++i)
    rest.push_back(std::move(b[i]));
  rest.push_back(std::move(c));
  auto expired = count_closed(rest, 5s);
  std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
  CAF_MESSAGE(expired << " of " << rest.size() << " idle sockets closed after "
                      << took.count() << " s");
  CAF_CHECK_EQUAL(expired, rest.size());
  CAF_CHECK_GREATER(took.count(), 1.5);
  CAF_REQUIRE(!client->send_text(protocol::ping_frame("p")));
  CAF_CHECK(receive_until(*client, [](auto& j) {
    return j["type"] == "pong" && j["id"] == "p";
  }));
  CAF_CHECK_EQUAL(node.stop(), 0);
}

CAF_TEST(the http parser refuses what a proxy could read otherwise) {
  temp_dir dir{"keel-front-parser"};
  node_process node{dir.str(), node_yaml(dir)};
  auto ep = node.address();
  auto head = "GET /healthz HTTP/1.1\r\nHost: " + to_string(ep) + "\r\n";
  auto post = [&](const std::string& coding) {
    return "POST /healthz HTTP/1.1\r\nHost: " + to_string(ep)
           + "\r\nTransfer-Encoding: " + coding + "\r\n\r\n0\r\n\r\n";
  };
  struct refusal {
    const char* what;
    std::string bytes;
    unsigned status;
    const char* named;
  };
  std::vector<refusal> refusals{
    {"obs-fold", head + "X-A: 1\r\n 2\r\n\r\n", 400, "line folding"},
    {"bare LF", "GET /healthz HTTP/1.1\nHost: " + to_string(ep) + "\n\n", 400,
     "LF without CR"},
    {"chunked, gzip", post("chunked, gzip"), 400, "Transfer-Encoding"},
    {"chunked, chunked", post("chunked, chunked"), 400, "Transfer-Encoding"},
    {"17 KiB head", head + "X-A: " + std::string(17 * 1024, 'a') + "\r\n\r\n",
     431, "16384 bytes"},
  };
  for (auto& r : refusals) {
    auto res = raw_exchange(ep, r.bytes, 5s);
    CAF_MESSAGE(r.what << ": " << res.status << " " << res.body);
    CAF_CHECK_EQUAL(res.status, r.status);
    KEEL_CHECK_CONTAINS(message_of(res), r.named);
  }
  // What stays valid: a head just under the limit, a chunked body, the
  // WebSocket upgrade.
  auto big = head + "X-A: " + std::string(15 * 1024, 'a') + "\r\n\r\n";
  CAF_CHECK_EQUAL(raw_exchange(ep, big, 5s).status, 200u);
  CAF_CHECK_EQUAL(raw_exchange(ep, post("gzip, chunked"), 5s).status, 405u);
  CAF_CHECK_EQUAL(
    raw_request(ep, "GET", "/ws", upgrade_headers(ep, client_token)).status,
    101u);
  CAF_CHECK_EQUAL(node.stop(), 0);
}
