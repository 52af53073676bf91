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

namespace {

/// An openai and an anthropic provider with parameters of their own.
const std::string http_base = R"(
providers:
  - name: gpt
    kind: openai
    base_url: http://127.0.0.1:1
    model: gpt-x
    temperature: 0.7
    stop: [END]
    max_output_tokens: 2000
    token_limit_field: max_tokens
    extra_body: {seed: 7, metadata: {team: support}}
  - {name: claude, kind: anthropic, base_url: "http://127.0.0.1:2",
     model: claude-x, max_tokens: 500}
pools:
  - {name: default, chain: [gpt]}
  - {name: both, chain: [gpt, claude]}
)";

} // namespace

CAF_TEST(providers and agents set model parameters) {
  auto cfg = parse(http_base + R"(
agents:
  - name: coder
    pool: both
    model: {temperature: 0.1, reasoning_effort: high,
            extra_body: {seed: null}}
)");
  CAF_REQUIRE(cfg);
  auto gpt = cfg->find_provider("gpt");
  CAF_REQUIRE(gpt != nullptr);
  CAF_CHECK_EQUAL(gpt->params.temperature, 0.7);
  CAF_CHECK_EQUAL(gpt->params.top_p, unset_param);
  CAF_CHECK_EQUAL(gpt->params.stop, std::vector<std::string>{"END"});
  CAF_CHECK_EQUAL(gpt->params.max_output_tokens, 2000u);
  CAF_CHECK_EQUAL(gpt->token_limit_field, "max_tokens");
  CAF_CHECK_EQUAL(gpt->params.extra_body,
                  R"({"seed":7,"metadata":{"team":"support"}})");
  // max_tokens is the older spelling of the same limit.
  CAF_CHECK_EQUAL(cfg->find_provider("claude")->params.max_output_tokens, 500u);
  CAF_CHECK_EQUAL(cfg->find_provider("claude")->token_limit_field,
                  "max_completion_tokens");
  auto coder = cfg->find_agent("coder");
  CAF_REQUIRE(coder != nullptr);
  CAF_CHECK_EQUAL(coder->params.temperature, 0.1);
  CAF_CHECK_EQUAL(coder->params.max_output_tokens, 0u); // Its provider's.
  // Over the provider's, key by key; a null still removes the field.
  auto sent = overlay(gpt->params, coder->params);
  CAF_CHECK_EQUAL(sent.temperature, 0.1);
  CAF_CHECK_EQUAL(sent.stop, std::vector<std::string>{"END"});
  CAF_CHECK_EQUAL(sent.reasoning_effort, "high");
  CAF_CHECK_EQUAL(sent.extra_body,
                  R"({"seed":null,"metadata":{"team":"support"}})");
  CAF_CHECK_EQUAL(output_token_limit(gpt->params, coder->params), 2000u);
  CAF_CHECK_EQUAL(output_token_limit(model_params{}, model_params{}), 1024u);
}

CAF_TEST(bad model parameters are errors naming the key) {
  struct row {
    std::string yaml;
    std::string expected;
  };
  std::vector<row> rows{
    {"providers:\n  - {name: e, kind: echo, temperature: 1}\n",
     "providers[0].temperature: only openai and anthropic providers take "
     "temperature"},
    {http_base + "agents:\n  - {name: a, model: {temperature: 2.5}}\n",
     "agents[0].model.temperature"},
    {http_base + "agents:\n  - {name: a, model: {top_p: -0.1}}\n",
     "agents[0].model.top_p"},
    {http_base + "agents:\n  - {name: a, model: {stop: [\"\"]}}\n",
     "agents[0].model.stop[0]"},
    {http_base + "agents:\n  - {name: a, model: {reasoning_effort: max}}\n",
     "unknown value \"max\""},
    {http_base + "agents:\n  - {name: a, model: {extra_body: [1]}}\n",
     "agents[0].model.extra_body: expected a mapping of request fields"},
    {http_base + "agents:\n  - {name: a, model: {seed: 1}}\n",
     "agents[0].model.seed: unknown key"},
    {http_base
       + "agents:\n  - {name: a, pool: both, model: {reasoning_effort: "
         "none}}\n",
     "provider \"claude\" is anthropic, whose effort is low, medium or high"},
    {"providers:\n  - {name: g, kind: openai, base_url: \"http://x\", "
     "model: m, max_tokens: 5, max_output_tokens: 6}\n",
     "set only one of max_output_tokens and max_tokens"},
    {"providers:\n  - {name: g, kind: openai, base_url: \"http://x\", "
     "model: m, token_limit_field: max_length}\n",
     "providers[0].token_limit_field"},
  };
  for (auto& x : rows) {
    CAF_MESSAGE(x.expected);
    KEEL_CHECK_CONTAINS(error_of(x.yaml), x.expected);
  }
}
