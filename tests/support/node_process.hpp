#pragma once

// Starts a real keel-node process on 127.0.0.1 with its own port and data
// folder, for process-level tests. The process is always stopped (SIGKILL
// as a last resort) when the object goes away.

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <sys/types.h>

#include <nlohmann/json.hpp>

#include "keel/ws_client.hpp"

namespace keel::test {

/// Path of the keel-node binary under test (from KEEL_NODE_BINARY, which
/// CTest sets).
std::string node_binary();

/// Path of a sibling binary of keel-node (e.g. "keelctl").
std::string tool_binary(const std::string& name);

/// The output and exit status of a finished command.
struct command_result {
  int exit_code = -1;
  std::string out;
  std::string err;
};

/// Runs a command to completion (no shell), capturing its output.
command_result run_command(const std::vector<std::string>& argv,
                           std::chrono::seconds timeout
                           = std::chrono::seconds{60});

/// Runs `keelctl verify` (the oracle) on a stopped node's data folder:
/// returns an empty string when every invariant holds, else the exit code
/// and the violations it printed.
std::string data_violations(const std::string& data_dir);

class node_process {
public:
  /// Writes `yaml` to `dir/node.yaml` (the caller puts `data_dir` and
  /// `gateway.port: 0` in it) and starts the node; waits for its
  /// "listening on" line. Throws std::runtime_error with the node's stderr
  /// if it does not come up.
  node_process(std::string dir, std::string yaml);

  ~node_process();

  node_process(const node_process&) = delete;
  node_process& operator=(const node_process&) = delete;

  /// Starts the node again (after kill or stop) with the same config.
  void start();

  /// SIGKILL, then reap.
  void kill9();

  /// SIGTERM and wait for a clean exit; returns the exit code.
  int stop();

  /// True while the process runs.
  bool running();

  /// The node's current address (port changes on every start).
  endpoint address() const;

  /// Everything the node wrote to stderr so far.
  std::string stderr_text() const;

  /// The config file path.
  const std::string& config_path() const {
    return config_path_;
  }

private:
  std::string dir_;
  std::string config_path_;
  std::string stderr_path_;
  std::string token_;
  pid_t pid_ = -1;
  uint16_t port_ = 0;
  int starts_ = 0;
};

/// A node config on 127.0.0.1 (free port) with data in `data_dir`, whose
/// default pool is a scripted provider answering "answer to {input}" after
/// `delay` (so kills land mid-turn too); `extra` is appended as is.
std::string slow_echo_yaml(const std::string& name,
                           const std::string& data_dir,
                           const std::string& delay,
                           const std::string& extra = {});

/// Opens a WebSocket client to the node and consumes its hello frame.
std::unique_ptr<ws_client> connect_client(const endpoint& ep);

/// Receives frames until one satisfies `pred` (parsed JSON) or the
/// deadline passes; returns it or std::nullopt.
template <class Pred>
std::optional<nlohmann::json>
receive_until(ws_client& client, Pred pred,
              std::chrono::milliseconds timeout = std::chrono::seconds{10});

/// Asks for the first 1,000 entries of `thread`'s history; returns them (the
/// history frame's `entries`), or std::nullopt if none came in time.
std::optional<nlohmann::json>
read_history(ws_client& client, const std::string& thread,
             std::chrono::milliseconds timeout = std::chrono::seconds{10});

} // namespace keel::test

#include "node_process_impl.hpp"
