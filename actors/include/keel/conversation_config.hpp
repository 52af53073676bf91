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
#include "keel/shard_table.hpp"
#include "keel/turn.hpp"

namespace keel {

/// What every conversation of a node reads alike: one copy per node, which
/// each conversation's configuration shares (a live thread's memory counts
/// every byte it holds by itself). Its turns read their part
/// (`turn_settings`: the pool, the guard's limits, compaction, the window,
/// the owner's contact) through the same copy.
struct conversation_settings : turn_settings {
  /// Placed before the context in every completion request.
  std::string system_prompt;
  /// Passivate after this long without work.
  caf::timespan idle_timeout;
  /// A provider call longer than this ends the turn with an error: the
  /// pool stops the call at this deadline (see `turn_timeout_grace`).
  caf::timespan turn_timeout;
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
  /// Shared with every conversation of the node; never null.
  std::shared_ptr<const conversation_settings> settings
    = default_conversation_settings();

  const conversation_settings* operator->() const {
    return settings.get();
  }
};

/// How much longer than `turn_timeout` a conversation waits for its pool,
/// which ends a call at the turn's deadline and answers then.
constexpr caf::timespan turn_timeout_grace = std::chrono::seconds{5};

/// The settings of every conversation of `node`: its thread defaults,
/// storage settings and tools (the guard's limits shared with `node`).
std::shared_ptr<const conversation_settings>
make_conversation_settings(const std::shared_ptr<const node_config>& node);

/// The configuration of the conversation of `thread` on `node`, whose
/// settings are `settings` (see `make_conversation_settings`; null: the
/// defaults).
conversation_config
make_conversation_config(const node_config& node,
                         std::shared_ptr<const conversation_settings> settings,
                         std::string thread);

/// What the thread's history and the model read when `tool` is disabled
/// after its `failures`-th failure, `error`.
std::string disabled_tool_text(const std::string& tool, uint32_t failures,
                               const std::string& error);

} // namespace keel
