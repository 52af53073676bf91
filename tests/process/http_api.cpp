#define CAF_SUITE http_api

// The OpenAI- and Anthropic-compatible API of a real keel-node, over raw
// HTTP: answers plain and streamed in each API's shape, a resent request
// answered once, a reused key refused, refusals in the API's error shape
// with their retry hints, keep-alives while a turn waits.

#include <caf/test/unit_test.hpp>

#include <future>
#include <set>

#include <nlohmann/json.hpp>

#include "keel/tools/node_process.hpp"
#include "npm_server.hpp"
#include "raw_http.hpp"
#include "temp_dir.hpp"
#include "text_checks.hpp"

using namespace keel;
using namespace keel::test;
using json = nlohmann::json;

namespace {

constexpr auto token = "client-7c1e";

/// A node with the client token whose `slow` agent answers after 600 ms,
/// `gateway` appended to its gateway section.
std::string node_yaml(const temp_dir& dir, const std::string& gateway = {}) {
  return "node:\n  name: compat\n  data_dir: " + dir.str()
         + "/data\ngateway:\n  port: 0\n  token: " + token + "\n" + gateway
         + "providers:\n  - name: echo\n    kind: echo\n"
           "  - name: slow\n    kind: scripted\n    script:\n"
           "      - reply: \"slowly: {input}\"\n        delay: 600ms\n"
           "pools:\n  - name: default\n    chain: [echo]\n"
           "  - name: slow\n    chain: [slow]\n"
           "agents:\n  - name: slow\n    pool: slow\n"
           "logging:\n  level: warn\n";
}

header_map headers_for(const endpoint& ep, header_map more = {}) {
  header_map result{{"Host", to_string(ep)},
                    {"Authorization", std::string{"Bearer "} + token},
                    {"Content-Type", "application/json"}};
  for (auto& [name, value] : more)
    result[name] = value;
  return result;
}

json chat(const std::string& text, const std::string& model = "default") {
  return {{"model", model},
          {"messages",
           {{{"role", "system"}, {"content", "ignored"}},
            {{"role", "user"}, {"content", text}}}}};
}

raw_response post(const endpoint& ep, const std::string& path, const json& body,
                  header_map more = {}) {
  return raw_request(ep, "POST", path, headers_for(ep, std::move(more)),
                     body.dump());
}

/// The JSON `data:` payloads of a stream, `[DONE]` as the string "[DONE]".
std::vector<json> data_of(const std::string& events) {
  std::vector<json> result;
  size_t pos = 0;
  while ((pos = events.find("data: ", pos)) != std::string::npos) {
    auto end = events.find('\n', pos);
    auto text = events.substr(pos + 6, end - pos - 6);
    result.push_back(text == "[DONE]" ? json("[DONE]") : json::parse(text));
    pos = end;
  }
  return result;
}

} // namespace

CAF_TEST(a chat completion is answered once however often it is sent) {
  temp_dir dir{"keel-http-api"};
  node_process node{dir.str(), node_yaml(dir)};
  auto ep = node.address();
  header_map keyed{{"Keel-Thread", "support-1"}, {"Idempotency-Key", "m-1"}};
  auto res = post(ep, "/v1/chat/completions", chat("where is my order"), keyed);
  CAF_REQUIRE_EQUAL(res.status, 200u);
  auto body = json::parse(res.body);
  CAF_CHECK_EQUAL(body["object"], "chat.completion");
  auto choice = body["choices"][0];
  CAF_CHECK_EQUAL(choice["message"]["content"], "echo: where is my order");
  CAF_CHECK_EQUAL(choice["finish_reason"], "stop");
  CAF_CHECK_EQUAL(body["keel"]["thread"], "support-1");
  CAF_CHECK_EQUAL(body["keel"]["provider"], "echo");
  CAF_CHECK_GREATER(body["usage"]["total_tokens"].get<int>(), 0);
  CAF_CHECK_EQUAL(res.headers["keel-thread"], "support-1");
  CAF_CHECK_EQUAL(res.headers["keel-ignored-messages"], "1");
  CAF_CHECK_EQUAL(res.headers["x-request-id"].substr(0, 4), "req_");
  // Sent again (an SDK's retry): the stored answer, not a second turn.
  auto again = post(ep, "/v1/chat/completions", chat("where is my order"),
                    keyed);
  CAF_REQUIRE_EQUAL(again.status, 200u);
  auto second = json::parse(again.body);
  CAF_CHECK_EQUAL(second["id"], body["id"]);
  CAF_CHECK_EQUAL(second["keel"]["reply_seq"], body["keel"]["reply_seq"]);
  CAF_CHECK_EQUAL(again.headers["keel-duplicate"], "true");
  // The same key with another message: refused, and not to be retried.
  auto reused = post(ep, "/v1/chat/completions", chat("something else"), keyed);
  CAF_CHECK_EQUAL(reused.status, 422u);
  auto error = json::parse(reused.body)["error"];
  CAF_CHECK_EQUAL(error["code"], "idempotency_key_reused");
  CAF_CHECK_EQUAL(reused.headers["x-should-retry"], "false");
  // A new key on the same thread is the next message.
  auto next = post(ep, "/v1/chat/completions", chat("and now"),
                   {{"Keel-Thread", "support-1"}, {"Idempotency-Key", "m-2"}});
  auto third = json::parse(next.body);
  CAF_CHECK_GREATER(third["keel"]["seq"].get<int>(),
                    body["keel"]["reply_seq"].get<int>());
}

CAF_TEST(a streamed chat completion has the chunks the sdks parse) {
  temp_dir dir{"keel-http-api"};
  node_process node{dir.str(),
                    node_yaml(dir, "  compat:\n    keepalive: 100ms\n")};
  auto ep = node.address();
  auto request = chat("tell me slowly", "slow");
  request["stream"] = true;
  request["stream_options"] = {{"include_usage", true}};
  auto res = post(ep, "/v1/chat/completions", request,
                  {{"Idempotency-Key", "s-1"}});
  CAF_REQUIRE_EQUAL(res.status, 200u);
  CAF_CHECK_EQUAL(res.headers["content-type"], "text/event-stream");
  KEEL_CHECK_CONTAINS(res.body, ": keel-ack thread=oai-");
  // 600 ms of a turn with nothing to say: keep-alives every 100 ms.
  KEEL_CHECK_CONTAINS(res.body, ": keep-alive\n\n");
  auto chunks = data_of(res.body);
  CAF_REQUIRE_GREATER_OR_EQUAL(chunks.size(), 5u);
  CAF_CHECK_EQUAL(chunks[0]["choices"][0]["delta"]["role"], "assistant");
  std::string text;
  for (auto& c : chunks)
    if (c.is_object() && !c["choices"].empty())
      text += c["choices"][0]["delta"].value("content", "");
  CAF_CHECK_EQUAL(text, "slowly: tell me slowly");
  auto n = chunks.size();
  CAF_CHECK_EQUAL(chunks[n - 3]["choices"][0]["finish_reason"], "stop");
  CAF_CHECK(chunks[n - 2]["choices"].empty());
  CAF_CHECK_GREATER(chunks[n - 2]["usage"]["completion_tokens"].get<int>(), 0);
  CAF_CHECK_EQUAL(chunks[n - 1], "[DONE]");
  // One-shot with a key: the resend finds the same thread and answer.
  auto again = post(ep, "/v1/chat/completions", request,
                    {{"Idempotency-Key", "s-1"}});
  CAF_CHECK_EQUAL(again.headers["keel-thread"], res.headers["keel-thread"]);
  CAF_CHECK_EQUAL(again.headers["keel-duplicate"], "true");
  KEEL_CHECK_CONTAINS(again.body, "slowly: tell me slowly");
}

CAF_TEST(a resend while the turn runs joins it in the shape it asks for) {
  temp_dir dir{"keel-http-api"};
  node_process node{dir.str(), node_yaml(dir)};
  auto ep = node.address();
  header_map keyed{{"Keel-Thread", "j-1"}, {"Idempotency-Key", "m-1"}};
  // The slow agent takes 600 ms: the resend comes while the first waits.
  auto first = std::async(std::launch::async, [&] {
    return post(ep, "/v1/chat/completions", chat("wait for it", "slow"), keyed);
  });
  auto streamed = chat("wait for it", "slow");
  streamed["stream"] = true;
  raw_response joined;
  for (int i = 0; i < 100; ++i) {
    joined = post(ep, "/v1/chat/completions", streamed, keyed);
    if (joined.headers["keel-duplicate"] == "true")
      break;
  }
  auto plain = first.get();
  CAF_REQUIRE_EQUAL(plain.status, 200u);
  auto body = json::parse(plain.body);
  CAF_CHECK_EQUAL(body["choices"][0]["message"]["content"],
                  "slowly: wait for it");
  CAF_CHECK_EQUAL(joined.headers["keel-duplicate"], "true");
  CAF_CHECK_EQUAL(joined.headers["content-type"], "text/event-stream");
  std::string text;
  for (auto& c : data_of(joined.body))
    if (c.is_object() && !c["choices"].empty())
      text += c["choices"][0]["delta"].value("content", "");
  CAF_CHECK_EQUAL(text, "slowly: wait for it");
  // One message, one answer: the resend's id is the first's.
  auto first_chunk = data_of(joined.body).at(0);
  CAF_CHECK_EQUAL(first_chunk["id"], body["id"]);
}

CAF_TEST(an anthropic client gets messages and their events) {
  temp_dir dir{"keel-http-api"};
  node_process node{dir.str(), node_yaml(dir)};
  auto ep = node.address();
  header_map anthropic{{"x-api-key", token},
                       {"anthropic-version", "2023-06-01"},
                       {"Keel-Thread", "c-1"}};
  auto headers = headers_for(ep, anthropic);
  headers.erase("Authorization");
  json body{{"model", "default"},
            {"max_tokens", 256},
            {"messages", {{{"role", "user"}, {"content", "hello claude"}}}}};
  auto res = raw_request(ep, "POST", "/v1/messages", headers, body.dump());
  CAF_REQUIRE_EQUAL(res.status, 200u);
  auto message = json::parse(res.body);
  CAF_CHECK_EQUAL(message["type"], "message");
  CAF_CHECK_EQUAL(message["content"][0]["text"], "echo: hello claude");
  CAF_CHECK_EQUAL(message["stop_reason"], "end_turn");
  CAF_CHECK_EQUAL(res.headers["request-id"], res.headers["x-request-id"]);
  body["stream"] = true;
  body["messages"][0]["content"] = "stream it";
  auto streamed = raw_request(ep, "POST", "/v1/messages", headers, body.dump());
  CAF_REQUIRE_EQUAL(streamed.status, 200u);
  std::vector<std::string> types;
  for (auto& event : data_of(streamed.body))
    types.push_back(event.value("type", ""));
  CAF_CHECK_EQUAL(types, (std::vector<std::string>{
                           "message_start", "content_block_start",
                           "content_block_delta", "content_block_stop",
                           "message_delta", "message_stop"}));
  // The wrong key: 401 in Anthropic's shape.
  headers["x-api-key"] = "wrong";
  auto refused = raw_request(ep, "POST", "/v1/messages", headers, body.dump());
  CAF_CHECK_EQUAL(refused.status, 401u);
  auto error = json::parse(refused.body);
  CAF_CHECK_EQUAL(error["type"], "error");
  CAF_CHECK_EQUAL(error["error"]["type"], "authentication_error");
}

CAF_TEST(refusals come in the api error shape with their retry hints) {
  temp_dir dir{"keel-http-api"};
  node_process node{dir.str(), node_yaml(dir)};
  auto ep = node.address();
  auto no_token = headers_for(ep);
  no_token.erase("Authorization");
  auto unauthorized = raw_request(ep, "POST", "/v1/chat/completions", no_token,
                                  chat("x").dump());
  CAF_CHECK_EQUAL(unauthorized.status, 401u);
  auto e401 = json::parse(unauthorized.body)["error"];
  CAF_CHECK_EQUAL(e401["code"], "invalid_api_key");
  auto many = chat("x");
  many["n"] = 3;
  auto bad = post(ep, "/v1/chat/completions", many);
  CAF_CHECK_EQUAL(bad.status, 400u);
  auto e400 = json::parse(bad.body)["error"];
  CAF_CHECK_EQUAL(e400["param"], "n");
  CAF_CHECK_EQUAL(bad.headers["x-should-retry"], "false");
  auto unknown = post(ep, "/v1/chat/completions", chat("x", "no-such-agent"),
                      {{"Keel-Thread", "u-1"}});
  CAF_CHECK_EQUAL(unknown.status, 404u);
  auto e404 = json::parse(unknown.body)["error"];
  CAF_CHECK_EQUAL(e404["code"], "model_not_found");
  auto garbage = raw_request(ep, "POST", "/v1/chat/completions",
                             headers_for(ep), "{not json");
  CAF_CHECK_EQUAL(garbage.status, 400u);
  auto missing = raw_request(ep, "GET", "/v1/nothing-here", headers_for(ep));
  CAF_CHECK_EQUAL(missing.status, 404u);
  // The models are the agents.
  auto models = raw_request(ep, "GET", "/v1/models", headers_for(ep));
  CAF_REQUIRE_EQUAL(models.status, 200u);
  auto list = json::parse(models.body);
  CAF_CHECK_EQUAL(list["object"], "list");
  std::set<std::string> ids;
  for (auto& m : list["data"])
    ids.insert(m["id"].get<std::string>());
  CAF_CHECK_EQUAL(ids, (std::set<std::string>{"default", "slow"}));
  auto slow = raw_request(ep, "GET", "/v1/models/slow", headers_for(ep));
  auto model = json::parse(slow.body);
  CAF_CHECK_EQUAL(model["object"], "model");
  CAF_CHECK_EQUAL(model["owned_by"], "keel");
  auto versioned = headers_for(ep, {{"anthropic-version", "2023-06-01"}});
  auto claude = raw_request(ep, "GET", "/v1/models", versioned);
  auto anthropic_list = json::parse(claude.body);
  CAF_CHECK_EQUAL(anthropic_list["data"][0]["type"], "model");
  CAF_CHECK_EQUAL(anthropic_list["has_more"], false);
  auto none = raw_request(ep, "GET", "/v1/models/nope", headers_for(ep));
  CAF_CHECK_EQUAL(none.status, 404u);
  auto e_none = json::parse(none.body)["error"];
  CAF_CHECK_EQUAL(e_none["code"], "model_not_found");
  // Turned off, /v1/ is no path of the node.
  node.stop();
  temp_dir off{"keel-http-api"};
  node_process plain{off.str(),
                     node_yaml(off, "  compat:\n    enabled: false\n")};
  auto gone = post(plain.address(), "/v1/chat/completions", chat("x"));
  CAF_CHECK_EQUAL(gone.status, 404u);
  KEEL_CHECK_CONTAINS(gone.body, "no such path");
}

// tests/conformance/sdk-clients.mjs: the official `openai` and
// `@anthropic-ai/sdk` packages of tests/npm against a real node.
CAF_TEST(the official sdks are clients of the node) {
  temp_dir dir{"keel-http-api"};
  node_process node{dir.str(), node_yaml(dir)};
  auto nodejs = find_in_path("node");
  if (!nodejs)
    CAF_FAIL("node is not in PATH: run scripts/setup");
  auto result = run_command(
    {*nodejs, keel_source_dir() + "/tests/conformance/sdk-clients.mjs", "--url",
     "http://" + to_string(node.address()), "--token", token},
    std::chrono::seconds{120});
  CAF_MESSAGE("\n" << result.out << result.err);
  CAF_CHECK_EQUAL(result.exit_code, 0);
  KEEL_CHECK_CONTAINS(result.out, " passed, 0 failed\n");
  CAF_CHECK(node.running());
}
