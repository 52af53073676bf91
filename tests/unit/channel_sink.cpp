#define CAF_SUITE channel_sink
#include <caf/test/unit_test.hpp>

#include "keel/tools/channel_sink_server.hpp"

#include <chrono>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <nlohmann/json.hpp>

#include "npm_server.hpp"

using namespace keel;
using namespace keel::channel_sink;
using namespace std::chrono_literals;
using json = nlohmann::json;
using keel::test::http_call;
using keel::test::http_fields;
using keel::test::try_http_call;

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;

namespace {

/// Generous upper bound for events that normally take milliseconds.
constexpr auto event_timeout = 10s;

/// How long a client waits for an answer that must not come.
constexpr auto silence = 200ms;

constexpr auto send_message = "/bot123:ABC/sendMessage";

fault spec(const std::string& text) {
  std::string error;
  auto result = parse_fault(text, &error);
  if (!result)
    throw std::runtime_error(error);
  return *result;
}

/// A sendMessage body; no parse_mode if `parse_mode` is empty.
std::string telegram_body(const json& chat_id, const std::string& text,
                          const std::string& parse_mode = {}) {
  json body{{"chat_id", chat_id}, {"text", text}};
  if (!parse_mode.empty())
    body["parse_mode"] = parse_mode;
  return body.dump();
}

/// The headers Keel sends with a webhook event (signed if `secret` is not
/// empty).
http_fields webhook_headers(const std::string& key, const std::string& body,
                            const std::string& secret = {}) {
  http_fields result{{"Idempotency-Key", key},
                     {"X-Keel-Event", "reply"},
                     {"X-Keel-Timestamp", "1700000000"}};
  if (!secret.empty())
    result.emplace_back("X-Keel-Signature", sign(secret, "1700000000", body));
  return result;
}

/// One client connection, kept alive across calls; each exchange has a
/// deadline (a timer on the stream, no sleeps).
class connection {
public:
  explicit connection(uint16_t port) : stream_(ioc_) {
    stream_.connect(tcp::endpoint{net::ip::make_address("127.0.0.1"), port});
  }

  /// Writes a POST of `body` to `target`.
  void send(const std::string& target, const std::string& body) {
    http::request<http::string_body> req{http::verb::post, target, 11};
    req.set(http::field::host, "127.0.0.1");
    req.set(http::field::content_type, "application/json");
    req.body() = body;
    req.prepare_payload();
    http::write(stream_, req);
  }

  /// Reads one answer within `timeout`; nullopt, the reason in `error`, if
  /// none came.
  std::optional<http::response<http::string_body>>
  receive(std::chrono::milliseconds timeout, beast::error_code& error) {
    http::response<http::string_body> res;
    stream_.expires_after(timeout);
    http::async_read(stream_, buffer_, res,
                     [&](beast::error_code err, size_t) { error = err; });
    ioc_.restart();
    ioc_.run();
    if (error)
      return std::nullopt;
    return res;
  }

private:
  net::io_context ioc_;
  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
};

} // namespace

CAF_TEST(specs parse into faults) {
  auto f = spec("500");
  CAF_CHECK(f.what == fault::kind::status);
  CAF_CHECK_EQUAL(f.status, 500);
  f = spec("status=429; retry_after=2");
  CAF_CHECK(f.what == fault::kind::status);
  CAF_CHECK_EQUAL(f.status, 429);
  CAF_REQUIRE(f.retry_after);
  CAF_CHECK_EQUAL(*f.retry_after, 2);
  f = spec("delay=300ms;drop");
  CAF_CHECK(f.what == fault::kind::drop);
  CAF_CHECK_EQUAL(f.delay.count(), 300);
  CAF_CHECK_EQUAL(spec("delay=12s").delay.count(), 12000);
  CAF_CHECK(spec("parse_error").what == fault::kind::parse_error);
  CAF_CHECK(spec("hang").what == fault::kind::hang);
  CAF_CHECK(spec("reset").what == fault::kind::reset);
  CAF_CHECK(spec("ok").what == fault::kind::ok);
  CAF_CHECK(spec("202").what == fault::kind::ok);
  for (auto bad :
       {"bogus", "status=", "delay=5", "delay=5m", "retry_after=x", "42"}) {
    std::string error;
    CAF_CHECK(!parse_fault(bad, &error));
    CAF_CHECK(error.find(bad) != std::string::npos);
  }
  auto seq = parse_fault_sequence("500,429;retry_after=1,ok");
  CAF_REQUIRE(seq);
  CAF_REQUIRE_EQUAL(seq->size(), 3u);
  CAF_CHECK_EQUAL((*seq)[0].status, 500);
  CAF_CHECK_EQUAL((*seq)[1].status, 429);
  CAF_CHECK_EQUAL(*(*seq)[1].retry_after, 1);
  CAF_CHECK((*seq)[2].what == fault::kind::ok);
  CAF_CHECK(!parse_fault_sequence("500,nope"));
}

CAF_TEST(telegram answers like the bot api and counts message ids) {
  channel_sink_server sink;
  CAF_CHECK_EQUAL(sink.base_url(),
                  "http://127.0.0.1:" + std::to_string(sink.port()));
  auto first = http_call(sink.port(), "POST", send_message,
                         telegram_body(42, "hello", "MarkdownV2"));
  CAF_CHECK_EQUAL(first.status, 200u);
  auto j = json::parse(first.body);
  CAF_CHECK_EQUAL(j["ok"], true);
  CAF_CHECK_EQUAL(j["result"]["message_id"], 1);
  CAF_CHECK_EQUAL(j["result"]["chat"]["id"], 42);
  CAF_CHECK_EQUAL(j["result"]["text"], "hello");
  CAF_CHECK(j["result"]["date"].get<int64_t>() > 1600000000);
  auto second = http_call(sink.port(), "POST", "/relay/bot9:x/sendMessage",
                          telegram_body("@news", "again"));
  j = json::parse(second.body);
  CAF_CHECK_EQUAL(j["result"]["message_id"], 2);
  CAF_CHECK_EQUAL(j["result"]["chat"]["id"], "@news");
  auto reqs = sink.requests();
  CAF_REQUIRE_EQUAL(reqs.size(), 2u);
  CAF_CHECK_EQUAL(reqs[0].protocol, "telegram");
  CAF_CHECK_EQUAL(reqs[0].target, send_message);
  CAF_CHECK_EQUAL(reqs[0].chat_id, "42");
  CAF_CHECK_EQUAL(reqs[0].text, "hello");
  CAF_CHECK_EQUAL(reqs[0].parse_mode, "MarkdownV2");
  CAF_CHECK_EQUAL(reqs[0].status, 200);
  CAF_CHECK_EQUAL(reqs[0].header("content-type"), "application/json");
  CAF_CHECK_EQUAL(reqs[1].protocol, "telegram");
  CAF_CHECK_EQUAL(reqs[1].chat_id, "@news");
  CAF_CHECK(reqs[1].parse_mode.empty());
  CAF_CHECK(reqs[0].at <= reqs[1].at);
  CAF_CHECK_EQUAL(sink.delivered().size(), 2u);
}

CAF_TEST(telegram errors carry error codes and retry_after) {
  channel_sink_server::options opts;
  opts.script = *parse_fault_sequence("429;retry_after=3,401,500,403,418");
  channel_sink_server sink{opts};
  auto call = [&] {
    auto reply = http_call(sink.port(), "POST", send_message,
                           telegram_body(7, "hi"));
    return std::make_pair(reply.status, json::parse(reply.body));
  };
  auto [status, j] = call();
  CAF_CHECK_EQUAL(status, 429u);
  CAF_CHECK_EQUAL(j.dump(),
                  json({{"ok", false},
                        {"error_code", 429},
                        {"description", "Too Many Requests: retry after 3"},
                        {"parameters", {{"retry_after", 3}}}})
                    .dump());
  for (auto [code, description] :
       {std::pair{401, "Unauthorized"}, std::pair{500, "Internal Server Error"},
        std::pair{403, "Forbidden: bot was blocked by the user"},
        std::pair{418, "Error"}}) {
    std::tie(status, j) = call();
    CAF_CHECK_EQUAL(status, static_cast<unsigned>(code));
    CAF_CHECK_EQUAL(j["ok"], false);
    CAF_CHECK_EQUAL(j["error_code"], code);
    CAF_CHECK_EQUAL(j["description"], description);
    CAF_CHECK(!j.contains("parameters"));
  }
  std::tie(status, j) = call();
  CAF_CHECK_EQUAL(status, 200u);
  CAF_CHECK_EQUAL(j["result"]["message_id"], 1);
  CAF_CHECK_EQUAL(sink.delivered().size(), 1u);
}

CAF_TEST(telegram parse errors need a parse mode) {
  channel_sink_server sink;
  sink.push(spec("parse_error"));
  sink.push(spec("parse_error"));
  auto refused = http_call(sink.port(), "POST", send_message,
                           telegram_body(1, "*bold", "MarkdownV2"));
  CAF_CHECK_EQUAL(refused.status, 400u);
  auto j = json::parse(refused.body);
  CAF_CHECK_EQUAL(j["error_code"], 400);
  CAF_CHECK_EQUAL(j["description"],
                  "Bad Request: can't parse entities: Can't find end of the "
                  "entity starting at byte offset 0");
  // Without parse_mode the second parse_error answers ok, and is consumed.
  auto plain = http_call(sink.port(), "POST", send_message,
                         telegram_body(1, "*bold"));
  CAF_CHECK_EQUAL(plain.status, 200u);
  auto again = http_call(sink.port(), "POST", send_message,
                         telegram_body(1, "*bold", "Markdown"));
  CAF_CHECK_EQUAL(again.status, 200u);
  auto j2 = json::parse(again.body);
  CAF_CHECK_EQUAL(j2["result"]["message_id"], 2);
}

CAF_TEST(telegram bodies without chat or text are refused unscripted) {
  channel_sink_server sink;
  sink.push(spec("500"));
  auto check = [&](const std::string& body, const std::string& description) {
    auto reply = http_call(sink.port(), "POST", send_message, body);
    CAF_CHECK_EQUAL(reply.status, 400u);
    CAF_CHECK_EQUAL(
      reply.body,
      json({{"ok", false}, {"error_code", 400}, {"description", description}})
        .dump());
  };
  check("not json", "Bad Request: message text is empty");
  check(R"({"text":"hi"})", "Bad Request: chat not found");
  check(R"({"chat_id":1})", "Bad Request: message text is empty");
  check(R"({"chat_id":1,"text":""})", "Bad Request: message text is empty");
  // The script's 500 is still there.
  auto reply = http_call(sink.port(), "POST", send_message,
                         telegram_body(1, "hi"));
  CAF_CHECK_EQUAL(reply.status, 500u);
}

CAF_TEST(webhooks check signatures when a secret is set) {
  channel_sink_server::options opts;
  opts.webhook_secret = "s3cret";
  channel_sink_server sink{opts};
  sink.push(spec("503"));
  std::string body = R"({"event":"reply","id":"k1","text":"hello"})";
  auto bad = webhook_headers("k1", body, "wrong");
  auto refused = http_call(sink.port(), "POST", "/hooks/keel", body, bad);
  CAF_CHECK_EQUAL(refused.status, 401u);
  CAF_CHECK_EQUAL(refused.body, R"({"error":"bad signature"})");
  auto unsigned_reply = http_call(sink.port(), "POST", "/hooks/keel", body,
                                  webhook_headers("k1", body));
  CAF_CHECK_EQUAL(unsigned_reply.status, 401u);
  auto good = webhook_headers("k1", body, "s3cret");
  // The refusals left the script's 503 in place.
  CAF_CHECK_EQUAL(
    http_call(sink.port(), "POST", "/hooks/keel", body, good).status, 503u);
  auto ok = http_call(sink.port(), "POST", "/hooks/keel", body, good);
  CAF_CHECK_EQUAL(ok.status, 200u);
  CAF_CHECK_EQUAL(ok.body, R"({"ok":true})");
  auto reqs = sink.requests();
  CAF_REQUIRE_EQUAL(reqs.size(), 4u);
  CAF_CHECK(!reqs[0].signature_ok);
  CAF_CHECK_EQUAL(reqs[0].status, 401);
  CAF_CHECK(!reqs[1].signature_ok);
  CAF_CHECK(reqs[3].signature_ok);
  CAF_CHECK_EQUAL(reqs[3].protocol, "webhook");
  CAF_CHECK_EQUAL(reqs[3].idempotency_key, "k1");
  CAF_CHECK_EQUAL(reqs[3].event, "reply");
  CAF_CHECK_EQUAL(reqs[3].text, "hello");
  CAF_CHECK_EQUAL(reqs[3].body, body);
  CAF_CHECK_EQUAL(reqs[3].header("x-keel-timestamp"), "1700000000");
  CAF_CHECK_EQUAL(sink.delivered().size(), 1u);
}

CAF_TEST(webhook errors and retry after) {
  channel_sink_server::options opts;
  opts.script = *parse_fault_sequence("429;retry_after=5,parse_error,204");
  channel_sink_server sink{opts};
  std::string body = R"({"event":"reply","id":"k"})";
  auto limited = http_call(sink.port(), "POST", "/hook", body,
                           webhook_headers("k", body));
  CAF_CHECK_EQUAL(limited.status, 429u);
  CAF_CHECK_EQUAL(limited.header("Retry-After"), "5");
  CAF_CHECK_EQUAL(limited.body, R"({"error":"Too Many Requests"})");
  auto parse = http_call(sink.port(), "POST", "/hook", body,
                         webhook_headers("k", body));
  CAF_CHECK_EQUAL(parse.status, 400u);
  auto no_content = http_call(sink.port(), "POST", "/hook", body,
                              webhook_headers("k", body));
  CAF_CHECK_EQUAL(no_content.status, 204u);
  CAF_CHECK(no_content.body.empty());
  CAF_CHECK_EQUAL(http_call(sink.port(), "POST", "/hook", "not json").status,
                  400u);
  CAF_CHECK_EQUAL(http_call(sink.port(), "GET", "/hook").status, 405u);
  // Not a Telegram target: no token.
  CAF_CHECK_EQUAL(
    http_call(sink.port(), "POST", "/bot/sendMessage", body).status, 200u);
  auto reqs = sink.requests();
  CAF_REQUIRE_EQUAL(reqs.size(), 6u);
  CAF_CHECK_EQUAL(reqs[5].protocol, "webhook");
  CAF_CHECK_EQUAL(sink.delivered().size(), 2u);
}

CAF_TEST(duplicates count repeats of a delivered idempotency key) {
  channel_sink_server sink;
  std::string body = R"({"event":"reply"})";
  auto post = [&](const std::string& key) {
    http_fields headers;
    if (!key.empty())
      headers = webhook_headers(key, body);
    return http_call(sink.port(), "POST", "/hook", body, headers).status;
  };
  CAF_CHECK_EQUAL(post("k1"), 200u);
  CAF_CHECK_EQUAL(post("k1"), 200u);
  CAF_CHECK_EQUAL(post("k2"), 200u);
  CAF_CHECK_EQUAL(post(""), 200u);
  CAF_CHECK_EQUAL(post(""), 200u);
  sink.push(spec("500"));
  CAF_CHECK_EQUAL(post("k3"), 500u); // A failed attempt is no delivery...
  CAF_CHECK_EQUAL(post("k3"), 200u); // ...so its retry is no duplicate.
  CAF_CHECK_EQUAL(post("k1"), 200u);
  CAF_CHECK_EQUAL(sink.requests().size(), 8u);
  auto delivered = sink.delivered();
  CAF_REQUIRE_EQUAL(delivered.size(), 5u);
  CAF_CHECK_EQUAL(delivered[0].idempotency_key, "k1");
  CAF_CHECK_EQUAL(delivered[1].idempotency_key, "k2");
  CAF_CHECK_EQUAL(delivered[4].idempotency_key, "k3");
  CAF_CHECK_EQUAL(sink.duplicates(), 2u);
  CAF_CHECK(sink.wait_for_delivered(5, 0ms));
  CAF_CHECK(!sink.wait_for_delivered(6, 20ms));
  CAF_CHECK(sink.wait_for_requests(8, 0ms));
}

CAF_TEST(hang answers nothing until the server goes) {
  auto sink = std::make_unique<channel_sink_server>();
  sink->set_default(spec("hang"));
  std::string error;
  auto reply = try_http_call(sink->port(), "POST", send_message,
                             telegram_body(1, "hi"), {}, silence, &error);
  CAF_CHECK(!reply);
  CAF_CHECK(sink->wait_for_requests(1, event_timeout));
  auto reqs = sink->requests();
  CAF_CHECK_EQUAL(reqs[0].status, 0);
  CAF_CHECK(sink->delivered().empty());
  // A hanging connection is cut when the server goes.
  connection c{sink->port()};
  c.send("/hook", "{}");
  CAF_CHECK(sink->wait_for_requests(2, event_timeout));
  sink.reset();
  beast::error_code err;
  auto start = std::chrono::steady_clock::now();
  CAF_CHECK(!c.receive(event_timeout, err));
  CAF_CHECK(err == http::error::end_of_stream
            || err == net::error::connection_reset);
  CAF_CHECK(std::chrono::steady_clock::now() - start < event_timeout / 2);
}

CAF_TEST(drop and reset close without an answer) {
  channel_sink_server sink;
  sink.push(spec("drop"));
  sink.push(spec("reset"));
  std::string error;
  auto dropped = try_http_call(sink.port(), "POST", "/hook", "{}", {},
                               event_timeout, &error);
  CAF_CHECK(!dropped);
  CAF_CHECK(error.find("end of stream") != std::string::npos);
  auto reset = try_http_call(sink.port(), "POST", "/hook", "{}", {},
                             event_timeout, &error);
  CAF_CHECK(!reset);
  CAF_CHECK(error.find("timeout") == std::string::npos);
  auto reqs = sink.requests();
  CAF_REQUIRE_EQUAL(reqs.size(), 2u);
  CAF_CHECK_EQUAL(reqs[0].status, 0);
  CAF_CHECK_EQUAL(reqs[1].status, 0);
  CAF_CHECK_EQUAL(http_call(sink.port(), "POST", "/hook", "{}").status, 200u);
}

CAF_TEST(delay waits before answering) {
  channel_sink_server sink;
  sink.push(spec("delay=100ms;503"));
  auto start = std::chrono::steady_clock::now();
  auto reply = http_call(sink.port(), "POST", "/hook", "{}");
  CAF_CHECK(std::chrono::steady_clock::now() - start >= 100ms);
  CAF_CHECK_EQUAL(reply.status, 503u);
}

CAF_TEST(connections stay open across requests) {
  channel_sink_server sink;
  connection c{sink.port()};
  for (int id = 1; id <= 3; ++id) {
    c.send(send_message, telegram_body(5, "m" + std::to_string(id)));
    beast::error_code err;
    auto res = c.receive(event_timeout, err);
    CAF_REQUIRE(res);
    CAF_CHECK(res->keep_alive());
    auto j = json::parse(res->body());
    CAF_CHECK_EQUAL(j["result"]["message_id"], id);
  }
}

CAF_TEST(a taken port is an error) {
  channel_sink_server sink;
  channel_sink_server::options opts;
  opts.port = sink.port();
  bool threw = false;
  try {
    channel_sink_server second{opts};
  } catch (const std::runtime_error& e) {
    threw = std::string{e.what()}.find("cannot listen") != std::string::npos;
  }
  CAF_CHECK(threw);
}
