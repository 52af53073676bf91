#pragma once

// The agents of a node as its actors see them: the conversation settings of
// each, and its live status.

#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "keel/config.hpp"
#include "keel/conversation_config.hpp"

namespace keel {

/// The agents of a node as its conversations see them: the settings of
/// each (one copy per agent, shared by its threads) and its live status,
/// which an operator changes without a restart (the change is stored; see
/// the persistence's agent statuses).
class agent_catalog {
public:
  /// The agents of `node` (`agents_of`), their statuses as the file says.
  explicit agent_catalog(const std::shared_ptr<const node_config>& node);

  /// The settings of `agent`; null if the node has no such agent.
  std::shared_ptr<const conversation_settings>
  find(const std::string& agent) const;

  /// The agent of threads whose first message names none.
  const std::string& default_agent() const {
    return default_agent_;
  }

  /// The agent answering messages that name an unknown one; empty: none.
  const std::string& system_agent() const {
    return system_agent_;
  }

  /// The live status of `agent` (active for an unknown one).
  agent_status status(const std::string& agent) const;

  /// Sets the live status of `agent`; false if there is no such agent.
  bool set_status(const std::string& agent, agent_status status) const;

  /// A conversation of `agent` started, or stopped (the live threads count).
  void enter(const std::string& agent) const;
  void leave(const std::string& agent) const;

  /// Conversations of `agent` running now.
  uint64_t live_threads(const std::string& agent) const;

  /// The agents' definitions, in configuration order (`agents_of`).
  const std::vector<agent_config>& definitions() const {
    return definitions_;
  }

private:
  struct entry {
    std::shared_ptr<const conversation_settings> settings;
    mutable std::atomic<agent_status> status{agent_status::active};
    mutable std::atomic<int64_t> live{0};
  };

  std::vector<agent_config> definitions_;
  std::map<std::string, entry> entries_;
  std::string default_agent_;
  std::string system_agent_;
};

/// What the system agent's model is told about a message that asked for
/// `asked`, an agent the node does not have.
std::string unknown_agent_note(const std::string& asked);

/// The key of the stored status of `agent` in the store's meta records.
std::string agent_status_key(const std::string& agent);

} // namespace keel
