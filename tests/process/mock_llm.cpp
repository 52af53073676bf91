#define CAF_SUITE mock_llm

// Smoke checks of the npm test servers (tests/support/npm_server.hpp):
// mock-llm with the rule files of tests/mock-llm, and Portkey's gateway in
// front of it. Needs scripts/setup (tests/npm/node_modules).

#include <caf/test/unit_test.hpp>

#include <nlohmann/json.hpp>

#include "npm_server.hpp"

using namespace keel::test;

namespace {

const std::string completions = "/v1/chat/completions";

// The value at JSON `pointer` ("/error/code") in `body`; null if absent.
// (By value: CAF's check macros hold on to their arguments.)
nlohmann::json json_at(const std::string& body, const std::string& pointer) {
  auto j = nlohmann::json::parse(body, nullptr, false);
  nlohmann::json::json_pointer ptr{pointer};
  if (j.is_discarded() || !j.contains(ptr))
    return nullptr;
  return j.at(ptr);
}

} // namespace

CAF_TEST(mock - llm answers a chat completion plain and streamed) {
  mock_llm mock{"ok.yaml"};
  CAF_CHECK(!mock.extended());
  auto res = http_call(mock.port(), "POST", completions, chat_request("hello"));
  CAF_CHECK_EQUAL(res.status, 200u);
  CAF_CHECK_EQUAL(completion_text(res.body), "echo: hello");
  CAF_CHECK_EQUAL(json_at(res.body, "/usage/total_tokens"), 8);
  auto streamed = http_call(mock.port(), "POST", completions,
                            chat_request("hello there", true));
  CAF_CHECK_EQUAL(streamed.status, 200u);
  CAF_CHECK_EQUAL(streamed.header("Content-Type"), "text/event-stream");
  auto events = sse_data(streamed.body);
  // "echo: hello there" in chunks of 8 characters, then [DONE].
  CAF_REQUIRE_EQUAL(events.size(), 4u);
  CAF_CHECK_EQUAL(events.back(), "[DONE]");
  CAF_CHECK_EQUAL(json_at(events[0], "/choices/0/delta/role"), "assistant");
  CAF_CHECK_EQUAL(json_at(events[2], "/choices/0/finish_reason"), "stop");
  CAF_CHECK_EQUAL(completion_text(streamed.body), "echo: hello there");
}

CAF_TEST(a rate limit answers 429 with Retry - After plain and streamed) {
  mock_llm mock{"error-429-rate-limit.yaml"};
  CAF_CHECK(mock.extended());
  for (auto stream : {false, true}) {
    auto res = http_call(mock.port(), "POST", completions,
                         chat_request("hi", stream));
    CAF_CHECK_EQUAL(res.status, 429u);
    CAF_CHECK_EQUAL(res.header("retry-after"), "2");
    CAF_CHECK_EQUAL(json_at(res.body, "/error/code"), "rate_limit_exceeded");
  }
}

CAF_TEST(a flaky mock fails twice then answers until it is reset) {
  mock_llm mock{"flaky-503-then-ok.yaml"};
  auto status = [&] {
    return http_call(mock.port(), "POST", completions, chat_request("x"))
      .status;
  };
  CAF_CHECK_EQUAL(status(), 503u);
  CAF_CHECK_EQUAL(status(), 503u);
  CAF_CHECK_EQUAL(status(), 200u);
  CAF_CHECK_EQUAL(status(), 200u);
  mock.reset();
  CAF_CHECK_EQUAL(status(), 503u);
}

CAF_TEST(portkey in front of mock - llm passes answers and errors through) {
  mock_llm mock{"scenarios.yaml"};
  portkey_gateway portkey;
  auto route = portkey_gateway::route_to(mock.base_url());
  auto res = http_call(portkey.port(), "POST", completions,
                       chat_request("via portkey"), route);
  CAF_CHECK_EQUAL(res.status, 200u);
  CAF_CHECK_EQUAL(res.header("x-portkey-provider"), "openai");
  CAF_CHECK_EQUAL(completion_text(res.body), "echo: via portkey");
  auto streamed = http_call(portkey.port(), "POST", completions,
                            chat_request("streamed via portkey", true), route);
  CAF_CHECK_EQUAL(streamed.status, 200u);
  auto events = sse_data(streamed.body);
  CAF_REQUIRE(!events.empty());
  CAF_CHECK_EQUAL(events.back(), "[DONE]");
  CAF_CHECK_EQUAL(completion_text(streamed.body), "echo: streamed via portkey");
  auto limited = http_call(portkey.port(), "POST", completions,
                           chat_request("[mock:429]"), route);
  CAF_CHECK_EQUAL(limited.status, 429u);
  CAF_CHECK_EQUAL(limited.header("retry-after"), "2");
  CAF_CHECK_EQUAL(json_at(limited.body, "/error/code"), "rate_limit_exceeded");
  CAF_CHECK(mock.running());
  CAF_CHECK(portkey.running());
}
