#include "keel/conversation_config.hpp"

#include <algorithm>

// The conversation's configuration, read once per node from its config.

namespace keel {

namespace {

// The tools named by `pool` and by `names`, each once, in declaration
// order (the config checked that every name is declared).
std::vector<tool_config> tools_named(const node_config& node,
                                     const std::vector<std::string>& names) {
  std::vector<std::string> wanted = names;
  for (auto& pool : node.pools)
    if (pool.name == node.threads.pool)
      wanted.insert(wanted.end(), pool.tools.begin(), pool.tools.end());
  std::vector<tool_config> result;
  for (auto& tool : node.tools)
    if (std::find(wanted.begin(), wanted.end(), tool.name) != wanted.end())
      result.push_back(tool);
  return result;
}

// The context window of the first provider of `pool`: its own
// `context_window`, else the model table's.
uint64_t pool_window(const node_config& node, const std::string& pool) {
  for (auto& p : node.pools)
    if (p.name == pool && !p.chain.empty())
      for (auto& provider : node.providers)
        if (provider.name == p.chain.front())
          return provider.context_window != 0 ? provider.context_window
                                              : context_window(provider.model);
  return default_context_window;
}

} // namespace

std::shared_ptr<const conversation_settings> default_conversation_settings() {
  static const auto settings = std::make_shared<const conversation_settings>();
  return settings;
}

std::shared_ptr<const conversation_settings>
make_conversation_settings(const std::shared_ptr<const node_config>& shared) {
  auto& node = *shared;
  auto& defaults = node.threads;
  auto cfg = std::make_shared<conversation_settings>();
  cfg->storage_timeout = node.storage.request_timeout;
  cfg->pool = defaults.pool;
  cfg->system_prompt = defaults.system_prompt;
  cfg->idle_timeout = defaults.idle_timeout;
  cfg->turn_timeout = defaults.turn_timeout;
  cfg->max_inbox = defaults.max_inbox;
  cfg->max_reply_bytes = defaults.max_reply_bytes;
  cfg->max_tool_output_bytes = defaults.max_tool_output_bytes;
  cfg->root_tools = tools_named(node, defaults.tools);
  cfg->agent_tools = tools_named(node, defaults.agent_tools);
  cfg->guard = std::shared_ptr<const guard_limits>(shared, &defaults.guard);
  cfg->disable_tool_after = defaults.disable_tool_after;
  cfg->compaction = defaults.compaction;
  cfg->compaction_enabled = defaults.compaction_enabled;
  cfg->context_window = pool_window(node, defaults.pool);
  cfg->agents = defaults.agents;
  cfg->owner_contact = node.owner.contact;
  return cfg;
}

conversation_config
make_conversation_config(const node_config& node,
                         std::shared_ptr<const conversation_settings> settings,
                         std::string thread) {
  conversation_config cfg;
  cfg.channels = node.delivery.channels_of(thread);
  cfg.thread = std::move(thread);
  if (settings)
    cfg.settings = std::move(settings);
  return cfg;
}

std::string disabled_tool_text(const std::string& tool, uint32_t failures,
                               const std::string& error) {
  return "The tool " + tool + " failed " + std::to_string(failures)
         + " times in this thread and is disabled here; the last failure: "
         + error;
}

} // namespace keel
