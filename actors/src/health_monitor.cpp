#include "keel/health_monitor.hpp"

#include <caf/all.hpp>
#include <spdlog/spdlog.h>

#include "keel/logging.hpp"
#include "keel/lookup.hpp"
#include "keel/service_notify.hpp"

namespace keel {

health_state check_health(caf::actor_system& sys,
                          std::chrono::milliseconds deadline, bool draining) {
  health_state result;
  auto orch = lookup<orchestrator_actor>(sys, names::orchestrator);
  auto db = lookup<persistence_actor>(sys, names::persistence);
  if (!orch || !db) {
    result.status = "restarting a component";
    return result;
  }
  // One after the other, within one deadline together.
  caf::scoped_actor self{sys};
  auto until = std::chrono::steady_clock::now() + deadline;
  auto left = [until] {
    return std::max(caf::timespan{std::chrono::milliseconds{1}},
                    caf::timespan{until - std::chrono::steady_clock::now()});
  };
  bool recovered = false;
  bool writable = false;
  int answers = 0;
  self->request(orch, left(), atom::health_v)
    .receive(
      [&](bool done) {
        recovered = done;
        ++answers;
      },
      [](caf::error&) {});
  if (answers == 1)
    self->request(db, left(), atom::writable_v)
      .receive(
        [&](bool ok) {
          writable = ok;
          ++answers;
        },
        [](caf::error&) {});
  bool answered = answers == 2;
  result.live = answered;
  result.ready = answered && recovered && writable && !draining;
  result.status = !answered    ? "unresponsive: the actor tree did not answer"
                  : draining   ? "draining"
                  : !recovered ? "recovering"
                  : !writable  ? "not ready: the store cannot write"
                               : "ready";
  return result;
}

health_monitor::health_monitor(caf::actor_system& sys,
                               std::shared_ptr<ws_server> server)
  : sys_(sys), server_(std::move(server)) {
  // The first check before the node says it listens: its probes answer
  // from the start.
  publish(check_health(sys_, deadline(), false));
  thread_ = std::thread{[this] { run(); }};
}

health_monitor::~health_monitor() {
  {
    std::lock_guard<std::mutex> guard{mtx_};
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void health_monitor::draining() {
  draining_ = true;
  if (server_)
    server_->start_drain();
  service_notify::stopping("draining: finishing the turns under way");
  metrics_of(sys_).health(false, true);
}

std::chrono::milliseconds health_monitor::deadline() {
  std::chrono::milliseconds result{5000};
  if (auto watchdog = service_notify::watchdog_interval())
    result = std::min(
      result,
      std::chrono::duration_cast<std::chrono::milliseconds>(*watchdog / 2));
  return std::max(result, interval());
}

std::chrono::milliseconds health_monitor::interval() {
  std::chrono::milliseconds result{1000};
  if (auto watchdog = service_notify::watchdog_interval())
    result = std::min(
      result,
      std::chrono::duration_cast<std::chrono::milliseconds>(*watchdog / 2));
  return std::max(result, std::chrono::milliseconds{10});
}

void health_monitor::run() {
  auto every = interval();
  auto wait = deadline();
  std::unique_lock<std::mutex> lock{mtx_};
  while (!stop_) {
    lock.unlock();
    auto started = std::chrono::steady_clock::now();
    publish(check_health(sys_, wait, draining_));
    lock.lock();
    wake_.wait_until(lock, started + every, [this] { return stop_; });
  }
}

void health_monitor::publish(const health_state& now) {
  if (server_)
    server_->set_health(now.live, now.ready);
  metrics_of(sys_).health(now.ready, draining_);
  if (now.live)
    service_notify::watchdog();
  if (now.ready && !announced_ready_) {
    announced_ready_ = true;
    last_status_ = now.status;
    service_notify::ready(now.status);
    return;
  }
  if (now.status != last_status_) {
    if (!now.live || (!now.ready && !draining_)) {
      log_scope scope{log_component::node};
      spdlog::warn("node health: {}", now.status);
    }
    last_status_ = now.status;
    service_notify::status(now.status);
  }
}

} // namespace keel
