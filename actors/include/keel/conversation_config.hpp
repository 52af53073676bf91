#pragma once

// The configuration of a conversation actor: what every conversation of a
// node shares, and its thread's own part.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <caf/timespan.hpp>

#include "keel/actors.hpp"
#include "keel/config.hpp"
#include "keel/prompt_files.hpp"
#include "keel/shard_table.hpp"
#include "keel/turn.hpp"

namespace keel {

/// What every conversation of a node reads alike: one copy per node, which
/// each conversation's configuration shares (a live thread's memory counts
/// every byte it holds by itself). Its turns read their part
/// (`turn_settings`: the pool, the guard's limits, compaction, the window,
/// the owner's contact) through the same copy.
struct conversation_settings : turn_settings {
  /// The agent these settings are of (`agents[].name`).
  std::string agent = default_agent_name;
  /// Placed before the context in every completion request.
  std::string system_prompt;
  /// The agent's model parameters, sent with its turns' calls (not with a
  /// compaction's summaries, which take the provider's own).
  model_params params;
  /// The agent's prompt files, placed after the prompt as they are at each
  /// turn; null when it has none.
  std::shared_ptr<prompt_files> prompt;
  /// Agents the thread may spawn children of, besides its own.
  std::vector<std::string> spawns;
  /// Passivate after this long without work.
  caf::timespan idle_timeout;
  /// Timeout for each persistence request.
  caf::timespan storage_timeout = std::chrono::seconds{30};
  /// Delay before retrying a turn whose commit failed.
  caf::timespan commit_retry_delay = std::chrono::seconds{1};
  /// Unanswered messages held before new ones are refused.
  size_t max_inbox = 1000;
  /// A provider's reply text is cut to this before it enters the context.
  size_t max_reply_bytes = 256 * 1024;
  /// Each line a tool call adds to the answer, and each message to a child
  /// agent, is cut to this.
  size_t max_tool_output_bytes = 64 * 1024;
  /// The tools the model may call in a root thread (its pool's and
  /// `threads.tools`) and in a child agent (its pool's and
  /// `threads.agent_tools`).
  std::vector<tool_config> root_tools;
  std::vector<tool_config> agent_tools;
  /// A tool failing this often in the thread is disabled there.
  uint32_t disable_tool_after = 3;
  /// Spawns per answer and messages between the tree's threads per client
  /// message (the store enforces children and depth).
  agent_limits agents;
};

/// The settings of a conversation without a node's (one copy per process).
std::shared_ptr<const conversation_settings> default_conversation_settings();

class agent_catalog;

/// Configuration of one conversation actor: its thread's own part, and the
/// node's settings through `->`.
struct conversation_config {
  /// The thread this actor owns.
  std::string thread;
  /// The outbound channels the thread is bound to
  /// (`delivery.channels[].threads`): each answer is committed with a
  /// delivery record for them.
  std::vector<std::string> channels;
  /// In a cluster, the node's shard table: the conversation takes its
  /// tenure from it before it loads the thread. Null on a single node.
  std::shared_ptr<const shard_table> shards;
  /// The settings of the thread's agent, shared with every conversation of
  /// that agent; never null. The default agent's until the thread's agent
  /// is known (its session is loaded, or its first message names it).
  std::shared_ptr<const conversation_settings> settings
    = default_conversation_settings();
  /// The node's agents; null where a test runs a conversation alone (it
  /// then has only `settings`).
  std::shared_ptr<const agent_catalog> agents;

  const conversation_settings* operator->() const {
    return settings.get();
  }
};

/// How much longer than `turn_timeout` a conversation waits for its pool,
/// which ends a call at the turn's deadline and answers then.
constexpr caf::timespan turn_timeout_grace = std::chrono::seconds{5};

/// The settings of the conversations of `agent` on `node`: its prompt,
/// pool, tools and limits, the node's storage settings (the guard's limits
/// shared with `node`).
std::shared_ptr<const conversation_settings>
make_conversation_settings(const std::shared_ptr<const node_config>& node,
                           const agent_config& agent);

/// The settings of the conversations of `node`'s default agent.
std::shared_ptr<const conversation_settings>
make_conversation_settings(const std::shared_ptr<const node_config>& node);

/// The configuration of the conversation of `thread` on `node`, starting
/// with the settings of the default agent of `agents`.
conversation_config
make_conversation_config(const node_config& node,
                         std::shared_ptr<const agent_catalog> agents,
                         std::string thread);

/// What the thread's history and the model read when `tool` is disabled
/// after its `failures`-th failure, `error`.
std::string disabled_tool_text(const std::string& tool, uint32_t failures,
                               const std::string& error);

} // namespace keel
