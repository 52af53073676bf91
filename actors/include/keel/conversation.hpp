#pragma once

// The conversation actor of one thread. Its configuration is in
// conversation_config.hpp, its state in conversation_state.hpp, the turn
// loop's decisions in the turn module (keel/turn.hpp).

#include <caf/typed_event_based_actor.hpp>

#include "keel/actors.hpp"
#include "keel/conversation_config.hpp"
#include "keel/conversation_state.hpp"

namespace keel {

/// One thread's conversation: loads its state, accepts messages durably,
/// drains the inbox one turn at a time, and when idle asks the orchestrator
/// to passivate it (its supervisor then stops it).
conversation_actor::behavior_type
conversation(conversation_actor::stateful_pointer<conversation_state> self,
             conversation_config cfg);

} // namespace keel
