#define CAF_SUITE llm_client
#include <caf/test/unit_test.hpp>

#include "keel/llm_client.hpp"
#include "keel/llm_wire.hpp"
#include "keel/offline_provider.hpp"
#include "keel/text.hpp"

#include <condition_variable>
#include <fstream>
#include <memory>
#include <mutex>

#include <nlohmann/json.hpp>

#include "keel/tools/fault_llm_server.hpp"
#include "temp_dir.hpp"
#include "text_checks.hpp"
#include "wire_bodies.hpp"

using namespace keel;
using namespace std::chrono_literals;
using json = nlohmann::json;
using keel::fault_llm::fault_llm_server;

namespace {

/// Generous upper bound for events that normally take milliseconds.
constexpr auto event_timeout = 10s;

/// Collects what one call reports; counts results to catch doubles.
struct probe {
  std::mutex mtx;
  std::condition_variable cv;
  std::vector<std::string> deltas;
  std::optional<call_result> result;
  int results = 0;

  static std::shared_ptr<probe> make() {
    return std::make_shared<probe>();
  }

  bool wait() {
    std::unique_lock<std::mutex> guard{mtx};
    return cv.wait_for(guard, event_timeout, [&] { return results > 0; });
  }

  std::string joined() {
    std::lock_guard<std::mutex> guard{mtx};
    std::string result;
    for (auto& x : deltas)
      result += x;
    return result;
  }

  const completion* ok() {
    return result ? std::get_if<completion>(&*result) : nullptr;
  }

  const call_failure* failed() {
    return result ? std::get_if<call_failure>(&*result) : nullptr;
  }
};

call_canceller start(llm_endpoint& ep, const completion_request& req,
                     const std::shared_ptr<probe>& p,
                     uint32_t max_tokens = 64) {
  return ep.complete(
    req, max_tokens,
    [p](std::string_view text) {
      std::lock_guard<std::mutex> guard{p->mtx};
      p->deltas.emplace_back(text);
    },
    [p](call_result result) {
      std::lock_guard<std::mutex> guard{p->mtx};
      ++p->results;
      p->result = std::move(result);
      p->cv.notify_all();
    });
}

completion_request ask(std::string text) {
  completion_request req;
  req.thread = "t1";
  req.system_prompt = "Be brief.";
  req.context.push_back(context_entry{1, "user", std::move(text)});
  return req;
}

provider_config http_provider(const std::string& kind, const std::string& url,
                              bool stream) {
  provider_config cfg;
  cfg.name = "p1";
  cfg.kind = kind;
  cfg.model = "test-model";
  cfg.base_url = url;
  cfg.api_key = "sk-test";
  cfg.stream = stream;
  cfg.connect_timeout = 5s;
  cfg.first_byte_timeout = 5s;
  cfg.total_timeout = 10s;
  return cfg;
}

std::string transport_name(const std::optional<transport_error>& x) {
  if (!x)
    return "none";
  switch (*x) {
    case transport_error::connect_refused: return "connect_refused";
    case transport_error::reset: return "reset";
    case transport_error::timeout: return "timeout";
    case transport_error::tls: return "tls";
    case transport_error::dns: return "dns";
    default: return "other";
  }
}

bool contains(const std::string& str, const std::string& part) {
  return str.find(part) != std::string::npos;
}

struct fixture {
  std::unique_ptr<fault_llm_server> server
    = std::make_unique<fault_llm_server>();
  std::unique_ptr<http_io> io = std::make_unique<http_io>(1);
  std::vector<std::shared_ptr<probe>> probes;

  ~fixture() {
    io.reset();
    // Every call reported exactly once, whatever the test did.
    for (auto& p : probes)
      CAF_CHECK_EQUAL(p->results, 1);
  }

  std::shared_ptr<llm_endpoint> endpoint(const provider_config& cfg) {
    auto ep = llm_endpoint::make(*io, cfg);
    if (!ep)
      CAF_FAIL("make failed: " << error_message(ep.error()));
    return *ep;
  }

  std::shared_ptr<llm_endpoint> endpoint(const std::string& kind, bool stream) {
    return endpoint(http_provider(kind, server->base_url(), stream));
  }

  /// Runs one call to its end.
  std::shared_ptr<probe> run(llm_endpoint& ep, const std::string& text) {
    auto p = probe::make();
    probes.push_back(p);
    start(ep, ask(text), p);
    if (!p->wait())
      CAF_FAIL("no result within " << event_timeout.count() << " s");
    return p;
  }

  /// Runs one call that must fail and returns its failure.
  call_failure run_failing(llm_endpoint& ep, const std::string& text) {
    auto p = run(ep, text);
    if (auto c = p->ok())
      CAF_FAIL("expected a failure, got the answer '" << c->text << "'");
    return *p->failed();
  }

  /// Runs one call that must succeed and returns its answer.
  completion run_ok(llm_endpoint& ep, const std::string& text) {
    auto p = run(ep, text);
    if (auto f = p->failed())
      CAF_FAIL("expected an answer, got: " << f->message);
    return *p->ok();
  }
};

const std::string tool_args = R"({"city":"Paris"})";

} // namespace

// -- wire: URLs and requests --------------------------------------------------

CAF_TEST(base urls resolve to host port and target) {
  struct row {
    const char* url;
    llm_wire::api kind;
    bool tls;
    const char* host;
    uint16_t port;
    const char* target;
    const char* host_header;
  };
  using llm_wire::api;
  row rows[] = {
    {"https://api.openai.com", api::openai, true, "api.openai.com", 443,
     "/v1/chat/completions", "api.openai.com"},
    {"http://127.0.0.1:4010/v1", api::openai, false, "127.0.0.1", 4010,
     "/v1/chat/completions", "127.0.0.1:4010"},
    {"http://127.0.0.1:4010/v1/", api::anthropic, false, "127.0.0.1", 4010,
     "/v1/messages", "127.0.0.1:4010"},
    {"https://api.anthropic.com/", api::anthropic, true, "api.anthropic.com",
     443, "/v1/messages", "api.anthropic.com"},
    // A path is used as given, as the SDKs use theirs (Gemini, Azure,
    // Ollama, vLLM); a query stays after the API's path.
    {"http://gw.local/proxy/openai/v1", api::openai, false, "gw.local", 80,
     "/proxy/openai/v1/chat/completions", "gw.local"},
    {"https://g.example/v1beta/openai/", api::openai, true, "g.example", 443,
     "/v1beta/openai/chat/completions", "g.example"},
    {"https://r.openai.azure.com/openai/deployments/"
     "gpt4o?api-version=2024-10-21",
     api::openai, true, "r.openai.azure.com", 443,
     "/openai/deployments/gpt4o/chat/completions?api-version=2024-10-21",
     "r.openai.azure.com"},
    {"http://127.0.0.1:11434/v1", api::openai, false, "127.0.0.1", 11434,
     "/v1/chat/completions", "127.0.0.1:11434"},
    {"http://h:8000?key=1", api::openai, false, "h", 8000,
     "/v1/chat/completions?key=1", "h:8000"},
    {"http://h/anthropic", api::anthropic, false, "h", 80,
     "/anthropic/messages", "h"},
    {"http://[::1]:8080", api::openai, false, "::1", 8080,
     "/v1/chat/completions", "[::1]:8080"},
    {"https://[::1]", api::anthropic, true, "::1", 443, "/v1/messages",
     "[::1]"},
  };
  for (auto& r : rows) {
    CAF_MESSAGE("url " << r.url);
    auto url = llm_wire::parse_base_url(r.url, r.kind);
    CAF_REQUIRE(url);
    CAF_CHECK_EQUAL(url->tls, r.tls);
    CAF_CHECK_EQUAL(url->host, r.host);
    CAF_CHECK_EQUAL(url->port, r.port);
    CAF_CHECK_EQUAL(url->target, r.target);
    CAF_CHECK_EQUAL(url->host_header, r.host_header);
  }
  for (auto bad : {"ftp://x", "http://", "http://:80", "http://h:99999",
                   "http://u@h", "http://h/p#f", "127.0.0.1:80"}) {
    CAF_MESSAGE("bad url " << bad);
    auto url = llm_wire::parse_base_url(bad, api::openai);
    CAF_CHECK(!url);
    if (!url)
      CAF_CHECK(contains(error_message(url.error()), bad));
  }
}

CAF_TEST(openai request bodies carry system prompt and context roles) {
  completion_request req;
  req.system_prompt = "sys";
  req.context = {{1, "user", "q1"},
                 {2, "assistant", "a1"},
                 {3, "", "provider failed"},
                 {4, "system", "note"},
                 {5, "user", "q2"}};
  auto body = keel::test::wire_body(llm_wire::api::openai, req, "gpt", 77,
                                    true);
  CAF_CHECK_EQUAL(body["model"], "gpt");
  CAF_CHECK_EQUAL(body["max_completion_tokens"], 77);
  CAF_CHECK(!body.contains("max_tokens"));
  CAF_CHECK_EQUAL(body["stream"], true);
  auto expected = json::array({{{"role", "system"}, {"content", "sys"}},
                               {{"role", "user"}, {"content", "q1"}},
                               {{"role", "assistant"}, {"content", "a1"}},
                               {{"role", "system"}, {"content", "note"}},
                               {{"role", "user"}, {"content", "q2"}}});
  CAF_CHECK_EQUAL(body["messages"].dump(), expected.dump());
  CAF_CHECK(body.find("system") == body.end());
  // The agent tools are offered as functions.
  CAF_REQUIRE_EQUAL(body["tools"].size(), 2u);
  CAF_CHECK_EQUAL(body["tools"][0]["type"], "function");
  CAF_CHECK_EQUAL(body["tools"][0]["function"]["name"], "spawn_agent");
  CAF_CHECK_EQUAL(body["tools"][0]["function"]["parameters"]["required"],
                  json::array({"name", "task"}));
  CAF_CHECK_EQUAL(body["tools"][1]["function"]["name"], "message_agent");
}

CAF_TEST(anthropic request bodies move system text and merge turns) {
  completion_request req;
  req.system_prompt = "sys";
  req.context = {{1, "user", "q1"},     {2, "", "provider failed"},
                 {3, "user", "q2"},     {4, "assistant", ""},
                 {5, "system", "note"}, {6, "assistant", "a2"}};
  auto body = keel::test::wire_body(llm_wire::api::anthropic, req, "claude", 5,
                                    false);
  CAF_CHECK_EQUAL(body["model"], "claude");
  CAF_CHECK_EQUAL(body["max_tokens"], 5);
  CAF_CHECK_EQUAL(body["stream"], false);
  CAF_CHECK_EQUAL(body["system"], "sys\n\nnote");
  auto expected = json::array({{{"role", "user"}, {"content", "q1\n\nq2"}},
                               {{"role", "assistant"}, {"content", "a2"}}});
  CAF_CHECK_EQUAL(body["messages"].dump(), expected.dump());
  // The agent tools, with Anthropic's input_schema.
  CAF_REQUIRE_EQUAL(body["tools"].size(), 2u);
  CAF_CHECK_EQUAL(body["tools"][0]["name"], "spawn_agent");
  CAF_CHECK_EQUAL(body["tools"][1]["input_schema"]["required"],
                  json::array({"name", "text"}));
  req.system_prompt.clear();
  req.context = {req.context[0]};
  body = keel::test::wire_body(llm_wire::api::anthropic, req, "claude", 5,
                               false);
  CAF_CHECK(body.find("system") == body.end());
}

namespace {

context_entry user_entry(seq_t seq, std::string text) {
  return {seq, "user", std::move(text)};
}

context_entry calls_entry(seq_t seq, std::string text,
                          std::vector<tool_call> calls) {
  context_entry result{seq, "assistant", std::move(text)};
  result.set_tool_calls(std::move(calls));
  return result;
}

context_entry tool_entry(seq_t seq, std::string id, std::string content) {
  context_entry result{seq, "tool", std::move(content)};
  result.set_tool_result(std::move(id), "f");
  return result;
}

/// The messages each API gets for one context.
struct body_row {
  const char* what;
  std::vector<context_entry> context;
  json openai;
  json anthropic;
};

json openai_call(const char* id, const char* name, const char* args) {
  return {{"id", id},
          {"type", "function"},
          {"function", {{"name", name}, {"arguments", args}}}};
}

json tool_use(const char* id, const char* name, json input) {
  return {{"type", "tool_use"}, {"id", id}, {"name", name}, {"input", input}};
}

json tool_result(const char* id, const char* content) {
  return {{"type", "tool_result"}, {"tool_use_id", id}, {"content", content}};
}

json msg(const char* role, json content) {
  return {{"role", role}, {"content", std::move(content)}};
}

std::vector<body_row> tool_body_rows() {
  auto q = msg("user", "q");
  auto a1 = json::object({{"a", 1}});
  auto a1_text = R"({"a":1})";
  return {
    {"one call and its result",
     {user_entry(1, "q"), calls_entry(2, "", {{"c1", "f", a1_text}}),
      tool_entry(3, "c1", "42")},
     json::array(
       {q,
        {{"role", "assistant"},
         {"content", nullptr},
         {"tool_calls", json::array({openai_call("c1", "f", a1_text)})}},
        {{"role", "tool"}, {"tool_call_id", "c1"}, {"content", "42"}}}),
     json::array({q, msg("assistant", json::array({tool_use("c1", "f", a1)})),
                  msg("user", json::array({tool_result("c1", "42")}))})},
    {"text and two calls, then both results (arguments not an object)",
     {user_entry(1, "q"),
      calls_entry(2, "let me see", {{"c1", "f", "{}"}, {"c2", "g", "[1]"}}),
      tool_entry(3, "c1", "r1"), tool_entry(4, "c2", "r2")},
     json::array(
       {q,
        {{"role", "assistant"},
         {"content", "let me see"},
         {"tool_calls", json::array({openai_call("c1", "f", "{}"),
                                     openai_call("c2", "g", "[1]")})}},
        {{"role", "tool"}, {"tool_call_id", "c1"}, {"content", "r1"}},
        {{"role", "tool"}, {"tool_call_id", "c2"}, {"content", "r2"}}}),
     json::array({q,
                  msg("assistant",
                      json::array({{{"type", "text"}, {"text", "let me see"}},
                                   tool_use("c1", "f", json::object()),
                                   tool_use("c2", "g", json::object())})),
                  msg("user", json::array({tool_result("c1", "r1"),
                                           tool_result("c2", "r2")}))})},
    {"a result then an entry of no role and a user message",
     {user_entry(1, "q"), calls_entry(2, "", {{"c1", "f", "not json"}}),
      tool_entry(3, "c1", "r1"), context_entry{4, "", "oops"},
      user_entry(5, "more"), calls_entry(6, "ok", {}),
      context_entry{7, "assistant", "done"}},
     json::array(
       {q,
        {{"role", "assistant"},
         {"content", nullptr},
         {"tool_calls", json::array({openai_call("c1", "f", "not json")})}},
        {{"role", "tool"}, {"tool_call_id", "c1"}, {"content", "r1"}},
        msg("user", "more"),
        msg("assistant", "ok"),
        msg("assistant", "done")}),
     json::array(
       {q, msg("assistant", json::array({tool_use("c1", "f", json::object())})),
        msg("user", json::array({tool_result("c1", "r1"),
                                 {{"type", "text"}, {"text", "more"}}})),
        msg("assistant", "ok\n\ndone")})},
    {"a user text before a result (tool results go first), an empty result",
     {calls_entry(1, "", {{"c1", "f", "{}"}}), user_entry(2, "wait"),
      tool_entry(3, "c1", "")},
     json::array({{{"role", "assistant"},
                   {"content", nullptr},
                   {"tool_calls", json::array({openai_call("c1", "f", "{}")})}},
                  msg("user", "wait"),
                  {{"role", "tool"}, {"tool_call_id", "c1"}, {"content", ""}}}),
     json::array(
       {msg("assistant", json::array({tool_use("c1", "f", json::object())})),
        msg("user",
            json::array({{{"type", "tool_result"}, {"tool_use_id", "c1"}},
                         {{"type", "text"}, {"text", "wait"}}}))})},
  };
}

} // namespace

CAF_TEST(request bodies carry tool calls and tool results in both apis) {
  for (auto& row : tool_body_rows()) {
    CAF_MESSAGE(row.what);
    completion_request req;
    req.context = row.context;
    auto openai = keel::test::wire_body(llm_wire::api::openai, req, "m", 9,
                                        false);
    CAF_CHECK_EQUAL(openai["messages"].dump(), row.openai.dump());
    auto anthropic = keel::test::wire_body(llm_wire::api::anthropic, req, "m",
                                           9, false);
    CAF_CHECK_EQUAL(anthropic["messages"].dump(), row.anthropic.dump());
    CAF_CHECK(anthropic.find("system") == anthropic.end());
  }
}

CAF_TEST(request bodies advertise the configured tools after the agent tools) {
  completion_request req;
  req.context = {user_entry(1, "q")};
  auto schema = R"({"type":"object","properties":{"cmd":{"type":"string"}}})";
  req.tools = {{"run", "Runs a command.", schema},
               {"spawn_agent", "shadows an agent tool", "{}"},
               {"broken", "Bad schema.", "{not json"},
               {"scalar", "Not an object.", "42"},
               {"run", "listed twice", "{}"}};
  auto empty_schema = json{{"type", "object"}, {"properties", json::object()}};
  auto openai = keel::test::wire_body(llm_wire::api::openai, req, "m", 9,
                                      false);
  auto& ot = openai["tools"];
  CAF_REQUIRE_EQUAL(ot.size(), 5u);
  CAF_CHECK_EQUAL(ot[0]["function"]["name"], "spawn_agent");
  CAF_CHECK_NOT_EQUAL(ot[0]["function"]["description"],
                      "shadows an agent tool");
  CAF_CHECK_EQUAL(ot[1]["function"]["name"], "message_agent");
  CAF_CHECK_EQUAL(ot[2].dump(), json({{"type", "function"},
                                      {"function",
                                       {{"name", "run"},
                                        {"description", "Runs a command."},
                                        {"parameters", json::parse(schema)}}}})
                                  .dump());
  CAF_CHECK_EQUAL(ot[3]["function"]["name"], "broken");
  CAF_CHECK_EQUAL(ot[3]["function"]["parameters"], empty_schema);
  CAF_CHECK_EQUAL(ot[4]["function"]["name"], "scalar");
  CAF_CHECK_EQUAL(ot[4]["function"]["parameters"], empty_schema);
  auto anthropic = keel::test::wire_body(llm_wire::api::anthropic, req, "m", 9,
                                         false);
  auto& at = anthropic["tools"];
  CAF_REQUIRE_EQUAL(at.size(), 5u);
  CAF_CHECK_EQUAL(at[0]["name"], "spawn_agent");
  CAF_CHECK_EQUAL(at[2].dump(), json({{"name", "run"},
                                      {"description", "Runs a command."},
                                      {"input_schema", json::parse(schema)}})
                                  .dump());
  CAF_CHECK_EQUAL(at[3]["input_schema"], empty_schema);
  CAF_CHECK_EQUAL(at[4]["name"], "scalar");
}

// -- offline providers --------------------------------------------------------

namespace {

provider_config scripted_provider_config() {
  provider_config cfg;
  cfg.name = "s";
  cfg.kind = "scripted";
  scripted_step failed;
  failed.match = "exit status";
  failed.reply = "the tool failed: {input}";
  scripted_step run;
  run.match = "run";
  run.tool_name = "shell";
  run.tool_arguments = R"({"cmd":"{input}"})";
  scripted_step rest;
  rest.reply = "done: {input}";
  cfg.script = {failed, run, rest};
  return cfg;
}

completion_request with_context(std::vector<context_entry> ctx) {
  completion_request req;
  req.context = std::move(ctx);
  return req;
}

} // namespace

CAF_TEST(scripted steps answer the last user message or tool result) {
  auto p = make_provider(scripted_provider_config());
  CAF_REQUIRE(p);
  auto& prov = **p;
  auto call = calls_entry(2, "", {{"call_1", "shell", R"({"cmd":"run ls"})"}});
  // A user message asks for the tool.
  auto out = prov.complete(with_context({user_entry(1, "run ls")}), 10);
  CAF_CHECK(out.what == provider_outcome::kind::reply);
  CAF_CHECK_EQUAL(out.reply.finish_reason, "tool_calls");
  CAF_REQUIRE_EQUAL(out.reply.tool_calls.size(), 1u);
  CAF_CHECK_EQUAL(out.reply.tool_calls[0].name, "shell");
  CAF_CHECK_EQUAL(out.reply.tool_calls[0].arguments, R"({"cmd":"run ls"})");
  // Its failed result is what the next step matches and quotes, even with
  // entries of other roles after it.
  out = prov.complete(with_context({user_entry(1, "run ls"), call,
                                    tool_entry(3, "call_1", "exit status 2"),
                                    context_entry{4, "system", "note"},
                                    context_entry{5, "", "run"}}),
                      10);
  CAF_CHECK_EQUAL(out.reply.text, "the tool failed: exit status 2");
  CAF_CHECK(out.reply.tool_calls.empty());
  CAF_CHECK_EQUAL(out.reply.finish_reason, "stop");
  // A result no step matches goes to the rotation, quoted as {input}.
  out = prov.complete(with_context({user_entry(1, "run ls"), call,
                                    tool_entry(3, "call_1", "a.txt")}),
                      10);
  CAF_CHECK_EQUAL(out.reply.text, "done: a.txt");
  CAF_CHECK(out.reply.tool_calls.empty());
  // A user message after the result is the input again.
  out = prov.complete(with_context({user_entry(1, "run ls"), call,
                                    tool_entry(3, "call_1", "exit status 1"),
                                    user_entry(4, "thanks")}),
                      10);
  CAF_CHECK_EQUAL(out.reply.text, "done: thanks");
}

CAF_TEST(echo answers the last user message or tool result) {
  provider_config cfg;
  cfg.name = "e";
  cfg.kind = "echo";
  auto p = make_provider(cfg);
  CAF_REQUIRE(p);
  auto call = calls_entry(2, "", {{"c1", "f", "{}"}});
  auto out = (*p)->complete(
    with_context({user_entry(1, "hi"), context_entry{2, "system", "note"}}),
    10);
  CAF_CHECK_EQUAL(out.reply.text, "echo: hi");
  out = (*p)->complete(
    with_context({user_entry(1, "hi"), call, tool_entry(3, "c1", "out")}), 10);
  CAF_CHECK_EQUAL(out.reply.text, "echo: out");
  CAF_CHECK_EQUAL(last_input_text({}), "");
  CAF_CHECK_EQUAL(
    last_user_text({user_entry(1, "hi"), call, tool_entry(3, "c1", "out")}),
    "hi");
}

// -- wire: answers ------------------------------------------------------------

CAF_TEST(plain answers parse into text tool calls and finish reason) {
  completion c;
  std::string err;
  auto openai = R"({"model":"gpt-x","choices":[{"message":{"role":"assistant",
    "content":null,"tool_calls":[{"id":"call_9","type":"function",
    "function":{"name":"f","arguments":"{\"a\":1}"}}]},
    "finish_reason":"tool_calls"}]})";
  CAF_REQUIRE(llm_wire::parse_answer(llm_wire::api::openai, openai, c, err));
  CAF_CHECK_EQUAL(c.text, "");
  CAF_CHECK_EQUAL(c.model, "gpt-x");
  CAF_CHECK_EQUAL(c.finish_reason, "tool_calls");
  CAF_REQUIRE_EQUAL(c.tool_calls.size(), 1u);
  CAF_CHECK_EQUAL(c.tool_calls[0].id, "call_9");
  CAF_CHECK_EQUAL(c.tool_calls[0].name, "f");
  CAF_CHECK_EQUAL(c.tool_calls[0].arguments, R"({"a":1})");
  c = {};
  auto anthropic = R"({"content":[{"type":"text","text":"Hel"},
    {"type":"thinking","thinking":"hm"},{"type":"text","text":"lo"},
    {"type":"tool_use","id":"toolu_2","name":"g","input":{"b":[1,2]}}],
    "stop_reason":"max_tokens"})";
  CAF_REQUIRE(
    llm_wire::parse_answer(llm_wire::api::anthropic, anthropic, c, err));
  CAF_CHECK_EQUAL(c.text, "Hello");
  CAF_CHECK_EQUAL(c.finish_reason, "length");
  CAF_REQUIRE_EQUAL(c.tool_calls.size(), 1u);
  CAF_CHECK_EQUAL(c.tool_calls[0].id, "toolu_2");
  CAF_CHECK_EQUAL(c.tool_calls[0].arguments, R"({"b":[1,2]})");
}

CAF_TEST(unusable plain answers say what was wrong) {
  struct row {
    llm_wire::api kind;
    const char* body;
    const char* says;
  };
  using llm_wire::api;
  row rows[] = {
    {api::openai, R"({"choices":[)", "not valid JSON"},
    {api::openai, "[1]", "not a JSON object"},
    {api::openai, R"({"choices":[]})", "choices[0]"},
    {api::openai, R"({"choices":[{"text":"x"}]})", "message"},
    {api::openai, R"({"choices":[{"message":{"content":5}}]})", "content"},
    {api::openai,
     R"({"choices":[{"message":{"tool_calls":[{"function":{}}]}}]})",
     "tool_calls[0]"},
    {api::anthropic, R"({"id":"x"})", "content array"},
    {api::anthropic, R"({"content":[{"type":"text"}]})", "content[0]"},
    {api::anthropic, R"({"content":[{"type":"tool_use","id":"t"}]})",
     "no name"},
  };
  for (auto& r : rows) {
    CAF_MESSAGE("body " << r.body);
    completion c;
    std::string err;
    CAF_CHECK(!llm_wire::parse_answer(r.kind, r.body, c, err));
    CAF_CHECK(contains(err, r.says));
  }
}

CAF_TEST(error summaries take the provider message) {
  CAF_CHECK_EQUAL(
    error_summary(R"({"error":{"message":"Rate limit","type":"x"}})"),
    "Rate limit");
  CAF_CHECK_EQUAL(error_summary(
                    R"({"type":"error","error":{"type":"overloaded_error",)"
                    R"("message":"Overloaded"}})"),
                  "Overloaded");
  CAF_CHECK_EQUAL(error_summary("<html>\nBad Gateway\n</html>"),
                  "<html> Bad Gateway </html>");
  CAF_CHECK_EQUAL(error_summary(std::string(300, 'x')).size(), 203u);
}

CAF_TEST(error summaries are well formed utf8 whatever the provider sent) {
  // 199 ASCII bytes, then a 3-byte character across the 200-byte mark.
  auto euro = std::string(199, 'x') + "\xe2\x82\xac" + std::string(10, 'y');
  auto cut = error_summary(euro);
  CAF_CHECK(valid_utf8(cut));
  CAF_CHECK_EQUAL(cut, std::string(199, 'x') + "\xe2\x82\xac...");
  // A body that is not JSON and not UTF-8 either.
  auto raw = error_summary("Bad \xff\xfe Gateway");
  CAF_CHECK(valid_utf8(raw));
  CAF_CHECK_EQUAL(raw, "Bad \xef\xbf\xbd\xef\xbf\xbd Gateway");
  // A long JSON message of 2-byte characters keeps 200 whole characters.
  auto accents = std::string(R"({"error":{"message":")");
  for (int i = 0; i < 250; ++i)
    accents += "\xc3\xa9";
  accents += "\"}}";
  auto msg = error_summary(accents);
  CAF_CHECK(valid_utf8(msg));
  CAF_CHECK_EQUAL(msg.size(), 200u * 2 + 3);
}

// -- wire: server-sent events -------------------------------------------------

namespace {

using event_list = std::vector<std::pair<std::string, std::string>>;

event_list parse_sse(const std::vector<std::string_view>& chunks) {
  event_list result;
  llm_wire::sse_parser parser;
  auto on_event = [&](std::string_view event, std::string_view data) {
    result.emplace_back(std::string{event}, std::string{data});
  };
  for (auto chunk : chunks)
    parser.feed(chunk, on_event);
  parser.finish(on_event);
  return result;
}

} // namespace

CAF_TEST(sse parsing survives any split of the stream) {
  struct row {
    const char* name;
    std::string stream;
    event_list expected;
  };
  row rows[] = {
    {"lf", "data: a\n\ndata: b\n\n", {{"", "a"}, {"", "b"}}},
    {"crlf", "data: a\r\n\r\ndata: b\r\n\r\n", {{"", "a"}, {"", "b"}}},
    {"cr", "data: a\r\rdata: b\r\r", {{"", "a"}, {"", "b"}}},
    {"comments and keep-alives",
     ": keep-alive\n\n:ping\ndata: x\n: mid\n\n",
     {{"", "x"}}},
    {"multi-line data", "data: l1\ndata: l2\ndata:\n\n", {{"", "l1\nl2\n"}}},
    {"no space after colon", "data:tight\n\n", {{"", "tight"}}},
    {"event names",
     "event: message_start\ndata: {}\n\nevent: ping\ndata: p\n\n",
     {{"message_start", "{}"}, {"ping", "p"}}},
    {"event without data is dropped",
     "event: lonely\n\ndata: d\n\n",
     {{"", "d"}}},
    {"id and retry ignored", "id: 7\nretry: 10\ndata: d\n\n", {{"", "d"}}},
    {"unterminated last event",
     "data: a\n\ndata: [DONE]",
     {{"", "a"}, {"", "[DONE]"}}},
    {"done with single newline", "data: [DONE]\n", {{"", "[DONE]"}}},
    {"openai",
     "data: {\"x\":1}\n\ndata: [DONE]\n\n",
     {{"", "{\"x\":1}"}, {"", "[DONE]"}}},
  };
  for (auto& r : rows) {
    CAF_MESSAGE("stream: " << r.name);
    std::string_view all{r.stream};
    CAF_CHECK_EQUAL(parse_sse({all}), r.expected);
    // Every split into two chunks, and byte by byte.
    for (size_t i = 1; i < all.size(); ++i)
      if (parse_sse({all.substr(0, i), all.substr(i)}) != r.expected)
        CAF_FAIL(r.name << ": split at " << i << " parses differently");
    std::vector<std::string_view> bytes;
    for (size_t i = 0; i < all.size(); ++i)
      bytes.push_back(all.substr(i, 1));
    CAF_CHECK_EQUAL(parse_sse(bytes), r.expected);
  }
}

CAF_TEST(openai streams decode into deltas and accumulated tool calls) {
  using step = llm_wire::stream_decoder::step;
  llm_wire::stream_decoder dec{llm_wire::api::openai};
  std::string delta;
  std::vector<std::string> deltas;
  auto feed = [&](const std::string& data) {
    delta.clear();
    auto result = dec.on_event("", data, delta);
    if (!delta.empty())
      deltas.push_back(delta);
    return result;
  };
  CAF_CHECK(feed(R"({"model":"m1","choices":[{"delta":{"role":"assistant",
    "content":""}}]})")
            == step::more);
  CAF_CHECK(feed(R"({"choices":[{"delta":{"content":"Hel"}}]})") == step::more);
  CAF_CHECK(feed(R"({"choices":[{"delta":{"content":"lo"}}]})") == step::more);
  CAF_CHECK(feed(R"({"choices":[{"delta":{"tool_calls":[{"index":0,
    "id":"c1","function":{"name":"f","arguments":""}},{"index":1,"id":"c2",
    "function":{"name":"g","arguments":"{"}}]}}]})")
            == step::more);
  CAF_CHECK(feed(R"({"choices":[{"delta":{"tool_calls":[{"index":0,
    "function":{"arguments":"{\"a\""}}]}}]})")
            == step::more);
  CAF_CHECK(feed(R"({"choices":[{"delta":{"tool_calls":[{"index":1,
    "function":{"arguments":"}"}}]}}]})")
            == step::more);
  CAF_CHECK(feed(R"({"choices":[{"delta":{"tool_calls":[{"index":0,
    "function":{"arguments":":1}"}}]}}]})")
            == step::more);
  CAF_CHECK(feed(R"({"choices":[{"delta":{},"finish_reason":"tool_calls"}]})")
            == step::more);
  CAF_CHECK(feed(R"({"choices":[],"usage":{"total_tokens":3}})") == step::more);
  CAF_CHECK(feed("[DONE]") == step::done);
  CAF_CHECK_EQUAL(deltas, std::vector<std::string>({"Hel", "lo"}));
  auto& c = dec.result();
  CAF_CHECK_EQUAL(c.text, "Hello");
  CAF_CHECK_EQUAL(c.model, "m1");
  CAF_CHECK_EQUAL(c.finish_reason, "tool_calls");
  CAF_REQUIRE_EQUAL(c.tool_calls.size(), 2u);
  CAF_CHECK_EQUAL(c.tool_calls[0].id, "c1");
  CAF_CHECK_EQUAL(c.tool_calls[0].name, "f");
  CAF_CHECK_EQUAL(c.tool_calls[0].arguments, R"({"a":1})");
  CAF_CHECK_EQUAL(c.tool_calls[1].arguments, "{}");
}

CAF_TEST(anthropic streams decode into deltas and tool input) {
  using step = llm_wire::stream_decoder::step;
  llm_wire::stream_decoder dec{llm_wire::api::anthropic};
  std::string delta;
  std::string text;
  auto feed = [&](const char* event, const std::string& data) {
    delta.clear();
    auto result = dec.on_event(event, data, delta);
    text += delta;
    return result;
  };
  CAF_CHECK(feed("message_start", R"({"type":"message_start","message":
    {"model":"claude-x","content":[]}})")
            == step::more);
  CAF_CHECK(feed("content_block_start", R"({"type":"content_block_start",
    "index":0,"content_block":{"type":"text","text":""}})")
            == step::more);
  CAF_CHECK(feed("ping", R"({"type":"ping"})") == step::more);
  CAF_CHECK(feed("content_block_delta", R"({"type":"content_block_delta",
    "index":0,"delta":{"type":"text_delta","text":"Hi"}})")
            == step::more);
  CAF_CHECK(
    feed("content_block_stop", R"({"type":"content_block_stop","index":0})")
    == step::more);
  CAF_CHECK(feed("content_block_start", R"({"type":"content_block_start",
    "index":1,"content_block":{"type":"tool_use","id":"tu1","name":"f",
    "input":{}}})")
            == step::more);
  CAF_CHECK(feed("content_block_delta", R"({"type":"content_block_delta",
    "index":1,"delta":{"type":"input_json_delta","partial_json":"{\"a\":"}})")
            == step::more);
  CAF_CHECK(feed("content_block_delta", R"({"type":"content_block_delta",
    "index":1,"delta":{"type":"input_json_delta","partial_json":"2}"}})")
            == step::more);
  CAF_CHECK(
    feed("content_block_stop", R"({"type":"content_block_stop","index":1})")
    == step::more);
  CAF_CHECK(feed("content_block_start", R"({"type":"content_block_start",
    "index":2,"content_block":{"type":"tool_use","id":"tu2","name":"g",
    "input":{}}})")
            == step::more);
  CAF_CHECK(
    feed("content_block_stop", R"({"type":"content_block_stop","index":2})")
    == step::more);
  CAF_CHECK(feed("message_delta", R"({"type":"message_delta","delta":
    {"stop_reason":"tool_use"}})")
            == step::more);
  CAF_CHECK(feed("message_stop", R"({"type":"message_stop"})") == step::done);
  auto& c = dec.result();
  CAF_CHECK_EQUAL(text, "Hi");
  CAF_CHECK_EQUAL(c.text, "Hi");
  CAF_CHECK_EQUAL(c.model, "claude-x");
  CAF_CHECK_EQUAL(c.finish_reason, "tool_calls");
  CAF_REQUIRE_EQUAL(c.tool_calls.size(), 2u);
  CAF_CHECK_EQUAL(c.tool_calls[0].id, "tu1");
  CAF_CHECK_EQUAL(c.tool_calls[0].arguments, R"({"a":2})");
  CAF_CHECK_EQUAL(c.tool_calls[1].arguments, "{}");
}

CAF_TEST(stream errors and garbage fail the decoder) {
  using step = llm_wire::stream_decoder::step;
  std::string delta;
  {
    llm_wire::stream_decoder dec{llm_wire::api::anthropic};
    auto body = R"({"type":"error","error":{"type":"overloaded_error",)"
                R"("message":"Overloaded"}})";
    CAF_CHECK(dec.on_event("error", body, delta) == step::failed);
    CAF_CHECK(dec.provider_error());
    CAF_CHECK_EQUAL(dec.error_body(), body);
    provider_failure f;
    f.body = dec.error_body();
    CAF_CHECK_EQUAL(classify(f), error_class::overloaded);
  }
  {
    llm_wire::stream_decoder dec{llm_wire::api::openai};
    CAF_CHECK(dec.on_event("",
                           R"({"error":{"message":"Rate limit reached",)"
                           R"("type":"rate_limit_exceeded"}})",
                           delta)
              == step::failed);
    CAF_CHECK(dec.provider_error());
  }
  struct row {
    llm_wire::api kind;
    const char* event;
    const char* data;
    const char* says;
  };
  row rows[] = {
    {llm_wire::api::openai, "", "{\"choices\":[{\"delta\":", "not valid JSON"},
    {llm_wire::api::openai, "", "42", "not a JSON object"},
    {llm_wire::api::anthropic, "content_block_delta",
     "{\"type\":", "valid JSON"},
    {llm_wire::api::anthropic, "content_block_delta",
     R"({"type":"content_block_delta","index":0,"delta":{"type":"text_delta"}})",
     "text_delta without text"},
    {llm_wire::api::anthropic, "content_block_start",
     R"({"type":"content_block_start","index":0,"content_block":{}})",
     "content_block.type"},
  };
  for (auto& r : rows) {
    CAF_MESSAGE("event data " << r.data);
    llm_wire::stream_decoder dec{r.kind};
    CAF_CHECK(dec.on_event(r.event, r.data, delta) == step::failed);
    CAF_CHECK(!dec.provider_error());
    CAF_CHECK(contains(dec.error(), r.says));
  }
}

// -- the fault server's specs ------------------------------------------------

CAF_TEST(fault specs parse into behaviours) {
  using keel::fault_llm::fault;
  using keel::fault_llm::parse_fault;
  auto f = parse_fault("status=429;retry_after=2;error=insufficient_quota");
  CAF_REQUIRE(f);
  CAF_CHECK(f->what == fault::kind::status);
  CAF_CHECK_EQUAL(f->status, 429);
  CAF_CHECK_EQUAL(f->retry_after, "2");
  CAF_CHECK_EQUAL(f->error_type, "insufficient_quota");
  f = parse_fault(" drip=50ms ; truncate;tool;reply=Hi there");
  CAF_REQUIRE(f);
  CAF_CHECK(f->what == fault::kind::truncate);
  CAF_CHECK_EQUAL(f->drip.count(), 50);
  CAF_CHECK(f->tool);
  CAF_CHECK_EQUAL(f->reply, "Hi there");
  f = parse_fault("drip=2s");
  CAF_REQUIRE(f);
  CAF_CHECK_EQUAL(f->drip.count(), 2000);
  auto seq
    = keel::fault_llm::parse_fault_sequence("503,529;retry_after_ms=5,ok");
  CAF_REQUIRE(seq);
  CAF_REQUIRE_EQUAL(seq->size(), 3u);
  CAF_CHECK_EQUAL((*seq)[0].status, 503);
  CAF_CHECK_EQUAL((*seq)[1].retry_after_ms, "5");
  CAF_CHECK((*seq)[2].what == fault::kind::ok);
  std::string err;
  for (auto bad : {"bogus", "drip=fast", "status=abc", "status=42"}) {
    CAF_MESSAGE("bad spec " << bad);
    CAF_CHECK(!parse_fault(bad, &err));
    CAF_CHECK(contains(err, bad));
  }
}

// -- the client against the fault server --------------------------------------

CAF_TEST_FIXTURE_SCOPE(llm_client_tests, fixture)

CAF_TEST(endpoints reject bad configuration) {
  auto cfg = http_provider("openai", server->base_url(), false);
  cfg.kind = "echo";
  auto ep = llm_endpoint::make(*io, cfg);
  CAF_REQUIRE(!ep);
  CAF_CHECK(ep.error() == ec::config_invalid);
  CAF_CHECK(contains(error_message(ep.error()), "providers.p1.kind"));
  cfg = http_provider("openai", "gopher://x", false);
  ep = llm_endpoint::make(*io, cfg);
  CAF_REQUIRE(!ep);
  CAF_CHECK(contains(error_message(ep.error()), "providers.p1.base_url"));
  cfg = http_provider("anthropic", "https://127.0.0.1:1", false);
  cfg.ca_file = "/nonexistent/ca.pem";
  ep = llm_endpoint::make(*io, cfg);
  CAF_REQUIRE(!ep);
  CAF_CHECK(contains(error_message(ep.error()), "providers.p1.ca_file"));
}

CAF_TEST(every base url shape reaches its server at the path it gives) {
  struct shape {
    const char* kind;
    std::string suffix; // after the server's http://127.0.0.1:PORT
    const char* target;
  };
  for (auto& [kind, suffix, target] : std::vector<shape>{
         {"openai", "", "/v1/chat/completions"},
         {"openai", "/v1beta/openai/", "/v1beta/openai/chat/completions"},
         {"openai", "/openai/deployments/gpt4o?api-version=2024-10-21",
          "/openai/deployments/gpt4o/chat/completions?api-version=2024-10-21"},
         {"openai", "/proxy/openai/v1", "/proxy/openai/v1/chat/completions"},
         {"anthropic", "/anthropic", "/anthropic/messages"},
         {"anthropic", "", "/v1/messages"}}) {
    CAF_MESSAGE(kind << " at base url suffix '" << suffix << "'");
    auto ep = endpoint(http_provider(kind, server->base_url() + suffix, false));
    CAF_CHECK_EQUAL(run_ok(*ep, "where").text, "echo: where");
    CAF_CHECK_EQUAL(server->last_request().target, target);
  }
}

CAF_TEST(openai plain calls send the request and parse the answer) {
  auto cfg = http_provider("openai", server->base_url() + "/v1", false);
  cfg.headers["X-Custom"] = "yes";
  auto ep = endpoint(cfg);
  auto c = run_ok(*ep, "hello world");
  CAF_CHECK_EQUAL(c.text, "echo: hello world");
  CAF_CHECK_EQUAL(c.finish_reason, "stop");
  CAF_CHECK_EQUAL(c.provider, "p1");
  CAF_CHECK_EQUAL(c.model, "test-model");
  auto req = server->last_request();
  CAF_CHECK_EQUAL(req.method, "POST");
  CAF_CHECK_EQUAL(req.target, "/v1/chat/completions");
  CAF_CHECK_EQUAL(req.headers["authorization"], "Bearer sk-test");
  CAF_CHECK_EQUAL(req.headers["content-type"], "application/json");
  CAF_CHECK_EQUAL(req.headers["x-custom"], "yes");
  CAF_CHECK_EQUAL(req.headers.count("x-api-key"), 0u);
  auto body = json::parse(req.body);
  CAF_CHECK_EQUAL(body["model"], "test-model");
  CAF_CHECK_EQUAL(body["max_completion_tokens"], 64);
  CAF_CHECK_EQUAL(body["stream"], false);
  CAF_CHECK_EQUAL(body["messages"][0]["role"], "system");
  CAF_CHECK_EQUAL(body["messages"][1]["content"], "hello world");
}

CAF_TEST(a call sends the parameters of the provider with those of the request
           over them) {
  struct row {
    const char* kind;
    const char* limit_field;
    const char* stop_field;
  };
  for (auto& x : {row{"openai", "max_tokens", "stop"},
                  row{"anthropic", "max_tokens", "stop_sequences"}}) {
    CAF_MESSAGE(x.kind);
    auto cfg = http_provider(x.kind, server->base_url(), false);
    cfg.token_limit_field = "max_tokens"; // An older OpenAI-style server.
    cfg.params.temperature = 0.5;
    cfg.params.top_p = 0.9;
    cfg.params.max_output_tokens = 300;
    cfg.params.extra_body = R"({"seed":7,"top_k":40})";
    auto ep = endpoint(cfg);
    auto req = ask("hello");
    req.params.temperature = 0.25; // The agent's, over the provider's.
    req.params.stop = {"END"};
    req.params.reasoning_effort = "low";
    req.params.extra_body = R"({"top_k":null})"; // Removes the provider's.
    auto p = probe::make();
    probes.push_back(p);
    start(*ep, req, p, 0); // 0: the parameters' limit.
    CAF_REQUIRE(p->wait());
    CAF_REQUIRE(p->ok() != nullptr);
    auto body = json::parse(server->last_request().body);
    CAF_CHECK_EQUAL(body["temperature"], 0.25);
    CAF_CHECK_EQUAL(body["top_p"], 0.9);
    CAF_CHECK_EQUAL(body[x.limit_field], 300);
    CAF_CHECK_EQUAL(body[x.stop_field], json::array({"END"}));
    CAF_CHECK_EQUAL(body["seed"], 7);
    CAF_CHECK(!body.contains("top_k"));
    if (std::string{x.kind} == "openai") {
      CAF_CHECK_EQUAL(body["reasoning_effort"], "low");
      CAF_CHECK(!body.contains("max_completion_tokens"));
    } else {
      CAF_CHECK_EQUAL(body["output_config"]["effort"], "low");
    }
  }
}

CAF_TEST(the smaller limit of a timed out retry wins over the parameters) {
  auto cfg = http_provider("openai", server->base_url(), false);
  cfg.params.max_output_tokens = 300;
  auto ep = endpoint(cfg);
  auto p = probe::make();
  probes.push_back(p);
  start(*ep, ask("hello"), p, 30);
  CAF_REQUIRE(p->wait());
  auto body = json::parse(server->last_request().body);
  CAF_CHECK_EQUAL(body["max_completion_tokens"], 30);
  CAF_CHECK(!body.contains("temperature")); // Unset: the server's.
  CAF_CHECK(!body.contains("stop"));
  CAF_CHECK(!body.contains("reasoning_effort"));
}

CAF_TEST(openai streamed calls deliver deltas in order) {
  auto cfg = http_provider("openai", server->base_url(), true);
  cfg.api_key.clear();
  auto ep = endpoint(cfg);
  auto p = run(*ep, "one two three four");
  CAF_REQUIRE(p->ok());
  CAF_CHECK_EQUAL(p->ok()->text, "echo: one two three four");
  CAF_CHECK_EQUAL(p->deltas, std::vector<std::string>(
                               {"echo: ", "one ", "two ", "three ", "four"}));
  CAF_CHECK_EQUAL(p->joined(), p->ok()->text);
  auto req = server->last_request();
  CAF_CHECK_EQUAL(req.headers.count("authorization"), 0u);
  CAF_CHECK_EQUAL(req.headers["accept"], "text/event-stream");
  CAF_CHECK_EQUAL(json::parse(req.body)["stream"].get<bool>(), true);
}

CAF_TEST(anthropic calls plain and streamed) {
  for (auto stream : {false, true}) {
    CAF_MESSAGE("stream " << stream);
    auto ep = endpoint("anthropic", stream);
    auto p = run(*ep, "alpha beta");
    CAF_REQUIRE(p->ok());
    CAF_CHECK_EQUAL(p->ok()->text, "echo: alpha beta");
    CAF_CHECK_EQUAL(p->ok()->finish_reason, "stop");
    if (stream)
      CAF_CHECK_EQUAL(p->deltas,
                      std::vector<std::string>({"echo: ", "alpha ", "beta"}));
    else
      CAF_CHECK(p->deltas.empty());
    auto req = server->last_request();
    CAF_CHECK_EQUAL(req.target, "/v1/messages");
    CAF_CHECK_EQUAL(req.headers["x-api-key"], "sk-test");
    CAF_CHECK_EQUAL(req.headers["anthropic-version"], "2023-06-01");
    CAF_CHECK_EQUAL(req.headers.count("authorization"), 0u);
    auto body = json::parse(req.body);
    CAF_CHECK_EQUAL(body["system"], "Be brief.");
    CAF_CHECK_EQUAL(body["messages"].size(), 1u);
  }
  auto cfg = http_provider("anthropic", server->base_url(), false);
  cfg.headers["anthropic-version"] = "2099-01-01";
  auto ep = endpoint(cfg);
  run_ok(*ep, "x");
  auto req = server->last_request();
  CAF_CHECK_EQUAL(req.headers["anthropic-version"], "2099-01-01");
}

CAF_TEST(tool calls arrive in both apis and both modes) {
  for (auto kind : {"openai", "anthropic"}) {
    for (auto stream : {false, true}) {
      CAF_MESSAGE(kind << " stream " << stream);
      auto ep = endpoint(kind, stream);
      auto c = run_ok(*ep, "weather? [[fault:tool;reply=Let me check.]]");
      CAF_CHECK_EQUAL(c.text, "Let me check.");
      CAF_CHECK_EQUAL(c.finish_reason, "tool_calls");
      CAF_REQUIRE_EQUAL(c.tool_calls.size(), 1u);
      CAF_CHECK_EQUAL(c.tool_calls[0].name, "get_weather");
      CAF_CHECK_EQUAL(c.tool_calls[0].id,
                      std::string{kind} == "openai" ? "call_1" : "toolu_1");
      CAF_CHECK_EQUAL(json::parse(c.tool_calls[0].arguments),
                      json::parse(tool_args));
    }
  }
}

CAF_TEST(sequential calls reuse one keep - alive connection) {
  for (auto stream : {false, true}) {
    auto before = server->connections();
    auto ep = endpoint("openai", stream);
    for (int i = 0; i < 5; ++i)
      run_ok(*ep, "call " + std::to_string(i));
    CAF_CHECK_EQUAL(server->connections() - before, 1u);
  }
  // Errors answered in full leave the connection usable too.
  auto before = server->connections();
  auto ep = endpoint("anthropic", true);
  run_failing(*ep, "[[fault:429]]");
  run_ok(*ep, "again");
  CAF_CHECK_EQUAL(server->connections() - before, 1u);
}

CAF_TEST(connections the server closes are not reused) {
  auto ep = endpoint("openai", false);
  run_ok(*ep, "[[fault:close]]");
  run_ok(*ep, "two");
  CAF_CHECK_EQUAL(server->connections(), 2u);
  // Closed without notice: the next call reconnects, sending once.
  run_ok(*ep, "[[fault:hangup]]");
  run_ok(*ep, "four");
  CAF_CHECK_EQUAL(server->connections(), 3u);
  CAF_CHECK_EQUAL(server->requests(), 4u);
}

CAF_TEST(a pooled connection failing before the answer is retried once) {
  auto ep = endpoint("anthropic", true);
  run_ok(*ep, "pooled");
  // The server closes the reused connection as the request arrives: the
  // client sends it again on a fresh connection.
  server->push(*keel::fault_llm::parse_fault("drop"));
  CAF_CHECK_EQUAL(run_ok(*ep, "retried").text, "echo: retried");
  CAF_CHECK_EQUAL(server->requests(), 3u);
  CAF_CHECK_EQUAL(server->connections(), 2u);
  // Only once: a request the fresh connection drops as well fails.
  auto f = run_failing(*ep, "[[fault:drop]]");
  CAF_CHECK_EQUAL(transport_name(f.failure.transport), "reset");
  CAF_CHECK(contains(f.message, "without answering"));
  CAF_CHECK_EQUAL(server->requests(), 5u);
  CAF_CHECK_EQUAL(server->connections(), 3u);
}

CAF_TEST(refused connections fail as connect_refused) {
  auto port = keel::fault_llm::closed_port();
  auto ep = endpoint(
    http_provider("openai", "http://127.0.0.1:" + std::to_string(port), false));
  auto f = run_failing(*ep, "hi");
  CAF_CHECK_EQUAL(transport_name(f.failure.transport), "connect_refused");
  CAF_CHECK(contains(f.message, "refused"));
  CAF_CHECK(contains(f.message, "127.0.0.1:" + std::to_string(port)));
  CAF_CHECK(!f.partial);
  CAF_CHECK(!f.failure.status);
}

CAF_TEST(connections reset mid - answer fail as reset) {
  for (auto stream : {false, true}) {
    CAF_MESSAGE("stream " << stream);
    auto ep = endpoint("openai", stream);
    auto p = run(*ep, "a b c d e f g h [[fault:reset]]");
    CAF_REQUIRE(p->failed());
    auto& f = *p->failed();
    CAF_MESSAGE(f.message);
    CAF_CHECK_EQUAL(transport_name(f.failure.transport), "reset");
    CAF_CHECK_EQUAL(f.partial, stream);
    CAF_CHECK_EQUAL(f.partial, !p->deltas.empty());
    CAF_CHECK(contains(f.message, server->base_url().substr(7)));
  }
}

CAF_TEST(a server that never answers hits the first byte timeout) {
  auto cfg = http_provider("anthropic", server->base_url(), true);
  cfg.first_byte_timeout = 200ms;
  auto ep = endpoint(cfg);
  auto t0 = std::chrono::steady_clock::now();
  auto f = run_failing(*ep, "[[fault:hang]]");
  auto elapsed = std::chrono::steady_clock::now() - t0;
  CAF_CHECK_EQUAL(transport_name(f.failure.transport), "timeout");
  CAF_CHECK_EQUAL(classify(f.failure), error_class::timeout);
  CAF_CHECK(contains(f.message, "200 ms"));
  CAF_CHECK(elapsed >= 200ms);
  CAF_CHECK(elapsed < 5s);
}

CAF_TEST(a slow stream hits the total timeout with partial text) {
  auto cfg = http_provider("openai", server->base_url(), true);
  cfg.total_timeout = 400ms;
  auto ep = endpoint(cfg);
  auto p = run(*ep, "w1 w2 w3 w4 w5 w6 w7 w8 w9 [[fault:drip=100ms]]");
  CAF_REQUIRE(p->failed());
  auto& f = *p->failed();
  CAF_CHECK_EQUAL(transport_name(f.failure.transport), "timeout");
  CAF_CHECK(f.partial);
  CAF_CHECK(!p->deltas.empty());
  CAF_CHECK(contains(f.message, "total timeout of 400 ms"));
}

CAF_TEST(malformed answers are unparseable format failures) {
  for (auto kind : {"openai", "anthropic"}) {
    for (auto stream : {false, true}) {
      CAF_MESSAGE(kind << " stream " << stream);
      auto ep = endpoint(kind, stream);
      auto f = run_failing(*ep, "x y z [[fault:malformed]]");
      CAF_CHECK(f.failure.unparseable);
      CAF_CHECK_EQUAL(classify(f.failure), error_class::format);
      CAF_CHECK(contains(f.message, "not valid JSON"));
      CAF_CHECK(contains(f.message, "unusable answer from 127.0.0.1:"));
    }
  }
}

CAF_TEST(streams cut before their terminal event fail as partial) {
  for (auto kind : {"openai", "anthropic"}) {
    CAF_MESSAGE(kind);
    auto ep = endpoint(kind, true);
    auto p = run(*ep, "a b c d e f g h i j [[fault:truncate]]");
    CAF_REQUIRE(p->failed());
    auto& f = *p->failed();
    CAF_CHECK(f.partial);
    CAF_CHECK(!p->deltas.empty());
    CAF_CHECK_EQUAL(transport_name(f.failure.transport), "reset");
    CAF_CHECK(contains(
      f.message, std::string{kind} == "openai" ? "[DONE]" : "message_stop"));
  }
  // A plain answer short of its Content-Length.
  auto ep = endpoint("openai", false);
  auto f = run_failing(*ep, "[[fault:truncate]]");
  CAF_CHECK_EQUAL(transport_name(f.failure.transport), "reset");
  CAF_CHECK(!f.partial);
}

CAF_TEST(answers past max_response_bytes fail as format errors) {
  // About 6 KB of reply text: past the limit as one body and as a stream.
  std::string words;
  for (int i = 0; i < 1000; ++i)
    words += "word" + std::to_string(i % 10) + ' ';
  for (auto kind : {"openai", "anthropic"}) {
    for (auto stream : {false, true}) {
      CAF_MESSAGE(kind << " stream " << stream);
      auto cfg = http_provider(kind, server->base_url(), stream);
      cfg.max_response_bytes = 2000;
      auto ep = endpoint(cfg);
      auto p = run(*ep, words);
      CAF_REQUIRE(p->failed());
      auto& f = *p->failed();
      CAF_CHECK(f.failure.unparseable);
      CAF_CHECK_EQUAL(classify(f.failure), error_class::format);
      CAF_CHECK(contains(f.message, "larger than 2000 bytes"));
      CAF_CHECK(contains(f.message, "max_response_bytes"));
      // Nothing past the limit was read, let alone passed on.
      size_t streamed = 0;
      for (auto& d : p->deltas)
        streamed += d.size();
      CAF_CHECK_LESS(streamed, 2000u);
      // An answer within the limit still comes through.
      CAF_CHECK_EQUAL(run_ok(*ep, "short").text, "echo: short");
    }
  }
}

CAF_TEST(rate limits carry status body and retry after) {
  auto ep = endpoint("openai", true);
  auto f = run_failing(*ep, "[[fault:status=429;retry_after=2]]");
  CAF_REQUIRE(f.failure.status);
  CAF_CHECK_EQUAL(*f.failure.status, 429);
  CAF_CHECK_EQUAL(classify(f.failure), error_class::rate_limit);
  CAF_REQUIRE(f.retry_after);
  CAF_CHECK_EQUAL(f.retry_after->count(), 2000);
  CAF_CHECK(contains(f.failure.body, "rate_limit_exceeded"));
  CAF_CHECK(contains(f.message, "HTTP 429 from 127.0.0.1:"));
  CAF_CHECK(contains(f.message, "Rate limit exceeded"));
  f = run_failing(*ep, "[[fault:429;retry_after_ms=1500;retry_after=9]]");
  CAF_REQUIRE(f.retry_after);
  CAF_CHECK_EQUAL(f.retry_after->count(), 1500);
  f = run_failing(*ep, "[[fault:503]]");
  CAF_CHECK(!f.retry_after);
  CAF_CHECK_EQUAL(classify(f.failure), error_class::overloaded);
}

CAF_TEST(quota and overload errors classify) {
  auto openai = endpoint("openai", false);
  auto f = run_failing(*openai, "[[fault:429;error=insufficient_quota]]");
  CAF_CHECK_EQUAL(classify(f.failure), error_class::billing);
  auto anthropic = endpoint("anthropic", false);
  f = run_failing(*anthropic, "[[fault:529]]");
  CAF_CHECK(f.failure.status == 529);
  CAF_CHECK_EQUAL(classify(f.failure), error_class::overloaded);
  CAF_CHECK(contains(f.message, "Overloaded"));
  // Overloaded in the middle of a stream: an error event after some text.
  auto streamed = endpoint("anthropic", true);
  auto p = run(*streamed, "a b c [[fault:sse_error]]");
  CAF_REQUIRE(p->failed());
  CAF_CHECK(!p->failed()->failure.status);
  CAF_CHECK_EQUAL(classify(p->failed()->failure), error_class::overloaded);
  CAF_CHECK(p->failed()->partial);
  CAF_CHECK(contains(p->failed()->message, "error in the stream"));
  streamed = endpoint("openai", true);
  p = run(*streamed, "a b c [[fault:sse_error]]");
  CAF_REQUIRE(p->failed());
  CAF_CHECK_EQUAL(classify(p->failed()->failure), error_class::overloaded);
}

CAF_TEST(scripted failures then success) {
  server->push(*keel::fault_llm::parse_fault("503"));
  server->push(*keel::fault_llm::parse_fault("reset"));
  auto ep = endpoint("openai", false);
  auto first = run_failing(*ep, "1");
  CAF_CHECK(first.failure.status == 503);
  auto second = run_failing(*ep, "2");
  CAF_CHECK_EQUAL(transport_name(second.failure.transport), "reset");
  auto third = run_ok(*ep, "3");
  CAF_CHECK_EQUAL(third.text, "echo: 3");
}

CAF_TEST(calls beyond max concurrency queue) {
  io = std::make_unique<http_io>(2);
  auto cfg = http_provider("openai", server->base_url(), true);
  cfg.max_concurrency = 2;
  auto ep = endpoint(cfg);
  std::vector<std::shared_ptr<probe>> batch;
  for (int i = 0; i < 6; ++i) {
    auto p = probe::make();
    probes.push_back(p);
    batch.push_back(p);
    start(*ep, ask("a b c [[fault:drip=20ms]]"), p);
  }
  for (auto& p : batch) {
    CAF_REQUIRE(p->wait());
    CAF_CHECK(p->ok());
  }
  CAF_CHECK_EQUAL(server->max_in_flight(), 2u);
  CAF_CHECK_EQUAL(server->connections(), 2u);
}

CAF_TEST(waiting for a slot counts against the total timeout) {
  auto cfg = http_provider("openai", server->base_url(), false);
  cfg.max_concurrency = 1;
  cfg.total_timeout = 300ms;
  auto ep = endpoint(cfg);
  auto first = probe::make();
  auto second = probe::make();
  probes.push_back(first);
  probes.push_back(second);
  auto t0 = std::chrono::steady_clock::now();
  start(*ep, ask("[[fault:hang]]"), first);
  start(*ep, ask("queued [[fault:hang]]"), second);
  CAF_REQUIRE(second->wait());
  auto elapsed = std::chrono::steady_clock::now() - t0;
  CAF_REQUIRE(second->failed());
  CAF_CHECK_EQUAL(transport_name(second->failed()->failure.transport),
                  "timeout");
  CAF_CHECK(contains(second->failed()->message, "total timeout of 300 ms"));
  // The second call got the slot only when the first timed out, and its
  // clock had been running since it was queued: it fails about together
  // with the first, not 300 ms later.
  CAF_CHECK(elapsed < 550ms);
  CAF_REQUIRE(first->wait());
}

CAF_TEST(a time budget shorter than the total timeout bounds the call) {
  auto cfg = http_provider("openai", server->base_url(), false);
  cfg.total_timeout = 10s;
  auto ep = endpoint(cfg);
  auto req = ask("[[fault:hang]]");
  req.time_budget_ms = 300;
  auto p = probe::make();
  probes.push_back(p);
  auto t0 = std::chrono::steady_clock::now();
  start(*ep, req, p);
  CAF_REQUIRE(p->wait());
  auto elapsed = std::chrono::steady_clock::now() - t0;
  CAF_REQUIRE(p->failed());
  CAF_CHECK_EQUAL(transport_name(p->failed()->failure.transport), "timeout");
  KEEL_CHECK_CONTAINS(p->failed()->message, "300 ms left of its turn");
  CAF_CHECK(elapsed >= 300ms);
  CAF_CHECK(elapsed < 5s);
}

CAF_TEST(a cancelled call fails at once and closes its connection) {
  auto ep = endpoint(http_provider("anthropic", server->base_url(), true));
  auto p = probe::make();
  probes.push_back(p);
  auto cancel = start(*ep, ask("[[fault:hang]]"), p);
  CAF_REQUIRE(server->wait_requests(1));
  cancel("its turn ended");
  CAF_REQUIRE(p->wait());
  CAF_REQUIRE(p->failed());
  KEEL_CHECK_CONTAINS(p->failed()->message, "cancelled: its turn ended");
  CAF_CHECK(server->wait_in_flight(0));
  cancel("again"); // Harmless once done.
  CAF_CHECK_EQUAL(p->results, 1);
}

CAF_TEST(https verifies the server certificate) {
  auto identity = keel::fault_llm::make_self_signed_identity();
  keel::fault_llm::fault_server_options opts;
  opts.tls = identity;
  server = std::make_unique<fault_llm_server>(opts);
  auto untrusted = endpoint("openai", false);
  auto f = run_failing(*untrusted, "hi");
  CAF_CHECK_EQUAL(transport_name(f.failure.transport), "tls");
  CAF_CHECK(contains(f.message, "TLS handshake with 127.0.0.1:"));
  CAF_CHECK(contains(f.message, "certificate"));
  keel::test::temp_dir dir;
  auto ca_file = dir.str() + "/ca.pem";
  std::ofstream{ca_file} << identity.cert_pem;
  for (auto host : {"127.0.0.1", "localhost"}) {
    for (auto stream : {false, true}) {
      CAF_MESSAGE(host << " stream " << stream);
      auto cfg = http_provider("anthropic",
                               std::string{"https://"} + host + ":"
                                 + std::to_string(server->port()),
                               stream);
      cfg.ca_file = ca_file;
      auto trusted = endpoint(cfg);
      CAF_CHECK_EQUAL(run_ok(*trusted, "secure").text, "echo: secure");
      CAF_CHECK_EQUAL(run_ok(*trusted, "again").text, "echo: again");
    }
  }
  // One untrusted attempt, then one connection per trusted endpoint.
  CAF_CHECK_EQUAL(server->connections(), 5u);
}

CAF_TEST(destroying the io cancels calls in flight) {
  auto cfg = http_provider("openai", server->base_url(), true);
  cfg.max_concurrency = 2;
  auto ep = endpoint(cfg);
  std::vector<std::shared_ptr<probe>> batch;
  for (int i = 0; i < 3; ++i) {
    auto p = probe::make();
    probes.push_back(p);
    batch.push_back(p);
    start(*ep, ask("[[fault:hang]]"), p);
  }
  CAF_REQUIRE(server->wait_requests(2));
  io.reset();
  for (auto& p : batch) {
    CAF_REQUIRE_EQUAL(p->results, 1);
    CAF_REQUIRE(p->failed());
    CAF_CHECK(contains(p->failed()->message, "shutting down"));
  }
  // The endpoint outlives its io: later calls fail at once.
  auto late = probe::make();
  probes.push_back(late);
  start(*ep, ask("late"), late);
  CAF_REQUIRE_EQUAL(late->results, 1);
  CAF_CHECK(contains(late->failed()->message, "shut down"));
  CAF_CHECK(server->wait_in_flight(0));
}

CAF_TEST_FIXTURE_SCOPE_END()
