#pragma once

// The WebSocket load generator of keel-bench: drives a node over many
// connections and threads and checks that every message gets exactly one
// ack and one reply, in order; optionally injects a fault mid-run, to time
// how the node fails over from one provider to the next.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "keel/endpoint.hpp"
#include "keel/error.hpp"
#include "keel/tools/latency.hpp"
#include "keel/tools/traffic.hpp"

namespace keel::bench {

/// A fault `run_load` injects at a fixed time, to measure how fast the node
/// fails over from one provider to the next.
struct fault_options {
  /// When, counted from the start of the measured phase; none: no fault.
  std::optional<std::chrono::milliseconds> at;
  /// Sent SIGKILL at `at` (e.g. the primary provider's server); 0: none.
  int kill_pid = 0;
  /// Appended to the text of every message sent from `at` on, e.g.
  /// keel-fault-llm's directive `[[fault:503]]`, which makes that server
  /// answer 503 to those messages.
  std::string text_suffix;
  /// The provider whose replies show that the node has failed over.
  std::string fallback_provider;
};

/// What `run_load` does.
struct load_options : traffic_options {
  /// The node (and token).
  endpoint node;
  /// WebSocket connections to open.
  size_t connections = 100;
  /// Distinct threads; thread `i` belongs to connection `i % connections`, so
  /// each thread's messages travel on one connection and their order is
  /// observable. Must be at least `connections`.
  size_t threads = 1000;
  /// Flat out: messages in flight (sent, not yet answered) per connection.
  size_t window = 8;
  /// Prefix of thread ids; a random one per run keeps runs apart.
  std::string thread_prefix;
  /// Prefix of message ids (then the connection's index, a dash and a
  /// counter). A run on threads an earlier run used needs another one: a
  /// repeated id is a duplicate, acknowledged and never answered again.
  std::string message_prefix = "c";
  /// A fault to inject during the run, if `fault.at` is set.
  fault_options fault;
  /// Each thread gets exactly one message (each connection sends to each of
  /// its threads once, then stops); set `messages` to `threads`.
  bool one_message_per_thread = false;
  /// When set, called once on the I/O thread when the measured phase
  /// starts (after the warmup). It must not block: the load waits for it.
  std::function<void()> on_measure_start;
};

/// How the node went through the fault of `fault_options`. Times are in
/// milliseconds, on the load generator's clock.
struct failover_result {
  /// True when the fault was injected (the run lasted long enough).
  bool injected = false;
  /// Why injecting failed (e.g. kill failed), if it did.
  std::string fault_error;
  /// From the fault to the first reply by the fallback provider; negative
  /// when none came.
  double to_first_fallback = -1;
  /// Messages the fault touched: outcome at or after the fault (or none),
  /// sent before the first fallback reply arrived.
  uint64_t affected = 0;
  /// Of these, answered by an `error` frame or not at all.
  uint64_t affected_failed = 0;
  /// Send -> outcome of each affected message (-1 without an outcome), in
  /// send order (at most 50), with the provider that answered ("error" for
  /// error frames, "none" for no outcome).
  std::vector<std::pair<double, std::string>> affected_latencies;
  /// Send -> outcome over all affected messages.
  latency_summary affected_latency;
  /// Send -> reply of measured messages answered before the fault.
  latency_summary before;
  /// Send -> reply of messages sent after the first fallback reply.
  latency_summary after;
  /// Replies per provider to messages sent at or after the fault.
  std::map<std::string, uint64_t> replies_after_fault;
};

/// The outcome of `run_load`: the counts of `traffic_result` (`errors`
/// counts `error` frames, `error_samples` holds the first few error frames
/// and connection failures) and the checks of the WebSocket protocol.
struct load_result : traffic_result {
  /// Messages acknowledged (first ack).
  uint64_t acked = 0;
  /// Messages that got an outcome but never an ack.
  uint64_t missing_acks = 0;
  /// Messages without any outcome when the run ended.
  uint64_t missing_replies = 0;
  /// Acks or outcomes beyond the first for one message.
  uint64_t duplicates = 0;
  /// Frames naming a message id this run never sent.
  uint64_t unknown_ids = 0;
  /// Outcomes that arrived before the outcome of an earlier message of the
  /// same thread.
  uint64_t out_of_order = 0;
  /// Connections that closed or failed during the run.
  uint64_t connection_errors = 0;
  /// Send -> ack, measured phase.
  latency_summary ack_latency;
  /// Send -> reply, measured phase.
  latency_summary reply_latency;
  /// The failover figures, when a fault was configured.
  failover_result failover;

  /// True when every message got exactly one ack and one reply, in order.
  bool clean() const noexcept;
};

/// Opens the connections, drives the load on one I/O thread (the calling
/// one) and returns the figures. Fails with `ec::connection_failed` or
/// `ec::unauthorized` when a connection cannot be opened, naming the node.
caf::expected<load_result> run_load(const load_options& opts);

} // namespace keel::bench
