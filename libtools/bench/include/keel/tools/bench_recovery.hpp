#pragma once

// The recovery benchmark of `keel-bench recovery`: fills a fresh data folder
// through the store API with threads as a node killed mid-work leaves them
// (sessions mostly ACTIVE, short histories, some unanswered messages, some
// children), then starts a real keel-node on it and times its recovery: to the
// gateway listening, to the recovery report, each step of the report, and to
// every pending message answered; then stops the node and runs the oracle
// (`keelctl verify`) on the data.

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "keel/error.hpp"
#include "keel/types.hpp"

namespace keel::bench {

// -- populating ---------------------------------------------------------------

/// What `populate_crashed_store` writes.
struct populate_options {
  /// The RocksDB folder (keel-node uses `<data_dir>/db`). Created; must not
  /// hold anything yet.
  std::string db_dir;
  /// Threads (sessions) to write.
  uint64_t threads = 1000;
  /// Share of the threads that are children (spawned by an earlier thread,
  /// root or child, picked at random): the last ones in id order. At least
  /// one thread stays a root.
  double children_fraction = 0.2;
  /// Share of the threads, picked at random, with one unanswered message in
  /// the inbox: the work the recovery must resume.
  double pending_fraction = 0.1;
  /// Share of the threads, picked at random, left ACTIVE (live when the
  /// node died); the others are SUSPENDED.
  double active_fraction = 0.9;
  /// Answered exchanges (a message and its reply) per thread before the
  /// pending one.
  uint32_t turns = 3;
  /// Text sizes of a message and of a reply.
  size_t user_bytes = 200;
  size_t reply_bytes = 800;
  /// Staged operations per synced write group.
  size_t group_ops = 4096;
  /// Seed of the random choices (same seed, same data but timestamps).
  uint64_t seed = 1;
};

/// What a thread must gain once the node has answered everything pending.
struct expected_outcomes {
  std::string thread;
  /// The last seq written; the outcomes come after it.
  seq_t after = 0;
  /// The seq of the thread's unanswered message; 0 when it has none.
  seq_t pending_seq = 0;
  /// Outcomes (reply or error entries) it must gain: one for its own
  /// pending message, plus one per pending descendant, whose answer is
  /// forwarded up the tree and answered by each ancestor in turn.
  uint64_t outcomes = 0;
};

/// What `populate_crashed_store` wrote.
struct population {
  uint64_t threads = 0;
  uint64_t roots = 0;
  uint64_t children = 0;
  uint64_t links = 0;
  uint64_t active = 0;
  uint64_t pending = 0;
  /// Pending threads that are roots (resumed by `resume_roots`); the others
  /// are children (`resume_children`).
  uint64_t pending_roots = 0;
  /// Log entries written (messages and replies).
  uint64_t log_entries = 0;
  /// Staged operations and the synced groups that wrote them.
  uint64_t operations = 0;
  uint64_t flushes = 0;
  /// Size of the database folder afterwards.
  uint64_t disk_bytes = 0;
  double seconds = 0;
  /// Every thread that must gain outcomes, in id order.
  std::vector<expected_outcomes> expected;
};

/// The id of the `index`-th populated thread ("rb-0000042").
std::string populated_thread_id(uint64_t index);

/// Writes the threads (see `populate_options`) through the store API, in
/// synced groups of `group_ops` operations. Fails with `ec::config_invalid`
/// for bad options or a folder that holds something, and with the store's
/// error when a write fails.
caf::expected<population> populate_crashed_store(const populate_options& opts);

// -- the run ------------------------------------------------------------------

/// What `run_recovery_benchmark` does.
struct recovery_bench_options {
  /// The node's data folder: populated in `<data_dir>/db`; the node's config
  /// and log go beside it. Created; must be empty or missing. Left in place.
  std::string data_dir;
  /// What to populate (`db_dir` is set from `data_dir`).
  populate_options populate;
  /// The keel-node and keelctl binaries.
  std::string node_binary;
  std::string keelctl_binary;
  /// Longest wait for every pending message to be answered.
  std::chrono::milliseconds answer_timeout{std::chrono::minutes{10}};
  /// When set, called with a line saying what the run does next.
  std::function<void(const std::string&)> progress;
};

/// The outcome of `run_recovery_benchmark`. Times are in milliseconds from
/// the node's start (fork).
struct recovery_bench_result {
  population populated;
  /// The report's `started_at`: the process is up and the store open
  /// (RocksDB has replayed its write-ahead log); step 1 begins.
  double to_recovery_started_ms = 0;
  /// The node's "listening on" line (it prints it once the persistence
  /// actor is up, that is after recovery steps 1-4).
  double to_listening_ms = 0;
  /// The report's `finished_at` (resume_children done).
  double to_recovery_finished_ms = 0;
  /// The last answer to a populated pending message (its `at`).
  double to_pending_answered_ms = 0;
  /// The last outcome of all, forwarded answers included: the node is
  /// quiet.
  double to_quiet_ms = 0;
  /// True when every expected outcome arrived within the timeout.
  bool all_answered = false;
  uint64_t outcomes_expected = 0;
  uint64_t outcomes_seen = 0;
  /// Of the outcomes seen, error entries.
  uint64_t errors = 0;
  /// Pending messages answered more than once (must be 0).
  uint64_t duplicate_answers = 0;
  /// The node's report (steps with their durations).
  recovery_report report;
  /// The node's peak RSS (VmHWM) when the report was read, and at the end;
  /// its RSS at the end; its CPU time (user + system) at the end.
  uint64_t peak_rss_at_recovery = 0;
  uint64_t peak_rss_bytes = 0;
  uint64_t rss_bytes = 0;
  double node_cpu_seconds = 0;
  /// The clean stop (SIGTERM to exit) and its exit code.
  double stop_ms = 0;
  int stop_exit_code = -1;
  /// `keelctl verify --json` on the stopped node's data: its report, and
  /// how long it took; `verify_error` when it could not run.
  bool verified = false;
  nlohmann::json verify;
  double verify_ms = 0;
  std::string verify_error;
  /// Wall clock of the node's start, and the machine's load average
  /// (1, 5, 15 min) then: the machine may be shared.
  millis started_at = 0;
  std::string load_average;

  /// True when everything was answered once and the oracle found nothing.
  bool clean() const noexcept;
};

/// Populates, starts the node (offline echo provider, own port, a token,
/// `storage.sync` on), measures, stops it and verifies. Fails when the
/// folder cannot be populated or the node does not come up; a failed check
/// is in the result (`clean()`).
caf::expected<recovery_bench_result>
run_recovery_benchmark(const recovery_bench_options& opts);

/// The result as JSON (for scripts).
nlohmann::json to_json(const recovery_bench_result& x);

/// The result as a readable table.
std::string render(const recovery_bench_result& x);

/// The header of the recovery table in docs/reliability.md (two lines).
std::string recovery_markdown_header();

/// The result as one row of that table.
std::string recovery_markdown_row(const recovery_bench_result& x);

} // namespace keel::bench
