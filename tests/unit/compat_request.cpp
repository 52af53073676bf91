#define CAF_SUITE compat_request

// Reading OpenAI Chat Completions and Anthropic Messages requests as Keel
// messages: the thread, the message id, the new message, the earlier ones,
// and a 400 naming the field for whatever Keel cannot serve as asked.

#include <caf/test/unit_test.hpp>

#include <nlohmann/json.hpp>

#include "keel/compat_request.hpp"

#include "text_checks.hpp"

using namespace keel;
using namespace keel::compat;
using json = nlohmann::json;

namespace {

request_limits limits;

compat_call chat_ok(const json& body, const request_headers& headers = {}) {
  auto result = read_chat_request(body.dump(), headers, limits);
  if (auto err = std::get_if<api_error>(&result))
    CAF_FAIL("refused: " << err->message);
  return std::get<compat_call>(std::move(result));
}

api_error text_refused(const std::string& body) {
  auto result = read_chat_request(body, {}, limits);
  CAF_REQUIRE(std::holds_alternative<api_error>(result));
  return std::get<api_error>(std::move(result));
}

api_error chat_refused(const json& body) {
  return text_refused(body.dump());
}

json chat(json messages) {
  return {{"model", "default"}, {"messages", std::move(messages)}};
}

json user(const std::string& text) {
  return {{"role", "user"}, {"content", text}};
}

} // namespace

CAF_TEST(a chat request with a thread is its last user message) {
  request_headers headers;
  headers.thread = "support-42";
  headers.idempotency_key = "m-1";
  headers.retry_count = 1;
  auto body = chat({{{"role", "developer"}, {"content", "be brief"}},
                    user("earlier"),
                    {{"role", "assistant"}, {"content", "ok"}},
                    {{"role", "user"},
                     {"content",
                      {{{"type", "text"}, {"text", "new"}},
                       {{"type", "text"}, {"text", "one"}}}}}});
  body["stream"] = true;
  body["stream_options"] = {{"include_usage", true}};
  body["temperature"] = 0.2;
  body["user"] = "u-1";
  auto call = chat_ok(body, headers);
  CAF_CHECK(call.wire == api::openai);
  CAF_CHECK_EQUAL(call.model, "default");
  CAF_CHECK_EQUAL(call.thread, "support-42");
  CAF_CHECK_EQUAL(call.message_id, "m-1");
  CAF_CHECK_EQUAL(call.text, "new\none");
  CAF_CHECK_EQUAL(call.retry_count, 1u);
  CAF_CHECK(call.stream);
  CAF_CHECK(call.include_usage);
  CAF_REQUIRE_EQUAL(call.earlier.size(), 3u);
  CAF_CHECK_EQUAL(call.earlier[0].role, "system");
  CAF_CHECK_EQUAL(call.earlier[2].text, "ok");
}

CAF_TEST(the thread and key come from metadata when no header gives them) {
  auto body = chat({user("hi")});
  body["metadata"] = {{"keel_thread", "t-7"}, {"keel_message_id", "k 1"}};
  auto call = chat_ok(body);
  CAF_CHECK_EQUAL(call.thread, "t-7");
  // Not a valid Keel id (a space): its digest stands in, the same each time.
  CAF_CHECK_EQUAL(call.message_id, message_id_for("k 1"));
  CAF_CHECK_EQUAL(call.message_id.substr(0, 3), "ik:");
  CAF_CHECK_EQUAL(call.message_id.size(), 43u);
  CAF_CHECK_EQUAL(message_id_for("agent:x").substr(0, 3), "ik:");
  request_headers headers;
  headers.thread = "from-header";
  CAF_CHECK_EQUAL(chat_ok(body, headers).thread, "from-header");
  // Without either: a one-shot request, no key.
  auto oneshot = chat_ok(chat({user("hi")}));
  CAF_CHECK(oneshot.thread.empty());
  CAF_CHECK(oneshot.message_id.empty());
  CAF_CHECK(!oneshot.stream);
  CAF_CHECK(!oneshot.include_usage);
}

CAF_TEST(chat requests Keel cannot serve are 400s naming the field) {
  struct refusal_case {
    json body;
    std::string code;
    std::string param;
  };
  auto with = [](const char* key, json value) {
    auto body = chat({user("hi")});
    body[key] = std::move(value);
    return body;
  };
  auto image = json{
    {"role", "user"},
    {"content",
     {{{"type", "text"}, {"text", "look"}},
      {{"type", "image_url"}, {"image_url", {{"url", "https://x/y.png"}}}}}}};
  std::vector<refusal_case> cases{
    {with("n", 2), "unsupported_parameter", "n"},
    {with("logprobs", true), "unsupported_parameter", "logprobs"},
    {with("modalities", {"text", "audio"}), "unsupported_parameter",
     "modalities"},
    {with("response_format", {{"type", "json_object"}}),
     "unsupported_parameter", "response_format"},
    {with("tools", {{{"type", "function"}}}), "unsupported_parameter", "tools"},
    {with("store", false), "unsupported_parameter", "store"},
    {with("stream", "yes"), "invalid_type", "stream"},
    {chat({image}), "unsupported_content", "messages[0].content[1]"},
    {chat({user("hi"), {{"role", "assistant"}, {"content", "x"}}}),
     "invalid_value", "messages[1].role"},
    {chat({{{"role", "robot"}, {"content", "x"}}}), "invalid_value",
     "messages[0].role"},
    {chat({user("")}), "invalid_value", "messages[0].content"},
    {chat(json::array()), "missing_required_parameter", "messages"},
    {json{{"messages", {user("hi")}}}, "missing_required_parameter", "model"},
    {with("metadata", {{"keel_thread", "no spaces"}}), "invalid_value",
     "metadata.keel_thread"},
  };
  for (auto& c : cases) {
    CAF_MESSAGE(c.body.dump());
    auto err = chat_refused(c.body);
    CAF_CHECK_EQUAL(err.status, 400u);
    CAF_CHECK_EQUAL(err.type, "invalid_request_error");
    CAF_CHECK_EQUAL(err.code, c.code);
    CAF_CHECK_EQUAL(err.param, c.param);
    CAF_CHECK(!err.should_retry);
  }
  // Tools the request forbids itself are no tools.
  auto none = with("tools", {{{"type", "function"}}});
  none["tool_choice"] = "none";
  CAF_CHECK_EQUAL(chat_ok(none).text, "hi");
  // An image in an earlier message is ignored on a thread (its context is
  // the store's) but refused when it would seed a new one.
  request_headers headers;
  headers.thread = "t";
  CAF_CHECK_EQUAL(chat_ok(chat({image, user("and now")}), headers).text,
                  "and now");
  CAF_CHECK_EQUAL(chat_refused(chat({image, user("and now")})).param,
                  "messages[0].content[1]");
}

CAF_TEST(bodies that are no request and unknown models are refused) {
  auto bad = text_refused("{\"model\":");
  CAF_CHECK_EQUAL(bad.code, "invalid_json");
  CAF_CHECK_EQUAL(text_refused("[1]").code, "invalid_json");
  CAF_CHECK_EQUAL(text_refused("{\"model\":\"default\",\"messages\":"
                               "[{\"role\":\"user\",\"content\":\"\xff\"}]}")
                    .code,
                  "invalid_json");
  auto body = chat({user("hi")});
  body["model"] = "no such/model";
  auto unknown = chat_refused(body);
  CAF_CHECK_EQUAL(unknown.status, 404u);
  CAF_CHECK_EQUAL(unknown.code, "model_not_found");
  CAF_CHECK_EQUAL(unknown.param, "model");
  request_limits small;
  small.max_text_bytes = 4;
  auto result = read_chat_request(chat({user("hello")}).dump(), {}, small);
  CAF_REQUIRE(std::holds_alternative<api_error>(result));
  CAF_CHECK_EQUAL(std::get<api_error>(result).code, "string_above_max_length");
}

CAF_TEST(an anthropic request reads the same way) {
  json body{{"model", "coder"},
            {"max_tokens", 1024},
            {"system", "be brief"},
            {"stream", true},
            {"metadata", {{"user_id", "u-1"}}},
            {"messages",
             {user("first"),
              {{"role", "assistant"}, {"content", "ok"}},
              {{"role", "user"},
               {"content", {{{"type", "text"}, {"text", "second"}}}}}}}};
  request_headers headers;
  headers.thread = "c-1";
  headers.idempotency_key = "m-9";
  auto result = read_messages_request(body.dump(), headers, limits);
  CAF_REQUIRE(std::holds_alternative<compat_call>(result));
  auto& call = std::get<compat_call>(result);
  CAF_CHECK(call.wire == api::anthropic);
  CAF_CHECK_EQUAL(call.model, "coder");
  CAF_CHECK_EQUAL(call.thread, "c-1");
  CAF_CHECK_EQUAL(call.message_id, "m-9");
  CAF_CHECK_EQUAL(call.text, "second");
  CAF_CHECK(call.stream);
  CAF_REQUIRE_EQUAL(call.earlier.size(), 3u);
  CAF_CHECK_EQUAL(call.earlier[0].role, "system");
  CAF_CHECK_EQUAL(call.earlier[0].text, "be brief");
  auto refused = [&](json b) {
    auto r = read_messages_request(b.dump(), {}, limits);
    CAF_REQUIRE(std::holds_alternative<api_error>(r));
    return std::get<api_error>(r);
  };
  auto no_limit = body;
  no_limit.erase("max_tokens");
  CAF_CHECK_EQUAL(refused(no_limit).param, "max_tokens");
  auto image = body;
  image["messages"][2]["content"].push_back(
    {{"type", "image"}, {"source", {{"type", "base64"}}}});
  CAF_CHECK_EQUAL(refused(image).param, "messages[2].content[1]");
  auto tools = body;
  tools["tools"] = {{{"name", "get_weather"}}};
  CAF_CHECK_EQUAL(refused(tools).param, "tools");
  auto odd = body;
  odd["tool_choice"] = "auto";
  odd["messages"][0]["role"] = 7;
  CAF_CHECK_EQUAL(refused(odd).param, "messages[0].role");
}
