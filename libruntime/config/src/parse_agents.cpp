// The reader of `agents`: each agent read over the `threads` defaults (its
// guard and tree limits key by key), the pool made for its `models` and
// `execution`, and the checks of the names agents refer to.

#include <algorithm>
#include <set>

#include "config_parser.hpp"

namespace keel::config_detail {

using strict_yaml::one_of;

void parser::read_agents(const map_reader& top, node_config& cfg) {
  auto node = top.get("agents");
  if (!node)
    return;
  auto items = read_list(*node, "agents", "a list of agents");
  for (size_t i = 0; i < items.size(); ++i)
    cfg.agents.push_back(read_agent(items[i], indexed("agents", i), cfg));
}

agent_config parser::read_agent(const YAML::Node& node, const std::string& path,
                                const node_config& cfg) {
  map_reader m{*this, node, path, line_of(node),
               agent_definition_keys().known()};
  auto result = threads_agent(cfg);
  auto name = required(m, "name", "an agent name");
  result.name = read_string(name, m.path("name"));
  if (!valid_agent_name(result.name))
    bad_value(name, m.path("name"), result.name, agent_rule);
  agent_definition_keys().read(*this, m, result);
  if (m.has("tools"))
    result.agent_tools = result.tools;
  if (auto files = m.get("prompt_files"))
    result.prompt_files = read_each(*files, m.path("prompt_files"),
                                    "a list of file paths", &reader::read_name);
  if (auto g = read_section(m, "guard", guard_keys(), result.guard))
    if (auto x = g->get("per_tool")) {
      result.guard.per_tool.clear();
      read_per_tool(*x, g->path("per_tool"), result.guard.per_tool);
    }
  read_section(m, "agents", agent_keys(), result.agents);
  if (auto params = section(m, "model", agent_model_keys()))
    read_model_params(*params, result.params);
  read_agent_pool(m, result, cfg);
  check_agent_params(result, path, cfg);
  return result;
}

void parser::read_agent_pool(const map_reader& m, agent_config& agent,
                             const node_config& cfg) {
  if (m.has("pool") && m.has("models"))
    fail(m.line("models"), m.path("models"),
         "set only one of pool and models (models is a chain of its own)");
  auto execution = section(m, "execution", agent_execution_keys());
  if (execution)
    agent_execution_keys().read(*this, *execution, agent);
  auto retry = execution ? execution->get("retry") : std::nullopt;
  auto breaker = execution ? execution->get("breaker") : std::nullopt;
  if (!m.has("models") && !retry && !breaker)
    return;
  auto base = cfg.find_pool(agent.pool);
  if (base == nullptr)
    fail(m.line(m.has("pool") ? "pool" : "name"), m.path("pool"),
         "unknown pool " + quote(agent.pool) + " (expected "
           + one_of(names_of(cfg.pools)) + ")");
  auto own = *base;
  own.name = agent_pool_prefix + agent.name;
  if (auto models = m.get("models"))
    own.chain = read_models(*models, m.path("models"), cfg);
  if (execution) {
    if (auto r = read_section(*execution, "retry", agent_retry_keys(), own))
      if (own.retry.max_delay < own.retry.base_delay)
        fail_below(r->line(r->has("max_backoff") ? "max_backoff"
                                                 : "initial_backoff"),
                   r->path("max_backoff"), r->path("initial_backoff"),
                   own.retry.base_delay, own.retry.max_delay);
    read_section(*execution, "breaker", agent_breaker_keys(), own.breaker);
  }
  agent.pool = own.name;
  agent_pools_.push_back(std::move(own));
}

std::vector<std::string> parser::read_models(const YAML::Node& node,
                                             const std::string& path,
                                             const node_config& cfg) {
  auto chain = read_each(node, path, "a list of provider names",
                         &reader::read_name);
  if (chain.empty())
    fail(line_of(node), path,
         "expected a non-empty list of provider names, got an empty list");
  std::set<std::string> seen;
  for (size_t i = 0; i < chain.size(); ++i) {
    auto at = line(indexed(path, i), path);
    if (cfg.find_provider(chain[i]) == nullptr)
      fail(at, indexed(path, i),
           "unknown provider " + quote(chain[i]) + " (expected "
             + one_of(names_of(cfg.providers)) + ")");
    if (!seen.insert(chain[i]).second)
      fail(at, indexed(path, i),
           "provider " + quote(chain[i]) + " is listed twice");
  }
  return chain;
}

// -- checks -------------------------------------------------------------------

void parser::check_agents(const node_config& cfg) const {
  check_unique_names(cfg.agents, "agents", "agent");
  auto known = names_of(agents_of(cfg));
  for (size_t i = 0; i < cfg.agents.size(); ++i) {
    auto& agent = cfg.agents[i];
    auto path = indexed("agents", i);
    if (agent.pool.rfind(agent_pool_prefix, 0) != 0
        && cfg.find_pool(agent.pool) == nullptr)
      fail(line(path + ".pool", path), path + ".pool",
           "unknown pool " + quote(agent.pool) + " (expected "
             + one_of(names_of(cfg.pools)) + ")");
    check_tool_refs(cfg, path + ".tools", agent.tools);
    check_tool_refs(cfg, path + ".deny", agent.deny);
    for (size_t j = 0; j < agent.spawns.size(); ++j)
      check_agent_ref(known, indexed(path + ".spawns", j), agent.spawns[j],
                      path + ".spawns");
  }
  for (size_t i = 0; i < cfg.pools.size(); ++i)
    if (cfg.pools[i].name.rfind(agent_pool_prefix, 0) == 0)
      fail(line(indexed("pools", i) + ".name"), indexed("pools", i) + ".name",
           std::string{"pool names starting with "} + agent_pool_prefix
             + " are reserved for the pools of agents");
  auto& threads = cfg.threads;
  check_agent_ref(known, "threads.default_agent", threads.default_agent,
                  "threads");
  if (!threads.system_agent.empty())
    check_agent_ref(known, "threads.system_agent", threads.system_agent,
                    "threads");
}

void parser::check_agent_ref(const std::vector<std::string>& known,
                             const std::string& path, const std::string& name,
                             const std::string& line_path) const {
  if (std::find(known.begin(), known.end(), name) == known.end())
    fail(line(path, line_path), path,
         "unknown agent " + quote(name) + " (expected " + one_of(known) + ")");
}

void parser::add_agent_pools(node_config& cfg) {
  for (auto& pool : agent_pools_)
    cfg.pools.push_back(std::move(pool));
  agent_pools_.clear();
}

} // namespace keel::config_detail
