#define CAF_SUITE providers

// Provider pools end to end: a real keel-node calls real HTTP servers over
// the OpenAI wire protocol: @dwmkerr/mock-llm from npm (tests/mock-llm) for
// the API's status codes and streaming, and our fault-injecting server
// (libtools/include/keel/tools/fault_llm_server.hpp) for what mock-llm cannot
// do: refused connections, resets, hangs, slow drips, malformed JSON, truncated
// streams. Through every fault the node keeps answering, and every message gets
// a reply or a descriptive error.

#include <caf/test/unit_test.hpp>

#include "keel/tools/fault_llm_server.hpp"
#include "node_client.hpp"
#include "npm_server.hpp"
#include "temp_dir.hpp"
#include "text_checks.hpp"

#include "keel/conversation.hpp"
#include "keel/protocol.hpp"

using namespace keel;
using namespace keel::test;
using namespace keel::fault_llm;
using namespace std::chrono_literals;

namespace {

/// One openai provider entry.
std::string openai(const std::string& name, const std::string& base_url,
                   bool stream, const std::string& extra = {}) {
  return "  - name: " + name + "\n    kind: openai\n    base_url: " + base_url
         + "\n    model: mock-model\n    api_key: sk-test\n    stream: "
         + (stream ? "true" : "false") + "\n" + extra;
}

/// A node config with `providers` (YAML list items) and the default pool
/// chaining `chain` with fast retries and `pool_extra` settings.
std::string node_yaml(const temp_dir& dir, const std::string& providers,
                      const std::string& chain,
                      const std::string& pool_extra = {}) {
  return "node:\n  name: providers-test\n  data_dir: " + dir.str()
         + "/data\ngateway:\n  port: 0\nproviders:\n" + providers
         + "pools:\n  - name: default\n    chain: [" + chain
         + "]\n    max_attempts: 3\n    retry:\n      base_delay: 10ms\n"
           "      max_delay: 50ms\n      retry_after_cap: 100ms\n"
           "      stream_delay: 10ms\n"
         + pool_extra + "logging:\n  level: warn\n";
}

/// Cooldowns of zero and a high threshold: every message meets the
/// providers afresh (breakers have their own tests).
const std::string no_cooldowns
  = "    breaker:\n      failure_threshold: 1000\n    cooldowns:\n"
    "      auth: 0s\n      rate_limit: 0s\n      billing: 0s\n"
    "      timeout: 0s\n      overloaded: 0s\n      model_not_found: 0s\n"
    "      unknown: 0s\n";

/// What a client saw of one message's turn.
struct turn {
  std::vector<nlohmann::json> statuses;
  std::vector<nlohmann::json> deltas;
  nlohmann::json outcome; // the reply or the thread's error frame
};

/// Sends `text` on `thread` (subscribed first; to `agent` if set) and
/// collects the turn's frames until its outcome.
turn run_turn(ws_client& client, const std::string& thread,
              const std::string& id, const std::string& text,
              const std::string& agent = {}) {
  CAF_REQUIRE(!client.send_text(protocol::subscribe_frame(thread, "s-" + id)));
  CAF_REQUIRE(
    receive_until(client, [](auto& j) { return j["type"] == "subscribed"; }));
  CAF_REQUIRE(!client.send_text(protocol::send_frame(thread, id, text, agent)));
  turn result;
  auto outcome = receive_until(
    client,
    [&](auto& j) {
      if (j.value("id", "") != id)
        return false;
      if (j["type"] == "status")
        result.statuses.push_back(j);
      else if (j["type"] == "delta")
        result.deltas.push_back(j);
      return j["type"] == "reply"
             || (j["type"] == "error" && j.contains("reply_to"));
    },
    30s);
  CAF_REQUIRE(outcome);
  result.outcome = *outcome;
  return result;
}

bool has_state(const turn& t, const std::string& state) {
  for (auto& s : t.statuses)
    if (s["state"] == state)
      return true;
  return false;
}

/// The node's provider health, by provider name.
std::map<std::string, nlohmann::json> provider_health(const endpoint& ep) {
  auto res = api_call(ep, "GET", "/api/v1/providers");
  CAF_REQUIRE(res);
  std::map<std::string, nlohmann::json> result;
  for (auto& pool : (*res)["pools"])
    for (auto& p : pool["providers"])
      result[p["provider"]] = p;
  return result;
}

} // namespace

CAF_TEST(answers come over the openai wire protocol plain and streamed) {
  mock_llm mock{"scenarios.yaml"};
  for (bool stream : {false, true}) {
    temp_dir dir{"keel-providers"};
    node_process node{
      dir.str(), node_yaml(dir, openai("gpt", mock.base_url(), stream), "gpt")};
    auto client = connect_client(node.address());
    auto t = run_turn(*client, "t", "m1", "hello there");
    CAF_CHECK_EQUAL(t.outcome["type"], "reply");
    CAF_CHECK_EQUAL(t.outcome["text"], "echo: hello there");
    CAF_CHECK_EQUAL(t.outcome["provider"], "gpt");
    if (stream) {
      // mock-llm streams 8 characters per event: deltas in order add up to
      // the reply.
      CAF_REQUIRE_GREATER(t.deltas.size(), 1u);
      std::string joined;
      for (auto& d : t.deltas) {
        CAF_CHECK_EQUAL(d["attempt"], 1);
        joined += d["text"].get<std::string>();
      }
      CAF_CHECK_EQUAL(joined, "echo: hello there");
    } else {
      CAF_CHECK(t.deltas.empty());
    }
    // The context goes back to the provider: a second turn works too.
    auto t2 = run_turn(*client, "t", "m2", "again");
    CAF_CHECK_EQUAL(t2.outcome["text"], "echo: again");
    // A call of a tool the thread lacks is answered to the model, which
    // then answers the user (the mock echoes the tool result).
    auto tool = run_turn(*client, "t", "m3", "[mock:tool] weather?");
    CAF_CHECK_EQUAL(tool.outcome["type"], "reply");
    CAF_CHECK_EQUAL(tool.outcome["text"],
                    "echo: [no tool named get_weather is available here]");
  }
}

CAF_TEST(answers come over the anthropic wire protocol streamed) {
  fault_llm_server server;
  temp_dir dir{"keel-providers"};
  node_process node{dir.str(),
                    node_yaml(dir,
                              "  - name: claude\n    kind: anthropic\n"
                              "    base_url: "
                                + server.base_url()
                                + "\n    model: claude-test\n"
                                  "    api_key: sk-ant-test\n",
                              "claude")};
  auto client = connect_client(node.address());
  auto t = run_turn(*client, "t", "m1", "streamed words arrive");
  CAF_CHECK_EQUAL(t.outcome["type"], "reply");
  CAF_CHECK_EQUAL(t.outcome["provider"], "claude");
  CAF_CHECK_EQUAL(t.outcome["text"], "echo: streamed words arrive");
  std::string joined;
  for (auto& d : t.deltas)
    joined += d["text"].get<std::string>();
  CAF_CHECK_EQUAL(joined, "echo: streamed words arrive");
  // Anthropic's overloaded error inside the stream is retried.
  auto t2 = run_turn(*client, "t", "m2", "[[fault:sse_error]] x");
  CAF_CHECK(has_state(t2, "stream_interrupted"));
  CAF_CHECK(has_state(t2, "retrying_provider"));
  CAF_CHECK_EQUAL(t2.outcome["code"], "provider_failed");
}

CAF_TEST(a broken stream is retried on its provider with a note to the model) {
  // The first answer of each wire breaks off mid-stream, the next is whole.
  fault_llm_server server;
  for (auto spec : {"truncate", "ok", "sse_error"})
    server.push(parse_fault(spec).value());
  temp_dir dir{"keel-providers"};
  node_process node{
    dir.str(),
    node_yaml(dir,
              openai("gpt", server.base_url(), true)
                + "  - name: claude\n    kind: anthropic\n    base_url: "
                + server.base_url()
                + "\n    model: claude-test\n    api_key: sk-ant-test\n",
              "gpt",
              "  - name: claude-pool\n    chain: [claude]\n"
              "    retry: {stream_delay: 10ms}\n")
      + "agents:\n  - name: claude-agent\n    pool: claude-pool\n"};
  auto client = connect_client(node.address());
  auto t = run_turn(*client, "t", "m1", "hello there");
  CAF_CHECK_EQUAL(t.outcome["type"], "reply");
  CAF_CHECK_EQUAL(t.outcome["provider"], "gpt");
  CAF_CHECK_EQUAL(t.outcome["text"], "echo: hello there");
  CAF_CHECK(has_state(t, "stream_interrupted"));
  auto retrying = t.statuses.back();
  CAF_CHECK_EQUAL(retrying["state"], "retrying_provider");
  auto detail = retrying["detail"].get<std::string>();
  KEEL_CHECK_CONTAINS(detail, "ended before [DONE]");
  KEEL_CHECK_CONTAINS(detail, "; retrying the stream from gpt in ");
  KEEL_CHECK_CONTAINS(detail, " ms (stream retry 1 of 2)");
  // The retry told the model what broke; the first call had no such note.
  auto calls = server.recorded();
  CAF_REQUIRE_EQUAL(calls.size(), 2u);
  CAF_CHECK_EQUAL(calls[0].body.find("cut off"), std::string::npos);
  auto retried = nlohmann::json::parse(calls[1].body);
  auto note = retried["messages"].back();
  CAF_CHECK_EQUAL(note["role"], "system");
  KEEL_CHECK_CONTAINS(note["content"].get<std::string>(),
                      "Your previous answer was cut off before it was "
                      "complete, and discarded (the stream from ");
  // Anthropic: an error event in the stream; the note joins `system`.
  auto c = run_turn(*client, "c", "m2", "hi claude", "claude-agent");
  CAF_CHECK_EQUAL(c.outcome["provider"], "claude");
  CAF_CHECK_EQUAL(c.outcome["text"], "echo: hi claude");
  calls = server.recorded();
  CAF_REQUIRE_EQUAL(calls.size(), 4u);
  auto system = nlohmann::json::parse(calls[3].body)["system"].dump();
  KEEL_CHECK_CONTAINS(system, "reported an error in the stream");
}

CAF_TEST(every error class of the api fails over or is retried as it should) {
  mock_llm primary{"scenarios.yaml"};
  mock_llm fallback{"ok.yaml"};
  temp_dir dir{"keel-providers"};
  node_process node{
    dir.str(), node_yaml(dir,
                         openai("primary", primary.base_url(), true)
                           + openai("fallback", fallback.base_url(), false),
                         "primary, fallback", no_cooldowns)};
  auto client = connect_client(node.address());
  struct expectation {
    std::string tag;
    bool retried; // retryable: retried on the primary before failing over
  };
  // Retryable classes first: auth, billing and model_not_found open the
  // breaker, and a provider with an open breaker is not retried.
  for (auto& [tag, retried] :
       std::vector<expectation>{{"429", true}, {"500", true}, {"503", true}}) {
    CAF_MESSAGE("[mock:" << tag << "]");
    auto text = "[mock:" + tag + "] hi";
    auto t = run_turn(*client, "t-" + tag, "m", text);
    CAF_CHECK_EQUAL(t.outcome["type"], "reply");
    CAF_CHECK_EQUAL(t.outcome["provider"], "fallback");
    CAF_CHECK_EQUAL(t.outcome["text"], "echo: " + text);
    CAF_CHECK(has_state(t, "failing_over"));
    CAF_CHECK_EQUAL(has_state(t, "retrying_provider"), retried);
    // The user is asked for a moment.
    for (auto& s : t.statuses)
      if (s["state"] == "failing_over")
        CAF_CHECK_EQUAL(s["text"], "Give me one more moment...");
  }
  auto health = provider_health(node.address());
  CAF_CHECK_EQUAL(health["primary"]["last_error_class"], "overloaded");
  CAF_CHECK_EQUAL(health["primary"]["status"], "degraded");
  CAF_CHECK_EQUAL(health["fallback"]["status"], "healthy");
  // 503, 503, then 200: retried on the primary, which answers.
  auto t = run_turn(*client, "t-flaky", "m", "[mock:flaky] hi");
  CAF_CHECK_EQUAL(t.outcome["provider"], "primary");
  CAF_CHECK_EQUAL(t.outcome["text"], "echo: [mock:flaky] hi");
  CAF_CHECK(has_state(t, "retrying_provider"));
  CAF_CHECK(!has_state(t, "failing_over"));
  // Provider-scoped failures: no retry, straight to the fallback.
  for (auto tag : {"401", "402", "404", "quota"}) {
    CAF_MESSAGE("[mock:" << tag << "]");
    auto text = "[mock:" + std::string{tag} + "] hi";
    auto t = run_turn(*client, "t-" + std::string{tag}, "m", text);
    CAF_CHECK_EQUAL(t.outcome["provider"], "fallback");
    CAF_CHECK_EQUAL(t.outcome["text"], "echo: " + text);
    CAF_CHECK(has_state(t, "failing_over"));
    CAF_CHECK(!has_state(t, "retrying_provider"));
  }
  health = provider_health(node.address());
  CAF_CHECK_EQUAL(health["primary"]["last_error_class"], "billing");
  CAF_CHECK_EQUAL(health["primary"]["status"], "unhealthy");
  // The times as RFC 3339 in UTC; null for what never happened.
  auto rfc3339 = [](const nlohmann::json& x) {
    auto text = x.is_string() ? x.get<std::string>() : std::string{};
    return text.size() == 24 && text[10] == 'T' && text.back() == 'Z';
  };
  auto first = health["primary"];
  CAF_CHECK(rfc3339(first["last_failure_at"]));
  CAF_CHECK(rfc3339(first["last_success_at"])); // The flaky turn.
  CAF_CHECK(rfc3339(first["circuit_open_until"]));
  CAF_CHECK_GREATER(first["consecutive_failures"].get<int>(), 0);
  auto second = health["fallback"];
  CAF_CHECK(second["last_failure_at"].is_null());
  CAF_CHECK(second["circuit_open_until"].is_null());
}

CAF_TEST(transport faults fail over and the thread hears of a cut stream) {
  fault_llm_server faulty;
  mock_llm fallback{"ok.yaml"};
  temp_dir dir{"keel-providers"};
  auto timeouts = "    first_byte_timeout: 500ms\n    total_timeout: 1s\n";
  auto dead = "http://127.0.0.1:" + std::to_string(closed_port());
  node_process node{
    dir.str(), node_yaml(dir,
                         openai("faulty", faulty.base_url(), true, timeouts)
                           + openai("fallback", fallback.base_url(), false),
                         "faulty, fallback", no_cooldowns)};
  auto client = connect_client(node.address());
  enum cut_t { whole, cut, either };
  struct expectation {
    std::string fault;
    cut_t streamed; // whether text reached the thread before the failure
  };
  for (auto& [fault, streamed] :
       std::vector<expectation>{{"reset", either},
                                {"drop", whole},
                                {"hang", whole},
                                {"malformed", either},
                                {"truncate", cut},
                                {"sse_error", cut},
                                {"drip=300ms", cut}}) {
    CAF_MESSAGE("[[fault:" << fault << "]]");
    auto text = "[[fault:" + fault + "]] hi";
    auto t = run_turn(*client, "t", "m-" + fault, text);
    // Text of a cut attempt never passes for the answer: the reply is the
    // fallback's, whole.
    CAF_CHECK_EQUAL(t.outcome["type"], "reply");
    CAF_CHECK_EQUAL(t.outcome["provider"], "fallback");
    CAF_CHECK_EQUAL(t.outcome["text"], "echo: " + text);
    if (streamed != either)
      CAF_CHECK_EQUAL(has_state(t, "stream_interrupted"), streamed == cut);
    if (streamed == cut)
      CAF_CHECK(!t.deltas.empty());
  }
  // The faulty server still works for plain requests afterwards.
  auto ok = run_turn(*client, "t", "m-ok", "fine now");
  CAF_CHECK_EQUAL(ok.outcome["provider"], "faulty");
  CAF_CHECK_EQUAL(ok.outcome["text"], "echo: fine now");
  // A refused connection: a provider on a closed port.
  node.stop();
  temp_dir dir2{"keel-providers"};
  node_process node2{
    dir2.str(), node_yaml(dir2,
                          openai("dead", dead, false)
                            + openai("fallback", fallback.base_url(), false),
                          "dead, fallback", no_cooldowns)};
  auto client2 = connect_client(node2.address());
  auto t = run_turn(*client2, "t", "m1", "anyone there");
  CAF_CHECK_EQUAL(t.outcome["provider"], "fallback");
  auto health = provider_health(node2.address());
  CAF_CHECK_EQUAL(health["dead"]["last_error_class"], "unknown");
  CAF_CHECK_NOT_EQUAL(
    health["dead"]["last_error"].get<std::string>().find("refused"),
    std::string::npos);
}

CAF_TEST(with no provider left the thread gets a descriptive error) {
  fault_llm_server faulty;
  temp_dir dir{"keel-providers"};
  node_process node{dir.str(),
                    node_yaml(dir,
                              openai("only", faulty.base_url(), false,
                                     "    first_byte_timeout: 300ms\n"),
                              "only", no_cooldowns)};
  auto client = connect_client(node.address());
  auto failed = run_turn(*client, "t", "m1", "[[fault:malformed]] x");
  CAF_CHECK_EQUAL(failed.outcome["type"], "error");
  CAF_CHECK_EQUAL(failed.outcome["code"], "provider_failed");
  CAF_CHECK_EQUAL(failed.outcome["message"],
                  with_owner_contact(turn_errors::provider_failed, ""));
  auto slow = run_turn(*client, "t", "m2", "[[fault:hang]] x");
  CAF_CHECK_EQUAL(slow.outcome["code"], "provider_timeout");
  CAF_CHECK_EQUAL(slow.outcome["message"], turn_errors::provider_timeout);
  faulty.set_default(parse_fault("status=400").value());
  auto rejected = run_turn(*client, "t", "m3", "x");
  CAF_CHECK_EQUAL(rejected.outcome["code"], "provider_rejected");
  faulty.set_default(parse_fault("ok").value());
  // The node keeps answering.
  auto ok = run_turn(*client, "t", "m4", "and now");
  CAF_CHECK_EQUAL(ok.outcome["type"], "reply");
  CAF_CHECK_EQUAL(ok.outcome["text"], "echo: and now");
}

CAF_TEST(fatal provider failures tell the user why and whom to contact) {
  fault_llm_server faulty;
  temp_dir dir{"keel-providers"};
  node_process node{
    dir.str(),
    node_yaml(dir, openai("only", faulty.base_url(), false), "only",
              no_cooldowns + "owner:\n  contact: ops@example.com\n")};
  auto client = connect_client(node.address());
  faulty.set_default(parse_fault("status=503").value());
  auto down = run_turn(*client, "t", "m0", "x");
  CAF_CHECK_EQUAL(down.outcome["code"], "provider_failed");
  KEEL_CHECK_CONTAINS(down.outcome["message"].get<std::string>(),
                      "or contact ops@example.com directly.");
  // While the pool retried (before the fatal classes below open the
  // breaker, which no retry passes), the user was asked to wait, in words.
  auto retrying
    = std::find_if(down.statuses.begin(), down.statuses.end(),
                   [](auto& s) { return s["state"] == "retrying_provider"; });
  CAF_REQUIRE(retrying != down.statuses.end());
  CAF_CHECK_EQUAL((*retrying)["text"],
                  "Just a moment while I think about that...");
  faulty.set_default(parse_fault("status=402").value());
  auto broke = run_turn(*client, "t", "m1", "x");
  CAF_CHECK_EQUAL(broke.outcome["code"], "credits_exhausted");
  CAF_CHECK_EQUAL(broke.outcome["message"],
                  with_owner_contact(turn_errors::credits_exhausted,
                                     "ops@example.com"));
  KEEL_CHECK_CONTAINS(broke.outcome["message"].get<std::string>(),
                      "please contact ops@example.com.");
  faulty.set_default(parse_fault("status=401").value());
  auto unset = run_turn(*client, "t", "m2", "x");
  CAF_CHECK_EQUAL(unset.outcome["code"], "provider_unauthorized");
  CAF_CHECK_EQUAL(unset.outcome["message"], turn_errors::provider_unauthorized);
  // The history keeps the same text and code.
  auto log = read_history(*client, "t");
  CAF_REQUIRE(log);
  CAF_CHECK_EQUAL(count_text(*log, "error", "thinking budget"), 1u);
}

CAF_TEST(cooldowns survive a kill of the node and keelctl shows them) {
  mock_llm primary{"scenarios.yaml"};
  mock_llm fallback{"ok.yaml"};
  temp_dir dir{"keel-providers"};
  node_process node{
    dir.str(), node_yaml(dir,
                         openai("primary", primary.base_url(), false)
                           + openai("fallback", fallback.base_url(), false),
                         "primary, fallback")};
  auto client = connect_client(node.address());
  auto t = run_turn(*client, "t", "m1", "[mock:401] hi");
  CAF_CHECK_EQUAL(t.outcome["provider"], "fallback");
  client.reset();
  node.kill9();
  node.start();
  // The restarted router restores the health from RocksDB as it starts.
  std::map<std::string, nlohmann::json> health;
  CAF_CHECK(poll_until(
    [&] {
      health = provider_health(node.address());
      return health["primary"]["status"] == "unhealthy";
    },
    10s));
  CAF_CHECK_EQUAL(health["primary"]["status"], "unhealthy");
  CAF_CHECK_EQUAL(health["primary"]["breaker"], "open");
  CAF_CHECK_EQUAL(health["primary"]["last_error_class"], "auth");
  CAF_CHECK_GREATER(health["primary"]["cooldown_remaining_ms"].get<int64_t>(),
                    9 * 60 * 1000);
  // Still cooling down: skipped without a call (a plain message would work
  // at the primary).
  client = connect_client(node.address());
  auto t2 = run_turn(*client, "t", "m2", "plain");
  CAF_CHECK_EQUAL(t2.outcome["provider"], "fallback");
  health = provider_health(node.address());
  CAF_MESSAGE("health after the restart: " << health["primary"].dump());
  CAF_CHECK_EQUAL(health["primary"]["calls"], 0);
  auto addr = node.address();
  auto out = run_command({tool_binary("keelctl"), "providers", "--node",
                          addr.host + ":" + std::to_string(addr.port)});
  CAF_CHECK_EQUAL(out.exit_code, 0);
  CAF_CHECK_NOT_EQUAL(out.out.find("primary"), std::string::npos);
  CAF_CHECK_NOT_EQUAL(out.out.find("unhealthy"), std::string::npos);
  CAF_CHECK_NOT_EQUAL(out.out.find("last error (auth) at 20"),
                      std::string::npos);
}
