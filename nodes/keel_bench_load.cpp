// keel-bench's top-level mode: drives a node over WebSocket (with the raw
// RocksDB measurement and an optional fault), or with --http an
// OpenAI-compatible server, or with --idle-threads / --idle-connections
// measures the node's memory (keel_bench_memory.cpp).

#include <chrono>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "cli.hpp"
#include "keel/tools/bench.hpp"
#include "keel_bench.hpp"

namespace keel_bench {

namespace {

/// Everything the top-level options set.
struct load_args {
  std::string node = "127.0.0.1:8080";
  std::string token;
  keel::bench::benchmark_options opts;
  bool no_raw = false;
  output_args output;
  std::string label;
  std::chrono::milliseconds fault_at{0};
  CLI::Option* fault_at_opt = nullptr;
  keel::bench::http_load_options http;
  std::vector<std::string> headers;
  CLI::Option* http_opt = nullptr;
  memory_args memory;
};

/// The node, and when and how much traffic.
void add_traffic_options(CLI::App& app, load_args& args) {
  auto& load = args.opts.load;
  keel::cli::add_node_options(app, args.node, args.token);
  app.add_option("--connections", load.connections, "WebSocket connections")
    ->check(CLI::Range(size_t{1}, size_t{100000}))
    ->capture_default_str();
  app
    .add_option("--threads", load.threads,
                "Distinct threads, spread over the connections (at least "
                "--connections)")
    ->check(CLI::Range(size_t{1}, size_t{10000000}))
    ->capture_default_str();
  app
    .add_option("--rate", load.rate,
                "Target total rate in messages/s (default: flat out)")
    ->check(CLI::PositiveNumber);
  app
    .add_option("--window", load.window,
                "Flat out: messages in flight per connection (HTTP mode: "
                "calls in flight, 1 = sequential)")
    ->check(CLI::Range(size_t{1}, size_t{100000}))
    ->capture_default_str();
  auto messages = app
                    .add_option("--messages", load.messages,
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
  app.add_option("--thread-prefix", load.thread_prefix,
                 "Threads are PREFIX-0 .. PREFIX-(M-1) (default: a random "
                 "prefix per run); reuse one to send to an earlier run's "
                 "threads");
}

/// RocksDB's raw synced-write rate, measured before the load.
void add_raw_options(CLI::App& app, load_args& args) {
  auto& raw = args.opts.raw_opts;
  app
    .add_option("--raw-dir", raw.dir,
                "Folder for the raw RocksDB measurement (use the node's file "
                "system; a fresh subfolder is created and removed)")
    ->capture_default_str();
  keel::cli::add_duration(app, "--raw-duration", raw.duration,
                          "Length of the raw RocksDB measurement", false)
    ->default_str("3s");
  app
    .add_option("--raw-value-bytes", raw.value_bytes,
                "Value size of the raw writes")
    ->check(CLI::Range(size_t{1}, size_t{1} << 20))
    ->capture_default_str();
  app.add_flag("--no-raw", args.no_raw, "Skip the raw RocksDB measurement");
}

void add_output_options(CLI::App& app, load_args& args) {
  app.add_flag("--json", args.output.json, "Print the report as JSON");
  app
    .add_option("--json-out", args.output.json_out,
                "Also write the report as JSON to FILE")
    ->type_name("FILE");
  app
    .add_option("--row-out", args.output.row_out,
                "Append the report as a row of the results table in "
                "docs/benchmarks.md to FILE (its header first unless FILE's "
                "last table has it)")
    ->type_name("FILE");
  app.add_option("--label", args.label, "Scenario name for --row-out")
    ->default_str("flat out or paced");
}

/// A fault injected mid-run, to time the failover.
void add_fault_options(CLI::App& app, load_args& args) {
  auto& fault = args.opts.load.fault;
  args.fault_at_opt
    = keel::cli::add_duration(app, "--fault-at", args.fault_at,
                              "Inject a fault this long into the measured "
                              "phase and report the failover");
  app
    .add_option("--kill-pid", fault.kill_pid,
                "The fault: SIGKILL to this process (e.g. the primary "
                "provider's server)")
    ->check(CLI::PositiveNumber)
    ->needs(args.fault_at_opt);
  app
    .add_option("--fault-text", fault.text_suffix,
                "The fault: append TEXT to every message sent from then on "
                "(e.g. keel-fault-llm's [[fault:503]])")
    ->type_name("TEXT")
    ->needs(args.fault_at_opt);
  app
    .add_option("--fallback-provider", fault.fallback_provider,
                "The provider whose replies show the node failed over")
    ->type_name("NAME")
    ->needs(args.fault_at_opt);
}

/// The HTTP mode: a server instead of a node; excludes what only a node
/// run has.
void add_http_options(CLI::App& app, load_args& args) {
  auto& server = args.http.server;
  server.model = "gpt-4o-mini";
  server.stream = false;
  // Enough for any sane open-loop rate; beyond it calls queue inside the
  // client (still measured from their due time), which keeps an overloaded
  // server from exhausting the usual limit of 1024 open files.
  server.max_concurrency = 512;
  args.http_opt
    = app
        .add_option("--http", server.base_url,
                    "HTTP mode: POST chat completions to this "
                    "OpenAI-compatible base URL (e.g. "
                    "http://127.0.0.1:4010/v1) instead of driving a node; "
                    "--window is the calls in flight, --rate paces them")
        ->type_name("URL");
  app
    .add_option("--header", args.headers,
                "HTTP mode: an extra request header (repeatable)")
    ->type_name("'NAME: VALUE'")
    ->needs(args.http_opt);
  app.add_option("--model", server.model, "HTTP mode: the model to ask")
    ->capture_default_str()
    ->needs(args.http_opt);
  args.http_opt->excludes(args.fault_at_opt);
  for (auto name : {"--row-out", "--raw-dir", "--raw-duration",
                    "--raw-value-bytes", "--no-raw"})
    args.http_opt->excludes(app.get_option(name));
}

/// What the options cannot check alone: the headers, the fault, threads
/// against connections. Throws CLI::ValidationError.
void check(load_args& args) {
  for (auto& header : args.headers) {
    auto colon = header.find(':');
    if (colon == 0 || colon == std::string::npos)
      throw CLI::ValidationError("--header",
                                 "'" + header + "' is not 'NAME: VALUE'");
    auto value = header.substr(colon + 1);
    value.erase(0, value.find_first_not_of(' '));
    args.http.server.headers[header.substr(0, colon)] = value;
  }
  auto& load = args.opts.load;
  if (*args.fault_at_opt) {
    load.fault.at = args.fault_at;
    if (load.fault.fallback_provider.empty())
      throw CLI::ValidationError("--fault-at", "needs --fallback-provider");
  }
  if (!args.memory.selected() && load.threads < load.connections)
    throw CLI::ValidationError("--threads",
                               "must be at least --connections (each "
                               "connection owns its threads)");
}

/// The HTTP mode: one run, printed like the WebSocket one.
int run_http(load_args& args) {
  auto& http = args.http;
  static_cast<keel::bench::traffic_options&>(http) = args.opts.load;
  http.window = args.opts.load.window;
  std::cerr << "keel-bench: calling " << http.server.base_url << std::endl;
  auto result = keel::bench::run_http_load(http);
  if (!result)
    return fail_run(result.error());
  if (!output_report(args.output, keel::bench::to_json(http, *result),
                     keel::bench::render(http, *result), {},
                     [] { return std::string{}; }))
    return exit_failed;
  return result->clean() ? 0 : exit_failed;
}

/// Sets the load's node from --node and --token; false (after saying why)
/// for a node the load generator cannot speak to.
bool set_node(load_args& args) {
  auto& load = args.opts.load;
  load.node = *keel::parse_endpoint(args.node); // checked by the option
  if (load.node.tls) {
    std::cerr << "keel-bench: --node " << args.node
              << ": the load generator speaks plain ws:// only; measure a "
                 "node without gateway.tls\n";
    return false;
  }
  load.node.token = args.token;
  return true;
}

/// The node mode: the raw measurement, the load, the node's figures.
int run_node(load_args& args) {
  auto& opts = args.opts;
  auto& load = opts.load;
  if (!set_node(args))
    return exit_usage;
  opts.raw = !args.no_raw;
  opts.progress = say;
  auto result = keel::bench::run_benchmark(opts);
  if (!result)
    return fail_run(result.error());
  auto row = [&] {
    auto label = args.label;
    if (label.empty())
      label = load.rate > 0 ? "paced" : "flat out";
    return keel::bench::markdown_row(*result, label);
  };
  if (!output_report(args.output, keel::bench::to_json(*result),
                     keel::bench::render(*result),
                     keel::bench::markdown_header(), row))
    return exit_failed;
  return result->load.clean() ? 0 : exit_failed;
}

} // namespace

load_mode add_load_mode(CLI::App& app) {
  auto args = std::make_shared<load_args>();
  add_traffic_options(app, *args);
  add_raw_options(app, *args);
  add_output_options(app, *args);
  add_fault_options(app, *args);
  add_http_options(app, *args);
  std::vector<CLI::Option*> load_only;
  for (auto name : {"--rate", "--duration", "--messages", "--warmup",
                    "--raw-dir", "--raw-duration", "--raw-value-bytes",
                    "--no-raw", "--fault-at", "--http"})
    load_only.push_back(app.get_option(name));
  add_memory_options(app, args->memory, load_only);
  return {[args] { check(*args); },
          [args] {
            if (*args->http_opt)
              return run_http(*args);
            if (!args->memory.selected())
              return run_node(*args);
            if (!set_node(*args))
              return exit_usage;
            return run_memory(args->memory, args->opts.load, args->output,
                              args->label);
          }};
}

} // namespace keel_bench
