#pragma once

// A real keel-node process on 127.0.0.1 with its own port and data folder,
// for process tests, the crash fuzzer and the recovery benchmark. The
// process dies with its parent and is always stopped (SIGKILL as a last
// resort) when the object goes away.

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <sys/types.h>

#include "keel/endpoint.hpp"
#include "keel/tools/process.hpp"

namespace keel {

/// Path of the keel-node binary under test, from KEEL_NODE_BINARY (which
/// CTest sets). Throws std::runtime_error when it is not set.
std::string node_binary();

/// Path of a sibling binary of `node_binary()` (e.g. "keelctl").
std::string tool_binary(const std::string& name);

class node_process {
public:
  /// Writes `yaml` to `dir/node.yaml` (the caller puts `data_dir` and
  /// `gateway.port: 0` in it) and starts `binary` on it; waits for its
  /// "listening on" line. Throws std::runtime_error with the node's stderr
  /// if it does not come up.
  node_process(std::string dir, std::string yaml,
               std::string binary = node_binary());

  ~node_process();

  node_process(const node_process&) = delete;
  node_process& operator=(const node_process&) = delete;

  /// Starts the node again (after kill or stop) with the same config, and
  /// `extra_args` after it (e.g. `--kill-at POINT`); waits for its
  /// "listening on" line (`launch`, then `await_listening`).
  void start(const std::vector<std::string>& extra_args = {});

  /// Starts the node again without waiting for it to come up. The caller
  /// must call `await_listening` before `address`, on this thread: the
  /// node dies with the thread that started it.
  void launch(const std::vector<std::string>& extra_args = {});

  /// Waits up to 60 s for the launched node's "listening on" line. Throws
  /// std::runtime_error with the node's stderr (after killing it) if it
  /// does not come up.
  void await_listening();

  /// SIGKILL, then reap.
  void kill9();

  /// Stops the node at once: SIGTERM until it exits (the second one skips
  /// the drain; up to 30 s); returns the exit code, or -1 when the node had
  /// to be killed.
  int stop();

  /// The operator's stop: one SIGTERM, so the node drains (finishes its
  /// turns under way up to `shutdown.drain_timeout`) and exits; waits up
  /// to `wait`, then kills it. Returns the exit code, or -1 when killed.
  int drain_stop(std::chrono::milliseconds wait = std::chrono::seconds{60});

  /// True while the process runs.
  bool running();

  /// The running node's pid; -1 when it is not running.
  pid_t pid() const;

  /// The node's current address (port changes on every start).
  endpoint address() const;

  /// The node's address with its admin token (`gateway.admin_token:` of the
  /// config), or with the client token when it has none.
  endpoint admin_address() const;

  /// Everything the node wrote to stderr so far.
  std::string stderr_text() const;

  /// The config file path.
  const std::string& config_path() const {
    return config_path_;
  }

private:
  std::string binary_;
  std::string config_path_;
  std::string stderr_path_;
  std::string token_;
  std::string admin_token_;
  std::unique_ptr<child_process> child_;
  uint16_t port_ = 0;
};

} // namespace keel
