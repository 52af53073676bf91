#define CAF_SUITE call_usage

// What one model call counts: the reported tokens, or estimates marked as
// such when the provider reported none.

#include "keel/call_usage.hpp"

#include <caf/test/unit_test.hpp>

using namespace keel;

CAF_TEST(a reported call counts its tokens as they are) {
  completion reply;
  reply.text = "hello there";
  reply.usage = {120, 7, true};
  estimate_usage(reply, 999);
  auto u = call_usage(reply);
  CAF_CHECK_EQUAL(u.input_tokens, 120u);
  CAF_CHECK_EQUAL(u.output_tokens, 7u);
  CAF_CHECK_EQUAL(u.model_calls, 1u);
  CAF_CHECK_EQUAL(u.estimated_calls, 0u);
}

CAF_TEST(an unreported call counts the estimates and says so) {
  completion reply;
  reply.text = std::string(40, 'x'); // 10 tokens and 4 of framing
  reply.tool_calls.push_back(tool_call{"c1", "nap", "{}"}); // 5 bytes more
  estimate_usage(reply, 321);
  auto u = call_usage(reply);
  CAF_CHECK_EQUAL(u.input_tokens, 321u);
  CAF_CHECK_EQUAL(u.output_tokens, (40u + 5u + 3u) / 4 + 4);
  CAF_CHECK_EQUAL(u.model_calls, 1u);
  CAF_CHECK_EQUAL(u.estimated_calls, 1u);
}

CAF_TEST(usage adds up) {
  usage_count total;
  total += usage_count{10, 2, 1, 0};
  total += usage_count{5, 1, 1, 1};
  CAF_CHECK(total == (usage_count{15, 3, 2, 1}));
  CAF_CHECK(!total.empty());
  CAF_CHECK(usage_count{}.empty());
}
