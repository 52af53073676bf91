#pragma once

// The node's own health check, on a thread of its own: every `interval` it
// asks the orchestrator and persistence for an answer within `deadline`.
// Their answers make the node live; with the recovery done, the store
// writable and no drain under way it is also ready. What it finds goes to
// the gateway's probes (`/healthz`, `/readyz`), the `keel_ready` and
// `keel_draining` gauges and the service manager: `READY=1` once first
// ready, `WATCHDOG=1` after each check the tree answered (a wedged node
// stops pinging and is restarted), `STATUS=` lines when the state changes.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include <caf/actor_system.hpp>

#include "keel/ws_server.hpp"

namespace keel {

/// What one check found.
struct health_state {
  bool live = false;
  bool ready = false;
  /// Why the node is not ready (or "ready").
  std::string status;
};

/// Checks the tree of `sys` once, waiting at most `deadline` for each
/// component; `draining` makes a live node not ready.
health_state check_health(caf::actor_system& sys,
                          std::chrono::milliseconds deadline, bool draining);

class health_monitor {
public:
  /// Starts checking at once. `server` may be null (no gateway).
  health_monitor(caf::actor_system& sys, std::shared_ptr<ws_server> server);

  /// Stops the thread (waits for a check under way).
  ~health_monitor();

  health_monitor(const health_monitor&) = delete;
  health_monitor& operator=(const health_monitor&) = delete;

  /// The drain started: not ready from now on, `STOPPING=1` sent.
  void draining();

  /// Time between checks: 1 s, or half the service manager's watchdog
  /// interval if that is shorter.
  static std::chrono::milliseconds interval();

  /// How long a check waits for the tree: 5 s (a node recovering or
  /// draining tens of thousands of threads may be slow to answer, not
  /// wedged), or half the watchdog interval if that is shorter (a ping
  /// must come within it); at least `interval()`.
  static std::chrono::milliseconds deadline();

private:
  void run();
  void publish(const health_state& now);

  caf::actor_system& sys_;
  std::shared_ptr<ws_server> server_;
  std::atomic<bool> draining_{false};
  bool announced_ready_ = false;
  std::string last_status_;
  std::mutex mtx_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::thread thread_;
};

} // namespace keel
