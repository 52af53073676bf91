#define CAF_SUITE channel_client

// The channel client over real sockets against the channel sink: a signed
// webhook event and a Telegram message delivered, and every failure the
// retry policy acts on read from the wire: Retry-After in either form, a
// markup the chat cannot parse, a send over its timeout, a cut connection.

#include <caf/test/unit_test.hpp>

#include <future>

#include "keel/channel_client.hpp"
#include "keel/tools/channel_sink_server.hpp"

#include "text_checks.hpp"

using namespace keel;
using namespace std::chrono_literals;
using channel_sink::channel_sink_server;
using channel_sink::parse_fault;

namespace {

struct fixture {
  channel_sink_server sink{{0, {}, {}, "s3cret"}};
  http_io io{1};

  channel_config webhook() {
    channel_config cfg;
    cfg.name = "hook";
    cfg.kind = channel_kind::webhook;
    cfg.url = sink.base_url() + "/events";
    cfg.secret = "s3cret";
    cfg.retry = channel_retry_preset(channel_kind::webhook);
    cfg.retry.send_timeout = 300ms;
    return cfg;
  }

  channel_config telegram() {
    channel_config cfg;
    cfg.name = "tg";
    cfg.kind = channel_kind::telegram;
    cfg.url = sink.base_url();
    cfg.token = "1:x";
    cfg.chat_id = "42";
    cfg.retry = channel_retry_preset(channel_kind::telegram);
    return cfg;
  }

  // Sends one message to `cfg` and waits for the result.
  send_result send(const channel_config& cfg, bool plain_text = false) {
    auto client = channel_client::make(io, cfg);
    CAF_REQUIRE(client);
    outbound_message msg;
    msg.id = reply_idempotency_key(cfg.name, "t1", 2);
    msg.thread = "t1";
    msg.seq = 2;
    msg.text = "*hi*";
    std::promise<send_result> done;
    (*client)->send(msg, plain_text,
                    [&](send_result r) { done.set_value(std::move(r)); });
    auto result = done.get_future();
    CAF_REQUIRE(result.wait_for(10s) == std::future_status::ready);
    return result.get();
  }
};

} // namespace

CAF_TEST_FIXTURE_SCOPE(channel_client_tests, fixture)

CAF_TEST(a webhook event arrives signed and delivers on 2xx) {
  auto r = send(webhook());
  CAF_CHECK(r.delivered);
  auto got = sink.requests();
  CAF_REQUIRE_EQUAL(got.size(), 1u);
  CAF_CHECK(got[0].signature_ok);
  CAF_CHECK_EQUAL(got[0].idempotency_key, "keel:hook:t1:2");
  CAF_CHECK_EQUAL(got[0].target, "/events");
}

CAF_TEST(telegram delivers and reads its failures) {
  CAF_CHECK(send(telegram()).delivered);
  sink.push(*parse_fault("429;retry_after=2"));
  auto limited = send(telegram());
  CAF_CHECK(!limited.delivered);
  CAF_CHECK(limited.failure.kind == send_failure_kind::transient);
  CAF_CHECK(limited.failure.retry_after == std::chrono::milliseconds{2000});
  sink.push(*parse_fault("parse_error"));
  auto markup = send(telegram());
  CAF_CHECK(markup.failure.kind == send_failure_kind::parse_error);
  KEEL_CHECK_CONTAINS(markup.description, "can't parse entities");
  sink.push(*parse_fault("401"));
  auto refused = send(telegram());
  CAF_CHECK(refused.failure.kind == send_failure_kind::rejected);
  // The token is in the URL only, never in what is reported.
  CAF_CHECK_EQUAL(refused.description.find("1:x"), std::string::npos);
}

CAF_TEST(a slow or cut send is a transient failure) {
  sink.push(*parse_fault("delay=2s"));
  auto slow = send(webhook());
  CAF_CHECK(!slow.delivered);
  CAF_CHECK(slow.failure.kind == send_failure_kind::transient);
  sink.push(*parse_fault("reset"));
  auto cut = send(webhook());
  CAF_CHECK(cut.failure.kind == send_failure_kind::transient);
  sink.push(*parse_fault("503;retry_after=1"));
  auto busy = send(webhook());
  CAF_CHECK(busy.failure.kind == send_failure_kind::transient);
  CAF_CHECK(busy.failure.retry_after == std::chrono::milliseconds{1000});
  sink.push(*parse_fault("404"));
  CAF_CHECK(send(webhook()).failure.kind == send_failure_kind::rejected);
}

CAF_TEST(a webhook url may carry a query) {
  auto cfg = webhook();
  cfg.url = sink.base_url() + "/events?key=abc";
  CAF_CHECK(send(cfg).delivered);
  auto got = sink.requests();
  CAF_REQUIRE_EQUAL(got.size(), 1u);
  CAF_CHECK_EQUAL(got[0].target, "/events?key=abc");
}

CAF_TEST(a channel with a bad url does not start and hides its secrets) {
  auto cfg = telegram();
  cfg.url = "http://";
  auto client = channel_client::make(io, cfg);
  CAF_REQUIRE(!client);
  auto why = error_message(client.error());
  CAF_CHECK_EQUAL(why.find("1:x"), std::string::npos);
  KEEL_CHECK_CONTAINS(why, "<url>");
  auto hook = webhook();
  hook.url = "http://127.0.0.1:9/events?key=abc#x";
  auto bad = channel_client::make(io, hook);
  CAF_REQUIRE(!bad);
  auto what = error_message(bad.error());
  CAF_CHECK_EQUAL(what.find("key=abc"), std::string::npos);
  KEEL_CHECK_CONTAINS(what, "fragment");
}

CAF_TEST_FIXTURE_SCOPE_END()
