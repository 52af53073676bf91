// `run_node`: a node run as a process, from its logging and limits to the
// signals that drain and stop it.

#include "keel/node.hpp"

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <iostream>
#include <sys/stat.h>
#include <thread>

#include <sys/prctl.h>

#include <caf/all.hpp>
#include <spdlog/spdlog.h>

#include "keel/config_secrets.hpp"
#include "keel/fd_limit.hpp"
#include "keel/logging.hpp"
#include "keel/process_tree.hpp"
#include "keel/run_slots.hpp"
#include "keel/store.hpp"
#include "keel/system_config.hpp"

namespace keel {

namespace {

// Takes SIGINT and SIGTERM on a thread of its own: the first asks `main`
// to drain, the second stops the tree at once (still safe: a stop commits
// what is staged, and every message acknowledged is answered after the
// next start). SIGUSR1 ends the thread once `done` is set (an outside
// SIGUSR1 is ignored).
std::thread signal_thread(sigset_t signals, caf::actor main, caf::actor root,
                          const std::atomic<bool>& done) {
  return std::thread{[signals, main, root, &done] {
    for (int received = 0;;) {
      int sig = 0;
      if (sigwait(&signals, &sig) != 0 || done)
        return;
      if (sig == SIGUSR1)
        continue;
      if (received++ == 0) {
        caf::anon_send(main, atom::drain_v);
      } else {
        spdlog::warn("second signal: stopping now");
        caf::anon_send_exit(root, caf::exit_reason::user_shutdown);
      }
    }
  }};
}

// Runs until the root stops on its own, or a signal drains and stops the
// node; returns the root's exit reason.
caf::error wait_for_stop(caf::scoped_actor& self, node& n,
                         const sigset_t& signals, caf::timespan drain_timeout) {
  std::atomic<bool> done{false};
  auto waiter = signal_thread(signals, caf::actor{self}, n.root(), done);
  caf::error reason;
  bool stopped = false;
  while (!stopped)
    self->receive(
      [&](caf::down_msg& msg) {
        reason = msg.reason;
        stopped = true;
      },
      [&](atom::drain) {
        n.drain(drain_timeout);
        self->send_exit(n.root(), caf::exit_reason::user_shutdown);
      });
  done = true;
  pthread_kill(waiter.native_handle(), SIGUSR1);
  waiter.join();
  return reason;
}

// The node's side of tool containment: its /proc files are root's, so a
// tool running as the node's user cannot read its environment (API keys,
// tokens) or memory; orphans of tool runs come back to it (to be killed);
// and tool processes run at most `threads.max_concurrent_tools` at once.
void contain_tools(const node_config& cfg) {
  if (::prctl(PR_SET_DUMPABLE, 0) != 0)
    spdlog::warn("cannot make the node non-dumpable ({}): tools running as "
                 "its user can read its environment",
                 std::strerror(errno));
  if (!become_child_subreaper())
    spdlog::warn("cannot become a child subreaper ({}): a tool's process "
                 "that leaves its process group may outlive its run",
                 std::strerror(errno));
  tool_run_slots().set_limit(cfg.threads.max_concurrent_tools);
}

} // namespace

int run_node(const node_config& cfg) {
  // Everything the node creates (data, logs, sockets; also what its tools
  // write) is its user's only: files 0600, folders 0700.
  ::umask(S_IRWXG | S_IRWXO);
  if (auto err = init_logging(cfg.logging, cfg.name, configured_secrets(cfg))) {
    std::cerr << "keel-node: " << cfg.source << ": " << render(err) << '\n';
    return 2;
  }
  for (auto& warning : cfg.warnings)
    spdlog::warn("{}: {}", cfg.source, warning);
  if (auto err = ensure_fd_limit(cfg.gateway.max_connections
                                   + cfg.gateway.max_unauthenticated,
                                 store_max_open_files)) {
    spdlog::error("cannot start node '{}': {}", cfg.name, render(err));
    std::cerr << "keel-node: cannot start: " << error_message(err) << '\n';
    return 2;
  }
  contain_tools(cfg);
  // Signals are taken by a dedicated thread (sigwait), so block them in
  // every thread before any is started.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGUSR1);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  system_config sys_cfg;
  sys_cfg.configure_node(cfg);
  caf::actor_system sys{sys_cfg};
  auto started = node::start(sys, cfg);
  if (!started) {
    spdlog::error("cannot start node '{}': {}", cfg.name,
                  render(started.error()));
    std::cerr << "keel-node: cannot start: " << render(started.error()) << '\n';
    return 1;
  }
  if (!*started) {
    spdlog::info("node '{}' stopped while it waited for its database",
                 cfg.name);
    return 0;
  }
  auto& n = **started;
  std::cout << "keel-node: listening on " << cfg.gateway.host << ':' << n.port()
            << std::endl;
  spdlog::info("node '{}' ready on {}:{} (data in {})", cfg.name,
               cfg.gateway.host, n.port(), cfg.data_dir);
  caf::scoped_actor self{sys};
  self->monitor(n.root());
  auto reason = wait_for_stop(self, n, signals, cfg.shutdown.drain_timeout);
  n.stop();
  if (reason == caf::exit_reason::user_shutdown) {
    spdlog::info("node '{}' stopped", cfg.name);
    return 0;
  }
  spdlog::error("node '{}' stopped: {}", cfg.name, render(reason));
  std::cerr << "keel-node: stopped: " << render(reason) << '\n';
  return 1;
}

} // namespace keel
