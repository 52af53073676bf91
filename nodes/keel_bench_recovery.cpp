// keel-bench recovery: fills a fresh data folder with threads as a crashed
// node leaves them, starts keel-node on it and times its recovery.

#include <memory>
#include <string>

#include "cli.hpp"
#include "keel/tools/bench_recovery.hpp"
#include "keel/tools/process.hpp"
#include "keel_bench.hpp"

namespace keel_bench {

namespace {

/// The recovery mode's options.
struct recovery_args {
  keel::bench::recovery_bench_options opts;
  output_args output;
};

/// The binary `name` beside this one (keel-bench, keel-node and keelctl are
/// built into one folder).
std::string sibling_binary(const std::string& name) {
  return keel::sibling_path(keel::own_executable(), name);
}

/// What the data folder holds: how many threads, and of what kind.
void add_population_options(CLI::App& cmd, keel::bench::populate_options& pop) {
  auto fraction = CLI::Range(0.0, 1.0);
  cmd
    .add_option("--pending-fraction", pop.pending_fraction,
                "Share of threads with an unanswered message")
    ->check(fraction)
    ->capture_default_str();
  cmd
    .add_option("--children-fraction", pop.children_fraction,
                "Share of threads that are children of another")
    ->check(fraction)
    ->capture_default_str();
  cmd
    .add_option("--active-fraction", pop.active_fraction,
                "Share of threads left ACTIVE (live when the node died)")
    ->check(fraction)
    ->capture_default_str();
  cmd
    .add_option("--turns", pop.turns,
                "Answered exchanges per thread before the pending one")
    ->check(CLI::Range(0u, 1000u))
    ->capture_default_str();
  cmd.add_option("--user-bytes", pop.user_bytes, "Bytes of a message")
    ->check(CLI::Range(size_t{1}, size_t{1} << 16))
    ->capture_default_str();
  cmd.add_option("--reply-bytes", pop.reply_bytes, "Bytes of a reply")
    ->check(CLI::Range(size_t{1}, size_t{1} << 20))
    ->capture_default_str();
  cmd
    .add_option("--group-ops", pop.group_ops,
                "Operations per synced write group while populating")
    ->check(CLI::Range(size_t{1}, size_t{1} << 24))
    ->capture_default_str();
  cmd.add_option("--seed", pop.seed, "Seed of the random choices")
    ->capture_default_str();
}

/// The node under test, the tool that verifies it, and how long to wait.
void add_node_options(CLI::App& cmd,
                      keel::bench::recovery_bench_options& opts) {
  keel::cli::add_duration(cmd, "--answer-timeout", opts.answer_timeout,
                          "Longest wait from the node's start until every "
                          "pending message is answered",
                          false)
    ->default_str("10m");
  opts.node_binary = sibling_binary("keel-node");
  opts.keelctl_binary = sibling_binary("keelctl");
  cmd.add_option("--node-binary", opts.node_binary, "The keel-node to start")
    ->type_name("PATH")
    ->capture_default_str();
  cmd
    .add_option("--keelctl-binary", opts.keelctl_binary,
                "The keelctl that verifies the data afterwards")
    ->type_name("PATH")
    ->capture_default_str();
}

void add_output_options(CLI::App& cmd, output_args& out) {
  cmd.add_flag("--json", out.json, "Print the report as JSON");
  cmd
    .add_option("--json-out", out.json_out,
                "Also write the report as JSON to FILE")
    ->type_name("FILE");
  cmd
    .add_option("--row-out", out.row_out,
                "Append the report as a row of the recovery table in "
                "docs/reliability.md to FILE (header first if FILE is new)")
    ->type_name("FILE");
}

int run_recovery(recovery_args& args) {
  args.opts.progress = say;
  auto result = keel::bench::run_recovery_benchmark(args.opts);
  if (!result)
    return fail_run(result.error());
  if (!output_report(args.output, keel::bench::to_json(*result),
                     keel::bench::render(*result),
                     keel::bench::recovery_markdown_header(), [&] {
                       return keel::bench::recovery_markdown_row(*result);
                     }))
    return exit_failed;
  return result->clean() ? 0 : exit_failed;
}

} // namespace

command add_recovery_command(CLI::App& app) {
  auto args = std::make_shared<recovery_args>();
  auto cmd = app.add_subcommand(
    "recovery", "Fills a fresh data folder with threads as a crashed node "
                "leaves them, starts keel-node on it and times its recovery "
                "(then stops it and runs keelctl verify)");
  auto& opts = args->opts;
  cmd
    ->add_option("--threads", opts.populate.threads,
                 "Threads (sessions) on disk")
    ->required()
    ->check(CLI::Range(uint64_t{1}, uint64_t{10000000}));
  cmd
    ->add_option("--data-dir", opts.data_dir,
                 "The node's data folder: must be empty or missing; left "
                 "in place")
    ->required()
    ->type_name("DIR");
  add_population_options(*cmd, opts.populate);
  add_node_options(*cmd, opts);
  add_output_options(*cmd, args->output);
  return {cmd, [args] { return run_recovery(*args); }};
}

} // namespace keel_bench
