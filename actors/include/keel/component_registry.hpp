#pragma once

#include <mutex>
#include <shared_mutex>
#include <unordered_map>

#include <caf/atom.hpp>
#include <caf/fwd.hpp>
#include <caf/intrusive_ptr.hpp>

namespace keel {

/// The node's named components (`names::*`), each the current incarnation
/// its supervisor registered. Kept apart from CAF's actor registry on
/// purpose: CAF's network layer delivers a message from another node to any
/// actor of that registry by name (BASP's named receivers), so a component
/// there could be reached by anyone who can open the cluster port. Only the
/// peers actor talks to other nodes (see peers.hpp). Safe from any thread.
class component_registry {
public:
  /// The component `name`, or null while none is registered.
  caf::strong_actor_ptr get(caf::atom_value name) const;

  /// Registers `handle` as `name` unless a component holds the name (as
  /// CAF's registry does): a supervisor erases a child's name when it goes
  /// down, before its next incarnation registers.
  void put(caf::atom_value name, caf::strong_actor_ptr handle);

  void erase(caf::atom_value name);

private:
  mutable std::shared_mutex mtx_;
  std::unordered_map<caf::atom_value, caf::strong_actor_ptr> entries_;
};

/// Removes the utility actors CAF registers by name in every actor system
/// ("SpawnServ", "ConfigServ"): Keel uses neither, and BASP would deliver
/// another node's messages to them.
void unregister_caf_utility_actors(caf::actor_system& sys);

} // namespace keel
