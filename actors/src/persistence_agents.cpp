#include "keel/persistence.hpp"

#include <spdlog/spdlog.h>

#include "keel/logging.hpp"
#include "keel/text.hpp"

// The agents in the store: spawns of child agents (bound to their agent,
// under the limits of the parent's), and the statuses operators give
// agents, stored as meta records so that a change survives a restart (and,
// on PostgreSQL, is the cluster's).

namespace keel {

namespace {

// The spawn of `child` of agent `agent` (in `pool`) under `parent` (whose
// session is `parent_rec`): a suspended session with the parent's model,
// and the tree link, both stamped now.
spawn_request
make_spawn_request(const std::string& parent, const session_record& parent_rec,
                   const std::string& child, const agent_limits& limits,
                   const std::string& agent, const std::string& pool) {
  spawn_request req;
  req.max_children = limits.max_children;
  req.max_depth = limits.max_depth;
  req.child.thread = child;
  req.child.parent = parent;
  req.child.agent = agent;
  req.child.pool = pool;
  req.child.model = parent_rec.model;
  req.child.state = session_state::suspended;
  req.child.created_at = wall_clock_millis();
  req.link = tree_link{parent, child, req.child.created_at};
  return req;
}

} // namespace

caf::result<spawn_result> persistence_state::spawn(const std::string& parent,
                                                   const std::string& child,
                                                   const std::string& agent) {
  auto parent_rec = db->session(parent);
  if (!parent_rec) {
    if (parent_rec.error() == ec::not_found)
      return caf::make_error(ec::not_found,
                             "thread '" + parent
                               + "' has no session yet: send it a "
                                 "message before spawning children");
    return parent_rec.error();
  }
  if (parent_rec->state == session_state::closed)
    return caf::make_error(ec::thread_closed,
                           "thread '" + parent + "' was cancelled");
  auto child_agent = agent.empty() ? agent_of(*parent_rec) : agent;
  auto limits = tree_limits;
  auto pool = parent_rec->pool;
  if (catalog) {
    auto settings = catalog->find(child_agent);
    if (!settings)
      return caf::make_error(ec::unknown_agent,
                             "no agent '" + child_agent + "' on this node");
    pool = settings->pool;
    if (auto of_parent = catalog->find(agent_of(*parent_rec)))
      limits = of_parent->agents;
  }
  if (counts_threads()) {
    auto admitted = admit_thread(child);
    if (!admitted)
      return std::move(admitted.error());
  }
  auto result = db->stage_spawn(
    make_spawn_request(parent, *parent_rec, child, limits, child_agent, pool));
  if (!result || !result->created)
    uncount(child);
  if (!result)
    return result.error();
  return after_flush(std::move(*result));
}

caf::result<caf::ok_atom>
persistence_state::store_agent_status(const std::string& agent,
                                      const std::string& status) {
  if (!parse_agent_status(status))
    return caf::make_error(ec::bad_frame, "unknown agent status '" + status
                                            + "' (expected active, paused "
                                              "or archived)");
  db->stage_meta(agent_status_key(agent), status);
  return after_flush(caf::ok_atom_v);
}

caf::error persistence_state::restore_agent_statuses() {
  if (!catalog)
    return caf::none;
  for (auto& agent : catalog->definitions()) {
    auto stored = db->meta(agent_status_key(agent.name));
    if (!stored) {
      if (stored.error() == ec::not_found)
        continue;
      return std::move(stored.error());
    }
    if (auto status = parse_agent_status(*stored)) {
      catalog->set_status(agent.name, *status);
    } else {
      log_scope scope{log_component::persistence};
      spdlog::warn("agent {}: ignoring the stored status '{}'", agent.name,
                   *stored);
    }
  }
  return caf::none;
}

} // namespace keel
