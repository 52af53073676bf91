#include "keel/supervisor.hpp"

#include <algorithm>
#include <unordered_set>

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

caf::error invalid(const supervisor_config& cfg, const std::string& what) {
  return caf::make_error(ec::config_invalid,
                         "supervisor '" + cfg.name + "': " + what);
}

caf::error validate_spec(const supervisor_config& cfg, const child_spec& spec,
                         const std::string& field) {
  auto& b = spec.backoff;
  if (b.initial < caf::timespan{0})
    return invalid(cfg, field + ".backoff.initial: must not be negative");
  if (b.max < b.initial)
    return invalid(cfg, field + ".backoff.max: must be at least initial");
  if (!(b.multiplier >= 1.0))
    return invalid(cfg, field + ".backoff.multiplier: must be at least 1");
  if (!(b.jitter >= 0.0 && b.jitter <= 1.0))
    return invalid(cfg, field + ".backoff.jitter: must be in 0..1");
  if (b.reset_after < caf::timespan{0})
    return invalid(cfg, field + ".backoff.reset_after: must not be negative");
  auto sd = spec.effective_shutdown();
  if (sd.kind == shutdown_spec::timeout && sd.after <= caf::timespan{0})
    return invalid(cfg, field + ".shutdown: timeout must be positive");
  return caf::none;
}

// Answers a forwarded message with an error; senders of asynchronous
// messages have no one to answer, so the error is logged instead.
void reject(caf::response_promise& rp, caf::error err) {
  if (rp.async()) {
    log_scope scope{log_component::supervisor};
    spdlog::warn("dropped a message: {}", render(err));
    return;
  }
  rp.deliver(std::move(err));
}

} // namespace

std::string to_string(restart_type x) {
  switch (x) {
    case restart_type::permanent: return "permanent";
    case restart_type::transient: return "transient";
    case restart_type::temporary: return "temporary";
  }
  return "unknown";
}

const char* to_string(child_status x) {
  switch (x) {
    case child_status::running: return "running";
    case child_status::restarting: return "restarting";
    case child_status::stopping: return "stopping";
    case child_status::stopped: return "stopped";
  }
  return "unknown";
}

bool is_normal_exit(const caf::error& reason) {
  if (!reason || reason == caf::exit_reason::normal
      || reason == caf::exit_reason::user_shutdown)
    return true;
  return reason.category() == error_category
         && reason.code() == static_cast<uint8_t>(ec::shutdown);
}

void apply_settings(supervisor_config& cfg, const supervisor_settings& s) {
  cfg.strategy = s.strategy;
  cfg.max_restarts = s.max_restarts;
  cfg.period = s.period;
  auto apply = [&](child_spec& spec) {
    spec.buffer = s.buffer;
    spec.backoff = s.backoff;
    if (!spec.supervisor)
      spec.shutdown = shutdown_spec::with_timeout(s.shutdown_timeout);
  };
  for (auto& spec : cfg.children)
    apply(spec);
  apply(cfg.child_template);
}

caf::error validate(const supervisor_config& cfg) {
  if (cfg.name.empty())
    return caf::make_error(ec::config_invalid, "supervisor: name: empty");
  if (cfg.period <= caf::timespan{0})
    return invalid(cfg, "period: must be positive");
  if (cfg.dynamic) {
    if (!cfg.children.empty())
      return invalid(cfg, "children: a dynamic supervisor has none");
    if (!cfg.dynamic_start)
      return invalid(cfg, "dynamic_start: missing");
    if (cfg.child_template.registry_name)
      return invalid(cfg, "child_template.registry_name: dynamic children "
                          "cannot share one registry name");
    return validate_spec(cfg, cfg.child_template, "child_template");
  }
  std::unordered_set<std::string> ids;
  std::unordered_set<caf::atom_value> names;
  for (size_t i = 0; i < cfg.children.size(); ++i) {
    auto& spec = cfg.children[i];
    auto field = "children[" + std::to_string(i) + "]";
    if (spec.id.empty() || spec.id.find('/') != std::string::npos)
      return invalid(cfg, field + ".id: must be non-empty without '/'");
    if (!ids.insert(spec.id).second)
      return invalid(cfg, field + ".id: duplicate id '" + spec.id + "'");
    if (spec.registry_name && !names.insert(*spec.registry_name).second)
      return invalid(cfg, field + ".registry_name: duplicate");
    if (!spec.start)
      return invalid(cfg, field + ".start: missing");
    if (auto err = validate_spec(cfg, spec, field))
      return err;
  }
  return caf::none;
}

// -- supervisor_state: start and restart --------------------------------------

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

// -- stopping
// ------------------------------------------------------------------

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

// -- held messages ----------------------------------------------------------

void supervisor_state::release_held(child_entry& child, const caf::error& why) {
  for (auto& msg : child.held)
    if (msg.mid.is_request() && msg.sender)
      msg.sender->enqueue(self->ctrl(), msg.mid.response_id(),
                          caf::make_message(why), self->context());
  child.held.clear();
}

void supervisor_state::deliver_held(child_entry& child) {
  auto ptr = caf::actor_cast<caf::abstract_actor*>(child.actor);
  for (auto& msg : child.held)
    ptr->enqueue(caf::make_mailbox_element(std::move(msg.sender), msg.mid,
                                           std::move(msg.stages),
                                           std::move(msg.content)),
                 self->context());
  child.held.clear();
}

void supervisor_state::forward(const std::string& id, caf::message content) {
  auto rp = self->make_response_promise();
  auto child = find(id);
  if (child == nullptr && cfg.dynamic && start_dynamic(id, {}))
    child = find(id); // Given up, or never started: it starts for this one.
  if (child == nullptr) {
    reject(rp, caf::make_error(ec::not_found,
                               cfg.name + ": no child '" + id + "'"));
    return;
  }
  bool hold = child->status == child_status::restarting
              || (child->status == child_status::stopping
                  && child->restart_pending);
  if (child->status == child_status::running && child->actor) {
    caf::actor_cast<caf::abstract_actor*>(child->actor)
      ->enqueue(caf::make_mailbox_element(rp.source(), rp.id(), rp.stages(),
                                          std::move(content)),
                self->context());
    return;
  }
  if (!hold) {
    reject(rp, caf::make_error(ec::unavailable, "child '" + id + "' is "
                                                  + to_string(child->status)));
    return;
  }
  if (child->held.size() >= child->spec.buffer) {
    reject(rp, caf::make_error(
                 ec::overloaded,
                 "child " + id + " is restarting and its buffer of "
                   + std::to_string(child->spec.buffer) + " messages is full"));
    return;
  }
  child->held.push_back(
    held_message{rp.source(), rp.id(), rp.stages(), std::move(content)});
}

// -- inspection and operation ---------------------------------------------

child_entry* supervisor_state::find(const std::string& id) {
  auto i = by_id.find(id);
  return i == by_id.end() ? nullptr : &children.at(i->second);
}

std::vector<child_info> supervisor_state::snapshot() {
  std::vector<child_info> result;
  result.reserve(children.size());
  auto now = self->clock().now();
  for (auto& [order, child] : children) {
    child_info info;
    info.id = child.spec.id;
    info.state = to_string(child.status);
    info.restarts = child.restarts;
    info.last_exit = child.last_exit ? render(child.last_exit) : "";
    info.supervisor = child.spec.supervisor;
    if (child.actor) {
      info.uptime = now - child.started;
      info.actor_id = child.actor.id();
    }
    result.push_back(std::move(info));
  }
  return result;
}

void supervisor_state::which_children(caf::response_promise rp) {
  struct collector {
    caf::response_promise rp;
    std::vector<child_info> result;
    size_t pending = 0;
  };
  auto acc = std::make_shared<collector>();
  acc->rp = std::move(rp);
  acc->result = snapshot();
  size_t index = 0;
  for (auto& [order, child] : children) {
    if (child.spec.supervisor && child.actor) {
      ++acc->pending;
      auto done = [acc] {
        if (--acc->pending == 0)
          acc->rp.deliver(std::move(acc->result));
      };
      self->request(child.actor, caf::infinite, atom::children_v)
        .then(
          [acc, index, done](std::vector<child_info>& xs) {
            acc->result[index].children = std::move(xs);
            done();
          },
          [done](caf::error&) {
            // Gone meanwhile: shown without children.
            done();
          });
    }
    ++index;
  }
  if (acc->pending == 0)
    acc->rp.deliver(std::move(acc->result));
}

void supervisor_state::kill(const std::string& path, caf::error reason,
                            caf::response_promise rp) {
  auto slash = path.find('/');
  auto id = path.substr(0, slash);
  auto child = find(id);
  if (child == nullptr
      || (slash != std::string::npos && !child->spec.supervisor)) {
    rp.deliver(caf::make_error(ec::not_found,
                               cfg.name + ": no child at path '" + path + "'"));
    return;
  }
  if (!child->actor) {
    rp.deliver(caf::make_error(ec::unavailable, cfg.name + ": child at path '"
                                                  + path + "' is "
                                                  + to_string(child->status)));
    return;
  }
  if (slash == std::string::npos) {
    log_scope scope{log_component::supervisor};
    spdlog::warn("{}: killing child '{}': {}", cfg.name, id, render(reason));
    self->send_exit(child->actor, std::move(reason));
    rp.deliver(caf::ok_atom_v);
    return;
  }
  self
    ->request(child->actor, caf::infinite, atom::kill_child_v,
              path.substr(slash + 1), std::move(reason))
    .then([rp](caf::ok_atom) mutable { rp.deliver(caf::ok_atom_v); },
          [rp, path, name = cfg.name](caf::error& err) mutable {
            // Name the whole path, as the caller gave it.
            if (err.category() == error_category
                && err.code() == static_cast<uint8_t>(ec::not_found))
              err = caf::make_error(ec::not_found,
                                    name + ": no child at path '" + path + "'");
            rp.deliver(std::move(err));
          });
}

caf::expected<caf::actor>
supervisor_state::start_dynamic(const std::string& id,
                                const caf::message& args) {
  if (!cfg.dynamic)
    return caf::make_error(ec::conflict,
                           cfg.name + ": not a dynamic supervisor");
  if (shutting_down)
    return caf::make_error(ec::unavailable, cfg.name + ": shutting down");
  if (id.empty() || id.find('/') != std::string::npos)
    return caf::make_error(ec::config_invalid,
                           cfg.name
                             + ": child id must be non-empty without '/'");
  if (by_id.count(id) != 0)
    return caf::make_error(ec::conflict,
                           cfg.name + ": child '" + id + "' already exists");
  auto order = next_order++;
  auto spec = cfg.child_template;
  spec.id = id;
  spec.start = nullptr; // `start` calls `cfg.dynamic_start`.
  auto& child = children.emplace(order, child_entry{std::move(spec), order})
                  .first->second;
  child.dynamic_args = args;
  by_id.emplace(id, order);
  if (!start(child)) {
    auto err = child.last_exit;
    erase(order);
    return err;
  }
  return child.actor;
}

void supervisor_state::terminate(const std::string& id,
                                 caf::response_promise rp) {
  auto child = find(id);
  if (child == nullptr) {
    rp.deliver(
      caf::make_error(ec::not_found, cfg.name + ": no child '" + id + "'"));
    return;
  }
  child->restart_pending = false;
  child->remove_on_stop = cfg.dynamic
                          || child->spec.restart == restart_type::temporary;
  if (child->status == child_status::stopping) {
    child->stop_waiters.push_back(std::move(rp));
    return;
  }
  child->timer = 0; // Cancels a pending backoff.
  if (!begin_stop(*child)) {
    child->status = child_status::stopped;
    release_held(*child, caf::make_error(ec::unavailable,
                                         "child '" + id + "' stopped"));
    if (child->remove_on_stop)
      erase(child->order);
    rp.deliver(caf::ok_atom_v);
    return;
  }
  child->stop_waiters.push_back(std::move(rp));
}

// -- the behaviour ------------------------------------------------------------

caf::behavior supervisor(caf::stateful_actor<supervisor_state>* self,
                         supervisor_config cfg) {
  // Children are monitored, not linked (a child dying of CAF's untrappable
  // `kill` would take a linked supervisor with it); if the supervisor dies
  // anyway (killed, exception), this stops the children it still has.
  self->attach_functor([live = self->state.by_addr](const caf::error& why) {
    auto reason = why ? why : caf::make_error(ec::shutdown);
    for (auto& [addr, order] : *live)
      if (auto ptr = caf::actor_cast<caf::strong_actor_ptr>(addr))
        ptr->enqueue(nullptr, caf::make_message_id(),
                     caf::make_message(caf::exit_msg{addr, reason}), nullptr);
    live->clear();
  });
  self->set_down_handler(
    [self](caf::down_msg& msg) { self->state.on_down(msg); });
  self->set_exit_handler(
    [self](caf::exit_msg& msg) { self->state.on_exit(msg); });
  if (auto err = self->state.init(std::move(cfg))) {
    log_scope scope{log_component::supervisor};
    spdlog::error("{}", render(err));
    self->quit(std::move(err));
    return {};
  }
  if (self->state.quit_called)
    return {};
  return {
    [self](atom::children) {
      self->state.which_children(self->make_response_promise());
    },
    [self](atom::kill_child, std::string& path, caf::error& reason) {
      self->state.kill(path, std::move(reason), self->make_response_promise());
    },
    [self](atom::start_child, std::string& id,
           caf::message& args) -> caf::result<caf::actor> {
      auto res = self->state.start_dynamic(id, args);
      if (!res)
        return std::move(res.error());
      return std::move(*res);
    },
    [self](atom::stop_child, std::string& id) {
      self->state.terminate(id, self->make_response_promise());
    },
    [self](atom::forward, std::string& id, caf::message& content) {
      self->state.forward(id, std::move(content));
    },
    [self](atom::restart, uint64_t order, uint64_t token) {
      self->state.on_restart_timer(order, token);
    },
    [self](atom::restart, uint64_t order, caf::error& reason) {
      // A start failed: handled as an immediate exit of that incarnation.
      self->state.decide(order, std::move(reason));
    },
    [self](atom::stop_timer, uint64_t order, uint64_t token) {
      self->state.on_stop_timer(order, token);
    },
  };
}

} // namespace keel
