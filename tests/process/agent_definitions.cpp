#define CAF_SUITE agent_definitions

// Named agents end to end on a real keel-node: two agents answering side by
// side with their own prompts, chains and tools (over the OpenAI wire
// protocol, against the fault-injecting LLM server, which records what each
// request carried), a child spawned as another agent, an unknown agent
// answered by the system agent, a paused agent, a config change applied
// after a restart, and a recovered turn whose tool was removed.

#include <fstream>

#include <caf/test/unit_test.hpp>

#include "keel/tools/fault_llm_server.hpp"
#include "node_client.hpp"
#include "temp_dir.hpp"
#include "text_checks.hpp"

#include "keel/protocol.hpp"

using namespace keel;
using namespace keel::test;
using namespace std::chrono_literals;
using nlohmann::json;

namespace {

/// An openai provider on `base_url`, not streamed (its answers report
/// their usage: 10 tokens in, 10 out).
std::string openai(const std::string& name, const std::string& base_url,
                   const std::string& model) {
  return "  - name: " + name + "\n    kind: openai\n    base_url: " + base_url
         + "\n    model: " + model + "\n    api_key: sk-test\n"
         + "    stream: false\n";
}

/// Support and coder on the LLM server, each with its own chain, prompt
/// and tools, coder with model parameters over its provider's; concierge
/// (the system agent) too.
std::string two_agents_yaml(const temp_dir& dir, const std::string& base_url,
                            const std::string& support_prompt
                            = "You are the support desk.") {
  return "node:\n  name: agents-defs\n  data_dir: " + dir.str()
         + "/data\ngateway:\n  port: 0\nlogging:\n  level: warn\n"
         + "providers:\n" + openai("help-llm", base_url, "help-model")
         + openai("code-llm", base_url, "code-model")
         + "    temperature: 0.7\n    max_output_tokens: 333\n"
         + "pools:\n  - name: default\n    chain: [help-llm]\n"
         + "tools:\n  - {name: today, description: The date., command: "
           "[date, \"+%Y\"]}\n"
         + "threads:\n  default_agent: support\n  system_agent: concierge\n"
         + "agents:\n  - name: support\n    system_prompt: " + support_prompt
         + "\n    prompt_files: [" + dir.str() + "/identity.md, " + dir.str()
         + "/missing.md]\n"
         + "  - name: coder\n    system_prompt: You write code.\n"
           "    models: [code-llm]\n    tools: [today]\n"
           "    model: {temperature: 0.2, stop: [END]}\n"
         + "  - name: concierge\n    system_prompt: You route people.\n"
         + storage_yaml(dir.str() + "/data");
}

void write_file(const std::string& path, const std::string& text) {
  std::ofstream out{path, std::ios::trunc};
  out << text;
}

/// The JSON bodies of the requests the server got, in order.
std::vector<json> bodies(const fault_llm::fault_llm_server& server) {
  std::vector<json> result;
  for (auto& r : server.recorded())
    result.push_back(json::parse(r.body));
  return result;
}

/// The system message of a chat completions request body.
std::string system_of(const json& body) {
  for (auto& m : body["messages"])
    if (m["role"] == "system")
      return m["content"].get<std::string>();
  return {};
}

/// Whether the request offered tool `name`.
bool offers(const json& body, const std::string& name) {
  for (auto& t : body.value("tools", json::array()))
    if (t["function"]["name"] == name)
      return true;
  return false;
}

/// How often `part` occurs in `text`.
size_t occurrences(const std::string& text, const std::string& part) {
  size_t n = 0;
  for (auto i = text.find(part); i != std::string::npos;
       i = text.find(part, i + part.size()))
    ++n;
  return n;
}

/// Whether any message of the request contains `text`.
bool mentions(const json& body, const std::string& text) {
  return body["messages"].dump().find(text) != std::string::npos;
}

struct client {
  explicit client(const endpoint& ep) : ws(connect_client(ep)) {
    // nop
  }

  std::unique_ptr<ws_client> ws;

  /// Sends `text` to `thread` (naming `agent` unless empty) and returns
  /// the first frame answering it: its error if refused, else its outcome.
  json send(const std::string& thread, const std::string& id,
            const std::string& text, const std::string& agent = {}) {
    CAF_REQUIRE(!ws->send_text(protocol::send_frame(thread, id, text, agent)));
    auto outcome = receive_until(
      *ws,
      [&](auto& j) {
        if (j.value("id", "") != id)
          return false;
        return j["type"] == "reply" || j["type"] == "error";
      },
      30s);
    CAF_REQUIRE(outcome);
    return *outcome;
  }

  json request(const std::string& frame, const std::string& id) {
    CAF_REQUIRE(!ws->send_text(frame));
    auto answer = receive_until(*ws, [&](auto& j) {
      return j["type"] != "status" && j["type"] != "delta"
             && j.value("id", "") == id;
    });
    CAF_REQUIRE(answer);
    return *answer;
  }
};

/// The agent of each thread, as GET /api/v1/agents says.
std::map<std::string, std::string> agents_by_thread(const endpoint& ep) {
  auto res = api_call(ep, "GET", "/api/v1/agents");
  CAF_REQUIRE(res);
  std::map<std::string, std::string> result;
  for (auto& x : (*res)["agents"])
    result[x["thread"]] = x.value("agent", "");
  return result;
}

/// An agent's entry of GET /api/v1/agent-definitions.
json definition(const endpoint& ep, const std::string& name) {
  auto res = api_call(ep, "GET", "/api/v1/agent-definitions");
  CAF_REQUIRE(res);
  for (auto& x : (*res)["agents"])
    if (x["name"] == name)
      return x;
  return json{};
}

} // namespace

CAF_TEST(two agents answer side by side with their own prompts and chains) {
  temp_dir dir{"keel-agent-defs"};
  fault_llm::fault_llm_server server;
  write_file(dir.str() + "/identity.md", "I am Ada from Example Ltd.");
  node_process node{dir.str(), two_agents_yaml(dir, server.base_url())};
  client c{node.address()};
  auto support = c.send("t-help", "m1", "my order is late");
  auto coder = c.send("t-code", "m2", "write a loop", "coder");
  CAF_CHECK_EQUAL(support["type"], "reply");
  CAF_CHECK_EQUAL(support["provider"], "help-llm");
  CAF_CHECK_EQUAL(coder["type"], "reply");
  CAF_CHECK_EQUAL(coder["provider"], "code-llm");
  // The usage the server reported, in the reply frame.
  CAF_CHECK_EQUAL(coder["usage"]["input_tokens"], 10);
  CAF_CHECK_EQUAL(coder["usage"]["output_tokens"], 10);
  CAF_CHECK_EQUAL(coder["usage"]["estimated"], false);
  auto sent = bodies(server);
  CAF_REQUIRE_EQUAL(sent.size(), 2u);
  CAF_CHECK_EQUAL(sent[0]["model"], "help-model");
  CAF_CHECK_EQUAL(system_of(sent[0]),
                  "You are the support desk.\n\nI am Ada from Example Ltd.");
  CAF_CHECK(!offers(sent[0], "today"));
  CAF_CHECK_EQUAL(sent[1]["model"], "code-model");
  CAF_CHECK_EQUAL(system_of(sent[1]), "You write code.");
  CAF_CHECK(offers(sent[1], "today"));
  // Each call carries its provider's parameters, its agent's over them.
  CAF_CHECK(!sent[0].contains("temperature"));
  CAF_CHECK_EQUAL(sent[0]["max_completion_tokens"], 1024);
  CAF_CHECK_EQUAL(sent[1]["temperature"], 0.2);
  CAF_CHECK_EQUAL(sent[1]["max_completion_tokens"], 333);
  CAF_CHECK_EQUAL(sent[1]["stop"], json::array({"END"}));
  // The missing prompt file is logged once, not per turn.
  c.send("t-help", "m3", "still late");
  CAF_CHECK_EQUAL(occurrences(node.stderr_text(), "missing.md"), 1u);
  auto bound = agents_by_thread(node.admin_address());
  CAF_CHECK_EQUAL(bound["t-help"], "support");
  CAF_CHECK_EQUAL(bound["t-code"], "coder");
  // A thread keeps its agent: naming another is refused before the ack.
  auto refused = c.send("t-code", "m4", "help me", "support");
  CAF_CHECK_EQUAL(refused["type"], "error");
  CAF_CHECK_EQUAL(refused["code"], "agent_mismatch");
  CAF_CHECK(!refused.contains("reply_to"));
  // Usage per thread, per agent and on the node.
  auto usage = keelctl_at(node.admin_address(), {"usage", "t-help"});
  CAF_CHECK_EQUAL(usage.exit_code, 0);
  KEEL_CHECK_CONTAINS(usage.out, "thread t-help (agent support): 20 in, 20 "
                                 "out, 2 calls");
  auto listing = keelctl_at(node.admin_address(), {"agents"});
  KEEL_CHECK_CONTAINS(listing.out, "support (default)");
  KEEL_CHECK_CONTAINS(listing.out, "concierge (system)");
  auto coder_def = definition(node.admin_address(), "coder");
  CAF_CHECK_EQUAL(coder_def["stored_threads"], 1);
  auto scraped = http_request(node.admin_address(), "GET", "/metrics");
  CAF_REQUIRE(scraped);
  auto metrics = scraped->body;
  KEEL_CHECK_CONTAINS(metrics, "keel_tokens_total{agent=\"coder\",kind=\"input"
                               "\",provider=\"code-llm\"} 10");
}

CAF_TEST(an unknown agent is answered by the system agent) {
  temp_dir dir{"keel-agent-defs"};
  fault_llm::fault_llm_server server;
  write_file(dir.str() + "/identity.md", "I am Ada.");
  node_process node{dir.str(), two_agents_yaml(dir, server.base_url())};
  client c{node.address()};
  auto answer = c.send("t-lost", "m1", "hello", "billing");
  CAF_CHECK_EQUAL(answer["type"], "reply");
  auto sent = bodies(server);
  CAF_REQUIRE_EQUAL(sent.size(), 1u);
  CAF_CHECK_EQUAL(system_of(sent[0]), "You route people.");
  CAF_CHECK(mentions(sent[0], "asked for the agent \\\"billing\\\""));
  auto bound = agents_by_thread(node.admin_address());
  CAF_CHECK_EQUAL(bound["t-lost"], "concierge");
}

CAF_TEST(without a system agent an unknown agent is refused) {
  temp_dir dir{"keel-agent-defs"};
  node_process node{dir.str(),
                    slow_echo_yaml("agents-defs", dir.str() + "/data", "0s",
                                   "agents:\n  - {name: helper}\n")};
  client c{node.address()};
  auto refused = c.send("t1", "m1", "hi", "billing");
  CAF_CHECK_EQUAL(refused["type"], "error");
  CAF_CHECK_EQUAL(refused["code"], "unknown_agent");
  KEEL_CHECK_CONTAINS(refused["message"].get<std::string>(), "billing");
  // Nothing was stored: the thread does not exist.
  CAF_CHECK_EQUAL(agents_by_thread(node.admin_address()).count("t1"), 0u);
  auto ok = c.send("t1", "m2", "hi", "helper");
  CAF_CHECK_EQUAL(ok["type"], "reply");
  auto spawned = c.request(protocol::spawn_frame("t1", "t1.x", "s1", "nobody"),
                           "s1");
  CAF_CHECK_EQUAL(spawned["code"], "unknown_agent");
}

CAF_TEST(a child is spawned as another agent) {
  temp_dir dir{"keel-agent-defs"};
  auto yaml = "node:\n  name: agents-defs\n  data_dir: " + dir.str()
              + "/data\ngateway:\n  port: 0\nlogging:\n  level: warn\n"
                "providers:\n"
                "  - name: lead\n    kind: scripted\n    script:\n"
                "      - match: \"delegate\"\n        reply: \"delegating\"\n"
                "        tool:\n          name: spawn_agent\n"
                "          arguments: '{\"name\": \"w\", \"task\": \"count\", "
                "\"agent\": \"worker\"}'\n"
                "      - match: \"sneak\"\n        reply: \"sneaking\"\n"
                "        tool:\n          name: spawn_agent\n"
                "          arguments: '{\"name\": \"s\", \"task\": \"x\", "
                "\"agent\": \"other\"}'\n"
                "      - reply: \"lead: {input}\"\n"
                "  - name: work\n    kind: scripted\n    script:\n"
                "      - reply: \"worker: {input}\"\n"
                "pools:\n  - name: default\n    chain: [lead]\n"
                "agents:\n  - {name: boss, spawns: [worker]}\n"
                "  - {name: worker, models: [work]}\n  - {name: other}\n"
                "threads:\n  default_agent: boss\n"
              + storage_yaml(dir.str() + "/data");
  node_process node{dir.str(), yaml};
  client c{node.address()};
  c.send("t1", "m1", "delegate it");
  // The child answers as a worker, and its outcome comes back to t1.
  auto entries = [&] {
    auto deadline = std::chrono::steady_clock::now() + 20s;
    for (;;) {
      auto h = read_history(*c.ws, "t1.w");
      CAF_REQUIRE(h);
      if (count_text(*h, "reply", "worker: [parent t1] count") > 0
          || std::chrono::steady_clock::now() > deadline)
        return *h;
    }
  }();
  CAF_CHECK_EQUAL(count_text(entries, "reply", "worker: [parent t1] count"),
                  1u);
  auto bound = agents_by_thread(node.admin_address());
  CAF_CHECK_EQUAL(bound["t1.w"], "worker");
  // An agent its own does not list is refused, in the call's result.
  c.send("t1", "m2", "sneak one");
  auto h = read_history(*c.ws, "t1");
  CAF_REQUIRE(h);
  CAF_CHECK_EQUAL(count_text(*h, "reply",
                             "may not spawn agents of kind "
                             "other"),
                  1u);
  CAF_CHECK_EQUAL(agents_by_thread(node.admin_address()).count("t1.s"), 0u);
  // A client spawns children of any agent.
  auto spawned = c.request(protocol::spawn_frame("t1", "t1.o", "s1", "other"),
                           "s1");
  CAF_CHECK_EQUAL(spawned["type"], "spawned");
  bound = agents_by_thread(node.admin_address());
  CAF_CHECK_EQUAL(bound["t1.o"], "other");
}

CAF_TEST(a paused agent answers offline and its status survives a restart) {
  temp_dir dir{"keel-agent-defs"};
  node_process node{dir.str(),
                    slow_echo_yaml("agents-defs", dir.str() + "/data", "0s",
                                   "agents:\n  - {name: helper}\n"
                                   "owner:\n  contact: ops@example.com\n")};
  {
    client c{node.address()};
    auto first = c.send("t1", "m1", "hi", "helper");
    CAF_CHECK_EQUAL(first["type"], "reply");
    auto set = keelctl_at(node.admin_address(), {"agents", "helper", "paused"});
    CAF_CHECK_EQUAL(set.exit_code, 0);
    KEEL_CHECK_CONTAINS(set.out, "helper is paused");
    auto offline = c.send("t1", "m2", "are you there");
    CAF_CHECK_EQUAL(offline["code"], "agent_paused");
    CAF_CHECK_EQUAL(offline["message"],
                    "I'm currently offline. Please try again later or "
                    "contact ops@example.com.");
    // Other agents answer on.
    auto other = c.send("t2", "m3", "hi");
    CAF_CHECK_EQUAL(other["type"], "reply");
  }
  node.stop();
  node.start();
  client c{node.address()};
  auto helper = definition(node.admin_address(), "helper");
  CAF_CHECK_EQUAL(helper["status"], "paused");
  auto still = c.send("t1", "m4", "still there");
  CAF_CHECK_EQUAL(still["code"], "agent_paused");
  keelctl_at(node.admin_address(), {"agents", "helper", "active"});
  auto back = c.send("t1", "m5", "back?");
  CAF_CHECK_EQUAL(back["type"], "reply");
  // The stored messages are all in the history, answered.
  auto h = read_history(*c.ws, "t1");
  CAF_REQUIRE(h);
  CAF_CHECK_EQUAL(count_text(*h, "user", ""), 4u);
}

CAF_TEST(a config change applies after a restart) {
  temp_dir dir{"keel-agent-defs"};
  fault_llm::fault_llm_server server;
  write_file(dir.str() + "/identity.md", "I am Ada.");
  node_process node{dir.str(), two_agents_yaml(dir, server.base_url())};
  {
    client c{node.address()};
    c.send("t1", "m1", "hello");
  }
  node.stop();
  write_file(node.config_path(),
             two_agents_yaml(dir, server.base_url(), "You are the new desk."));
  write_file(dir.str() + "/identity.md", "I am Bea.");
  node.start();
  client c{node.address()};
  c.send("t1", "m2", "hello again");
  auto sent = bodies(server);
  CAF_REQUIRE_EQUAL(sent.size(), 2u);
  CAF_CHECK_EQUAL(system_of(sent[1]), "You are the new desk.\n\nI am Bea.");
}

CAF_TEST(a recovered turn whose tool was removed gets a result saying so) {
  temp_dir dir{"keel-agent-defs"};
  auto yaml = [&](bool with_tool) {
    return "node:\n  name: agents-defs\n  data_dir: " + dir.str()
           + "/data\ngateway:\n  port: 0\nlogging:\n  level: warn\n"
             "providers:\n  - name: s\n    kind: scripted\n    script:\n"
             "      - match: \"interrupted\"\n        reply: \"again\"\n"
             "        tool: {name: nap, arguments: '{}'}\n"
             "      - match: \"no tool named\"\n        reply: \"gave up\"\n"
             "      - reply: \"napping\"\n"
             "        tool: {name: nap, arguments: '{}'}\n"
             "pools:\n  - name: default\n    chain: [s]\n"
           + (with_tool ? "tools:\n  - {name: nap, description: Sleeps., "
                          "command: [sleep, \"30\"]}\n"
                          "agents:\n  - {name: napper, tools: [nap]}\n"
                        : "agents:\n  - {name: napper}\n")
           + "threads:\n  default_agent: napper\n"
           + storage_yaml(dir.str() + "/data");
  };
  node_process node{dir.str(), yaml(true)};
  {
    client c{node.address()};
    CAF_REQUIRE(!c.ws->send_text(protocol::send_frame("t1", "m1", "nap now")));
    // The call is committed (and the tool runs): the node dies.
    CAF_REQUIRE(receive_until(*c.ws, [](auto& j) {
      return j["type"] == "status" && j.value("detail", "") == "running nap";
    }));
  }
  node.kill9();
  write_file(node.config_path(), yaml(false));
  node.start();
  client c{node.address()};
  auto deadline = std::chrono::steady_clock::now() + 20s;
  json h;
  do {
    auto entries = read_history(*c.ws, "t1");
    CAF_REQUIRE(entries);
    h = *entries;
  } while (count_text(h, "reply", "gave up") == 0
           && std::chrono::steady_clock::now() < deadline);
  CAF_CHECK_EQUAL(count_text(h, "reply", "gave up"), 1u);
  CAF_CHECK_EQUAL(count_text(h, "tool", "no tool named nap"), 1u);
}
