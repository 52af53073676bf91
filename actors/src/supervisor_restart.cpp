// The supervisor's starts and restarts: a child's incarnations, the
// restart decision with its intensity and backoff, and group restarts.

#include "keel/supervisor.hpp"

#include <algorithm>
#include <random>

#include <caf/all.hpp>
#include <spdlog/spdlog.h>

#include "keel/error.hpp"
#include "keel/logging.hpp"
#include "keel/system_config.hpp"

namespace keel {

namespace {

template <class Rep, class Period>
int64_t to_millis(std::chrono::duration<Rep, Period> d) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(d).count();
}

} // namespace

supervisor_state::supervisor_state(self_ptr self)
  : self(self),
    by_addr(std::make_shared<std::unordered_map<caf::actor_addr, uint64_t>>()) {
  // nop
}

caf::error supervisor_state::init(supervisor_config config) {
  cfg = std::move(config);
  if (auto err = validate(cfg))
    return err;
  rng.seed(cfg.seed != 0 ? cfg.seed : std::random_device{}());
  for (auto& spec : cfg.children) {
    auto order = next_order++;
    by_id.emplace(spec.id, order);
    children.emplace(order, child_entry{spec, order});
  }
  for (auto& [order, child] : children) {
    if (!start(child)) {
      // As OTP: a child that cannot start fails the supervisor's start.
      auto reason = caf::make_error(
        ec::shutdown, cfg.name + ": child '" + child.spec.id
                        + "' failed to start: " + render(child.last_exit));
      begin_shutdown(reason);
      return caf::none;
    }
  }
  return caf::none;
}

// Spawns the child's next incarnation; false (and last_exit set) if the
// start function throws or returns no actor.
bool supervisor_state::start(child_entry& child) {
  caf::actor hdl;
  try {
    hdl = child.spec.start
            ? child.spec.start(self)
            : cfg.dynamic_start(self, child.spec.id, child.dynamic_args);
  } catch (std::exception& ex) {
    child.last_exit = caf::make_error(ec::unavailable, ex.what());
  }
  if (!hdl) {
    if (!child.last_exit)
      child.last_exit = caf::make_error(ec::unavailable,
                                        "start returned no actor");
    child.status = child_status::restarting;
    return false;
  }
  child.actor = hdl;
  child.status = child_status::running;
  child.started = self->clock().now();
  child.timer = 0;
  self->monitor(hdl);
  by_addr->emplace(hdl.address(), child.order);
  if (child.spec.registry_name)
    components_of(self->system())
      .put(*child.spec.registry_name,
           caf::actor_cast<caf::strong_actor_ptr>(hdl));
  deliver_held(child);
  return true;
}

void supervisor_state::on_down(const caf::down_msg& msg) {
  auto i = by_addr->find(msg.source);
  if (i == by_addr->end())
    return; // Not (or no longer) ours.
  auto order = i->second;
  by_addr->erase(i);
  auto& child = children.at(order);
  if (child.spec.registry_name)
    components_of(self->system()).erase(*child.spec.registry_name);
  child.actor = nullptr;
  exited(child, msg.reason);
}

void supervisor_state::exited(child_entry& child, caf::error reason) {
  child.last_exit = reason;
  if (child.status == child_status::stopping) {
    stopped(child);
    return;
  }
  if (plan) {
    auto& q = plan->queue;
    auto i = std::find(q.begin(), q.end(), child.order);
    if (i != q.end()) {
      // Died before its turn in the stop sequence: it counts as stopped.
      q.erase(i);
      child.status = child.restart_pending ? child_status::restarting
                                           : child_status::stopped;
      if (child.remove_on_stop)
        erase(child.order);
      return;
    }
    child.status = child_status::restarting;
    deferred.emplace_back(child.order, std::move(reason));
    return;
  }
  decide(child.order, std::move(reason));
}

void supervisor_state::decide(uint64_t order, caf::error reason) {
  auto i = children.find(order);
  if (i == children.end() || i->second.actor)
    return;
  auto& child = i->second;
  auto type = child.spec.restart;
  bool restart
    = !shutting_down
      && (type == restart_type::permanent
          || (type == restart_type::transient && !is_normal_exit(reason)));
  if (!restart) {
    child.status = child_status::stopped;
    release_held(child, caf::make_error(ec::unavailable,
                                        "child '" + child.spec.id
                                          + "' stopped: " + render(reason)));
    if (cfg.dynamic || type == restart_type::temporary)
      erase(order);
    return;
  }
  if (cfg.dynamic) {
    // Each dynamic child has its own budget: one that crash-loops is given
    // up alone, and never costs its siblings their restarts.
    if (intensity_exceeded(child.restart_times)) {
      give_up(child, reason);
      return;
    }
  } else if (intensity_exceeded(restarts)) {
    log_scope scope{log_component::supervisor};
    spdlog::error("{}: restart intensity exceeded ({} restarts in {} ms); "
                  "shutting down after child '{}' exited: {}",
                  cfg.name, cfg.max_restarts, to_millis(cfg.period),
                  child.spec.id, render(reason));
    begin_shutdown(
      caf::make_error(ec::shutdown, cfg.name + ": restart intensity exceeded"));
    return;
  }
  auto delay = backoff_delay(child, self->clock().now());
  log_scope scope{log_component::supervisor};
  spdlog::warn("{}: restarting '{}' in {} ms after: {}", cfg.name,
               child.spec.id, to_millis(delay), render(reason));
  metrics_of(self->system()).restarted(cfg.name);
  if (cfg.dynamic || cfg.strategy == restart_strategy::one_for_one)
    schedule_restart(child, delay);
  else
    begin_group(order, delay);
}

bool supervisor_state::intensity_exceeded(std::vector<time_point>& window) {
  auto now = self->clock().now();
  window.push_back(now);
  auto recent = std::find_if(window.begin(), window.end(), [&](time_point t) {
    return t >= now - cfg.period;
  });
  window.erase(window.begin(), recent);
  return window.size() > cfg.max_restarts;
}

void supervisor_state::give_up(child_entry& child, const caf::error& reason) {
  log_scope scope{log_component::supervisor};
  spdlog::error("{}: child '{}' restarted more than {} times in {} ms; "
                "stopped until it is started again, after: {}",
                cfg.name, child.spec.id, cfg.max_restarts,
                to_millis(cfg.period), render(reason));
  child.status = child_status::stopped;
  release_held(child,
               caf::make_error(ec::unavailable,
                               "child '" + child.spec.id
                                 + "' failed too often: " + render(reason)));
  erase(child.order);
}

caf::timespan supervisor_state::backoff_delay(child_entry& child,
                                              time_point now) {
  auto& b = child.spec.backoff;
  if (b.initial <= caf::timespan{0})
    return caf::timespan{0};
  if (now - child.started >= b.reset_after)
    child.next_delay = caf::timespan{0};
  auto base = child.next_delay > caf::timespan{0} ? child.next_delay
                                                  : b.initial;
  base = std::min(base, b.max);
  auto next = static_cast<double>(base.count()) * b.multiplier;
  child.next_delay = next >= static_cast<double>(b.max.count())
                       ? b.max
                       : caf::timespan{static_cast<int64_t>(next)};
  if (b.jitter <= 0)
    return base;
  std::uniform_real_distribution<double> dist{-b.jitter, b.jitter};
  auto jittered = static_cast<double>(base.count()) * (1.0 + dist(rng));
  return caf::timespan{static_cast<int64_t>(jittered)};
}

void supervisor_state::schedule_restart(child_entry& child,
                                        caf::timespan delay) {
  ++child.restarts;
  child.status = child_status::restarting;
  if (delay > caf::timespan{0}) {
    child.timer = next_token++;
    self->delayed_send(self, delay, atom::restart_v, child.order, child.timer);
    return;
  }
  if (!start(child))
    self->send(self, atom::restart_v, child.order, child.last_exit);
}

void supervisor_state::on_restart_timer(uint64_t order, uint64_t token) {
  if (order == 0) {
    if (token == group_timer && !shutting_down)
      start_group();
    return;
  }
  auto i = children.find(order);
  if (i == children.end() || i->second.timer != token
      || i->second.status != child_status::restarting || shutting_down)
    return;
  if (!start(i->second))
    self->send(self, atom::restart_v, order, i->second.last_exit);
}

// -- group restarts (one_for_all, rest_for_one) -------------------------------

void supervisor_state::begin_group(uint64_t failed, caf::timespan delay) {
  auto first = cfg.strategy == restart_strategy::one_for_all
                 ? children.begin()
                 : children.find(failed);
  stop_plan p;
  p.delay = delay;
  std::vector<uint64_t> group = std::move(pending_group);
  pending_group.clear();
  group_timer = 0;
  for (auto i = first; i != children.end(); ++i) {
    auto& child = i->second;
    bool temporary = child.spec.restart == restart_type::temporary;
    // As OTP: the others are stopped; temporary ones are then forgotten.
    child.restart_pending = !temporary || child.order == failed;
    child.remove_on_stop = !child.restart_pending;
    if (child.restart_pending) {
      ++child.restarts;
      group.push_back(child.order);
    }
    child.timer = 0; // Its own pending backoff, if any, is void now.
    if (child.actor)
      p.queue.push_front(child.order); // Reverse start order.
    else if (child.status != child_status::stopping)
      child.status = child_status::restarting;
  }
  std::sort(group.begin(), group.end());
  group.erase(std::unique(group.begin(), group.end()), group.end());
  p.group = std::move(group);
  plan = std::move(p);
  plan_step();
}

void supervisor_state::start_group() {
  auto group = std::move(pending_group);
  pending_group.clear();
  group_timer = 0;
  for (auto order : group) {
    auto i = children.find(order);
    if (i == children.end() || i->second.actor)
      continue;
    auto& child = i->second;
    child.restart_pending = false;
    if (!start(child))
      self->send(self, atom::restart_v, order, child.last_exit);
  }
}

} // namespace keel
