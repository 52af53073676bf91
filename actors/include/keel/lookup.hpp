#pragma once

#include <string>
#include <utility>

#include <caf/actor.hpp>
#include <caf/actor_cast.hpp>
#include <caf/actor_system.hpp>
#include <caf/make_message.hpp>
#include <caf/send.hpp>

#include "keel/actors.hpp"
#include "keel/system_config.hpp"
#include "keel/timed_request.hpp"

namespace keel {

/// Finds the current incarnation of a named node component (registered by
/// its supervisor on every start). Returns an invalid handle while the
/// component is down.
template <class Handle>
Handle lookup(caf::actor_system& sys, caf::atom_value name) {
  return caf::actor_cast<Handle>(components_of(sys).get(name));
}

/// The root supervisor's child id of a registered component.
inline std::string root_child_id(caf::atom_value name) {
  if (name == names::persistence)
    return "persistence";
  if (name == names::providers)
    return "providers";
  if (name == names::conversations)
    return "conversations";
  if (name == names::orchestrator)
    return "orchestrator";
  if (name == names::cluster)
    return "cluster";
  if (name == names::peers)
    return "peers";
  if (name == names::dead_letters)
    return "dead_letters";
  if (name == names::channels)
    return "channels";
  if (name == names::notifier)
    return "notifier";
  return "gateway";
}

/// Sends a request to a root component by name: straight to its current
/// incarnation or, while it restarts, through the root supervisor, which
/// holds the request (up to the child's buffer) and hands it to the new
/// incarnation with the original sender. The answer comes back to `self`
/// either way; with no root running, the request fails at once. An actor
/// with a deadline set times its requests out through it (see
/// timed_request.hpp), others through CAF's clock.
template <class Self, class... Ts>
auto request_component(Self* self, caf::atom_value name, caf::timespan timeout,
                       Ts&&... xs) {
  auto request = [self, timeout](const caf::actor& dest, auto&&... ys) {
    if constexpr (has_deadline_set<Self>::value)
      return timed_request(self, dest, timeout,
                           std::forward<decltype(ys)>(ys)...);
    else
      return self->request(dest, timeout, std::forward<decltype(ys)>(ys)...);
  };
  auto& registry = components_of(self->system());
  auto current = caf::actor_cast<caf::actor>(registry.get(name));
  if (current)
    return request(current, std::forward<Ts>(xs)...);
  auto root = caf::actor_cast<caf::actor>(registry.get(names::root));
  return request(root, atom::forward_v, root_child_id(name),
                 caf::make_message(std::forward<Ts>(xs)...));
}

/// Pushes a ready-made server frame to the subscribers of `thread`, if a
/// gateway runs, and in a cluster to the other nodes whose clients follow
/// the thread. Events are best effort (what matters is stored), so this
/// never waits; safe from any thread.
inline void publish_event(caf::actor_system& sys, std::string thread,
                          std::string frame) {
  thread_event ev{std::move(thread), std::move(frame)};
  if (auto peers = lookup<caf::actor>(sys, names::peers))
    caf::anon_send(peers, atom::publish_v, ev);
  if (auto gw = lookup<gateway_bridge_actor>(sys, names::gateway))
    caf::anon_send(gw, atom::publish_v, std::move(ev));
}

/// Raises a notice to the node's owner (see `notifier_actor`): never
/// waits; while the notifier restarts, the root supervisor holds it. Safe
/// from any thread.
inline void notify_owner(caf::actor_system& sys, notice_kind kind,
                         std::string subject, std::string text) {
  owner_notice x;
  x.kind = kind;
  x.subject = std::move(subject);
  x.text = std::move(text);
  auto& registry = components_of(sys);
  if (auto current = caf::actor_cast<caf::actor>(registry.get(names::notifier)))
    caf::anon_send(current, atom::notify_v, std::move(x));
  else if (auto root = caf::actor_cast<caf::actor>(registry.get(names::root)))
    caf::anon_send(root, atom::forward_v, root_child_id(names::notifier),
                   caf::make_message(atom::notify_v, std::move(x)));
}

} // namespace keel
