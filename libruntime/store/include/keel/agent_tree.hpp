#pragma once

// The agent tree as operators see it (GET /api/v1/agents, `keelctl tree
// --agents`): every thread with a session, its parent, state and children,
// put together from the store's session records and tree links.

#include <vector>

#include "keel/error.hpp"
#include "keel/store.hpp"
#include "keel/types.hpp"

namespace keel {

/// The agents of `sessions` (in their order), each with its children from
/// `links` (in their order).
std::vector<agent_info> make_agents(const std::vector<session_record>& sessions,
                                    const std::vector<tree_link>& links);

/// Every agent of a store: `make_agents` over its sessions and tree links.
caf::expected<std::vector<agent_info>> read_agents(store& db);

/// A page of a store's agents: sessions in key order and the links from
/// them to their children.
struct agent_page {
  std::vector<session_record> sessions;
  std::vector<tree_link> links;
};

/// The page of at most `limit` sessions after thread `after` ("": from the
/// first) with their children's links: a seek and `limit` session reads,
/// plus one range read per session, however many threads are stored.
caf::expected<agent_page> read_agent_page(store& db, const std::string& after,
                                          size_t limit);

} // namespace keel
