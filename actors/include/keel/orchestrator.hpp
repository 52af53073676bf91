#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>

#include <caf/actor_clock.hpp>
#include <caf/typed_event_based_actor.hpp>

#include "keel/actors.hpp"
#include "keel/config.hpp"

namespace keel {

/// Configuration of the orchestrator.
struct orchestrator_config {
  /// Defaults for every conversation it spawns.
  thread_defaults threads;
  /// Resume threads with unanswered messages right after starting.
  bool recover_on_start = true;
  /// A conversation that fails more often than this within
  /// `restart_period` is not restarted until its next message.
  uint32_t max_conversation_restarts = 3;
  caf::timespan restart_period = std::chrono::seconds{10};
};

/// A running conversation as the orchestrator sees it.
struct conversation_entry {
  conversation_actor actor;
  /// Messages routed to it (compared with its own count on passivation).
  uint64_t routed = 0;
};

/// State of the orchestrator.
struct orchestrator_state {
  static inline const char* name = "keel.orchestrator";

  orchestrator_config cfg;
  /// Running conversations by thread id.
  std::unordered_map<std::string, conversation_entry> threads;
  /// Recent abnormal exits per thread, for the restart limit.
  std::unordered_map<std::string, std::vector<caf::actor_clock::time_point>>
    failures;

  /// Returns the thread's conversation, spawning it if needed.
  conversation_entry& conversation_for(
    orchestrator_actor::stateful_pointer<orchestrator_state> self,
    const std::string& thread);
};

/// Routes threads to conversations. Conversations are linked to it (they
/// stop with it and are reloaded from the store on demand); it traps their
/// exits and restarts one that failed if it still has work.
orchestrator_actor::behavior_type
orchestrator(orchestrator_actor::stateful_pointer<orchestrator_state> self,
             orchestrator_config cfg);

} // namespace keel
