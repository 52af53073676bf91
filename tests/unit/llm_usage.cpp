#define CAF_SUITE llm_usage

// The tokens a model call took, read from both wire formats: plain answers
// (`usage`), OpenAI's streamed usage chunk (asked for with
// `stream_options.include_usage`), Anthropic's `message_start` and
// `message_delta` usage, and answers that report none.

#include <string>
#include <vector>

#include <caf/test/unit_test.hpp>

#include <nlohmann/json.hpp>

#include "keel/llm_wire.hpp"

#include "wire_bodies.hpp"

using namespace keel;
using json = nlohmann::json;
using step = llm_wire::stream_decoder::step;

namespace {

completion plain(llm_wire::api kind, const std::string& body) {
  completion c;
  std::string err;
  CAF_CHECK(llm_wire::parse_answer(kind, body, c, err));
  CAF_CHECK_EQUAL(err, "");
  return c;
}

/// Feeds `events` (name, data) to a decoder of `kind` and returns what it
/// made of them once the last one ended the stream.
completion
streamed(llm_wire::api kind,
         const std::vector<std::pair<std::string, std::string>>& events) {
  llm_wire::stream_decoder dec{kind};
  std::string delta;
  auto last = step::more;
  for (auto& [name, data] : events)
    last = dec.on_event(name, data, delta);
  CAF_CHECK(last == step::done);
  return dec.result();
}

const std::string openai_answer
  = R"({"model":"m","choices":[{"index":0,"message":{"role":"assistant",
       "content":"hi"},"finish_reason":"stop"}])";

} // namespace

CAF_TEST(a plain openai answer gives prompt and completion tokens) {
  auto c = plain(llm_wire::api::openai,
                 openai_answer
                   + R"(,"usage":{"prompt_tokens":12,"completion_tokens":3,
                        "total_tokens":15}})");
  CAF_CHECK(c.usage.reported);
  CAF_CHECK_EQUAL(c.usage.input_tokens, 12u);
  CAF_CHECK_EQUAL(c.usage.output_tokens, 3u);
}

CAF_TEST(an answer without usage reports none) {
  auto c = plain(llm_wire::api::openai, openai_answer + "}");
  CAF_CHECK(!c.usage.reported);
  CAF_CHECK_EQUAL(c.usage.input_tokens, 0u);
  auto nulled = plain(llm_wire::api::openai,
                      openai_answer + R"(,"usage":null})");
  CAF_CHECK(!nulled.usage.reported);
  auto anthropic = plain(llm_wire::api::anthropic,
                         R"({"content":[{"type":"text","text":"hi"}],
                             "stop_reason":"end_turn"})");
  CAF_CHECK(!anthropic.usage.reported);
}

CAF_TEST(counts that are not whole numbers count as zero) {
  auto c
    = plain(llm_wire::api::openai,
            openai_answer
              + R"(,"usage":{"prompt_tokens":"12","completion_tokens":-3}})");
  CAF_CHECK(c.usage.reported);
  CAF_CHECK_EQUAL(c.usage.input_tokens, 0u);
  CAF_CHECK_EQUAL(c.usage.output_tokens, 0u);
}

CAF_TEST(a plain anthropic answer counts the cached input too) {
  auto c = plain(llm_wire::api::anthropic,
                 R"({"content":[{"type":"text","text":"hi"}],
                     "stop_reason":"end_turn","usage":{"input_tokens":20,
                     "cache_creation_input_tokens":5,
                     "cache_read_input_tokens":100,"output_tokens":7}})");
  CAF_CHECK(c.usage.reported);
  CAF_CHECK_EQUAL(c.usage.input_tokens, 125u);
  CAF_CHECK_EQUAL(c.usage.output_tokens, 7u);
}

CAF_TEST(an openai stream reads its usage chunk) {
  auto c = streamed(
    llm_wire::api::openai,
    {{"", R"({"choices":[{"delta":{"role":"assistant","content":""}}],
              "usage":null})"},
     {"", R"({"choices":[{"delta":{"content":"hi"}}],"usage":null})"},
     {"", R"({"choices":[{"delta":{},"finish_reason":"stop"}],"usage":null})"},
     {"", R"({"choices":[],"usage":{"prompt_tokens":9,"completion_tokens":2,
              "total_tokens":11}})"},
     {"", "[DONE]"}});
  CAF_CHECK_EQUAL(c.text, "hi");
  CAF_CHECK(c.usage.reported);
  CAF_CHECK_EQUAL(c.usage.input_tokens, 9u);
  CAF_CHECK_EQUAL(c.usage.output_tokens, 2u);
}

CAF_TEST(an openai stream without a usage chunk reports none) {
  auto c
    = streamed(llm_wire::api::openai,
               {{"", R"({"choices":[{"delta":{"content":"hi"}}]})"},
                {"", R"({"choices":[{"delta":{},"finish_reason":"stop"}]})"},
                {"", "[DONE]"}});
  CAF_CHECK(!c.usage.reported);
}

CAF_TEST(an anthropic stream takes input at the start and output at the end) {
  auto c = streamed(
    llm_wire::api::anthropic,
    {{"message_start",
      R"({"type":"message_start","message":{"model":"claude","content":[],
          "usage":{"input_tokens":25,"cache_read_input_tokens":4,
          "output_tokens":1}}})"},
     {"content_block_start",
      R"({"type":"content_block_start","index":0,
          "content_block":{"type":"text","text":""}})"},
     {"content_block_delta",
      R"({"type":"content_block_delta","index":0,
          "delta":{"type":"text_delta","text":"hi"}})"},
     {"content_block_stop", R"({"type":"content_block_stop","index":0})"},
     {"message_delta",
      R"({"type":"message_delta","delta":{"stop_reason":"end_turn"},
          "usage":{"output_tokens":15}})"},
     {"message_stop", R"({"type":"message_stop"})"}});
  CAF_CHECK_EQUAL(c.text, "hi");
  CAF_CHECK(c.usage.reported);
  CAF_CHECK_EQUAL(c.usage.input_tokens, 29u);
  CAF_CHECK_EQUAL(c.usage.output_tokens, 15u);
}

CAF_TEST(only a streamed openai request asks for the usage chunk) {
  completion_request req;
  req.context.push_back(context_entry{1, "user", "hi"});
  auto streamed_body = keel::test::wire_body(llm_wire::api::openai, req, "m",
                                             64, true);
  CAF_CHECK_EQUAL(streamed_body["stream_options"],
                  json({{"include_usage", true}}));
  auto plain_body = keel::test::wire_body(llm_wire::api::openai, req, "m", 64,
                                          false);
  CAF_CHECK(!plain_body.contains("stream_options"));
  auto anthropic_body = keel::test::wire_body(llm_wire::api::anthropic, req,
                                              "m", 64, true);
  CAF_CHECK(!anthropic_body.contains("stream_options"));
}
