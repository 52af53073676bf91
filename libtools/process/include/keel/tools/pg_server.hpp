#pragma once

// A PostgreSQL server of its own for a test or a benchmark: initdb in a
// fresh folder, then `pg_ctl start` listening on a unix socket in that
// folder and on 127.0.0.1 (a free port), stopped (and its folder left to
// the caller) when the object goes away, or, should this process die
// without that (a failed test's abort, SIGKILL), by a watchdog process at
// once. PostgreSQL refuses to run as root, so as root the server runs as the
// `postgres` user, which then owns the folder.

#include <string>
#include <vector>

#include <sys/types.h>

#include "keel/tools/process.hpp"

namespace keel {

class pg_server {
public:
  /// Creates the cluster in `dir`/pgdata (database `keel`, user `keel`,
  /// trust authentication on the socket and on loopback) and starts it. Throws
  /// std::runtime_error with the tools' output when it cannot.
  explicit pg_server(std::string dir);

  ~pg_server();

  pg_server(const pg_server&) = delete;
  pg_server& operator=(const pg_server&) = delete;

  /// A libpq URI for `database` (created by initdb: `keel`) on the
  /// server's socket.
  std::string url(const std::string& database = "keel") const;

  /// The port, on the unix socket and on 127.0.0.1 (for a test that puts
  /// a proxy between a client and the server).
  int port() const {
    return port_;
  }

  /// Starts the server again after `stop` or `kill9`.
  void start();

  /// `pg_ctl stop -m fast`.
  void stop();

  /// SIGKILL to the postmaster (a crash; `start` recovers from the WAL).
  void kill9();

  bool running() const;

  /// The folder of bin/initdb and bin/pg_ctl (/usr/lib/postgresql/N/bin).
  static std::string bin_dir();

private:
  /// Runs a PostgreSQL tool (as `postgres` when we are root).
  command_result tool_result(const std::vector<std::string>& argv) const;

  /// `tool_result`, throwing with the tool's output when it fails.
  void run_tool(const std::vector<std::string>& argv) const;

  /// Forks the watchdog: it waits for the end of a pipe only this process
  /// holds, then shuts the server down at once (SIGQUIT to the
  /// postmaster, if one still runs).
  void start_watchdog();

  std::string dir_;
  std::string socket_dir_;
  std::string data_dir_;
  int port_ = 0;
  /// This process's end of the watchdog's pipe, and the watchdog.
  int watchdog_fd_ = -1;
  pid_t watchdog_ = -1;
};

} // namespace keel
