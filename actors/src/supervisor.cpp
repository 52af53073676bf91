#include "keel/supervisor.hpp"

#include <caf/all.hpp>
#include <spdlog/spdlog.h>

#include "keel/error.hpp"

namespace keel {

namespace {

using self_ptr = caf::stateful_actor<supervisor_state>*;

void start_child(self_ptr self, child_state& child) {
  child.actor = child.spec.start(self);
  self->link_to(child.actor);
  if (child.spec.registry_name)
    self->system().registry().put(*child.spec.registry_name, child.actor);
}

void stop_children(self_ptr self, const caf::error& reason) {
  auto& children = self->state.children;
  for (auto i = children.rbegin(); i != children.rend(); ++i) {
    if (!i->actor)
      continue;
    if (i->spec.registry_name)
      self->system().registry().erase(*i->spec.registry_name);
    self->unlink_from(i->actor);
    self->send_exit(i->actor, reason);
    i->actor = nullptr;
  }
}

// Records a restart; true if the intensity limit is now exceeded.
bool intensity_exceeded(self_ptr self) {
  auto& st = self->state;
  auto now = self->clock().now();
  st.restarts.push_back(now);
  while (!st.restarts.empty() && st.restarts.front() < now - st.cfg.period)
    st.restarts.pop_front();
  return st.restarts.size() > st.cfg.max_restarts;
}

void on_exit(self_ptr self, caf::exit_msg& msg) {
  auto& children = self->state.children;
  auto i = std::find_if(children.begin(), children.end(), [&](auto& child) {
    return child.actor && child.actor.address() == msg.source;
  });
  if (i == children.end()) {
    // Our parent (or a peer linked to us) is stopping us.
    stop_children(self, msg.reason);
    self->quit(msg.reason);
    return;
  }
  auto& child = *i;
  child.actor = nullptr;
  child.last_exit = msg.reason;
  bool abnormal = msg.reason && msg.reason != caf::exit_reason::normal;
  bool restart = child.spec.restart == restart_type::permanent
                 || (child.spec.restart == restart_type::transient && abnormal);
  if (child.spec.registry_name)
    self->system().registry().erase(*child.spec.registry_name);
  if (!restart)
    return;
  if (intensity_exceeded(self)) {
    spdlog::error("{}: restart intensity exceeded ({} restarts in {} ms); "
                  "shutting down after: {}",
                  self->state.cfg.name, self->state.cfg.max_restarts,
                  std::chrono::duration_cast<std::chrono::milliseconds>(
                    self->state.cfg.period)
                    .count(),
                  render(msg.reason));
    stop_children(self, caf::exit_reason::user_shutdown);
    self->quit(msg.reason);
    return;
  }
  spdlog::warn("{}: restarting {} after: {}", self->state.cfg.name,
               child.spec.id, render(msg.reason));
  ++child.restarts;
  start_child(self, child);
}

} // namespace

caf::behavior supervisor(self_ptr self, supervisor_config cfg) {
  self->state.cfg = std::move(cfg);
  self->set_exit_handler([self](caf::exit_msg& msg) { on_exit(self, msg); });
  for (auto& spec : self->state.cfg.children)
    self->state.children.push_back(child_state{spec, nullptr, 0, {}});
  for (auto& child : self->state.children)
    start_child(self, child);
  return {
    [self](caf::get_atom) {
      // Child ids with their restart counts, for tests and status pages.
      std::vector<std::string> result;
      for (auto& child : self->state.children)
        result.push_back(child.spec.id + ":"
                         + std::to_string(child.restarts));
      return result;
    },
  };
}

} // namespace keel
