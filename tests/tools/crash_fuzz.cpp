// keel-crash-fuzz: the seeded crash fuzzer as a program.
// Starts a keel-node, builds random agent trees, sends random traffic, kills
// the node (kill -9 after the k-th acknowledgement, or an armed kill point
// biased toward the interesting ones; on PostgreSQL also kill -9 of the
// database server, the node living on), restarts it and checks the contract
// against its own record of acknowledgements: no acknowledged message lost,
// none answered twice, every log a prefix of what it was plus what came
// after, every child's outcome forwarded to its parent once, a tool run at
// most once per message that calls it (a call cut by a crash is answered
// "interrupted by a restart"); `keelctl verify` on the stopped node's data
// every few iterations.
//
//   keel-crash-fuzz [--seed N] [--iterations N] [--duration SECONDS]
//                   [--backend rocksdb|postgres]
//                   [--node-binary PATH] [--keelctl-binary PATH]
//                   [--work-dir DIR] [--json] [--verbose] ...
//
// The same seed replays the same operations and crash plans; on failure it
// prints the seed, the operations of the failing iteration, the crash point
// and the command line that replays it. Exit code 0 when every check held,
// 1 on a violation, 2 for bad usage. `--json` prints the figures on stdout.

#include <chrono>
#include <cstdlib>
#include <iostream>
#include <random>
#include <string>

#include <unistd.h>

#include <CLI/CLI.hpp>

#include "keel/tools/crash_fuzz.hpp"
#include "keel/tools/process.hpp"
#include "raw_records.hpp"
#include "test_store.hpp"

namespace {

// keel-node next to this binary in a build tree (tests/tools/ -> nodes/).
std::string default_node_binary() {
  if (auto env = std::getenv("KEEL_NODE_BINARY"))
    return env;
  auto self = keel::own_executable();
  if (self.empty())
    return "keel-node";
  return keel::sibling_path(self, "../../nodes/keel-node");
}

/// How big the generated iterations and data folders are.
void add_shape_options(CLI::App& app, keel::fuzz::generator_options& shape) {
  app
    .add_option("--generation-length", shape.generation_length,
                "iterations per data folder (default 10)")
    ->check(CLI::PositiveNumber);
  app
    .add_option("--min-ops", shape.min_ops,
                "fewest operations an iteration (default 8)")
    ->check(CLI::PositiveNumber);
  app
    .add_option("--max-ops", shape.max_ops,
                "most operations an iteration (default 20)")
    ->check(CLI::PositiveNumber);
  app
    .add_option("--max-threads", shape.max_threads,
                "threads per data folder (default 32)")
    ->check(CLI::PositiveNumber);
  app
    .add_option("--tool-percent", shape.tool_percent,
                "percent of messages that call the tool (default 20; 60 in "
                "iterations armed at a tool kill point)")
    ->check(CLI::Range(0, 100));
}

/// The command line; `duration` and `settle` are in seconds.
void add_options(CLI::App& app, keel::fuzz::fuzz_options& opts,
                 uint64_t& duration, uint64_t& settle) {
  app.add_option("--seed", opts.seed,
                 "seed of every choice (default: random, "
                 "always printed)");
  app.add_option("--iterations", opts.iterations,
                 "crash/restart cycles (default 20)");
  app.add_option("--duration", duration,
                 "stop starting iterations after this many seconds (0: no "
                 "limit); whichever of --iterations and --duration comes "
                 "first ends the run");
  app
    .add_option("--backend", opts.backend,
                "where the nodes keep their data: rocksdb (default) or "
                "postgres (a PostgreSQL server of the run's own, which the "
                "plans also kill)")
    ->check(CLI::IsMember({"rocksdb", "postgres"}));
  app.add_option("--node-binary", opts.node_binary,
                 "keel-node (default: $KEEL_NODE_BINARY, else the build "
                 "tree's)");
  app.add_option("--keelctl-binary", opts.keelctl_binary,
                 "keelctl (default: next to keel-node)");
  app.add_option("--work-dir", opts.work_dir,
                 "where the data folders go (default: a temp folder, removed "
                 "after a passing run)");
  app.add_flag("--json", opts.json, "print the figures as JSON on stdout");
  app.add_flag("--verbose", opts.verbose, "print every iteration's operations");
  app
    .add_option("--verify-every", opts.verify_every,
                "stop gracefully and run keelctl verify every N iterations "
                "(default 5)")
    ->check(CLI::PositiveNumber);
  add_shape_options(app, opts.shape);
  app.add_option("--provider-delay", opts.provider_delay,
                 "latency of the scripted provider (default 3ms)");
  app.add_option("--idle-timeout", opts.idle_timeout,
                 "the node's threads.idle_timeout: threads passivate after "
                 "this long without work (default 200ms)");
  app.add_option("--settle-timeout", settle,
                 "seconds a restarted node may take to answer everything "
                 "(default 60)");
  app.add_flag("--require-all", opts.require_all,
               "fail unless spawn, cancel, keelctl verify, every kill point, "
               "a tool result and an interrupted tool call, passivation, "
               "quarantine and (on postgres) a kill of the database server "
               "were exercised");
  app
    .add_option("--sabotage", opts.sabotage,
                "tests the fuzzer: corrupt its own record once (lost, "
                "prefix or duplicate); the run must then fail")
    ->check(CLI::IsMember({"lost", "prefix", "duplicate"}));
}

/// Fills in the binaries and checks what the options cannot check alone;
/// false after saying why.
bool complete(keel::fuzz::fuzz_options& opts) {
  if (opts.shape.max_ops < opts.shape.min_ops) {
    std::cerr << "keel-crash-fuzz: --max-ops is below --min-ops\n";
    return false;
  }
  if (opts.node_binary.empty())
    opts.node_binary = default_node_binary();
  if (opts.keelctl_binary.empty())
    opts.keelctl_binary = keel::sibling_path(opts.node_binary, "keelctl");
  if (::access(opts.node_binary.c_str(), X_OK) != 0) {
    std::cerr << "keel-crash-fuzz: no keel-node at " << opts.node_binary
              << " (use --node-binary)\n";
    return false;
  }
  return true;
}

/// The nodes' store as the test support sets it up for `backend`: on
/// PostgreSQL a database per data folder on this process's own server.
keel::fuzz::store_access test_store_access(const std::string& backend) {
  namespace test = keel::test;
  // test_store.hpp's helpers follow this.
  ::setenv("KEEL_STORE_BACKEND", backend.c_str(), 1);
  keel::fuzz::store_access result;
  result.postgres = test::store_on_postgres();
  result.storage_yaml = [](const std::string& dir, const std::string& extra) {
    return test::storage_yaml(dir, extra);
  };
  result.data_args = test::data_args;
  result.write_context_record = [](const std::string& dir,
                                   const std::string& thread, uint64_t seq,
                                   const std::string& value) {
    return test::write_node_record(dir, "context", test::seq_key(thread, seq),
                                   value);
  };
  result.database_url = test::test_pg_url_for;
  result.database = test::test_pg_server;
  return result;
}

/// The figures as JSON on stdout (with --json), and the summary line.
void report(const keel::fuzz::fuzz_options& opts,
            const keel::fuzz::fuzz_stats& stats, int rc) {
  auto summary = keel::fuzz::to_json(stats);
  summary["seed"] = opts.seed;
  summary["backend"] = opts.backend;
  summary["passed"] = rc == 0;
  if (opts.json)
    std::cout << summary.dump(2) << std::endl;
  std::cerr << "keel-crash-fuzz: seed " << opts.seed << " on " << opts.backend
            << ": " << (rc == 0 ? "PASSED" : "FAILED") << "; "
            << stats.iterations << " iterations, " << stats.kills << " kills ("
            << stats.kill9_instant << " kill -9, " << stats.kill9_fallback
            << " fallback kill -9, " << stats.kill_point_deaths
            << " kill points; " << stats.kills_survived << " survived), "
            << stats.pg_kills << " PostgreSQL kills, " << stats.acked
            << " acked, " << stats.answered << " answered, " << stats.lost
            << " lost, " << stats.duplicates << " duplicates, "
            << stats.verify_runs << " verify runs, " << stats.passivations
            << " passivations, " << stats.storage_timeouts
            << " storage timeouts, " << stats.quarantined_threads
            << " quarantined threads, " << stats.tool_messages
            << " tool messages (" << stats.tool_runs << " runs, "
            << stats.tool_results << " results, " << stats.tool_interrupted
            << " interrupted), " << stats.seconds << " s\n";
}

} // namespace

int main(int argc, char** argv) {
  CLI::App app{"keel-crash-fuzz: kills keel-node at random instants and kill "
               "points and checks that nothing acknowledged is lost or "
               "answered twice"};
  keel::fuzz::fuzz_options opts;
  opts.seed = std::random_device{}();
  uint64_t duration = 0;
  uint64_t settle = static_cast<uint64_t>(opts.settle_timeout.count());
  add_options(app, opts, duration, settle);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    auto code = app.exit(e);
    return code == 0 ? 0 : 2;
  }
  opts.duration = std::chrono::seconds{duration};
  opts.settle_timeout = std::chrono::seconds{settle};
  if (!complete(opts))
    return 2;
  opts.store = test_store_access(opts.backend);
  std::cerr << "keel-crash-fuzz: seed " << opts.seed << '\n';
  keel::fuzz::fuzz_stats stats;
  auto rc = keel::fuzz::run(opts, stats, argv[0]);
  report(opts, stats, rc);
  return rc;
}
