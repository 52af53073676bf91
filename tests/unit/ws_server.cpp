#define CAF_SUITE ws_server
#include <caf/test/unit_test.hpp>

#include "keel/ws_server.hpp"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <future>
#include <map>
#include <mutex>
#include <vector>

#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/websocket.hpp>

#include "keel/tools/ws_client.hpp"

using namespace keel;
using namespace std::chrono_literals;
using json = nlohmann::json;

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace websocket = beast::websocket;
using tcp = net::ip::tcp;

namespace {

/// Generous upper bound for events that normally take microseconds.
constexpr auto event_timeout = 10s;

/// Records every callback; answers `send` frames with an ack through the
/// server (synchronously, from the I/O thread) and `/api/v1/echo` requests
/// directly.
class test_handler : public gateway_handler {
public:
  std::atomic<ws_server*> server{nullptr};

  void on_open(connection_id conn) override {
    std::lock_guard<std::mutex> guard{mtx_};
    opened_.push_back(conn);
    cv_.notify_all();
  }

  void on_frame(connection_id conn, protocol::client_frame frame) override {
    if (frame.type == protocol::client_frame_type::send)
      server.load()->send(conn, protocol::ack_frame(frame.thread, frame.id,
                                                    ++seq_, false));
    std::lock_guard<std::mutex> guard{mtx_};
    frames_.push_back(std::move(frame));
    cv_.notify_all();
  }

  void on_close(connection_id conn) override {
    std::lock_guard<std::mutex> guard{mtx_};
    ++closed_[conn];
    cv_.notify_all();
  }

  void on_http(uint64_t request, const std::string& method,
               const std::string& target, const std::string& body) override {
    if (target.rfind("/api/v1/echo", 0) == 0) {
      json j{{"method", method}, {"target", target}, {"body", body}};
      server.load()->respond(request, 200, "application/json", j.dump());
      return;
    }
    // Anything else is answered later by the test thread.
    std::lock_guard<std::mutex> guard{mtx_};
    deferred_.push_back(request);
    cv_.notify_all();
  }

  template <class Pred>
  bool wait(Pred pred) {
    std::unique_lock<std::mutex> guard{mtx_};
    return cv_.wait_for(guard, event_timeout, [&] { return pred(*this); });
  }

  size_t opened() {
    std::lock_guard<std::mutex> guard{mtx_};
    return opened_.size();
  }

  connection_id last_opened() {
    std::lock_guard<std::mutex> guard{mtx_};
    return opened_.empty() ? 0 : opened_.back();
  }

  int closes(connection_id conn) {
    std::lock_guard<std::mutex> guard{mtx_};
    auto i = closed_.find(conn);
    return i == closed_.end() ? 0 : i->second;
  }

  size_t closed_total() {
    std::lock_guard<std::mutex> guard{mtx_};
    size_t n = 0;
    for (auto& kvp : closed_)
      n += static_cast<size_t>(kvp.second);
    return n;
  }

  std::vector<protocol::client_frame> frames() {
    std::lock_guard<std::mutex> guard{mtx_};
    return frames_;
  }

  // Unlocked accessors for use inside wait() predicates.
  std::vector<connection_id> opened_;
  std::map<connection_id, int> closed_;
  std::vector<protocol::client_frame> frames_;
  std::vector<uint64_t> deferred_;

private:
  std::mutex mtx_;
  std::condition_variable cv_;
  std::atomic<seq_t> seq_{0};
};

struct fixture {
  std::shared_ptr<test_handler> handler = std::make_shared<test_handler>();
  std::unique_ptr<ws_server> server;
  gateway_config cfg;

  fixture() {
    cfg.host = "127.0.0.1";
    cfg.port = 0;
    cfg.io_threads = 2; // Exercise the strands.
  }

  ~fixture() {
    if (server)
      server->stop();
  }

  /// Starts the server, live and ready unless `healthy` is false.
  void start(bool healthy = true, static_files files = {}) {
    auto srv = ws_server::start(cfg, handler, "test-node", std::move(files));
    if (!srv)
      CAF_FAIL("cannot start the server: " << render(srv.error()));
    server = std::move(*srv);
    handler->server = server.get();
    if (healthy)
      server->set_health(true, true);
  }

  /// The first API request the handler left for the test to answer (waits
  /// for it).
  uint64_t deferred_request() {
    uint64_t req = 0;
    auto arrived = handler->wait([&](auto& h) {
      if (h.deferred_.empty())
        return false;
      req = h.deferred_.front();
      return true;
    });
    if (!arrived)
      CAF_FAIL("no API request reached the handler");
    return req;
  }

  /// The status and `status` field of `GET path`.
  std::pair<unsigned, std::string> probe(const std::string& path) {
    auto res = http_request(ep(), "GET", path);
    if (!res)
      CAF_FAIL("GET " << path << ": " << render(res.error()));
    return {res->status, json::parse(res->body)["status"].get<std::string>()};
  }

  endpoint ep(std::string token = {}) {
    endpoint result;
    result.host = "127.0.0.1";
    result.port = server->port();
    result.token = std::move(token);
    return result;
  }

  /// Connects and consumes the hello frame.
  std::unique_ptr<ws_client> connect(std::string token = {},
                                     std::string path = "/ws") {
    auto client = ws_client::connect(ep(std::move(token)), path);
    if (!client)
      CAF_FAIL("cannot connect: " << render(client.error()));
    auto hello = receive(**client, "hello");
    CAF_CHECK_EQUAL(hello["protocol"].get<int>(), protocol::version);
    CAF_CHECK_EQUAL(hello["node"].get<std::string>(), "test-node");
    return std::move(*client);
  }

  json receive(ws_client& client, const std::string& type) {
    auto msg = client.receive(event_timeout);
    if (!msg)
      CAF_FAIL("expected a '" << type << "' frame, got "
                              << render(msg.error()));
    if (!msg->text)
      CAF_FAIL("expected a text frame");
    auto frame = protocol::decode_server_frame(msg->payload);
    if (!frame)
      CAF_FAIL("bad server frame: " << render(frame.error()));
    if (frame->type != type)
      CAF_FAIL("expected a '" << type << "' frame, got " << msg->payload);
    return std::move(frame->body);
  }

  /// Checks that the connection still answers a ping.
  void check_ping(ws_client& client, const std::string& id) {
    CAF_REQUIRE(!client.send_text(protocol::ping_frame(id)));
    auto pong = receive(client, "pong");
    CAF_CHECK_EQUAL(pong["id"].get<std::string>(), id);
  }

  /// Waits until the peer closes and returns the close code.
  uint16_t wait_closed(ws_client& client) {
    for (;;) {
      auto msg = client.receive(event_timeout);
      if (msg)
        continue; // Frames queued before the close.
      CAF_REQUIRE(msg.error() == ec::unavailable);
      CAF_REQUIRE(client.close_code().has_value());
      return *client.close_code();
    }
  }
};

/// A port nothing listens on.
uint16_t unused_port() {
  net::io_context ioc;
  tcp::acceptor acc{ioc, tcp::endpoint{net::ip::make_address("127.0.0.1"), 0}};
  auto port = acc.local_endpoint().port();
  acc.close();
  return port;
}

} // namespace

CAF_TEST_FIXTURE_SCOPE(ws_server_tests, fixture)

CAF_TEST(clients receive hello and the handler sees open and close once) {
  start();
  auto client = connect();
  CAF_REQUIRE(handler->wait([](auto& h) { return h.opened_.size() == 1; }));
  auto conn = handler->last_opened();
  CAF_CHECK_EQUAL(server->stats().connections_open, 1u);
  CAF_CHECK_EQUAL(server->stats().connections_total, 1u);
  client->close();
  CAF_REQUIRE(
    handler->wait([&](auto& h) { return h.closed_.count(conn) > 0; }));
  CAF_CHECK_EQUAL(handler->closes(conn), 1);
  CAF_CHECK_EQUAL(server->stats().connections_open, 0u);
  // Sending to a closed connection is silently dropped.
  server->send(conn, protocol::pong_frame("late"));
  server->send(12345, protocol::pong_frame("nobody"));
}

CAF_TEST(valid frames reach the handler which can answer synchronously) {
  start();
  auto client = connect();
  CAF_REQUIRE(!client->send_text(protocol::send_frame("t1", "m1", "hello")));
  auto ack = receive(*client, "ack");
  CAF_CHECK_EQUAL(ack["thread"].get<std::string>(), "t1");
  CAF_CHECK_EQUAL(ack["id"].get<std::string>(), "m1");
  CAF_REQUIRE(!client->send_text(protocol::subscribe_frame("t1", "s1")));
  CAF_REQUIRE(
    !client->send_text(protocol::history_request_frame("t1", "h1", 0, 10)));
  CAF_REQUIRE(handler->wait([](auto& h) { return h.frames_.size() == 3; }));
  auto frames = handler->frames();
  CAF_CHECK(frames[0].type == protocol::client_frame_type::send);
  CAF_CHECK_EQUAL(frames[0].text, "hello");
  CAF_CHECK(frames[1].type == protocol::client_frame_type::subscribe);
  CAF_CHECK(frames[2].type == protocol::client_frame_type::history);
  CAF_CHECK_EQUAL(frames[2].limit, 10u);
  // Pings never reach the handler: the server answers them.
  check_ping(*client, "p1");
  CAF_CHECK_EQUAL(handler->frames().size(), 3u);
  auto st = server->stats();
  CAF_CHECK_EQUAL(st.frames_in, 4u);
  // hello and ack are written before the pong (the pong's own write may
  // still be completing).
  CAF_CHECK_GREATER_OR_EQUAL(st.frames_out, 2u);
}

CAF_TEST(healthz answers without auth) {
  cfg.token = "s3cret";
  start();
  auto res = http_request(ep(), "GET", "/healthz");
  CAF_REQUIRE(res);
  CAF_CHECK_EQUAL(res->status, 200u);
  CAF_CHECK_EQUAL(res->content_type, "application/json");
  auto body = json::parse(res->body);
  CAF_CHECK_EQUAL(body["status"].get<std::string>(), "ok");
  CAF_CHECK_EQUAL(body["node"].get<std::string>(), "test-node");
}

CAF_TEST(a configured token is required for the upgrade) {
  cfg.token = "s3cret";
  cfg.admin_token = "adm1n";
  cfg.allow_query_token = true;
  start();
  auto none = ws_client::connect(ep());
  CAF_REQUIRE(!none);
  CAF_CHECK(none.error() == ec::unauthorized);
  CAF_CHECK(error_message(none.error()).find("401") != std::string::npos);
  auto wrong = ws_client::connect(ep("s3creT"));
  CAF_REQUIRE(!wrong);
  CAF_CHECK(wrong.error() == ec::unauthorized);
  auto wrong_query = ws_client::connect(ep(), "/ws?token=nope");
  CAF_REQUIRE(!wrong_query);
  CAF_CHECK(wrong_query.error() == ec::unauthorized);
  CAF_CHECK_EQUAL(handler->opened(), 0u);
  // Header and query parameter both work.
  auto by_header = connect("s3cret");
  check_ping(*by_header, "a");
  auto by_query = connect({}, "/ws?x=1&token=s3cret");
  check_ping(*by_query, "b");
  auto by_encoded_query = connect({}, "/ws?token=s3%63ret");
  check_ping(*by_encoded_query, "c");
  CAF_CHECK_EQUAL(handler->opened(), 3u);
  // The same goes for the HTTP API, with a JSON body explaining the refusal.
  auto api = http_request(ep(), "GET", "/api/v1/echo");
  CAF_REQUIRE(api);
  CAF_CHECK_EQUAL(api->status, 401u);
  CAF_CHECK_EQUAL(json::parse(api->body)["code"].get<std::string>(),
                  "unauthorized");
  auto api_ok = http_request(ep("adm1n"), "GET", "/api/v1/echo");
  CAF_REQUIRE(api_ok);
  CAF_CHECK_EQUAL(api_ok->status, 200u);
}

CAF_TEST(every bad frame gets an error frame and the connection stays usable) {
  cfg.max_text_bytes = 100;
  start();
  auto client = connect();
  struct {
    std::string frame;
    const char* code;
  } cases[] = {
    {"{not json", "bad_json"},
    {"[1,2]", "bad_frame"},
    {R"({"type":"dance"})", "unknown_type"},
    {R"({"type":"send","id":"m1","text":"x"})", "missing_field"},
    {R"({"type":"send","thread":1,"id":"m1","text":"x"})", "wrong_type"},
    {R"({"type":"send","thread":"no spaces","id":"m1","text":"x"})",
     "bad_value"},
    {protocol::send_frame("t1", "m1", std::string(101, 'x')), "too_large"},
    {R"({"type":"send","thread":"t1","id":"m1","text":"\udc00"})",
     "invalid_utf8"},
  };
  int n = 0;
  for (auto& c : cases) {
    CAF_MESSAGE("sending a frame that should fail with " << c.code);
    CAF_REQUIRE(!client->send_text(c.frame));
    auto err = receive(*client, "error");
    CAF_CHECK_EQUAL(err["code"].get<std::string>(), c.code);
    CAF_CHECK(!err["message"].get<std::string>().empty());
    check_ping(*client, "after-" + std::to_string(++n));
  }
  // Errors carry the id and thread of the refused frame.
  CAF_REQUIRE(
    !client->send_text(R"({"type":"send","thread":"t1","id":"m7","text":""})"));
  auto err = receive(*client, "error");
  CAF_CHECK_EQUAL(err["code"].get<std::string>(), "bad_value");
  CAF_CHECK_EQUAL(err["id"].get<std::string>(), "m7");
  CAF_CHECK_EQUAL(err["thread"].get<std::string>(), "t1");
  // Binary frames, even with valid JSON or invalid UTF-8 inside.
  CAF_REQUIRE(!client->send_binary(protocol::ping_frame("bin")));
  CAF_CHECK_EQUAL(receive(*client, "error")["code"].get<std::string>(),
                  "binary_frame");
  CAF_REQUIRE(!client->send_binary("\xff\xfe\x00"));
  CAF_CHECK_EQUAL(receive(*client, "error")["code"].get<std::string>(),
                  "binary_frame");
  check_ping(*client, "after-binary");
  CAF_CHECK(handler->frames().empty());
  CAF_CHECK_EQUAL(server->stats().bad_frames, 11u);
  CAF_CHECK_EQUAL(handler->opened(), 1u);
}

CAF_TEST(an oversized frame closes the connection with 1009) {
  cfg.max_frame_bytes = 4096;
  start();
  auto client = connect();
  check_ping(*client, "small");
  CAF_REQUIRE(handler->wait([](auto& h) { return h.opened_.size() == 1; }));
  auto conn = handler->last_opened();
  CAF_REQUIRE(!client->send_text(
    protocol::send_frame("t1", "m1", std::string(5000, 'x'))));
  CAF_CHECK_EQUAL(wait_closed(*client),
                  static_cast<uint16_t>(websocket::close_code::too_big));
  CAF_REQUIRE(
    handler->wait([&](auto& h) { return h.closed_.count(conn) > 0; }));
  CAF_CHECK(handler->frames().empty());
  // Others are not affected.
  auto other = connect();
  check_ping(*other, "other");
}

CAF_TEST(invalid utf8 in a text frame closes the connection with 1007) {
  start();
  auto client = connect();
  CAF_REQUIRE(!client->send_text(
    "{\"type\":\"send\",\"thread\":\"t\",\"id\":\"m\",\"text\":\"\xc3\x28\"}"));
  CAF_CHECK_EQUAL(wait_closed(*client),
                  static_cast<uint16_t>(websocket::close_code::bad_payload));
  auto err = client->receive(1s);
  CAF_REQUIRE(!err);
  CAF_CHECK(err.error() == ec::unavailable);
  CAF_CHECK(error_message(err.error()).find("1007") != std::string::npos);
}

CAF_TEST(probes answer what the node last set) {
  start(false);
  using result = std::pair<unsigned, std::string>;
  CAF_CHECK_EQUAL(probe("/healthz"), result(503u, "unresponsive"));
  CAF_CHECK_EQUAL(probe("/readyz"), result(503u, "not_ready"));
  server->set_health(true, false);
  CAF_CHECK_EQUAL(probe("/healthz"), result(200u, "ok"));
  CAF_CHECK_EQUAL(probe("/readyz"), result(503u, "not_ready"));
  server->set_health(true, true);
  CAF_CHECK_EQUAL(probe("/readyz"), result(200u, "ready"));
  server->start_drain();
  CAF_CHECK_EQUAL(probe("/readyz"), result(503u, "draining"));
  CAF_CHECK_EQUAL(probe("/healthz"), result(200u, "ok"));
}

CAF_TEST(a draining server refuses new work and new clients) {
  start();
  auto client = connect();
  server->start_drain();
  CAF_CHECK(server->draining());
  auto err = client->send_text(
    R"({"type":"send","id":"m1","thread":"t1","text":"hi"})");
  CAF_REQUIRE(!err);
  auto refused = client->receive();
  CAF_REQUIRE(refused);
  auto frame = json::parse(refused->payload);
  CAF_CHECK_EQUAL(frame["type"].get<std::string>(), "error");
  CAF_CHECK_EQUAL(frame["code"].get<std::string>(), "draining");
  CAF_CHECK_EQUAL(frame["id"].get<std::string>(), "m1");
  CAF_CHECK(handler->frames().empty());
  // Reads still reach the node (the client may fetch its replies).
  err = client->send_text(R"({"type":"history","id":"h1","thread":"t1"})");
  CAF_REQUIRE(!err);
  CAF_CHECK(handler->wait([](auto& h) { return h.frames_.size() == 1; }));
  auto late = ws_client::connect(ep(), "/ws", 2s);
  CAF_REQUIRE(!late);
  CAF_CHECK_NOT_EQUAL(error_message(late.error()).find("503"),
                      std::string::npos);
}

CAF_TEST(static files are served without auth and metrics need the admin) {
  cfg.token = "s3cret";
  cfg.admin_token = "adm1n";
  static_files files;
  files["/"] = static_file{"text/html; charset=utf-8", "<h1>keel</h1>"};
  start(true, files);
  auto page = http_request(ep(), "GET", "/");
  CAF_REQUIRE(page);
  CAF_CHECK_EQUAL(page->status, 200u);
  CAF_CHECK_EQUAL(page->content_type, "text/html; charset=utf-8");
  CAF_CHECK_EQUAL(page->body, "<h1>keel</h1>");
  auto missing = http_request(ep(), "GET", "/app.js");
  CAF_REQUIRE(missing);
  CAF_CHECK_EQUAL(missing->status, 404u);
  auto anonymous = http_request(ep(), "GET", "/metrics");
  CAF_REQUIRE(anonymous);
  CAF_CHECK_EQUAL(anonymous->status, 401u);
  auto metrics = std::async(std::launch::async, [this] {
    return http_request(ep("adm1n"), "GET", "/metrics");
  });
  auto req = deferred_request();
  server->respond(req, 200, "text/plain", "keel_up 1\n");
  auto res = metrics.get();
  CAF_REQUIRE(res);
  CAF_CHECK_EQUAL(res->body, "keel_up 1\n");
}

CAF_TEST(api paths go to the handler and others get 404) {
  start();
  auto echo = http_request(ep(), "POST", "/api/v1/echo?x=1", R"({"a":1})");
  CAF_REQUIRE(echo);
  CAF_CHECK_EQUAL(echo->status, 200u);
  auto body = json::parse(echo->body);
  CAF_CHECK_EQUAL(body["method"].get<std::string>(), "POST");
  CAF_CHECK_EQUAL(body["target"].get<std::string>(), "/api/v1/echo?x=1");
  CAF_CHECK_EQUAL(body["body"].get<std::string>(), R"({"a":1})");
  // Answered later, from another thread.
  auto later = std::async(std::launch::async, [this] {
    return http_request(ep(), "GET", "/api/v1/status");
  });
  auto req = deferred_request();
  server->respond(req, 202, "text/plain", "later");
  server->respond(req, 500, "text/plain", "twice is ignored");
  auto res = later.get();
  CAF_REQUIRE(res);
  CAF_CHECK_EQUAL(res->status, 202u);
  CAF_CHECK_EQUAL(res->content_type, "text/plain");
  CAF_CHECK_EQUAL(res->body, "later");
  auto missing = http_request(ep(), "GET", "/nope");
  CAF_REQUIRE(missing);
  CAF_CHECK_EQUAL(missing->status, 404u);
  CAF_CHECK_EQUAL(json::parse(missing->body)["code"].get<std::string>(),
                  "not_found");
  auto plain_ws = http_request(ep(), "GET", "/ws");
  CAF_REQUIRE(plain_ws);
  CAF_CHECK_EQUAL(plain_ws->status, 426u);
  auto bad_upgrade = ws_client::connect(ep(), "/elsewhere");
  CAF_REQUIRE(!bad_upgrade);
  CAF_CHECK(bad_upgrade.error() == ec::not_found);
}

CAF_TEST(api requests the node never answers get 504) {
  start();
  auto res = http_request(ep(), "GET", "/api/v1/never", {}, 30s);
  CAF_REQUIRE(res);
  CAF_CHECK_EQUAL(res->status, 504u);
  CAF_CHECK_EQUAL(json::parse(res->body)["code"].get<std::string>(), "timeout");
  auto req = deferred_request();
  // Too late: ignored.
  server->respond(req, 200, "text/plain", "late");
  auto health = http_request(ep(), "GET", "/healthz");
  CAF_REQUIRE(health);
  CAF_CHECK_EQUAL(health->status, 200u);
}

CAF_TEST(http keep alive serves several requests on one connection) {
  start();
  net::io_context ioc;
  beast::tcp_stream stream{ioc};
  stream.connect(
    tcp::endpoint{net::ip::make_address("127.0.0.1"), server->port()});
  stream.expires_after(event_timeout);
  beast::flat_buffer buf;
  for (int i = 0; i < 3; ++i) {
    http::request<http::empty_body> req{http::verb::get, "/healthz", 11};
    req.set(http::field::host, "localhost");
    http::write(stream, req);
    http::response<http::string_body> res;
    http::read(stream, buf, res);
    CAF_CHECK_EQUAL(res.result_int(), 200u);
    CAF_CHECK(res.keep_alive());
  }
}

CAF_TEST(hundreds of connections at once) {
  start();
  constexpr size_t n = 200;
  std::vector<std::unique_ptr<ws_client>> clients;
  for (size_t i = 0; i < n; ++i)
    clients.push_back(connect());
  CAF_REQUIRE(handler->wait([&](auto& h) { return h.opened_.size() == n; }));
  CAF_CHECK_EQUAL(server->stats().connections_open, n);
  // Every connection is served while all of them are open.
  for (size_t i = 0; i < n; ++i)
    CAF_REQUIRE(
      !clients[i]->send_text(protocol::ping_frame("p" + std::to_string(i))));
  for (size_t i = 0; i < n; ++i) {
    auto pong = receive(*clients[i], "pong");
    CAF_CHECK_EQUAL(pong["id"].get<std::string>(), "p" + std::to_string(i));
  }
  clients.clear();
  CAF_REQUIRE(handler->wait([&](auto& h) { return h.closed_.size() == n; }));
  CAF_CHECK_EQUAL(handler->closed_total(), n);
  CAF_CHECK_EQUAL(server->stats().connections_open, 0u);
  CAF_CHECK_EQUAL(server->stats().connections_total, n);
}

CAF_TEST(connections beyond the limit are refused with 503) {
  cfg.max_connections = 2;
  start();
  auto a = connect();
  auto b = connect();
  auto c = ws_client::connect(ep());
  CAF_REQUIRE(!c);
  CAF_CHECK(c.error() == ec::unavailable);
  CAF_CHECK(error_message(c.error()).find("503") != std::string::npos);
  a->close();
  CAF_REQUIRE(handler->wait([](auto& h) { return h.closed_.size() == 1; }));
  auto d = connect();
  check_ping(*d, "d");
  check_ping(*b, "b");
}

CAF_TEST(a stalled client is dropped without delaying others) {
  cfg.max_queued_bytes = 64 * 1024;
  cfg.io_threads = 1; // The worst case: everyone shares one I/O thread.
  start();
  auto fast = connect();
  // The stalled client completes the handshake and then never reads.
  net::io_context ioc;
  websocket::stream<tcp::socket> stalled{ioc};
  stalled.next_layer().open(tcp::v4());
  stalled.next_layer().set_option(net::socket_base::receive_buffer_size(4096));
  stalled.next_layer().connect(
    tcp::endpoint{net::ip::make_address("127.0.0.1"), server->port()});
  stalled.handshake("127.0.0.1", "/ws");
  CAF_REQUIRE(handler->wait([](auto& h) { return h.opened_.size() == 2; }));
  auto conn = handler->last_opened();
  std::string big(16 * 1024, 'x');
  auto frame = protocol::error_frame("flood", big);
  auto max_latency = 0ms;
  size_t sent = 0;
  size_t pings = 0;
  while (server->stats().slow_client_disconnects == 0) {
    if (sent > 100000)
      CAF_FAIL("the stalled client was never disconnected");
    for (int i = 0; i < 50; ++i, ++sent)
      server->send(conn, frame);
    auto t0 = std::chrono::steady_clock::now();
    check_ping(*fast, "f" + std::to_string(++pings));
    auto dt = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::steady_clock::now() - t0);
    max_latency = std::max(max_latency, dt);
  }
  CAF_MESSAGE("disconnected after " << sent << " frames, max pong latency "
                                    << max_latency.count() << " ms");
  // The stalled socket is closed hard once the close handshake cannot
  // complete; the fast client keeps being served meanwhile.
  while (handler->closes(conn) == 0) {
    auto t0 = std::chrono::steady_clock::now();
    check_ping(*fast, "g" + std::to_string(++pings));
    auto dt = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::steady_clock::now() - t0);
    max_latency = std::max(max_latency, dt);
    if (handler->wait([&](auto& h) { return h.closed_.count(conn) > 0; }))
      break;
  }
  CAF_CHECK_EQUAL(handler->closes(conn), 1);
  CAF_CHECK_LESS(max_latency.count(), 1500);
  CAF_CHECK_EQUAL(server->stats().slow_client_disconnects, 1u);
  CAF_CHECK_EQUAL(server->stats().connections_open, 1u);
  check_ping(*fast, "still-there");
  beast::error_code ignored;
  stalled.next_layer().close(ignored);
}

CAF_TEST(receive timeouts leave the connection usable) {
  start();
  auto client = connect();
  auto msg = client->receive(50ms);
  CAF_REQUIRE(!msg);
  CAF_CHECK(msg.error() == ec::timeout);
  check_ping(*client, "after-timeout");
}

CAF_TEST(stop closes connections with 1001 and tells the handler) {
  start();
  auto client = connect();
  CAF_REQUIRE(handler->wait([](auto& h) { return h.opened_.size() == 1; }));
  auto conn = handler->last_opened();
  server->stop();
  CAF_CHECK_EQUAL(handler->closes(conn), 1);
  CAF_CHECK_EQUAL(wait_closed(*client),
                  static_cast<uint16_t>(websocket::close_code::going_away));
  server->stop(); // Idempotent.
  auto again = ws_client::connect(ep(), "/ws", 2s);
  CAF_REQUIRE(!again);
  CAF_CHECK(again.error() == ec::connection_failed);
}

CAF_TEST(unreachable nodes are named in the error) {
  endpoint nowhere;
  nowhere.port = unused_port();
  auto client = ws_client::connect(nowhere, "/ws", 2s);
  CAF_REQUIRE(!client);
  CAF_CHECK(client.error() == ec::connection_failed);
  auto expected = "cannot reach 127.0.0.1:" + std::to_string(nowhere.port)
                  + ": ";
  CAF_CHECK_EQUAL(error_message(client.error()).rfind(expected, 0), 0u);
  auto res = http_request(nowhere, "GET", "/healthz", {}, 2s);
  CAF_REQUIRE(!res);
  CAF_CHECK(res.error() == ec::connection_failed);
  CAF_CHECK_EQUAL(error_message(res.error()).rfind(expected, 0), 0u);
}

CAF_TEST(binding a busy port fails with the address) {
  start();
  auto busy = cfg;
  busy.port = server->port();
  auto second = ws_server::start(busy, handler, "other");
  CAF_REQUIRE(!second);
  CAF_CHECK(second.error() == ec::connection_failed);
  CAF_CHECK(error_message(second.error())
              .find("127.0.0.1:" + std::to_string(server->port()))
            != std::string::npos);
}

CAF_TEST(host names are resolved for listening) {
  cfg.host = "localhost";
  start();
  auto where = ep();
  where.host = "localhost";
  auto res = http_request(where, "GET", "/healthz");
  CAF_REQUIRE(res);
  CAF_CHECK_EQUAL(res->status, 200u);
}

CAF_TEST_FIXTURE_SCOPE_END()

CAF_TEST(parse_endpoint accepts host and port or just a port) {
  auto a = parse_endpoint("example.org:9000");
  CAF_REQUIRE(a);
  CAF_CHECK_EQUAL(a->host, "example.org");
  CAF_CHECK_EQUAL(a->port, 9000u);
  auto b = parse_endpoint("8081");
  CAF_REQUIRE(b);
  CAF_CHECK_EQUAL(b->host, "127.0.0.1");
  CAF_CHECK_EQUAL(b->port, 8081u);
  auto c = parse_endpoint("[::1]:7000");
  CAF_REQUIRE(c);
  CAF_CHECK_EQUAL(c->host, "::1");
  CAF_CHECK_EQUAL(c->port, 7000u);
  CAF_CHECK(!c->tls);
  // A scheme says whether the node speaks TLS.
  for (auto [str, tls] : {std::pair{"wss://node.example:8443", true},
                          {"https://node.example:8443", true},
                          {"ws://node.example:8443", false},
                          {"http://node.example:8443", false}}) {
    auto d = parse_endpoint(str);
    CAF_REQUIRE(d);
    CAF_CHECK_EQUAL(d->host, "node.example");
    CAF_CHECK_EQUAL(d->port, 8443u);
    CAF_CHECK_EQUAL(d->tls, tls);
  }
  for (auto bad :
       {"", "host:", "host:0", "host:65536", "host:80x", "abc", "::1:80",
        "[::1]80", "wss://", "ftp://host:21", "wss://host:8443/ws"}) {
    auto r = parse_endpoint(bad);
    CAF_CHECK(!r);
    if (!r)
      CAF_CHECK(error_message(r.error()).find(bad) != std::string::npos);
  }
}
