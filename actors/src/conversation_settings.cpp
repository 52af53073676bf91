#include "keel/conversation_config.hpp"

#include "keel/agent_catalog.hpp"

#include <algorithm>

// The conversation's configuration, read once per node from its config:
// the settings of each agent.

namespace keel {

namespace {

// The tools of `names` and of `pool`, each once, in declaration order,
// without those of `deny` (the config checked that every name is
// declared).
std::vector<tool_config>
tools_named(const node_config& node, const std::vector<std::string>& names,
            const std::string& pool, const std::vector<std::string>& deny) {
  std::vector<std::string> wanted = names;
  if (auto p = node.find_pool(pool))
    wanted.insert(wanted.end(), p->tools.begin(), p->tools.end());
  auto listed = [](const std::vector<std::string>& xs, const std::string& x) {
    return std::find(xs.begin(), xs.end(), x) != xs.end();
  };
  std::vector<tool_config> result;
  for (auto& tool : node.tools)
    if (listed(wanted, tool.name) && !listed(deny, tool.name))
      result.push_back(tool);
  return result;
}

// The agent's guard limits with the loop keys of the node's tools (those
// its threads lack are never called).
std::shared_ptr<const guard_limits> guard_of(const node_config& node,
                                             const agent_config& agent) {
  auto limits = agent.guard;
  for (auto& tool : node.tools)
    if (!tool.loop_key.empty())
      limits.loop_keys[tool.name] = tool.loop_key;
  return std::make_shared<const guard_limits>(std::move(limits));
}

// The context window of the first provider of `pool`: its own
// `context_window`, else the model table's.
uint64_t pool_window(const node_config& node, const std::string& pool) {
  if (auto p = node.find_pool(pool); p != nullptr && !p->chain.empty())
    if (auto provider = node.find_provider(p->chain.front()))
      return provider->context_window != 0 ? provider->context_window
                                           : context_window(provider->model);
  return default_context_window;
}

} // namespace

std::shared_ptr<const conversation_settings> default_conversation_settings() {
  static const auto settings = std::make_shared<const conversation_settings>();
  return settings;
}

std::shared_ptr<const conversation_settings>
make_conversation_settings(const std::shared_ptr<const node_config>& shared,
                           const agent_config& agent) {
  auto& node = *shared;
  auto& defaults = node.threads;
  auto cfg = std::make_shared<conversation_settings>();
  cfg->agent = agent.name;
  cfg->storage_timeout = node.storage.request_timeout;
  cfg->pool = agent.pool;
  cfg->system_prompt = agent.system_prompt;
  cfg->params = agent.params;
  if (!agent.prompt_files.empty())
    cfg->prompt = std::make_shared<prompt_files>(agent.prompt_files);
  cfg->spawns = agent.spawns;
  cfg->idle_timeout = defaults.idle_timeout;
  cfg->turn_timeout = agent.turn_timeout;
  cfg->max_inbox = defaults.max_inbox;
  cfg->max_reply_bytes = defaults.max_reply_bytes;
  cfg->max_tool_output_bytes = defaults.max_tool_output_bytes;
  cfg->root_tools = tools_named(node, agent.tools, agent.pool, agent.deny);
  cfg->agent_tools = tools_named(node, agent.agent_tools, agent.pool,
                                 agent.deny);
  cfg->guard = guard_of(node, agent);
  cfg->disable_tool_after = defaults.disable_tool_after;
  cfg->compaction = defaults.compaction;
  cfg->compaction_enabled = defaults.compaction_enabled;
  cfg->context_window = pool_window(node, agent.pool);
  cfg->agents = agent.agents;
  cfg->owner_contact = node.owner.contact;
  return cfg;
}

std::shared_ptr<const conversation_settings>
make_conversation_settings(const std::shared_ptr<const node_config>& node) {
  for (auto& agent : agents_of(*node))
    if (agent.name == node->threads.default_agent)
      return make_conversation_settings(node, agent);
  return make_conversation_settings(node, threads_agent(*node));
}

conversation_config
make_conversation_config(const node_config& node,
                         std::shared_ptr<const agent_catalog> agents,
                         std::string thread) {
  conversation_config cfg;
  cfg.channels = node.delivery.channels_of(thread);
  cfg.thread = std::move(thread);
  if (agents)
    if (auto settings = agents->find(agents->default_agent()))
      cfg.settings = std::move(settings);
  cfg.agents = std::move(agents);
  return cfg;
}

std::string disabled_tool_text(const std::string& tool, uint32_t failures,
                               const std::string& error) {
  return "The tool " + tool + " failed " + std::to_string(failures)
         + " times in this thread and is disabled here; the last failure: "
         + error;
}

} // namespace keel
