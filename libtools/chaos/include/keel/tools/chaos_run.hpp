#pragma once

// Runs a keel-chaos scenario: starts its nodes, sends its traffic through
// clients that reconnect and resend like real ones, plays its fault steps on
// time, then, once everything is answered, checks the record kept here
// against the threads' histories and `keelctl verify` on each data folder
// (or, for a cluster, on the PostgreSQL database its nodes share).

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "keel/tools/chaos_oracle.hpp"
#include "keel/tools/chaos_scenario.hpp"

namespace keel::chaos {

struct run_options {
  std::string node_binary;
  std::string keelctl_binary;
  /// Where the nodes' folders go; empty: a fresh temporary folder, removed
  /// after a run in which every invariant held.
  std::string work_dir;
  /// Tests the checker itself: tampers with the record or a history before
  /// the check ("lost": an ack the node never gave; "duplicate": a second
  /// outcome of one message; "order": two outcomes swapped), so that the
  /// run must fail naming that rule.
  std::string sabotage;
  /// A cluster run's PostgreSQL folder is kept (and named in the report)
  /// after a clean run too; it is always kept after a failed one.
  bool keep_database = false;
  /// Receives progress lines.
  std::function<void(const std::string&)> progress;
};

/// A fault step as it was played.
struct played_step {
  /// From the start of the traffic.
  std::chrono::milliseconds at{0};
  std::string what;
  /// Empty when it worked, else why not.
  std::string error;
};

/// Percentiles of the time from a fault to the first answer on a thread
/// after it, over every (fault, thread) pair.
struct recovery_figures {
  uint64_t samples = 0;
  double p50_ms = 0;
  double p99_ms = 0;
  double max_ms = 0;
};

/// The same percentiles, of answer latencies (from a message's first send
/// to its outcome).
using latency_figures = recovery_figures;

/// A cluster node's death (kill -9 or the start of a pause) and how long
/// its threads waited: for every traffic thread whose shard it owned just
/// before, the time from the death to the first answer on that thread.
struct failover_figures {
  std::chrono::milliseconds at{0};
  /// Its cluster id ("n2") and the step ("kill_node", "pause_node").
  std::string node;
  std::string how;
  /// Traffic threads on its shards.
  uint64_t threads = 0;
  recovery_figures time;
};

/// A change of the cluster's membership (start_node, drain_node, or a
/// killed node's restart) and how long the shards took to settle.
struct rebalance_window {
  std::chrono::milliseconds at{0};
  std::string step;
  /// From `at` until a running node saw every shard owned by the running
  /// nodes, each holding some, and no orphan nor handoff; -1 if it never
  /// did (the window then lasts to the end of the run).
  std::chrono::milliseconds settled_after{-1};
};

/// What only a cluster run measures.
struct cluster_report {
  bool enabled = false;
  size_t nodes = 0;
  /// One per node death, in time order, and over every (death, thread).
  std::vector<failover_figures> failovers;
  recovery_figures failover;
  std::vector<rebalance_window> rebalances;
  /// Answer latency of the answers received inside a rebalance window, and
  /// of the steady state: outside every window and more than 2 s past
  /// every other fault step's end.
  latency_figures rebalance_latency;
  latency_figures steady_latency;
  /// Restarts after exit code 75 (a paused node that found itself declared
  /// dead exits so; the runner starts it again as a service manager would).
  uint64_t declared_dead_exits = 0;
  /// Counters of the nodes running at the end (since their last start):
  /// members they declared dead, shards they claimed and handed over.
  uint64_t declared_dead = 0;
  uint64_t claimed = 0;
  uint64_t handed_over = 0;
  /// `keelctl verify --pg URL` on the cluster's database after the run:
  /// its exit code and what it printed.
  int verify_exit = 0;
  std::string verify_output;
  /// The PostgreSQL server's folder when it was kept (a failed run, or
  /// `keep_database`), else "".
  std::string database_folder;
};

/// An error frame of code `internal` that a client received. Every failure
/// a fault brings about has a code of its own (`unavailable`, `storage_io`,
/// ...), so an `internal` one is a bug of the node: it is kept whole, to be
/// found in the node's log (which logs each one it sends).
struct internal_error {
  /// From the start of the traffic.
  std::chrono::milliseconds at{0};
  /// The client (its index) and the node it was connected to then.
  size_t client = 0;
  size_t node = 0;
  std::string thread;
  /// The id the frame names: the refused message's, or for an outcome
  /// (`reply_to` set) the answered one's.
  std::string id;
  bool outcome = false;
  std::string message;
};

/// Answers and their latency in one second of the run.
struct second_figures {
  uint64_t answered = 0;
  double latency_p50_ms = 0;
  double latency_max_ms = 0;
};

struct run_report {
  std::string scenario;
  uint64_t seed = 0;
  double seconds = 0;
  uint64_t sent = 0;
  uint64_t acknowledged = 0;
  /// Sends whose connection died before an answer and that were never
  /// answered after resends (should be 0: clients resend until answered).
  uint64_t unknown = 0;
  uint64_t refused = 0;
  uint64_t resends = 0;
  uint64_t reconnects = 0;
  /// Outcomes (replies and error outcomes) found in the histories.
  uint64_t outcomes = 0;
  uint64_t lost = 0;
  uint64_t duplicated = 0;
  /// Node exits nobody asked for (the node stopped itself, e.g. after its
  /// supervisor gave up); the runner restarts the node, as a service
  /// manager would.
  uint64_t unplanned_exits = 0;
  /// Nodes that died at an armed kill point (and were started unarmed).
  uint64_t kill_point_deaths = 0;
  /// Error frames by code (refusals and error outcomes).
  std::map<std::string, uint64_t> errors_by_code;
  /// Every `internal` error frame, in time order.
  std::vector<internal_error> internal_errors;
  std::vector<played_step> steps;
  recovery_figures recovery;
  /// Answers received while the traffic was sent, per second of it; and
  /// the busiest second of the run.
  double answered_per_second = 0;
  uint64_t peak_per_second = 0;
  cluster_report cluster;
  std::vector<second_figures> timeline;
  std::vector<violation> violations;

  bool clean() const {
    return violations.empty();
  }
};

/// Plays `sc`; returns the report (violations included). Fails only when
/// the run cannot be made at all (a node that does not start, an
/// unwritable folder).
caf::expected<run_report> run_scenario(const scenario& sc,
                                       const run_options& opts);

nlohmann::json to_json(const run_report& x);

/// A summary a person reads: the counts, the steps, the recovery figures
/// and every violation.
std::string render_text(const run_report& x);

/// The timeline as one self-contained HTML page (inline SVG, no scripts or
/// resources from elsewhere): answered messages per second and their
/// latency over the run, with every fault step marked, and the summary.
std::string render_html(const run_report& x);

} // namespace keel::chaos
