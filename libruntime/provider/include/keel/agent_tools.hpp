#pragma once

// The built-in agent tools a model may call to run sub-agents:
// `spawn_agent {"name", "task", "agent"?}` creates a child agent of the
// calling thread (of another kind of agent, if it names one) and sends it
// the task; `message_agent {"name", "text"}`
// sends an existing child a message. A child's id is the parent's id, a dot
// and the name, so it is stable across resends and crashes.

#include <optional>
#include <string>
#include <vector>

#include "keel/completion.hpp"
#include "keel/error.hpp"

namespace keel {

/// What an agent tool call asks for.
struct agent_action {
  /// True for `spawn_agent` (create the child if it does not exist).
  bool spawn = false;
  /// The child's thread id.
  std::string child;
  /// The message for the child.
  std::string text;
  /// For `spawn_agent`: the agent the child binds to; empty: the parent's.
  std::string agent;
};

/// The tool names.
constexpr const char* spawn_agent_tool = "spawn_agent";
constexpr const char* message_agent_tool = "message_agent";

/// How a provider request declares an agent tool to the model.
struct agent_tool_spec {
  const char* name;
  const char* description;
  /// The arguments' JSON schema, as JSON text.
  const char* parameters;
};

/// The agent tools every completion request offers the model.
const std::vector<agent_tool_spec>& agent_tool_specs();

/// Returns nullopt when `call` is not an agent tool; otherwise the action or
/// an error (`ec::bad_frame`) naming what is wrong with its arguments.
std::optional<caf::expected<agent_action>>
parse_agent_tool_call(const tool_call& call, const std::string& parent);

/// The child id of agent `name` under `parent`.
std::string child_thread_id(const std::string& parent, const std::string& name);

} // namespace keel
