// The supervisor's stops: a child's stop with its shutdown timeout, the
// stop plans of group restarts, and the supervisor's own shutdown.

#include "keel/supervisor.hpp"

#include <caf/all.hpp>
#include <spdlog/spdlog.h>

#include "keel/error.hpp"
#include "keel/logging.hpp"

namespace keel {

bool supervisor_state::begin_stop(child_entry& child) {
  if (!child.actor)
    return false;
  if (child.status == child_status::stopping)
    return true;
  child.status = child_status::stopping;
  ++stopping;
  auto sd = child.spec.effective_shutdown();
  if (sd.kind == shutdown_spec::brutal_kill) {
    // We only monitor children, so their `kill` never reaches us.
    self->send_exit(child.actor, caf::exit_reason::kill);
    return true;
  }
  self->send_exit(child.actor, caf::make_error(ec::shutdown, cfg.name));
  if (sd.kind == shutdown_spec::timeout) {
    child.timer = next_token++;
    self->delayed_send(self, sd.after, atom::stop_timer_v, child.order,
                       child.timer);
  }
  return true;
}

void supervisor_state::on_stop_timer(uint64_t order, uint64_t token) {
  auto i = children.find(order);
  if (i == children.end() || i->second.timer != token
      || i->second.status != child_status::stopping || !i->second.actor)
    return;
  log_scope scope{log_component::supervisor};
  spdlog::warn("{}: child '{}' did not stop in time; killing it", cfg.name,
               i->second.spec.id);
  self->send_exit(i->second.actor, caf::exit_reason::kill);
}

void supervisor_state::stopped(child_entry& child) {
  --stopping;
  child.timer = 0;
  child.status = child.restart_pending ? child_status::restarting
                                       : child_status::stopped;
  for (auto& rp : child.stop_waiters)
    rp.deliver(caf::ok_atom_v);
  child.stop_waiters.clear();
  auto order = child.order;
  if (child.status == child_status::stopped)
    release_held(child,
                 caf::make_error(ec::unavailable,
                                 "child '" + child.spec.id + "' stopped"));
  if (child.remove_on_stop)
    erase(order);
  if (!plan)
    return;
  if (plan->parallel) {
    if (stopping == 0)
      plan_done();
  } else if (plan->current == order) {
    plan->current = 0;
    plan_step();
  }
}

// Stops the next child of the plan, or finishes the plan.
void supervisor_state::plan_step() {
  while (!plan->queue.empty()) {
    auto order = plan->queue.front();
    plan->queue.pop_front();
    auto i = children.find(order);
    if (i == children.end())
      continue;
    if (begin_stop(i->second)) {
      plan->current = order;
      return;
    }
  }
  if (plan->current == 0)
    plan_done();
}

void supervisor_state::plan_done() {
  auto p = std::move(*plan);
  plan.reset();
  if (p.shutdown) {
    finish();
    quit_called = true;
    self->quit(p.quit_reason);
    return;
  }
  pending_group = std::move(p.group);
  if (p.delay > caf::timespan{0}) {
    group_timer = next_token++;
    self->delayed_send(self, p.delay, atom::restart_v, uint64_t{0},
                       group_timer);
  } else {
    start_group();
  }
  // Exits that came in meanwhile, in arrival order (as OTP would see them).
  while (!deferred.empty() && !plan && !shutting_down) {
    auto [order, reason] = std::move(deferred.front());
    deferred.pop_front();
    decide(order, std::move(reason));
  }
}

void supervisor_state::begin_shutdown(caf::error reason) {
  if (shutting_down)
    return;
  shutting_down = true;
  pending_group.clear();
  group_timer = 0;
  deferred.clear();
  for (auto& [order, child] : children) {
    child.restart_pending = false;
    if (!child.actor && child.status != child_status::stopping)
      child.status = child_status::stopped;
  }
  auto current = plan ? plan->current : uint64_t{0};
  plan = stop_plan{};
  plan->shutdown = true;
  plan->quit_reason = std::move(reason);
  plan->current = current;
  if (cfg.dynamic) {
    // As OTP's dynamic supervisors: all children stop at once.
    plan->parallel = true;
    for (auto& [order, child] : children)
      begin_stop(child);
    if (stopping == 0)
      plan_done();
    return;
  }
  for (auto i = children.rbegin(); i != children.rend(); ++i)
    if (i->second.actor && i->first != current)
      plan->queue.push_back(i->first);
  plan_step();
}

void supervisor_state::on_exit(const caf::exit_msg& msg) {
  // Exits with reason normal are ignored, as by any actor that does not
  // trap exits.
  if (!msg.reason || msg.reason == caf::exit_reason::normal)
    return;
  begin_shutdown(msg.reason);
}

// Answers what is still waiting and forgets the children.
void supervisor_state::finish() {
  auto why = caf::make_error(ec::unavailable,
                             "supervisor '" + cfg.name + "' stopped");
  for (auto& [order, child] : children) {
    release_held(child, why);
    for (auto& rp : child.stop_waiters)
      rp.deliver(caf::ok_atom_v);
    child.stop_waiters.clear();
  }
}

void supervisor_state::erase(uint64_t order) {
  auto i = children.find(order);
  if (i == children.end())
    return;
  by_id.erase(i->second.spec.id);
  children.erase(i);
}

} // namespace keel
