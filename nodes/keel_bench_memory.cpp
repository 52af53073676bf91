// keel-bench's memory runs, options of the top-level mode: --idle-threads N
// (the node's RSS per live idle thread, and with --passivate-wait what is
// left after the idle timeout) and --idle-connections N (its RSS per idle
// WebSocket connection).

#include <iostream>

#include "cli.hpp"
#include "keel/tools/bench_memory.hpp"
#include "keel_bench.hpp"

namespace keel_bench {

void add_memory_options(CLI::App& app, memory_args& args,
                        const std::vector<CLI::Option*>& load_only) {
  args.idle_threads_opt
    = app
        .add_option("--idle-threads", args.idle_threads,
                    "Memory run: send one message to each of N fresh "
                    "threads (over --connections, flat out with --window), "
                    "and report the node's RSS growth per live idle thread")
        ->check(CLI::Range(size_t{1}, size_t{10000000}));
  args.idle_connections_opt
    = app
        .add_option("--idle-connections", args.idle_connections,
                    "Memory run: open N idle WebSocket connections (spread "
                    "over 127.0.0.1, 127.0.0.2, ... for a node on "
                    "loopback) and report the node's RSS growth per "
                    "connection")
        ->check(CLI::Range(size_t{1}, size_t{1000000}));
  auto wait = keel::cli::add_duration(
    app, "--passivate-wait", args.passivate_wait,
    "--idle-threads: then wait this long (longer than the node's "
    "threads.idle_timeout) and report the live threads and RSS left");
  wait->needs(args.idle_threads_opt);
  auto hold = keel::cli::add_duration(app, "--hold", args.hold,
                                      "--idle-connections: keep them open "
                                      "this long after measuring")
                ->default_str("3s");
  hold->needs(args.idle_connections_opt);
  args.idle_threads_opt->excludes(args.idle_connections_opt);
  for (auto opt : load_only) {
    args.idle_threads_opt->excludes(opt);
    args.idle_connections_opt->excludes(opt);
  }
  for (auto name : {"--connections", "--threads", "--window"})
    args.idle_connections_opt->excludes(app.get_option(name));
  args.idle_threads_opt->excludes(app.get_option("--threads"));
}

namespace {

/// A memory run that failed before measuring: says why (like `fail_run`)
/// and keeps the failure in the JSON and the results row too.
int report_failure(const output_args& out, const std::string& label,
                   const std::string& what, const caf::error& err) {
  auto code = fail_run(err);
  auto reason = keel::readable_message(err);
  nlohmann::json json{{"mode", label}, {"error", reason}, {"clean", false}};
  auto quiet = out;
  quiet.json = false; // the error is on stderr already
  output_report(quiet, json, {}, keel::bench::memory_markdown_header(), [&] {
    return keel::bench::memory_failure_row(label, what, reason);
  });
  return code;
}

// Writes a memory run's report (JSON, text, results row) as asked;
// exit 0 when the run was clean.
template <class Result>
int report_memory_run(const output_args& out, const std::string& name,
                      const Result& result) {
  auto row = [&] { return keel::bench::markdown_row(result, name); };
  if (!output_report(out, keel::bench::to_json(result),
                     keel::bench::render(result),
                     keel::bench::memory_markdown_header(), row))
    return exit_failed;
  return result.clean() ? 0 : exit_failed;
}

int run_idle_threads(const memory_args& args,
                     const keel::bench::load_options& load,
                     const output_args& out, const std::string& label) {
  keel::bench::idle_threads_options opts;
  opts.load = load;
  opts.load.threads = args.idle_threads;
  opts.load.connections = std::min(load.connections, args.idle_threads);
  opts.passivate_wait = args.passivate_wait;
  opts.progress = say;
  auto name = label.empty() ? std::string{"idle-threads"} : label;
  auto result = keel::bench::run_idle_threads(opts);
  if (!result)
    return report_failure(out, name,
                          std::to_string(args.idle_threads) + " threads",
                          result.error());
  return report_memory_run(out, name, *result);
}

int run_idle_connections(const memory_args& args,
                         const keel::bench::load_options& load,
                         const output_args& out, const std::string& label) {
  keel::bench::idle_connections_options opts;
  opts.node = load.node;
  opts.connections = args.idle_connections;
  opts.hold = args.hold;
  opts.progress = say;
  auto name = label.empty() ? std::string{"idle-connections"} : label;
  auto result = keel::bench::run_idle_connections(opts);
  if (!result)
    return report_failure(
      out, name, std::to_string(args.idle_connections) + " connections",
      result.error());
  return report_memory_run(out, name, *result);
}

} // namespace

int run_memory(const memory_args& args, const keel::bench::load_options& load,
               const output_args& out, const std::string& label) {
  if (*args.idle_threads_opt)
    return run_idle_threads(args, load, out, label);
  return run_idle_connections(args, load, out, label);
}

} // namespace keel_bench
