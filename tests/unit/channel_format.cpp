#define CAF_SUITE channel_format

// What Keel sends to outbound channels and how it reads their answers: the
// webhook's signed event, Telegram's sendMessage with and without markup,
// and the classification of every answer shape the retry policy acts on.

#include <caf/test/unit_test.hpp>

#include <nlohmann/json.hpp>

#include "keel/channel_format.hpp"

#include "text_checks.hpp"

using namespace keel;
using namespace std::chrono_literals;
using json = nlohmann::json;

namespace {

channel_config webhook(std::string secret = {}) {
  channel_config cfg;
  cfg.name = "hook";
  cfg.kind = channel_kind::webhook;
  cfg.url = "http://127.0.0.1:9/events";
  cfg.secret = std::move(secret);
  return cfg;
}

channel_config telegram() {
  channel_config cfg;
  cfg.name = "tg";
  cfg.kind = channel_kind::telegram;
  cfg.url = "https://api.telegram.org/";
  cfg.token = "123:abc";
  cfg.chat_id = "42";
  return cfg;
}

outbound_message message() {
  outbound_message msg;
  msg.id = reply_idempotency_key("hook", "t1", 4);
  msg.thread = "t1";
  msg.seq = 4;
  msg.reply_to = 3;
  msg.text = "**hi** there";
  msg.at = 1700000000123;
  return msg;
}

std::string header(const channel_send& x, const std::string& name) {
  for (auto& [key, value] : x.headers)
    if (key == name)
      return value;
  return {};
}

/// Where the answers come from.
constexpr std::string_view peer = "127.0.0.1:9";

http_client_response refused(unsigned status, std::string body,
                             std::optional<std::chrono::seconds> after = {}) {
  http_client_response res;
  res.status = status;
  res.body = std::move(body);
  if (after)
    res.headers.emplace_back("Retry-After", std::to_string(after->count()));
  return res;
}

http_client_response answered(std::string body) {
  http_client_response res;
  res.status = 200;
  res.body = std::move(body);
  return res;
}

} // namespace

CAF_TEST(hmac matches the RFC 4231 test vector) {
  // RFC 4231, test case 2.
  CAF_CHECK_EQUAL(hmac_sha256_hex("Jefe", "what do ya want for nothing?"),
                  "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec"
                  "3843");
}

CAF_TEST(a webhook event is signed over its timestamp and body) {
  auto x = build_send(webhook("s3cret"), message(), false, 1700000005000);
  auto body = json::parse(x.body);
  CAF_CHECK_EQUAL(body["event"], "reply");
  CAF_CHECK_EQUAL(body["id"], "keel:hook:t1:4");
  CAF_CHECK_EQUAL(body["thread"], "t1");
  CAF_CHECK_EQUAL(body["seq"], 4);
  CAF_CHECK_EQUAL(body["reply_to"], 3);
  CAF_CHECK_EQUAL(body["text"], "**hi** there");
  CAF_CHECK_EQUAL(header(x, "Idempotency-Key"), "keel:hook:t1:4");
  CAF_CHECK_EQUAL(header(x, "X-Keel-Timestamp"), "1700000005");
  CAF_CHECK_EQUAL(header(x, "X-Keel-Signature"),
                  "sha256="
                    + hmac_sha256_hex("s3cret", "1700000005." + x.body));
  // Without a secret there is no signature.
  auto plain = build_send(webhook(), message(), false, 1700000005000);
  CAF_CHECK_EQUAL(header(plain, "X-Keel-Signature"), "");
}

CAF_TEST(telegram gets its parse mode or the text without markup) {
  auto cfg = telegram();
  CAF_CHECK_EQUAL(send_url(cfg), "https://api.telegram.org/bot123:abc/"
                                 "sendMessage");
  auto x = json::parse(build_send(cfg, message(), false, 0).body);
  CAF_CHECK_EQUAL(x["chat_id"], "42");
  CAF_CHECK_EQUAL(x["text"], "**hi** there");
  CAF_CHECK_EQUAL(x["parse_mode"], "Markdown");
  auto y = json::parse(build_send(cfg, message(), true, 0).body);
  CAF_CHECK_EQUAL(y["text"], "hi there");
  CAF_CHECK(!y.contains("parse_mode"));
}

CAF_TEST(a notice goes to a webhook as an event and to telegram as text) {
  owner_notice notice;
  notice.kind = notice_kind::credits_exhausted;
  notice.subject = "pool main";
  notice.text = "Thread t1 could not be answered";
  notice.at = 1700000000123;
  auto msg = notice_message(notice);
  CAF_CHECK_EQUAL(msg.id, "keel:notice:credits_exhausted:pool main:"
                          "1700000000123");
  auto x = build_send(webhook("s3cret"), msg, false, 1700000005000);
  auto body = json::parse(x.body);
  CAF_CHECK_EQUAL(body["event"], "notice");
  CAF_CHECK_EQUAL(body["kind"], "credits_exhausted");
  CAF_CHECK_EQUAL(body["severity"], "high");
  CAF_CHECK_EQUAL(body["subject"], "pool main");
  CAF_CHECK_EQUAL(body["text"], "Thread t1 could not be answered");
  CAF_CHECK_EQUAL(body["at"], 1700000000123);
  CAF_CHECK(!body.contains("thread"));
  CAF_CHECK_EQUAL(header(x, "X-Keel-Event"), "notice");
  CAF_CHECK_EQUAL(header(x, "Idempotency-Key"), msg.id);
  // Telegram: plain text (kind names hold '_', which Markdown would take
  // for markup).
  auto y = json::parse(build_send(telegram(), msg, false, 0).body);
  CAF_CHECK_EQUAL(y["text"], "[high] credits_exhausted: pool main\n"
                             "Thread t1 could not be answered");
  CAF_CHECK(!y.contains("parse_mode"));
}

CAF_TEST(answers are delivered or classified for the retry policy) {
  auto tg = channel_kind::telegram;
  auto hook = channel_kind::webhook;
  CAF_CHECK(read_send_answer(hook, answered(""), peer).delivered);
  CAF_CHECK(read_send_answer(tg, answered(R"({"ok":true,"result":{}})"), peer)
              .delivered);
  auto odd = read_send_answer(tg, answered(R"({"ok":false})"), peer);
  CAF_CHECK(!odd.delivered);
  CAF_CHECK(odd.failure.kind == send_failure_kind::rejected);
  // Telegram's 429 carries its wait in the body.
  auto limited = read_send_answer(
    tg,
    refused(429, R"({"ok":false,"error_code":429,"description":"Too )"
                 R"(Many Requests: retry after 3","parameters":)"
                 R"({"retry_after":3}})"),
    peer);
  CAF_CHECK(limited.failure.kind == send_failure_kind::transient);
  CAF_CHECK(limited.failure.retry_after == std::chrono::milliseconds{3000});
  KEEL_CHECK_CONTAINS(limited.description, "retry after 3");
  auto markup = read_send_answer(
    tg,
    refused(400, R"({"ok":false,"error_code":400,"description":"Bad )"
                 R"(Request: can't parse entities: Can't find end"})"),
    peer);
  CAF_CHECK(markup.failure.kind == send_failure_kind::parse_error);
  auto chat = read_send_answer(
    tg,
    refused(400, R"({"ok":false,"error_code":400,"description":"Bad )"
                 R"(Request: chat not found"})"),
    peer);
  CAF_CHECK(chat.failure.kind == send_failure_kind::rejected);
  // A webhook's Retry-After header, 5xx, 408 and a cut connection are worth
  // another try; another 4xx is not.
  auto busy = read_send_answer(hook, refused(503, "", 2s), peer);
  CAF_CHECK(busy.failure.kind == send_failure_kind::transient);
  CAF_CHECK(busy.failure.retry_after == std::chrono::milliseconds{2000});
  CAF_CHECK(read_send_answer(hook, refused(408, ""), peer).failure.kind
            == send_failure_kind::transient);
  CAF_CHECK(read_send_answer(hook, refused(404, ""), peer).failure.kind
            == send_failure_kind::rejected);
  http_failure cut;
  cut.error = http_error::reset;
  cut.message = "127.0.0.1:9 closed the connection without answering";
  auto reset = read_send_answer(hook, cut, peer);
  CAF_CHECK(reset.failure.kind == send_failure_kind::transient);
  CAF_CHECK_EQUAL(reset.description, cut.message);
}
