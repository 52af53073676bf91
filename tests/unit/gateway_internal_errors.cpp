#define CAF_SUITE gateway_internal_errors

// An `internal` error is a bug of the node, so the gateway logs every one
// it sends, whatever made it: the whole frame (whose text names the cause)
// and the connection, at level error. Other error frames are not logged.

#include <caf/test/unit_test.hpp>

#include "keel/ws_server.hpp"

#include <chrono>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>

#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include "keel/tools/ws_client.hpp"

using namespace keel;
using namespace std::chrono_literals;

namespace {

/// Answers every `send` frame with an `unavailable` and an `internal`
/// refusal, in that order.
class refusing_handler : public gateway_handler {
public:
  ws_server* server = nullptr;

  void on_open(connection_id) override {
    // nop
  }

  void on_frame(connection_id conn, protocol::client_frame frame) override {
    server->send(conn, protocol::error_frame("unavailable", "restarting",
                                             frame.id, frame.thread));
    server->send(conn, protocol::error_frame("internal", "unexpected_message",
                                             frame.id, frame.thread));
  }

  void on_close(connection_id) override {
    // nop
  }

  void on_http(uint64_t request, const std::string&, const std::string&,
               const std::string&) override {
    server->respond(request, 503, "application/json",
                    protocol::error_frame("internal", "no answer"));
  }
};

/// Sends the default logger's events to a string for the test's lifetime.
struct captured_log {
  std::ostringstream out;
  std::shared_ptr<spdlog::logger> saved = spdlog::default_logger();

  captured_log() {
    auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(out);
    sink->set_pattern("%l %v");
    spdlog::set_default_logger(std::make_shared<spdlog::logger>("test", sink));
  }

  ~captured_log() {
    spdlog::set_default_logger(saved);
  }

  std::string text() {
    spdlog::default_logger()->flush();
    return out.str();
  }
};

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (auto i = text.find(what); i != std::string::npos;
       i = text.find(what, i + 1))
    ++n;
  return n;
}

} // namespace

CAF_TEST(every internal error frame sent is logged with its text) {
  captured_log log;
  auto handler = std::make_shared<refusing_handler>();
  gateway_config cfg;
  cfg.host = "127.0.0.1";
  cfg.port = 0;
  auto srv = ws_server::start(cfg, handler, "test-node");
  CAF_REQUIRE(srv);
  handler->server = srv->get();
  (*srv)->set_health(true, true);
  endpoint ep{"127.0.0.1", (*srv)->port(), ""};
  auto client = ws_client::connect(ep);
  CAF_REQUIRE(client);
  auto& ws = **client;
  CAF_REQUIRE(ws.receive(5s)); // hello
  CAF_REQUIRE(!ws.send_text(protocol::send_frame("t1", "m1", "hi")));
  auto first = ws.receive(5s);
  auto second = ws.receive(5s);
  CAF_REQUIRE(first && second);
  CAF_CHECK(second->payload.find("\"internal\"") != std::string::npos);
  auto text = log.text();
  CAF_MESSAGE("log: " << text);
  CAF_CHECK_EQUAL(count(text, "error sent an internal error"), 1u);
  CAF_CHECK_EQUAL(count(text, "over WebSocket connection"), 1u);
  CAF_CHECK(text.find(second->payload) != std::string::npos);
  CAF_CHECK_EQUAL(count(text, "restarting"), 0u);
  // The admin API's answers too.
  auto res = http_request(ep, "GET", "/api/v1/status", "");
  CAF_REQUIRE(res);
  CAF_CHECK_EQUAL(res->status, 503u);
  CAF_CHECK_EQUAL(count(log.text(), "over HTTP connection"), 1u);
  (*srv)->stop();
}
