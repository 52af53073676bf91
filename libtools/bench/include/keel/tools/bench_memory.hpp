#pragma once

// keel-bench's memory runs against a node: what one live idle thread and
// one idle WebSocket connection cost in the node's resident memory, read
// from `rss_bytes` of its `GET /api/v1/status` before and after. The
// reports as JSON, as a table and as rows of the memory table in
// docs/benchmarks.md.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "keel/endpoint.hpp"
#include "keel/error.hpp"
#include "keel/tools/ws_load.hpp"

namespace keel::bench {

/// How long the memory runs poll the node's RSS after the work is done,
/// waiting for it to stop growing (allocators and the store settling).
constexpr auto rss_settle_timeout = std::chrono::seconds{10};

/// The node's RSS after the work, polled until it stops growing.
struct settled_rss {
  uint64_t rss_bytes = 0;
  /// From the first poll to the last.
  double seconds = 0;
  /// False when it still grew at `rss_settle_timeout`.
  bool settled = false;
};

// -- idle threads
// ---------------------------------------------------------------

/// What `run_idle_threads` does.
struct idle_threads_options {
  /// The node, the connections, the window and `threads` (one message to
  /// each, flat out); `messages`, `warmup` and `rate` are set by the run.
  load_options load;
  /// When non-zero, wait this long after the measurement and read the live
  /// threads and the RSS again (the node's `threads.idle_timeout` should be
  /// shorter, so that the threads have passivated by then).
  std::chrono::milliseconds passivate_wait{0};
  /// When set, called with a line saying what the run does next.
  std::function<void(const std::string&)> progress;
};

/// The outcome of `run_idle_threads`.
struct idle_threads_result {
  /// The load: one message to each thread.
  load_result load;
  /// Threads (one message each).
  size_t threads = 0;
  uint64_t rss_before = 0;
  settled_rss after;
  /// Live conversations (`threads.active`) before and after.
  uint64_t live_before = 0;
  uint64_t live_after = 0;
  /// Set when `passivate_wait` was given.
  bool passivation_checked = false;
  std::chrono::milliseconds passivate_wait{0};
  uint64_t live_after_wait = 0;
  /// Conversations stopped for being idle (`threads.passivations`) during
  /// the wait.
  uint64_t passivations_during_wait = 0;
  uint64_t rss_after_wait = 0;
  /// What made the run unclean besides the load's checks.
  std::vector<std::string> problems;

  /// (RSS after - RSS before) / threads; may be negative.
  double bytes_per_thread() const noexcept;

  /// True when the load was clean, every thread was live afterwards and no
  /// status read failed.
  bool clean() const noexcept;
};

/// Reads the node's RSS, sends one message to each of `threads` fresh
/// threads and waits for every answer, waits for the RSS to settle and
/// reads it again; then, with `passivate_wait`, waits and reads the live
/// threads and the RSS once more. Fails when the node cannot be reached,
/// refuses the token or has no status endpoint.
caf::expected<idle_threads_result>
run_idle_threads(const idle_threads_options& opts);

nlohmann::json to_json(const idle_threads_result& x);
std::string render(const idle_threads_result& x);
std::string markdown_row(const idle_threads_result& x,
                         const std::string& label);

// -- idle connections
// -----------------------------------------------------------

/// Open files keel-bench keeps besides the idle connections (standard
/// streams, status calls, the resolver, the I/O context).
constexpr size_t idle_connections_fd_reserve = 64;

/// Idle connections per local source address: below the ~28,000 ephemeral
/// ports Linux gives one (address, destination) pair by default.
constexpr size_t connections_per_source_address = 20000;

/// What `run_idle_connections` does.
struct idle_connections_options {
  /// The node (and token).
  endpoint node;
  /// WebSocket connections to open.
  size_t connections = 1000;
  /// How long to keep them open once all are open and the RSS was read.
  std::chrono::milliseconds hold{3000};
  /// Connection attempts in flight at once.
  size_t concurrency = 256;
  /// When set, called with a line saying what the run does next.
  std::function<void(const std::string&)> progress;
};

/// The outcome of `run_idle_connections`.
struct idle_connections_result {
  size_t requested = 0;
  /// Connections upgraded to WebSocket.
  size_t opened = 0;
  /// Connections the node answered with 503 (its `gateway.max_connections`).
  size_t refused = 0;
  /// Connections that failed otherwise (connect, handshake, token).
  size_t failed = 0;
  /// Open connections that closed or failed before keel-bench closed them.
  size_t lost = 0;
  /// Local source addresses the connections were spread over (0: the
  /// kernel chose, the node not being on 127.0.0.0/8).
  size_t source_addresses = 0;
  /// RLIMIT_NOFILE of keel-bench after raising it.
  uint64_t fd_limit = 0;
  /// From the first connection attempt to the last outcome.
  double open_seconds = 0;
  uint64_t rss_before = 0;
  settled_rss after;
  /// The node's `gateway.connections_open` before and with them open.
  uint64_t node_connections_before = 0;
  uint64_t node_connections_after = 0;
  /// The node's RSS and open connections after closing them (0 when the
  /// status could not be read).
  uint64_t rss_after_close = 0;
  uint64_t node_connections_after_close = 0;
  /// The first few failures, for diagnosis.
  std::vector<std::string> error_samples;
  /// What made the run unclean besides the counts above.
  std::vector<std::string> problems;

  /// (RSS after - RSS before) / opened; may be negative.
  double bytes_per_connection() const noexcept;

  /// True when every connection opened, none was refused or lost, and no
  /// status read failed.
  bool clean() const noexcept;
};

/// Raises keel-bench's RLIMIT_NOFILE to the hard limit, reads the node's
/// RSS, opens `connections` idle WebSocket connections (spread over the
/// source addresses 127.0.0.1, 127.0.0.2, ... when the node is on
/// 127.0.0.0/8), waits for the RSS to settle and reads it again, keeps them
/// open for `hold`, then closes them. Fails with `ec::config_invalid` when
/// the open files limit cannot fit `connections`, and when the node cannot
/// be reached, refuses the token or has no status endpoint.
caf::expected<idle_connections_result>
run_idle_connections(const idle_connections_options& opts);

nlohmann::json to_json(const idle_connections_result& x);
std::string render(const idle_connections_result& x);
std::string markdown_row(const idle_connections_result& x,
                         const std::string& label);

/// The header of the memory table in docs/benchmarks.md (two lines), for
/// the rows of both memory runs.
std::string memory_markdown_header();

/// A row of that table for a run that failed before measuring: `what` it
/// was to do ("50000 connections"), `reason` why it failed.
std::string memory_failure_row(const std::string& label,
                               const std::string& what,
                               const std::string& reason);

} // namespace keel::bench
