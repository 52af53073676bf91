// keel-bench: drives a running node over WebSocket and reports throughput,
// ack and reply latency, the node's peak RSS, and Keel's durable message
// rate as a ratio of RocksDB's raw synced-write rate; optionally injects a
// fault mid-run (kills a process, or tags messages with a fault directive)
// and reports how the node failed over. With --http URL it instead POSTs
// chat completions to an OpenAI-compatible server (a mock, or a gateway in
// front of one) and reports their latency. `keel-bench recovery` instead
// fills a fresh data folder with threads as a crashed node leaves them,
// starts a keel-node on it and times its recovery. The work is in
// libruntime (keel/bench.hpp, keel/bench_recovery.hpp); this file parses
// arguments and prints.
//
// Exit codes: 0 clean run, 1 a check failed (missing, duplicate or
// reordered acks/replies, error frames, failed calls) or the run failed,
// 2 bad arguments, 3 the node or server cannot be reached or refuses the
// token.

#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "cli.hpp"
#include "keel/tools/bench.hpp"
#include "keel/tools/bench_recovery.hpp"
#include "keel/tools/ws_client.hpp"

namespace {

constexpr int exit_failed = 1;
constexpr int exit_usage = 2;
constexpr int exit_unreachable = 3;

int fail_write(const std::string& path) {
  std::cerr << "keel-bench: cannot write " << path << '\n';
  return exit_failed;
}

int fail_run(const caf::error& err) {
  auto msg = keel::error_message(err);
  std::cerr << "keel-bench: " << (msg.empty() ? keel::render(err) : msg)
            << '\n';
  bool unreachable = err == keel::ec::connection_failed
                     || err == keel::ec::unauthorized
                     || err == keel::ec::timeout;
  return unreachable ? exit_unreachable : exit_failed;
}

/// The HTTP mode: one run, printed like the WebSocket one.
int run_http(const keel::bench::http_load_options& opts, bool json,
             const std::string& json_out) {
  std::cerr << "keel-bench: calling " << opts.server.base_url << std::endl;
  auto result = keel::bench::run_http_load(opts);
  if (!result)
    return fail_run(result.error());
  if (json)
    std::cout << keel::bench::to_json(opts, *result).dump(2) << '\n';
  else
    std::cout << keel::bench::render(opts, *result);
  if (!json_out.empty()) {
    std::ofstream out{json_out};
    out << keel::bench::to_json(opts, *result).dump(2) << '\n';
    if (!out)
      return fail_write(json_out);
  }
  return result->clean() ? 0 : exit_failed;
}

/// The binary `name` beside this one (keel-bench, keel-node and keelctl are
/// built into one folder).
std::string sibling_binary(const std::string& name) {
  std::error_code err;
  auto self = std::filesystem::read_symlink("/proc/self/exe", err);
  return err ? name : (self.parent_path() / name).string();
}

/// The recovery mode's options.
struct recovery_args {
  keel::bench::recovery_bench_options opts;
  bool json = false;
  std::string json_out;
  std::string row_out;
};

CLI::App* add_recovery_command(CLI::App& app, recovery_args& args) {
  auto cmd = app.add_subcommand(
    "recovery", "Fills a fresh data folder with threads as a crashed node "
                "leaves them, starts keel-node on it and times its recovery "
                "(then stops it and runs keelctl verify)");
  auto& opts = args.opts;
  auto& pop = opts.populate;
  cmd->add_option("--threads", pop.threads, "Threads (sessions) on disk")
    ->required()
    ->check(CLI::Range(uint64_t{1}, uint64_t{10000000}));
  cmd->add_option("--data-dir", opts.data_dir,
                  "The node's data folder: must be empty or missing; left "
                  "in place")
    ->required()
    ->type_name("DIR");
  auto fraction = CLI::Range(0.0, 1.0);
  cmd->add_option("--pending-fraction", pop.pending_fraction,
                  "Share of threads with an unanswered message")
    ->check(fraction)
    ->capture_default_str();
  cmd->add_option("--children-fraction", pop.children_fraction,
                  "Share of threads that are children of another")
    ->check(fraction)
    ->capture_default_str();
  cmd->add_option("--active-fraction", pop.active_fraction,
                  "Share of threads left ACTIVE (live when the node died)")
    ->check(fraction)
    ->capture_default_str();
  cmd->add_option("--turns", pop.turns,
                  "Answered exchanges per thread before the pending one")
    ->check(CLI::Range(0u, 1000u))
    ->capture_default_str();
  cmd->add_option("--user-bytes", pop.user_bytes, "Bytes of a message")
    ->check(CLI::Range(size_t{1}, size_t{1} << 16))
    ->capture_default_str();
  cmd->add_option("--reply-bytes", pop.reply_bytes, "Bytes of a reply")
    ->check(CLI::Range(size_t{1}, size_t{1} << 20))
    ->capture_default_str();
  cmd->add_option("--group-ops", pop.group_ops,
                  "Operations per synced write group while populating")
    ->check(CLI::Range(size_t{1}, size_t{1} << 24))
    ->capture_default_str();
  cmd->add_option("--seed", pop.seed, "Seed of the random choices")
    ->capture_default_str();
  keel::cli::add_duration(*cmd, "--answer-timeout", opts.answer_timeout,
                          "Longest wait from the node's start until every "
                          "pending message is answered",
                          false)
    ->default_str("10m");
  opts.node_binary = sibling_binary("keel-node");
  opts.keelctl_binary = sibling_binary("keelctl");
  cmd->add_option("--node-binary", opts.node_binary, "The keel-node to start")
    ->type_name("PATH")
    ->capture_default_str();
  cmd->add_option("--keelctl-binary", opts.keelctl_binary,
                  "The keelctl that verifies the data afterwards")
    ->type_name("PATH")
    ->capture_default_str();
  cmd->add_flag("--json", args.json, "Print the report as JSON");
  cmd->add_option("--json-out", args.json_out,
                  "Also write the report as JSON to FILE")
    ->type_name("FILE");
  cmd->add_option("--row-out", args.row_out,
                  "Append the report as a row of the recovery table in "
                  "docs/reliability.md to FILE (header first if FILE is new)")
    ->type_name("FILE");
  return cmd;
}

int run_recovery(recovery_args& args) {
  args.opts.progress = [](const std::string& line) {
    std::cerr << "keel-bench: " << line << std::endl;
  };
  auto result = keel::bench::run_recovery_benchmark(args.opts);
  if (!result)
    return fail_run(result.error());
  auto json = keel::bench::to_json(*result);
  if (args.json)
    std::cout << json.dump(2) << '\n';
  else
    std::cout << keel::bench::render(*result);
  if (!args.json_out.empty()) {
    std::ofstream out{args.json_out};
    out << json.dump(2) << '\n';
    if (!out)
      return fail_write(args.json_out);
  }
  if (!args.row_out.empty()) {
    bool fresh = !std::ifstream{args.row_out}.good();
    std::ofstream out{args.row_out, std::ios::app};
    if (fresh)
      out << keel::bench::recovery_markdown_header();
    out << keel::bench::recovery_markdown_row(*result);
    if (!out)
      return fail_write(args.row_out);
  }
  return result->clean() ? 0 : exit_failed;
}

} // namespace

int main(int argc, char** argv) {
  CLI::App app{"keel-bench: drives a Keel node over WebSocket and measures "
               "throughput, ack and reply latency, peak RSS, and the durable "
               "message rate relative to RocksDB's raw synced-write rate."};
  std::string node = "127.0.0.1:8080";
  std::string token;
  keel::bench::benchmark_options opts;
  auto& load = opts.load;
  bool json = false;
  bool no_raw = false;
  keel::cli::add_node_options(app, node, token);
  app.add_option("--connections", load.connections, "WebSocket connections")
    ->check(CLI::Range(size_t{1}, size_t{100000}))
    ->capture_default_str();
  app.add_option("--threads", load.threads,
                 "Distinct threads, spread over the connections (at least "
                 "--connections)")
    ->check(CLI::Range(size_t{1}, size_t{10000000}))
    ->capture_default_str();
  app.add_option("--rate", load.rate,
                 "Target total rate in messages/s (default: flat out)")
    ->check(CLI::PositiveNumber);
  app.add_option("--window", load.window,
                 "Flat out: messages in flight per connection (HTTP mode: "
                 "calls in flight, 1 = sequential)")
    ->check(CLI::Range(size_t{1}, size_t{100000}))
    ->capture_default_str();
  auto messages = app.add_option("--messages", load.messages,
                                 "Send this many measured messages instead "
                                 "of running for --duration")
                    ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 40));
  keel::cli::add_duration(app, "--duration", load.duration,
                          "Length of the measured phase", false)
    ->default_str("10s")
    ->excludes(messages);
  keel::cli::add_duration(app, "--warmup", load.warmup,
                          "Traffic before the measured phase (checked, not "
                          "measured)")
    ->default_str("2s");
  keel::cli::add_duration(app, "--drain-timeout", load.drain_timeout,
                          "After sending stops, how long to wait for missing "
                          "answers (also: longest silence while sending)",
                          false)
    ->default_str("10s");
  app.add_option("--text-bytes", load.text_bytes, "Bytes of text per message")
    ->check(CLI::Range(size_t{1}, size_t{1} << 20))
    ->capture_default_str();
  app.add_option("--raw-dir", opts.raw_opts.dir,
                 "Folder for the raw RocksDB measurement (use the node's file "
                 "system; a fresh subfolder is created and removed)")
    ->capture_default_str();
  keel::cli::add_duration(app, "--raw-duration", opts.raw_opts.duration,
                          "Length of the raw RocksDB measurement", false)
    ->default_str("3s");
  app.add_option("--raw-value-bytes", opts.raw_opts.value_bytes,
                 "Value size of the raw writes")
    ->check(CLI::Range(size_t{1}, size_t{1} << 20))
    ->capture_default_str();
  app.add_flag("--no-raw", no_raw, "Skip the raw RocksDB measurement");
  app.add_flag("--json", json, "Print the report as JSON");
  std::string json_out;
  std::string row_out;
  std::string label;
  app.add_option("--json-out", json_out,
                 "Also write the report as JSON to FILE")
    ->type_name("FILE");
  app.add_option("--row-out", row_out,
                 "Append the report as a row of the results table in "
                 "docs/benchmarks.md to FILE (header first if FILE is new)")
    ->type_name("FILE");
  app.add_option("--label", label, "Scenario name for --row-out")
    ->default_str("flat out or paced");
  auto& fault = load.fault;
  std::chrono::milliseconds fault_at{0};
  auto fault_at_opt
    = keel::cli::add_duration(app, "--fault-at", fault_at,
                              "Inject a fault this long into the measured "
                              "phase and report the failover");
  app.add_option("--kill-pid", fault.kill_pid,
                 "The fault: SIGKILL to this process (e.g. the primary "
                 "provider's server)")
    ->check(CLI::PositiveNumber)
    ->needs(fault_at_opt);
  app.add_option("--fault-text", fault.text_suffix,
                 "The fault: append TEXT to every message sent from then on "
                 "(e.g. keel-fault-llm's [[fault:503]])")
    ->type_name("TEXT")
    ->needs(fault_at_opt);
  app.add_option("--fallback-provider", fault.fallback_provider,
                 "The provider whose replies show the node failed over")
    ->type_name("NAME")
    ->needs(fault_at_opt);
  keel::bench::http_load_options http;
  http.server.model = "gpt-4o-mini";
  http.server.stream = false;
  // Enough for any sane open-loop rate; beyond it calls queue inside the
  // client (still measured from their due time), which keeps an overloaded
  // server from exhausting the usual limit of 1024 open files.
  http.server.max_concurrency = 512;
  std::vector<std::string> headers;
  auto http_opt
    = app.add_option("--http", http.server.base_url,
                     "HTTP mode: POST chat completions to this "
                     "OpenAI-compatible base URL (e.g. "
                     "http://127.0.0.1:4010/v1) instead of driving a node; "
                     "--window is the calls in flight, --rate paces them")
        ->type_name("URL");
  app.add_option("--header", headers,
                 "HTTP mode: an extra request header (repeatable)")
    ->type_name("'NAME: VALUE'")
    ->needs(http_opt);
  app.add_option("--model", http.server.model, "HTTP mode: the model to ask")
    ->capture_default_str()
    ->needs(http_opt);
  recovery_args recovery;
  auto recovery_cmd = add_recovery_command(app, recovery);
  http_opt->excludes(fault_at_opt);
  for (auto name : {"--row-out", "--raw-dir", "--raw-duration",
                    "--raw-value-bytes", "--no-raw"})
    http_opt->excludes(app.get_option(name));
  try {
    app.parse(argc, argv);
    for (auto& header : headers) {
      auto colon = header.find(':');
      if (colon == 0 || colon == std::string::npos)
        throw CLI::ValidationError("--header",
                                   "'" + header + "' is not 'NAME: VALUE'");
      auto value = header.substr(colon + 1);
      value.erase(0, value.find_first_not_of(' '));
      http.server.headers[header.substr(0, colon)] = value;
    }
    if (*fault_at_opt) {
      fault.at = fault_at;
      if (fault.fallback_provider.empty())
        throw CLI::ValidationError("--fault-at",
                                   "needs --fallback-provider");
    }
    if (load.threads < load.connections)
      throw CLI::ValidationError("--threads",
                                 "must be at least --connections (each "
                                 "connection owns its threads)");
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : exit_usage;
  }
  if (recovery_cmd->parsed())
    return run_recovery(recovery);
  if (*http_opt) {
    static_cast<keel::bench::traffic_options&>(http) = load;
    http.window = load.window;
    return run_http(http, json, json_out);
  }
  auto ep = keel::parse_endpoint(node);
  load.node = *ep; // checked above
  load.node.token = token;
  opts.raw = !no_raw;
  opts.progress = [](const std::string& line) {
    std::cerr << "keel-bench: " << line << std::endl;
  };
  auto result = keel::bench::run_benchmark(opts);
  if (!result)
    return fail_run(result.error());
  if (json)
    std::cout << keel::bench::to_json(*result).dump(2) << '\n';
  else
    std::cout << keel::bench::render(*result);
  if (!json_out.empty()) {
    std::ofstream out{json_out};
    out << keel::bench::to_json(*result).dump(2) << '\n';
    if (!out)
      return fail_write(json_out);
  }
  if (!row_out.empty()) {
    bool fresh = !std::ifstream{row_out}.good();
    std::ofstream out{row_out, std::ios::app};
    if (fresh)
      out << keel::bench::markdown_header();
    if (label.empty())
      label = load.rate > 0 ? "paced" : "flat out";
    out << keel::bench::markdown_row(*result, label);
    if (!out)
      return fail_write(row_out);
  }
  return result->load.clean() ? 0 : exit_failed;
}
