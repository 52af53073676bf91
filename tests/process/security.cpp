#define CAF_SUITE security

// The gateway's safe defaults against real keel-node processes: refusing to
// start exposed without a token, client and admin tokens, browser origins,
// Host names, JSON-only admin posts, chaos endpoints off by default, query
// tokens, the per-connection rate limit, and secrets kept out of every
// answer and log line.

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <vector>

#include <caf/test/unit_test.hpp>

#include "node_client.hpp"
#include "raw_http.hpp"
#include "temp_dir.hpp"
#include "text_checks.hpp"

#include "keel/protocol.hpp"
#include "keel/tools/process.hpp"

using namespace keel;
using namespace keel::test;
using namespace std::chrono_literals;

namespace {

constexpr auto client_token = "client-7f3a9c";
constexpr auto admin_token = "admin-b81e44";

/// A node on loopback with a client token, an admin token and `extra`
/// appended to its config.
std::string node_yaml(const temp_dir& dir, const std::string& gateway = {},
                      const std::string& extra = {}) {
  return "node:\n  name: sec\n  data_dir: " + dir.str()
         + "/data\ngateway:\n  port: 0\n  token: " + client_token
         + "\n  admin_token: " + admin_token + "\n" + gateway
         + "providers:\n  - name: echo\n    kind: echo\n"
           "pools:\n  - name: default\n    chain: [echo]\n"
         + extra + "logging:\n  level: info\n";
}

} // namespace

CAF_TEST(a gateway beyond loopback without a token refuses to start) {
  temp_dir dir{"keel-sec-open"};
  auto yaml = "node:\n  name: open\n  data_dir: " + dir.str()
              + "/data\ngateway:\n  host: 0.0.0.0\n  port: 0\n";
  auto path = dir.str() + "/node.yaml";
  std::ofstream{path} << yaml;
  auto res = run_command({node_binary(), "--config", path}, 30s);
  CAF_CHECK_NOT_EQUAL(res.exit_code, 0);
  KEEL_CHECK_CONTAINS(res.err, "gateway.token");
  // Saying so explicitly starts it.
  node_process node{dir.str(), yaml + "  allow_unauthenticated: true\n"};
  CAF_CHECK(connect_client(node.address()));
  CAF_CHECK_EQUAL(node.stop(), 0);
}

CAF_TEST(client and admin tokens open what they should and nothing more) {
  temp_dir dir{"keel-sec-auth"};
  node_process node{dir.str(), node_yaml(dir)};
  auto ep = node.address();
  CAF_CHECK_EQUAL(ep.token, client_token);
  // WebSockets: no or a wrong token is 401 with a bearer challenge.
  for (std::string token : {"", "wrong"}) {
    auto res = raw_request(ep, "GET", "/ws", upgrade_headers(ep, token));
    CAF_CHECK_EQUAL(res.status, 401u);
    CAF_CHECK_EQUAL(res.www_authenticate, "Bearer");
  }
  CAF_CHECK_EQUAL(
    raw_request(ep, "GET", "/ws", upgrade_headers(ep, client_token)).status,
    101u);
  CAF_CHECK_EQUAL(
    raw_request(ep, "GET", "/ws", upgrade_headers(ep, admin_token)).status,
    101u);
  // The admin API: only the admin token.
  auto none = raw_request(ep, "GET", "/api/v1/status", api_headers(ep));
  CAF_CHECK_EQUAL(none.status, 401u);
  auto client = raw_request(ep, "GET", "/api/v1/status",
                            api_headers(ep, client_token));
  CAF_CHECK_EQUAL(client.status, 403u);
  CAF_CHECK_EQUAL(code_of(client), "forbidden");
  KEEL_CHECK_CONTAINS(message_of(client), "admin token");
  auto admin = raw_request(ep, "GET", "/api/v1/status",
                           api_headers(ep, admin_token));
  CAF_CHECK_EQUAL(admin.status, 200u);
  CAF_CHECK(api_call(node.admin_address(), "GET", "/api/v1/tree"));
  CAF_CHECK_EQUAL(node.stop(), 0);
}

CAF_TEST(browsers from other origins and foreign host names are refused) {
  temp_dir dir{"keel-sec-origin"};
  node_process node{
    dir.str(), node_yaml(dir, "  allowed_origins: [\"http://app.example\"]\n")};
  auto ep = node.address();
  auto headers = upgrade_headers(ep, client_token);
  CAF_CHECK_EQUAL(raw_request(ep, "GET", "/ws", headers).status, 101u);
  headers["Origin"] = "http://evil.example";
  auto evil = raw_request(ep, "GET", "/ws", headers);
  CAF_CHECK_EQUAL(evil.status, 403u);
  KEEL_CHECK_CONTAINS(message_of(evil), "http://evil.example");
  headers["Origin"] = "http://app.example";
  CAF_CHECK_EQUAL(raw_request(ep, "GET", "/ws", headers).status, 101u);
  headers["Origin"] = "http://" + to_string(ep);
  CAF_CHECK_EQUAL(raw_request(ep, "GET", "/ws", headers).status, 101u);
  // DNS rebinding: a page on evil.example resolving to 127.0.0.1.
  headers = upgrade_headers(ep, client_token);
  headers["Host"] = "evil.example";
  auto rebound = raw_request(ep, "GET", "/ws", headers);
  CAF_CHECK_EQUAL(rebound.status, 421u);
  KEEL_CHECK_CONTAINS(message_of(rebound), "evil.example");
  auto api = api_headers(ep, admin_token);
  api["Origin"] = "http://evil.example";
  CAF_CHECK_EQUAL(raw_request(ep, "GET", "/api/v1/status", api).status, 403u);
  CAF_CHECK_EQUAL(node.stop(), 0);
}

CAF_TEST(chaos endpoints are off by default and take json only) {
  temp_dir dir{"keel-sec-chaos"};
  node_process node{dir.str(), node_yaml(dir)};
  auto ep = node.address();
  auto headers = api_headers(ep, admin_token);
  headers["Content-Type"] = "application/json";
  auto body = R"({"path":"/orchestrator"})";
  auto off = raw_request(ep, "POST", "/api/v1/kill", headers, body);
  CAF_CHECK_EQUAL(off.status, 403u);
  KEEL_CHECK_CONTAINS(message_of(off), "chaos.kill");
  auto disk = raw_request(ep, "POST", "/api/v1/chaos/disk", headers, "{}");
  CAF_CHECK_EQUAL(disk.status, 403u);
  KEEL_CHECK_CONTAINS(message_of(disk), "chaos.disk");
  CAF_CHECK_EQUAL(node.stop(), 0);
  temp_dir on_dir{"keel-sec-chaos-on"};
  node_process on{on_dir.str(),
                  node_yaml(on_dir, {}, "chaos:\n  kill: true\n")};
  ep = on.address();
  headers = api_headers(ep, admin_token);
  // A cross-site form can send text/plain without a preflight: refused.
  headers["Content-Type"] = "text/plain";
  auto plain = raw_request(ep, "POST", "/api/v1/kill", headers, body);
  CAF_CHECK_EQUAL(plain.status, 415u);
  headers["Content-Type"] = "application/json";
  CAF_CHECK_EQUAL(raw_request(ep, "POST", "/api/v1/kill", headers, body).status,
                  200u);
  CAF_CHECK_EQUAL(on.stop(), 0);
}

CAF_TEST(query tokens work only when enabled) {
  temp_dir dir{"keel-sec-query"};
  node_process node{dir.str(), node_yaml(dir)};
  auto ep = node.address();
  auto target = std::string{"/ws?token="} + client_token;
  auto refused = raw_request(ep, "GET", target, upgrade_headers(ep));
  CAF_CHECK_EQUAL(refused.status, 401u);
  KEEL_CHECK_CONTAINS(message_of(refused), "query tokens (?token=) are off");
  CAF_CHECK_EQUAL(node.stop(), 0);
  temp_dir on_dir{"keel-sec-query-on"};
  node_process on{on_dir.str(),
                  node_yaml(on_dir, "  allow_query_token: true\n")};
  ep = on.address();
  CAF_CHECK_EQUAL(raw_request(ep, "GET", target, upgrade_headers(ep)).status,
                  101u);
  CAF_CHECK_EQUAL(on.stop(), 0);
}

// A browser cannot send a header on a WebSocket: the dashboard trades its
// admin token for a single-use ticket, so no token goes into a URL.
CAF_TEST(a ws ticket from the admin api opens one websocket) {
  temp_dir dir{"keel-sec-ticket"};
  node_process node{dir.str(), node_yaml(dir)};
  auto ep = node.address();
  auto post = [&](const std::string& token) {
    auto headers = api_headers(ep, token);
    headers["Content-Type"] = "application/json";
    return raw_request(ep, "POST", "/api/v1/ws-ticket", headers, "{}");
  };
  auto issued = post(admin_token);
  CAF_REQUIRE_EQUAL(issued.status, 200u);
  auto ticket = nlohmann::json::parse(issued.body).value("ticket", "");
  CAF_CHECK_EQUAL(ticket.size(), 64u);
  auto target = "/ws?ticket=" + ticket;
  CAF_CHECK_EQUAL(raw_request(ep, "GET", target, upgrade_headers(ep)).status,
                  101u);
  auto again = raw_request(ep, "GET", target, upgrade_headers(ep));
  CAF_CHECK_EQUAL(again.status, 401u);
  KEEL_CHECK_CONTAINS(message_of(again), "the ticket is unknown, used or "
                                         "expired");
  CAF_CHECK_EQUAL(post(client_token).status, 403u);
  CAF_CHECK_EQUAL(post("").status, 401u);
  CAF_CHECK_EQUAL(raw_request(ep, "GET", "/api/v1/ws-ticket",
                              api_headers(ep, admin_token))
                    .status,
                  405u);
  // A ticket is not a token for the admin API.
  auto other
    = nlohmann::json::parse(post(admin_token).body).value("ticket", "");
  CAF_CHECK_EQUAL(raw_request(ep, "GET", "/api/v1/status?ticket=" + other,
                              api_headers(ep))
                    .status,
                  401u);
  CAF_CHECK_EQUAL(node.stop(), 0);
}

CAF_TEST(a flooding client is rate limited while another stays fast) {
  temp_dir dir{"keel-sec-rate"};
  node_process node{dir.str(),
                    node_yaml(dir, "  rate_limit:\n    per_second: 20\n"
                                   "    burst: 20\n")};
  auto flooder = connect_client(node.address());
  auto quiet = connect_client(node.address());
  for (int i = 0; i < 500; ++i)
    CAF_REQUIRE(
      !flooder->send_text(protocol::ping_frame("f" + std::to_string(i))));
  size_t limited = 0;
  for (;;) {
    auto msg = flooder->receive(2s);
    if (!msg)
      break;
    auto j = nlohmann::json::parse(msg->payload);
    if (j["type"] == "error" && j["code"] == "rate_limited") {
      ++limited;
      KEEL_CHECK_CONTAINS(j["message"].get<std::string>(), "per second");
    }
  }
  CAF_MESSAGE(limited << " of 500 flood frames were rate limited");
  CAF_CHECK_GREATER(limited, 400u);
  std::vector<double> latencies;
  for (int i = 0; i < 15; ++i) {
    auto start = std::chrono::steady_clock::now();
    auto id = "q" + std::to_string(i);
    CAF_REQUIRE(!quiet->send_text(protocol::ping_frame(id)));
    CAF_REQUIRE(receive_until(*quiet, [&](auto& j) {
      return j["type"] == "pong" && j["id"] == id;
    }));
    std::chrono::duration<double, std::milli> took
      = std::chrono::steady_clock::now() - start;
    latencies.push_back(took.count());
  }
  std::sort(latencies.begin(), latencies.end());
  CAF_MESSAGE("quiet client ping: median " << latencies[latencies.size() / 2]
                                           << " ms, max " << latencies.back()
                                           << " ms");
  CAF_CHECK_LESS(latencies.back(), 200.0);
  CAF_CHECK_EQUAL(node.stop(), 0);
}

CAF_TEST(no answer or log line contains a secret) {
  temp_dir dir{"keel-sec-secrets"};
  std::string api_key = "sk-live-5d1c0e99";
  auto providers = "providers:\n  - name: remote\n    kind: openai\n"
                   "    base_url: http://127.0.0.1:1\n    model: m\n"
                   "    api_key: "
                   + api_key
                   + "\n    connect_timeout: 200ms\n"
                     "pools:\n  - name: default\n    chain: [remote]\n";
  auto yaml = "node:\n  name: sec\n  data_dir: " + dir.str()
              + "/data\ngateway:\n  port: 0\n  token: " + client_token
              + "\n  admin_token: " + admin_token + "\n" + providers
              + "logging:\n  level: debug\n";
  node_process node{dir.str(), yaml};
  auto ep = node.address();
  std::string answers;
  auto record = [&](const raw_response& res) { answers += res.body + "\n"; };
  for (std::string token : {"", "wrong", client_token, admin_token}) {
    record(raw_request(ep, "GET", "/ws", upgrade_headers(ep, "x" + token)));
    for (auto target : {"/api/v1/status", "/api/v1/providers", "/api/v1/tree"})
      record(raw_request(ep, "GET", target, api_headers(ep, token)));
  }
  auto client = connect_client(ep);
  for (auto bad : {"{", "[]", R"({"type":"send"})", R"({"type":"nope"})"}) {
    CAF_REQUIRE(!client->send_text(bad));
    if (auto msg = client->receive(5s))
      answers += msg->payload + "\n";
  }
  // A provider call that fails (nothing listens on port 1).
  CAF_REQUIRE(!client->send_text(protocol::send_frame("t1", "m1", "hello")));
  auto outcome = receive_until(
    client.operator*(),
    [](auto& j) { return j["type"] == "error" || j["type"] == "reply"; }, 30s);
  CAF_REQUIRE(outcome);
  answers += outcome->dump() + "\n";
  record(
    raw_request(ep, "GET", "/api/v1/providers", api_headers(ep, admin_token)));
  CAF_CHECK_EQUAL(node.stop(), 0);
  auto log = node.stderr_text();
  for (auto secret :
       {std::string{client_token}, std::string{admin_token}, api_key}) {
    CAF_MESSAGE("looking for " << secret);
    CAF_CHECK_EQUAL(answers.find(secret), std::string::npos);
    CAF_CHECK_EQUAL(log.find(secret), std::string::npos);
  }
}

// The node's files are its user's only, whatever the umask it was started
// with (this test runner's is usually 022): the data folder, RocksDB's
// files in it and the log file and its folder have no group or other bits.
CAF_TEST(the data folder and the log file are for the owner only) {
  namespace fs = std::filesystem;
  temp_dir dir{"keel-sec-modes"};
  auto log_file = dir.str() + "/logs/node.log";
  auto yaml = node_yaml(dir) + "  file: " + log_file + "\n";
  node_process node{dir.str(), yaml};
  auto client = connect_client(node.address());
  CAF_REQUIRE(!client->send_text(protocol::send_frame("t1", "m1", "hello")));
  auto reply = receive_until(
    client.operator*(), [](auto& j) { return j["type"] == "reply"; }, 30s);
  CAF_CHECK(reply);
  CAF_CHECK_EQUAL(node.stop(), 0);
  auto exposed = [](const fs::path& path) {
    auto mode = fs::status(path).permissions();
    return (mode & (fs::perms::group_all | fs::perms::others_all))
           != fs::perms::none;
  };
  std::vector<fs::path> paths{dir.path() / "data", dir.path() / "logs",
                              log_file};
  for (auto& entry : fs::recursive_directory_iterator{dir.path() / "data"})
    paths.push_back(entry.path());
  CAF_MESSAGE(paths.size() << " paths");
  CAF_CHECK_GREATER(paths.size(), 5u);
  size_t open = 0;
  for (auto& path : paths)
    if (exposed(path)) {
      ++open;
      CAF_MESSAGE("open to group or others: " << path);
    }
  CAF_CHECK_EQUAL(open, 0u);
}
