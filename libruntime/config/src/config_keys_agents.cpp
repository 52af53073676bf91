// The key tables of `agents[]` and its `execution` (see config_keys.cpp).

#include "config_schema.hpp"

namespace keel::config_detail {

const key_table<agent_config>& agent_definition_keys() {
  static const auto table = [] {
    using a = agent_config;
    key_table<a> t;
    t.dedicated("name", "agent name, **required**", "—",
                "Unique among agents: 1-64 of A-Z, a-z, 0-9, '.', '_', '-'.")
      .string("description", &a::description, "What the agent is for.")
      .string("system_prompt", &a::system_prompt,
              "Placed before the context of its turns.")
      .derived("`threads.system_prompt`")
      .dedicated("prompt_files", "list of file paths", "`[]`",
                 "Files read for every turn, placed after the prompt.")
      .name("pool", &a::pool, "The provider pool answering its threads.")
      .derived("`threads.pool`")
      .dedicated("models", "non-empty list of provider names", "—",
                 "Its own failover chain instead of a pool's.")
      .names("tools", &a::tools, "a list of tool names",
             "Tools of its threads, on top of their pool's.")
      .derived("`threads.tools`, `threads.agent_tools`")
      .names("deny", &a::deny, "a list of tool names",
             "Tools its threads never get, their pool's included.")
      .names("spawns", &a::spawns, "a list of agent names",
             "Agents its threads may spawn children of.")
      .container("guard", "Keys of threads.guard, each overriding it.")
      .container("agents", "Keys of threads.agents, each overriding it.")
      .container("model", "Model parameters over its providers' own.")
      .container("execution", "Its turn timeout, retries and breakers.")
      .choice("status", agent_status_names, &a::status,
              "paused and archived answer with the offline text.");
    return t;
  }();
  return table;
}

const key_table<agent_config>& agent_execution_keys() {
  static const auto table = [] {
    key_table<agent_config> t;
    t.duration("timeout", positive_duration, &agent_config::turn_timeout,
               "A turn taking longer ends with an error.")
      .derived("`threads.turn_timeout`")
      .container("retry", "Attempts and backoff, over its pool's.")
      .container("breaker", "The breakers of its providers, over its pool's.");
    return t;
  }();
  return table;
}

const key_table<pool_config>& agent_retry_keys() {
  static const auto table = [] {
    key_table<pool_config> t;
    auto retry = [](auto member) {
      return [member](auto& x) -> auto& {
        return x.retry.*member;
      };
    };
    t.integer("max_attempts", 1, 100, retry(&retry_policy::max_attempts),
              "Attempts per provider before moving to the next.")
      .derived("its pool's")
      .duration("initial_backoff", duration_bounds{},
                retry(&retry_policy::base_delay),
                "Delay after the first failed attempt.")
      .derived("its pool's")
      .duration("max_backoff", duration_bounds{},
                retry(&retry_policy::max_delay),
                "Upper bound of a computed delay.")
      .derived("its pool's");
    return t;
  }();
  return table;
}

namespace {

// `cooldown` replaces the cooldown of every error class that has one: how
// long a provider whose breaker opened stays skipped.
void read_cooldown(reader& r, const map_reader& m, const std::string& key,
                   const YAML::Node& x, breaker_config& out) {
  auto value = r.read_millis(x, m.path(key), false);
  for (size_t i = 0; i < error_class_count; ++i) {
    auto cls = static_cast<error_class>(i);
    if (out.cooldowns.get(cls).count() > 0)
      out.cooldowns.set(cls, value);
  }
}

} // namespace

const key_table<breaker_config>& agent_breaker_keys() {
  static const auto table = [] {
    key_table<breaker_config> t;
    t.integer("failure_threshold", 1, 1000, &breaker_config::failure_threshold,
              "Consecutive failures that open a breaker.")
      .derived("its pool's")
      .custom("cooldown", "duration >= 0", read_cooldown, "its pool's",
              "How long an open breaker skips its provider.");
    return t;
  }();
  return table;
}

} // namespace keel::config_detail
