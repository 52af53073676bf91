// The supervisor's operations on its children: inspection, kill by path,
// dynamic starts and stops.

#include "keel/supervisor.hpp"

#include <caf/all.hpp>
#include <spdlog/spdlog.h>

#include "keel/error.hpp"
#include "keel/logging.hpp"

namespace keel {

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

} // namespace keel
