#pragma once

#include <caf/actor_system_config.hpp>

namespace keel {

/// The actor system configuration of every Keel process and test: registers
/// Keel's message types and error category once.
class system_config : public caf::actor_system_config {
public:
  system_config();
};

} // namespace keel
