#define CAF_SUITE compat_dedupe

// How a resent request finds its message: in the thread's history (its
// text, its outcome if answered) and, for the SDKs' retries without a key,
// by fingerprint within a window.

#include <caf/test/unit_test.hpp>

#include <nlohmann/json.hpp>

#include "keel/compat_history.hpp"
#include "keel/compat_request.hpp"
#include "keel/recent_requests.hpp"

using namespace keel::compat;
using json = nlohmann::json;
using namespace std::chrono_literals;

CAF_TEST(a history page gives the message text and its stored outcome) {
  auto page = json::parse(R"({"type":"history","thread":"t","more":true,
    "entries":[
      {"seq":7,"kind":"user","client_id":"m","text":"hi","at":1},
      {"seq":8,"kind":"user","client_id":"n","text":"other","at":2},
      {"seq":9,"kind":"tool","client_id":"m","reply_to":7,"tool":"x",
       "text":"done","at":3},
      {"seq":10,"kind":"reply","client_id":"m","reply_to":7,"text":"hello",
       "provider":"echo","at":4,"input_tokens":5,"output_tokens":2}]})");
  auto found = find_message(page, "t", 7);
  CAF_REQUIRE(found.text);
  CAF_CHECK_EQUAL(*found.text, "hi");
  CAF_REQUIRE(found.outcome);
  auto& reply = *found.outcome;
  CAF_CHECK_EQUAL(reply["type"], "reply");
  CAF_CHECK_EQUAL(reply["seq"], 10);
  CAF_CHECK_EQUAL(reply["reply_to"], 7);
  CAF_CHECK_EQUAL(reply["text"], "hello");
  CAF_CHECK_EQUAL(reply["usage"]["input_tokens"], 5);
  CAF_CHECK_EQUAL(found.last_seq, 10u);
  CAF_CHECK(found.more);
  // Message 8 is on the page, not yet answered.
  auto pending = find_message(page, "t", 8);
  CAF_CHECK(pending.text);
  CAF_CHECK(!pending.outcome);
  auto failed = find_message(json::parse(R"({"entries":[
      {"seq":3,"kind":"error","client_id":"m","reply_to":2,
       "code":"provider_failed","text":"sorry","at":1}]})"),
                             "t", 2);
  CAF_REQUIRE(failed.outcome);
  auto error = *failed.outcome;
  CAF_CHECK_EQUAL(error["type"], "error");
  CAF_CHECK_EQUAL(error["code"], "provider_failed");
  CAF_CHECK_EQUAL(error["message"], "sorry");
  CAF_CHECK(!failed.text);
}

CAF_TEST(a retry without a key is its first try within the window) {
  recent_requests recent{10min, 2};
  auto t0 = recent_requests::clock::time_point{};
  auto a = fingerprint("tok", "", R"({"x":1})");
  CAF_CHECK_EQUAL(a.size(), 64u);
  CAF_CHECK_NOT_EQUAL(a, fingerprint("tok", "t", R"({"x":1})"));
  CAF_CHECK_NOT_EQUAL(a, fingerprint("other", "", R"({"x":1})"));
  // Lengths keep the parts apart: "ab"+"c" is not "a"+"bc".
  CAF_CHECK_NOT_EQUAL(fingerprint("ab", "c", ""), fingerprint("a", "bc", ""));
  CAF_CHECK(!recent.find(a, t0));
  recent.remember(a, {"oai-1", "fp:1"}, t0);
  auto again = recent.find(a, t0 + 9min);
  CAF_REQUIRE(again);
  CAF_CHECK_EQUAL(again->thread, "oai-1");
  CAF_CHECK_EQUAL(again->message_id, "fp:1");
  CAF_CHECK(!recent.find(a, t0 + 11min));
  CAF_CHECK_EQUAL(recent.size(), 0u);
  // At capacity the oldest goes first.
  recent.remember("f1", {"t", "1"}, t0);
  recent.remember("f2", {"t", "2"}, t0 + 1s);
  recent.remember("f1", {"t", "1b"}, t0 + 2s);
  recent.remember("f3", {"t", "3"}, t0 + 3s);
  CAF_CHECK_EQUAL(recent.size(), 2u);
  CAF_CHECK(!recent.find("f2", t0 + 3s));
  CAF_CHECK_EQUAL(recent.find("f1", t0 + 3s)->message_id, "1b");
  CAF_CHECK(recent.find("f3", t0 + 3s));
}

CAF_TEST(a request becomes the message its key or its first try names) {
  recent_requests recent{10min, 100};
  auto t0 = recent_requests::clock::time_point{};
  compat_call keyed;
  keyed.message_id = "m-1";
  keyed.thread = "t";
  auto id = identity_for(keyed, "tok", "{}", recent, t0, "r1");
  CAF_CHECK_EQUAL(id.thread, "t");
  CAF_CHECK_EQUAL(id.message_id, "m-1");
  // One-shot with a key: the same thread for every resend of it.
  keyed.thread.clear();
  auto once = identity_for(keyed, "tok", "{}", recent, t0, "r2");
  CAF_CHECK_EQUAL(once.thread.substr(0, 4), "oai-");
  CAF_CHECK_EQUAL(once.thread.size(), 36u);
  CAF_CHECK_EQUAL(identity_for(keyed, "tok", "{}", recent, t0, "r3").thread,
                  once.thread);
  CAF_CHECK_NOT_EQUAL(
    identity_for(keyed, "other", "{}", recent, t0, "r3").thread, once.thread);
  // No key: a first try is new, the SDK's retry of it is the same message.
  compat_call keyless;
  auto first = identity_for(keyless, "tok", "{\"a\":1}", recent, t0, "r4");
  CAF_CHECK_EQUAL(first.message_id, "fp:r4");
  keyless.retry_count = 1;
  auto retry = identity_for(keyless, "tok", "{\"a\":1}", recent, t0 + 1s, "r5");
  CAF_CHECK_EQUAL(retry.message_id, "fp:r4");
  CAF_CHECK_EQUAL(retry.thread, first.thread);
  keyless.retry_count = 0;
  CAF_CHECK_EQUAL(
    identity_for(keyless, "tok", "{\"a\":1}", recent, t0 + 2s, "r6").message_id,
    "fp:r6");
}
