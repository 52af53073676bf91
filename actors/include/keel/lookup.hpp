#pragma once

#include <caf/actor_cast.hpp>
#include <caf/actor_registry.hpp>
#include <caf/actor_system.hpp>

namespace keel {

/// Finds the current incarnation of a named node component (registered by
/// its supervisor on every start). Returns an invalid handle while the
/// component is down.
template <class Handle>
Handle lookup(caf::actor_system& sys, caf::atom_value name) {
  return caf::actor_cast<Handle>(sys.registry().get(name));
}

} // namespace keel
