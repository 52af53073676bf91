#define CAF_SUITE compat_render

// Keel's frames about a message as OpenAI's and Anthropic's answers: the
// non-streamed bodies, the stream events in the order the SDKs parse them,
// a cut attempt never passed off as an answer, and the error table.

#include <caf/test/unit_test.hpp>

#include "keel/compat_models.hpp"
#include "keel/compat_render.hpp"

#include "text_checks.hpp"

using namespace keel;
using namespace keel::compat;
using json = nlohmann::json;

namespace {

exchange_info info_of(api wire, bool include_usage = false) {
  exchange_info info;
  info.wire = wire;
  info.model = "default";
  info.thread = "t";
  info.seq = 7;
  info.created = 1700000000;
  info.include_usage = include_usage;
  info.request_id = "req-1";
  return info;
}

json delta(uint64_t attempt, const std::string& text, uint64_t reply_to = 7) {
  return {{"type", "delta"},      {"thread", "t"},      {"id", "m"},
          {"reply_to", reply_to}, {"attempt", attempt}, {"text", text}};
}

json reply(const std::string& text) {
  return {{"type", "reply"},
          {"thread", "t"},
          {"seq", 8},
          {"reply_to", 7},
          {"id", "m"},
          {"text", text},
          {"provider", "echo"},
          {"usage", {{"input_tokens", 12}, {"output_tokens", 3}}}};
}

json outcome(const std::string& code, const std::string& message) {
  return {{"type", "error"}, {"thread", "t"}, {"seq", 8},
          {"reply_to", 7},   {"code", code},  {"message", message}};
}

/// The `data:` payloads of `events` that are JSON, in order.
std::vector<json> data_of(const std::string& events) {
  std::vector<json> result;
  size_t pos = 0;
  while ((pos = events.find("data: ", pos)) != std::string::npos) {
    auto end = events.find("\n\n", pos);
    auto text = events.substr(pos + 6, end - pos - 6);
    if (text != "[DONE]")
      result.push_back(json::parse(text));
    pos = end;
  }
  return result;
}

} // namespace

CAF_TEST(a non streamed reply is a chat completion or a message) {
  auto ok = final_answer(info_of(api::openai), reply("hello"));
  CAF_CHECK_EQUAL(ok.status, 200u);
  auto body = json::parse(ok.body);
  CAF_CHECK_EQUAL(body["id"], "chatcmpl-t.7");
  CAF_CHECK_EQUAL(body["object"], "chat.completion");
  CAF_CHECK_EQUAL(body["created"], 1700000000);
  CAF_CHECK_EQUAL(body["model"], "default");
  auto choice = body["choices"][0];
  CAF_CHECK_EQUAL(choice["message"]["role"], "assistant");
  CAF_CHECK_EQUAL(choice["message"]["content"], "hello");
  CAF_CHECK_EQUAL(choice["finish_reason"], "stop");
  CAF_CHECK_EQUAL(body["usage"]["prompt_tokens"], 12);
  CAF_CHECK_EQUAL(body["usage"]["completion_tokens"], 3);
  CAF_CHECK_EQUAL(body["usage"]["total_tokens"], 15);
  CAF_CHECK_EQUAL(body["keel"]["reply_seq"], 8);
  CAF_CHECK_EQUAL(body["keel"]["provider"], "echo");
  auto msg
    = json::parse(final_answer(info_of(api::anthropic), reply("hi")).body);
  CAF_CHECK_EQUAL(msg["id"], "msg_t.7");
  CAF_CHECK_EQUAL(msg["type"], "message");
  CAF_CHECK_EQUAL(msg["content"][0]["text"], "hi");
  CAF_CHECK_EQUAL(msg["stop_reason"], "end_turn");
  CAF_CHECK_EQUAL(msg["usage"]["input_tokens"], 12);
  CAF_CHECK_EQUAL(msg["usage"]["output_tokens"], 3);
}

CAF_TEST(an error outcome is final and in the api error shape) {
  auto failed = final_answer(info_of(api::openai),
                             outcome("provider_failed", "try again later"));
  CAF_CHECK_EQUAL(failed.status, 502u);
  CAF_CHECK(!failed.should_retry);
  auto body = json::parse(failed.body);
  CAF_CHECK_EQUAL(body["error"]["message"], "try again later");
  CAF_CHECK_EQUAL(body["error"]["type"], "server_error");
  CAF_CHECK_EQUAL(body["error"]["code"], "provider_failed");
  CAF_CHECK(body["error"]["param"].is_null());
  auto overflow = final_answer(info_of(api::openai),
                               outcome("context_overflow", "too long"));
  CAF_CHECK_EQUAL(overflow.status, 400u);
  auto overflow_body = json::parse(overflow.body);
  CAF_CHECK_EQUAL(overflow_body["error"]["code"], "context_length_exceeded");
  auto credits = final_answer(info_of(api::anthropic),
                              outcome("credits_exhausted", "no credit"));
  CAF_CHECK_EQUAL(credits.status, 402u);
  auto anthropic = json::parse(credits.body);
  CAF_CHECK_EQUAL(anthropic["type"], "error");
  CAF_CHECK_EQUAL(anthropic["error"]["type"], "billing_error");
  CAF_CHECK_EQUAL(anthropic["request_id"], "req-1");
  auto stopped = final_answer(info_of(api::openai),
                              outcome("guard_stopped", "trouble"));
  CAF_CHECK_EQUAL(stopped.status, 500u);
  CAF_CHECK(!stopped.should_retry);
}

CAF_TEST(refusals before the ack map to what the sdks retry) {
  struct row {
    std::string code;
    unsigned openai;
    unsigned anthropic;
    bool retry;
  };
  for (auto& r : std::vector<row>{{"unauthorized", 401, 401, false},
                                  {"forbidden", 403, 403, false},
                                  {"unknown_agent", 404, 404, false},
                                  {"thread_closed", 422, 422, false},
                                  {"agent_mismatch", 422, 422, false},
                                  {"rate_limited", 429, 429, true},
                                  {"overloaded", 503, 529, true},
                                  {"draining", 503, 503, true},
                                  {"storage_io", 503, 503, true},
                                  {"unavailable", 503, 503, true},
                                  {"something_new", 500, 500, true}}) {
    CAF_MESSAGE(r.code);
    auto o = refusal(api::openai, r.code, "why");
    CAF_CHECK_EQUAL(o.status, r.openai);
    CAF_CHECK_EQUAL(o.should_retry, r.retry);
    CAF_CHECK_EQUAL(o.retry_after, r.retry ? 1u : 0u);
    CAF_CHECK_EQUAL(refusal(api::anthropic, r.code, "why").status, r.anthropic);
  }
  CAF_CHECK_EQUAL(refusal(api::openai, "unknown_agent", "").code,
                  "model_not_found");
  CAF_CHECK_EQUAL(anthropic_type(529), "overloaded_error");
  CAF_CHECK_EQUAL(anthropic_type(404), "not_found_error");
}

CAF_TEST(an openai stream opens with the role and ends with done) {
  stream_writer w{info_of(api::openai, true)};
  auto out = w.open();
  KEEL_CHECK_CONTAINS(out, ": keel-ack thread=t seq=7 duplicate=false\n\n");
  out += w.on_frame({{"type", "status"},
                     {"thread", "t"},
                     {"reply_to", 7},
                     {"state", "thinking"}});
  out += w.on_frame(delta(1, "hel"));
  // Another message's frames are not this answer's.
  CAF_CHECK_EQUAL(w.on_frame(delta(1, "other", 9)), "");
  out += w.on_frame(delta(1, "lo"));
  CAF_CHECK(!w.done());
  out += w.on_frame(reply("hello"));
  CAF_CHECK(w.done());
  CAF_CHECK_EQUAL(w.on_frame(delta(1, "late")), "");
  KEEL_CHECK_CONTAINS(out, ": keel-status thinking\n\n");
  CAF_CHECK_EQUAL(out.substr(out.size() - 14), "data: [DONE]\n\n");
  auto chunks = data_of(out);
  CAF_REQUIRE_EQUAL(chunks.size(), 5u);
  CAF_CHECK_EQUAL(chunks[0]["choices"][0]["delta"]["role"], "assistant");
  CAF_CHECK_EQUAL(chunks[0]["object"], "chat.completion.chunk");
  CAF_CHECK(chunks[0]["usage"].is_null());
  CAF_CHECK_EQUAL(chunks[1]["choices"][0]["delta"]["content"], "hel");
  CAF_CHECK_EQUAL(chunks[2]["choices"][0]["delta"]["content"], "lo");
  CAF_CHECK_EQUAL(chunks[3]["choices"][0]["finish_reason"], "stop");
  CAF_CHECK(chunks[4]["choices"].empty());
  CAF_CHECK_EQUAL(chunks[4]["usage"]["total_tokens"], 15);
  for (auto& c : chunks)
    CAF_CHECK_EQUAL(c["id"], "chatcmpl-t.7");
}

CAF_TEST(a reply without deltas goes out whole and an outcome error ends it) {
  stream_writer w{info_of(api::openai)};
  auto out = w.open();
  out += w.on_frame(reply("all at once"));
  auto chunks = data_of(out);
  CAF_REQUIRE_EQUAL(chunks.size(), 3u);
  CAF_CHECK_EQUAL(chunks[1]["choices"][0]["delta"]["content"], "all at once");
  CAF_CHECK(!chunks[2].contains("usage"));
  stream_writer failing{info_of(api::openai)};
  auto events = failing.open();
  events += failing.on_frame(outcome("provider_failed", "sorry"));
  CAF_CHECK(failing.done());
  CAF_CHECK_EQUAL(events.find("[DONE]"), std::string::npos);
  auto last = data_of(events).back();
  CAF_CHECK_EQUAL(last["error"]["code"], "provider_failed");
  CAF_CHECK_EQUAL(last["error"]["message"], "sorry");
}

CAF_TEST(a cut attempt after text went out ends the stream with an error) {
  // A new attempt before any text of the first went out: seamless.
  stream_writer quiet{info_of(api::openai)};
  quiet.open();
  quiet.on_frame(delta(1, ""));
  auto fine = quiet.on_frame(delta(2, "whole"));
  auto whole = data_of(fine).at(0);
  CAF_CHECK_EQUAL(whole["choices"][0]["delta"]["content"], "whole");
  // Text went out, then the attempt was cut.
  for (auto cut : {json{{"type", "status"},
                        {"thread", "t"},
                        {"reply_to", 7},
                        {"state", "stream_interrupted"}},
                   delta(2, "again")}) {
    stream_writer w{info_of(api::openai)};
    w.open();
    w.on_frame(delta(1, "half"));
    auto out = w.on_frame(cut);
    CAF_CHECK(w.done());
    auto event = data_of(out).at(0);
    CAF_CHECK_EQUAL(event["error"]["code"], "stream_interrupted");
    CAF_CHECK_EQUAL(w.on_frame(reply("half and more")), "");
  }
  // A stored answer that does not begin with what went out is no answer.
  stream_writer w{info_of(api::openai)};
  w.open();
  w.on_frame(delta(1, "abc"));
  auto mismatch = data_of(w.on_frame(reply("xyz"))).at(0);
  CAF_CHECK_EQUAL(mismatch["error"]["code"], "stream_interrupted");
  // One that does gets its rest.
  stream_writer rest{info_of(api::openai)};
  rest.open();
  rest.on_frame(delta(1, "ab"));
  auto tail = data_of(rest.on_frame(reply("abc")));
  CAF_CHECK_EQUAL(tail.at(0)["choices"][0]["delta"]["content"], "c");
}

CAF_TEST(an anthropic stream has the events in the order of the api) {
  stream_writer w{info_of(api::anthropic)};
  // One statement each: the operands of + run in no fixed order.
  auto out = w.open();
  out += w.keepalive();
  out += w.on_frame(delta(1, "hi "));
  out += w.on_frame(reply("hi there"));
  std::vector<std::string> types;
  size_t pos = 0;
  while ((pos = out.find("event: ", pos)) != std::string::npos) {
    auto end = out.find('\n', pos);
    types.push_back(out.substr(pos + 7, end - pos - 7));
    pos = end;
  }
  CAF_CHECK_EQUAL(types,
                  (std::vector<std::string>{
                    "message_start", "content_block_start", "ping",
                    "content_block_delta", "content_block_delta",
                    "content_block_stop", "message_delta", "message_stop"}));
  auto data = data_of(out);
  CAF_CHECK_EQUAL(data[0]["message"]["id"], "msg_t.7");
  CAF_CHECK_EQUAL(data[3]["delta"]["text"], "hi ");
  CAF_CHECK_EQUAL(data[4]["delta"]["text"], "there");
  CAF_CHECK_EQUAL(data[6]["delta"]["stop_reason"], "end_turn");
  CAF_CHECK_EQUAL(data[6]["usage"]["output_tokens"], 3);
  stream_writer failing{info_of(api::anthropic)};
  failing.open();
  auto err = failing.on_frame(outcome("turn_failed", "broke"));
  KEEL_CHECK_CONTAINS(err, "event: error\n");
  auto error = data_of(err).at(0);
  CAF_CHECK_EQUAL(error["error"]["type"], "api_error");
}

CAF_TEST(the models are the agents in each apis shape) {
  std::vector<model_entry> models{{"default", "", 1700000000},
                                  {"coder", "Writes code", 1700000000}};
  auto openai = json::parse(models_body(api::openai, models));
  CAF_CHECK_EQUAL(openai["object"], "list");
  CAF_REQUIRE_EQUAL(openai["data"].size(), 2u);
  auto first = openai["data"][0];
  CAF_CHECK_EQUAL(first["id"], "default");
  CAF_CHECK_EQUAL(first["object"], "model");
  CAF_CHECK_EQUAL(first["created"], 1700000000);
  CAF_CHECK_EQUAL(first["owned_by"], "keel");
  auto anthropic = json::parse(models_body(api::anthropic, models));
  CAF_CHECK_EQUAL(anthropic["has_more"], false);
  CAF_CHECK_EQUAL(anthropic["first_id"], "default");
  CAF_CHECK_EQUAL(anthropic["last_id"], "coder");
  auto coder = json::parse(model_body(api::anthropic, models[1]));
  CAF_CHECK_EQUAL(coder["type"], "model");
  CAF_CHECK_EQUAL(coder["display_name"], "Writes code");
  CAF_CHECK_EQUAL(coder["created_at"], "2023-11-14T22:13:20.000Z");
  auto empty = json::parse(models_body(api::anthropic, {}));
  CAF_CHECK(empty["first_id"].is_null());
}
