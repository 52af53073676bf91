#include "keel/agent_catalog.hpp"

#include <algorithm>

// The node's agents: their settings, made once, and their live statuses.

namespace keel {

agent_catalog::agent_catalog(const std::shared_ptr<const node_config>& node)
  : definitions_(agents_of(*node)),
    default_agent_(node->threads.default_agent),
    system_agent_(node->threads.system_agent) {
  for (auto& agent : definitions_) {
    auto& x = entries_[agent.name];
    x.settings = make_conversation_settings(node, agent);
    x.status = agent.status;
  }
}

std::shared_ptr<const conversation_settings>
agent_catalog::find(const std::string& agent) const {
  auto i = entries_.find(agent);
  return i != entries_.end() ? i->second.settings : nullptr;
}

agent_status agent_catalog::status(const std::string& agent) const {
  auto i = entries_.find(agent);
  return i != entries_.end() ? i->second.status.load() : agent_status::active;
}

bool agent_catalog::set_status(const std::string& agent,
                               agent_status status) const {
  auto i = entries_.find(agent);
  if (i == entries_.end())
    return false;
  i->second.status = status;
  return true;
}

void agent_catalog::enter(const std::string& agent) const {
  if (auto i = entries_.find(agent); i != entries_.end())
    ++i->second.live;
}

void agent_catalog::leave(const std::string& agent) const {
  if (auto i = entries_.find(agent); i != entries_.end())
    --i->second.live;
}

uint64_t agent_catalog::live_threads(const std::string& agent) const {
  auto i = entries_.find(agent);
  return i != entries_.end()
           ? static_cast<uint64_t>(std::max<int64_t>(i->second.live.load(), 0))
           : 0;
}

std::string unknown_agent_note(const std::string& asked) {
  return "The user asked for the agent \"" + asked
         + "\", which does not exist here. You answer in its place: tell the "
           "user that no agent \""
         + asked + "\" exists, and help if you can.";
}

std::string agent_status_key(const std::string& agent) {
  return "agent_status/" + agent;
}

} // namespace keel
