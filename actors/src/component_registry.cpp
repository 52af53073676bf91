#include "keel/component_registry.hpp"

#include <caf/actor_control_block.hpp>
#include <caf/actor_registry.hpp>
#include <caf/actor_system.hpp>

namespace keel {

caf::strong_actor_ptr component_registry::get(caf::atom_value name) const {
  std::shared_lock<std::shared_mutex> guard{mtx_};
  auto i = entries_.find(name);
  return i == entries_.end() ? nullptr : i->second;
}

void component_registry::put(caf::atom_value name,
                             caf::strong_actor_ptr handle) {
  if (!handle)
    return;
  std::unique_lock<std::shared_mutex> guard{mtx_};
  entries_.emplace(name, std::move(handle));
}

void component_registry::erase(caf::atom_value name) {
  caf::strong_actor_ptr gone;
  std::unique_lock<std::shared_mutex> guard{mtx_};
  auto i = entries_.find(name);
  if (i == entries_.end())
    return;
  gone = std::move(i->second); // Released after the lock.
  entries_.erase(i);
}

void unregister_caf_utility_actors(caf::actor_system& sys) {
  sys.registry().erase(caf::atom("SpawnServ"));
  sys.registry().erase(caf::atom("ConfigServ"));
}

} // namespace keel
