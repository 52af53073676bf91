#define CAF_SUITE config_agents

// The `agents` section: each agent over the `threads` defaults, the pools
// made for `models` and `execution`, and the errors naming what is wrong.

#include "keel/config.hpp"

#include <caf/test/unit_test.hpp>

#include "text_checks.hpp"

#include <string>

using namespace keel;
using namespace std::chrono_literals;

namespace {

caf::expected<node_config> parse(const std::string& yaml) {
  return parse_config(yaml, "node.yaml", [](const std::string&) {
    return std::optional<std::string>{};
  });
}

std::string error_of(const std::string& yaml) {
  auto result = parse(yaml);
  if (result)
    return "<parsed without error>";
  return error_message(result.error());
}

/// Two providers, a pool of them and two tools: what the agents below use.
const std::string base = R"(
providers:
  - {name: fast, kind: echo}
  - {name: smart, kind: echo}
pools:
  - name: default
    chain: [fast, smart]
    max_attempts: 2
    tools: [shell]
tools:
  - {name: shell, description: Runs a command., command: ["true"]}
  - {name: today, description: The date., command: [date]}
threads:
  system_prompt: You help.
  tools: [today]
  turn_timeout: 3m
  guard: {max_tool_calls: 50, max_events: 70}
)";

} // namespace

CAF_TEST(a node without agents has the default agent built from threads) {
  auto cfg = parse(base);
  CAF_REQUIRE(cfg);
  CAF_CHECK(cfg->agents.empty());
  auto agents = agents_of(*cfg);
  CAF_REQUIRE_EQUAL(agents.size(), 1u);
  auto& a = agents.front();
  CAF_CHECK_EQUAL(a.name, "default");
  CAF_CHECK_EQUAL(a.system_prompt, "You help.");
  CAF_CHECK_EQUAL(a.pool, "default");
  CAF_CHECK_EQUAL(a.tools, std::vector<std::string>{"today"});
  CAF_CHECK_EQUAL(a.turn_timeout, caf::timespan{3min});
  CAF_CHECK_EQUAL(cfg->threads.default_agent, "default");
  CAF_CHECK_EQUAL(cfg->threads.system_agent, "");
}

CAF_TEST(an agent takes the threads defaults key by key) {
  auto cfg = parse(base + R"(
agents:
  - name: coder.v2
    description: Writes code.
    prompt_files: [identity.md, skills.md]
    tools: [shell]
    deny: [today]
    guard: {max_tool_calls: 5}
    agents: {max_children: 2}
    status: paused
)");
  CAF_REQUIRE(cfg);
  auto& a = cfg->agents.at(0);
  CAF_CHECK_EQUAL(a.name, "coder.v2");
  CAF_CHECK_EQUAL(a.description, "Writes code.");
  CAF_CHECK_EQUAL(a.system_prompt, "You help.");
  CAF_CHECK_EQUAL(a.prompt_files,
                  (std::vector<std::string>{"identity.md", "skills.md"}));
  CAF_CHECK_EQUAL(a.pool, "default");
  CAF_CHECK_EQUAL(a.tools, std::vector<std::string>{"shell"});
  CAF_CHECK_EQUAL(a.agent_tools, std::vector<std::string>{"shell"});
  CAF_CHECK_EQUAL(a.deny, std::vector<std::string>{"today"});
  CAF_CHECK_EQUAL(a.guard.max_tool_calls, 5u);
  CAF_CHECK_EQUAL(a.guard.max_events, 70u);
  CAF_CHECK_EQUAL(a.agents.max_children, 2u);
  CAF_CHECK_EQUAL(a.agents.max_depth, agent_limits{}.max_depth);
  CAF_CHECK(a.status == agent_status::paused);
  CAF_CHECK_EQUAL(agents_of(*cfg).size(), 2u);
  CAF_CHECK_EQUAL(agents_of(*cfg).back().name, "default");
}

CAF_TEST(models and execution make a pool of the agent) {
  auto cfg = parse(base + R"(
agents:
  - name: triage
    models: [smart, fast]
    execution:
      timeout: 30s
      retry: {max_attempts: 1, initial_backoff: 200ms, max_backoff: 2s}
      breaker: {failure_threshold: 7, cooldown: 45s}
  - name: plain
    execution: {timeout: 10s}
)");
  CAF_REQUIRE(cfg);
  auto& triage = cfg->agents.at(0);
  CAF_CHECK_EQUAL(triage.pool, "agent:triage");
  CAF_CHECK_EQUAL(triage.turn_timeout, caf::timespan{30s});
  auto pool = cfg->find_pool("agent:triage");
  CAF_REQUIRE(pool != nullptr);
  CAF_CHECK_EQUAL(pool->chain, (std::vector<std::string>{"smart", "fast"}));
  CAF_CHECK_EQUAL(pool->retry.max_attempts, 1u);
  CAF_CHECK_EQUAL(pool->retry.base_delay, 200ms);
  CAF_CHECK_EQUAL(pool->retry.max_delay, 2s);
  CAF_CHECK_EQUAL(pool->breaker.failure_threshold, 7u);
  CAF_CHECK_EQUAL(pool->breaker.cooldowns.get(error_class::rate_limit), 45s);
  // A class without a cooldown keeps none.
  CAF_CHECK_EQUAL(pool->breaker.cooldowns.get(error_class::invalid_request),
                  0ms);
  // The pool's tools come along.
  CAF_CHECK_EQUAL(pool->tools, std::vector<std::string>{"shell"});
  // A timeout alone needs no pool of its own.
  CAF_CHECK_EQUAL(cfg->agents.at(1).pool, "default");
  CAF_CHECK_EQUAL(cfg->pools.size(), 2u);
}

CAF_TEST(threads name the default and the system agent) {
  auto cfg = parse(R"(
providers: [{name: echo, kind: echo}]
threads: {default_agent: support, system_agent: concierge}
agents:
  - {name: support, system_prompt: You support.}
  - {name: concierge, system_prompt: You route.}
)");
  CAF_REQUIRE(cfg);
  CAF_CHECK_EQUAL(cfg->threads.default_agent, "support");
  CAF_CHECK_EQUAL(cfg->threads.system_agent, "concierge");
  // The agent built from threads is there too, addressable as `default`.
  CAF_CHECK_EQUAL(agents_of(*cfg).size(), 3u);
}

CAF_TEST(bad agents are errors naming the key) {
  auto check = [](const std::string& agents, const std::string& expected) {
    KEEL_CHECK_CONTAINS(error_of(base + agents), expected);
  };
  check("agents:\n  - {name: a b}\n",
        "agents[0].name: expected 1 to 64 characters");
  check("agents:\n  - {description: x}\n",
        "agents[0].name: missing required key");
  check("agents:\n  - {name: a}\n  - {name: a}\n",
        "duplicate agent name \"a\"");
  check("agents:\n  - {name: a, pool: nope}\n", "unknown pool \"nope\"");
  check("agents:\n  - {name: a, pool: default, models: [fast]}\n",
        "agents[0].models: set only one of pool and models");
  check("agents:\n  - {name: a, models: [fast, slow]}\n",
        "agents[0].models[1]: unknown provider \"slow\"");
  check("agents:\n  - {name: a, models: []}\n",
        "expected a non-empty list of provider names");
  check("agents:\n  - {name: a, tools: [nope]}\n",
        "agents[0].tools[0]: unknown tool \"nope\"");
  check("agents:\n  - {name: a, deny: [nope]}\n",
        "agents[0].deny[0]: unknown tool \"nope\"");
  check("agents:\n  - {name: a, spawns: [b]}\n",
        "agents[0].spawns[0]: unknown agent \"b\"");
  check("agents:\n  - {name: a, status: sleeping}\n",
        "unknown value \"sleeping\"");
  check("agents:\n  - {name: a, execution: {retry: {tries: 2}}}\n",
        "agents[0].execution.retry.tries: unknown key");
  check("agents:\n  - {name: a, execution: {retry: {initial_backoff: 5s, "
        "max_backoff: 1s}}}\n",
        "agents[0].execution.retry.max_backoff: expected at least");
  check("agents:\n  - {name: a, guard: {max_tool_calls: 0}}\n",
        "agents[0].guard.max_tool_calls");
}

CAF_TEST(threads name only agents that exist) {
  KEEL_CHECK_CONTAINS(error_of("threads: {default_agent: nobody}\n"),
                      "threads.default_agent: unknown agent \"nobody\" "
                      "(expected default)");
  KEEL_CHECK_CONTAINS(
    error_of("agents: [{name: a}]\nthreads: {system_agent: b}\n"),
    "threads.system_agent: unknown agent \"b\"");
}

CAF_TEST(pool names of agents are reserved) {
  KEEL_CHECK_CONTAINS(error_of(R"(
providers: [{name: echo, kind: echo}]
pools:
  - {name: default, chain: [echo]}
  - {name: "agent:x", chain: [echo]}
)"),
                      "pools[1].name: pool names starting with agent:");
}
