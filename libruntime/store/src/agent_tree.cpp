#include "keel/agent_tree.hpp"

#include <map>

namespace keel {

std::vector<agent_info> make_agents(const std::vector<session_record>& sessions,
                                    const std::vector<tree_link>& links) {
  std::map<std::string, std::vector<std::string>> children;
  for (auto& link : links)
    children[link.parent].push_back(link.child);
  std::vector<agent_info> result;
  for (auto& rec : sessions) {
    agent_info x;
    x.thread = rec.thread;
    x.parent = rec.parent;
    x.state = to_string(rec.state);
    x.pool = rec.pool;
    x.model = rec.model;
    x.provider = rec.provider;
    x.created_at = rec.created_at;
    x.tool_failures = rec.tool_failures;
    x.paused_at = rec.paused_at;
    x.agent = agent_of(rec);
    x.usage = rec.usage;
    if (auto i = children.find(rec.thread); i != children.end())
      x.children = std::move(i->second);
    result.push_back(std::move(x));
  }
  return result;
}

caf::expected<std::vector<agent_info>> read_agents(store& db) {
  auto sessions = db.sessions();
  if (!sessions)
    return std::move(sessions.error());
  auto links = db.tree_links();
  if (!links)
    return std::move(links.error());
  return make_agents(*sessions, *links);
}

caf::expected<agent_page> read_agent_page(store& db, const std::string& after,
                                          size_t limit) {
  auto sessions = db.sessions_after(after, limit);
  if (!sessions)
    return std::move(sessions.error());
  agent_page result;
  for (auto& rec : *sessions) {
    auto children = db.children(rec.thread);
    if (!children)
      return std::move(children.error());
    for (auto& child : *children)
      result.links.push_back(tree_link{rec.thread, std::move(child), 0});
  }
  result.sessions = std::move(*sessions);
  return result;
}

} // namespace keel
