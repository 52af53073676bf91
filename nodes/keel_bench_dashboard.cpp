// keel-bench dashboard: what an open dashboard costs the node's writes.
// Fills a fresh data folder with stored threads (through the store API, as
// `keel-bench recovery` does), starts keel-node on it and measures the ack
// latency of a paced load twice in one run: alone, then while a poller
// sends what the dashboard page sends (docs/dashboard.md) at its interval.

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "cli.hpp"
#include "keel/text.hpp"
#include "keel/tools/bench_recovery.hpp"
#include "keel/tools/node_process.hpp"
#include "keel/tools/process.hpp"
#include "keel/tools/ws_client.hpp"
#include "keel_bench.hpp"

namespace keel_bench {

namespace {

using namespace std::chrono_literals;
using json = nlohmann::json;

/// The dashboard mode's options.
struct dashboard_args {
  /// Stored threads to populate before the node starts.
  uint64_t stored_threads = 100000;
  /// Where the node's data goes; a fresh temporary folder when empty.
  std::string data_dir;
  std::string node_binary;
  /// The load of each phase.
  double rate = 1000;
  std::chrono::milliseconds duration{20000};
  std::chrono::milliseconds warmup{3000};
  size_t connections = 50;
  size_t threads = 1000;
  /// The dashboard's poll interval (POLL_MS in dashboard/app.js).
  std::chrono::milliseconds poll_interval{1500};
  output_args output;
};

/// The requests one poll of the dashboard page sends, all at once
/// (dashboard/app.js, `endpoints`; a list asks for its first page).
const std::vector<std::string> dashboard_requests = {
  "/api/v1/status",       "/api/v1/tree?limit=50",
  "/api/v1/providers",    "/api/v1/agents?limit=50",
  "/api/v1/dlq?limit=50", "/api/v1/notifications?limit=50",
};

/// What the poller saw.
struct poll_figures {
  uint64_t polls = 0;
  uint64_t failed_requests = 0;
  /// Bytes of the answers of one poll, the last.
  uint64_t poll_bytes = 0;
  keel::bench::latency_summary poll_latency;
};

/// Polls like an open dashboard tab on its own thread until stopped.
class dashboard_poller {
public:
  dashboard_poller(keel::endpoint node, std::chrono::milliseconds interval)
    : node_(std::move(node)), interval_(interval) {
    thread_ = std::thread{[this] { run(); }};
  }

  ~dashboard_poller() {
    stop();
  }

  void stop() {
    stopping_ = true;
    if (thread_.joinable())
      thread_.join();
  }

  poll_figures figures() {
    std::lock_guard<std::mutex> guard{mtx_};
    figures_.poll_latency = took_.summary();
    return figures_;
  }

private:
  void run() {
    auto next = std::chrono::steady_clock::now();
    while (!stopping_) {
      poll_once();
      next += interval_;
      while (!stopping_ && std::chrono::steady_clock::now() < next)
        std::this_thread::sleep_for(10ms);
    }
  }

  // One poll: every request at once, as the page's Promise.allSettled.
  void poll_once() {
    auto start = std::chrono::steady_clock::now();
    std::atomic<uint64_t> bytes{0};
    std::atomic<uint64_t> failed{0};
    std::vector<std::thread> calls;
    for (auto& target : dashboard_requests)
      calls.emplace_back([&, target] {
        auto res = keel::api_call(node_, "GET", target, {}, 30s);
        if (res)
          bytes += res->dump().size();
        else
          ++failed;
      });
    for (auto& call : calls)
      call.join();
    std::lock_guard<std::mutex> guard{mtx_};
    took_.record(std::chrono::steady_clock::now() - start);
    ++figures_.polls;
    figures_.failed_requests += failed;
    figures_.poll_bytes = bytes;
  }

  keel::endpoint node_;
  std::chrono::milliseconds interval_;
  std::atomic<bool> stopping_{false};
  std::mutex mtx_;
  keel::bench::latency_recorder took_;
  poll_figures figures_;
  std::thread thread_;
};

std::string node_yaml(const std::string& data_dir, const std::string& token) {
  return "node:\n  name: keel-dashboard-bench\n  data_dir: '" + data_dir
         + "'\ngateway:\n  host: 127.0.0.1\n  port: 0\n  token: " + token
         + "\n  rate_limit:\n    per_second: 0"
         + "\nproviders:\n  - name: echo\n    kind: echo\n"
           "pools:\n  - name: default\n    chain: [echo]\n"
           "logging:\n  level: warn\n";
}

// Writes `n` stored threads, each one answered exchange, none live.
caf::error populate(const std::string& data_dir, uint64_t n) {
  keel::bench::populate_options pop;
  pop.db_dir = data_dir + "/db";
  pop.threads = n;
  pop.children_fraction = 0;
  pop.pending_fraction = 0;
  pop.active_fraction = 0;
  pop.turns = 1;
  pop.user_bytes = 100;
  pop.reply_bytes = 200;
  auto res = keel::bench::populate_crashed_store(pop);
  if (!res)
    return std::move(res.error());
  say("populated " + std::to_string(res->threads) + " threads in "
      + keel::fixed(res->seconds, 1) + " s");
  return caf::none;
}

// The load of one phase; `phase` keeps the phases' threads and ids apart.
keel::bench::load_options phase_load(const dashboard_args& args,
                                     const keel::endpoint& node,
                                     const std::string& phase) {
  keel::bench::load_options load;
  load.node = node;
  load.rate = args.rate;
  load.duration = args.duration;
  load.warmup = args.warmup;
  load.connections = args.connections;
  load.threads = args.threads;
  load.thread_prefix = "dash-" + phase + "-" + keel::random_hex(4) + "-";
  load.message_prefix = phase;
  return load;
}

json phase_json(const keel::bench::load_result& res) {
  auto& ack = res.ack_latency;
  return {{"sent", res.sent},
          {"acked", res.acked},
          {"clean", res.clean()},
          {"ack_ms", {{"p50", ack.p50}, {"p99", ack.p99}, {"max", ack.max}}},
          {"reply_p99_ms", res.reply_latency.p99}};
}

// Runs the two phases on `node`; the report as JSON.
caf::expected<json> run_phases(const dashboard_args& args,
                               const keel::endpoint& node) {
  say("phase 1: load alone");
  auto alone = keel::bench::run_load(phase_load(args, node, "alone"));
  if (!alone)
    return std::move(alone.error());
  say("phase 2: load with a dashboard polling every "
      + std::to_string(args.poll_interval.count()) + " ms");
  dashboard_poller poller{node, args.poll_interval};
  auto polled = keel::bench::run_load(phase_load(args, node, "polled"));
  poller.stop();
  if (!polled)
    return std::move(polled.error());
  auto polls = poller.figures();
  auto ratio = alone->ack_latency.p99 > 0
                 ? polled->ack_latency.p99 / alone->ack_latency.p99
                 : 0.0;
  return json{{"stored_threads", args.stored_threads},
              {"rate", args.rate},
              {"alone", phase_json(*alone)},
              {"with_dashboard", phase_json(*polled)},
              {"ack_p99_ratio", ratio},
              {"polls",
               {{"count", polls.polls},
                {"failed_requests", polls.failed_requests},
                {"bytes_per_poll", polls.poll_bytes},
                {"p50_ms", polls.poll_latency.p50},
                {"p99_ms", polls.poll_latency.p99}}}};
}

std::string render_report(const json& r) {
  char buf[512];
  auto& a = r["alone"]["ack_ms"];
  auto& d = r["with_dashboard"]["ack_ms"];
  auto& p = r["polls"];
  std::snprintf(buf, sizeof(buf),
                "stored threads %llu, %.0f msgs/s\n"
                "ack p50/p99/max ms, alone:          %.2f / %.2f / %.2f\n"
                "ack p50/p99/max ms, with dashboard: %.2f / %.2f / %.2f\n"
                "ack p99 ratio: %.2fx\n"
                "polls %llu (%llu failed requests), %llu bytes per poll, "
                "poll p50/p99 ms %.1f / %.1f\n",
                r["stored_threads"].get<unsigned long long>(),
                r["rate"].get<double>(), a["p50"].get<double>(),
                a["p99"].get<double>(), a["max"].get<double>(),
                d["p50"].get<double>(), d["p99"].get<double>(),
                d["max"].get<double>(), r["ack_p99_ratio"].get<double>(),
                p["count"].get<unsigned long long>(),
                p["failed_requests"].get<unsigned long long>(),
                p["bytes_per_poll"].get<unsigned long long>(),
                p["p50_ms"].get<double>(), p["p99_ms"].get<double>());
  return buf;
}

std::string dashboard_row(const json& r) {
  char buf[256];
  std::snprintf(buf, sizeof(buf),
                "| %llu | %.0f | %.2f | %.2f | %.2fx | %llu |\n",
                r["stored_threads"].get<unsigned long long>(),
                r["rate"].get<double>(),
                r["alone"]["ack_ms"]["p99"].get<double>(),
                r["with_dashboard"]["ack_ms"]["p99"].get<double>(),
                r["ack_p99_ratio"].get<double>(),
                r["polls"]["bytes_per_poll"].get<unsigned long long>());
  return buf;
}

int run_dashboard(const dashboard_args& args) {
  auto dir = args.data_dir.empty()
               ? (std::filesystem::temp_directory_path()
                  / ("keel-dashboard-bench-" + keel::random_hex(6)))
                   .string()
               : args.data_dir;
  std::filesystem::create_directories(dir);
  // A kept folder populated by an earlier run is used again as it is (the
  // threads the earlier loads wrote included), so that two binaries can be
  // compared on the same data.
  if (!std::filesystem::exists(dir + "/data/db")) {
    if (auto err = populate(dir + "/data", args.stored_threads))
      return fail_run(err);
  }
  auto token = keel::random_hex(24);
  keel::node_process node{dir, node_yaml(dir + "/data", token),
                          args.node_binary};
  auto report = run_phases(args, node.admin_address());
  node.stop();
  if (args.data_dir.empty())
    std::filesystem::remove_all(dir);
  if (!report)
    return fail_run(report.error());
  auto ok = output_report(
    args.output, *report, render_report(*report),
    "| stored threads | msgs/s | ack p99 alone (ms) | ack p99 with dashboard "
    "(ms) | ratio | bytes per poll |\n|---|---|---|---|---|---|\n",
    [&] { return dashboard_row(*report); });
  return ok ? 0 : exit_failed;
}

} // namespace

command add_dashboard_command(CLI::App& app) {
  auto args = std::make_shared<dashboard_args>();
  auto cmd = app.add_subcommand(
    "dashboard",
    "Fills a fresh data folder with stored threads, starts keel-node on it "
    "and measures the ack latency of a paced load alone and with an open "
    "dashboard polling");
  cmd
    ->add_option("--stored-threads", args->stored_threads,
                 "Threads stored before the node starts")
    ->capture_default_str();
  cmd->add_option("--data-dir", args->data_dir,
                  "Where the data goes (kept, and used again as it is when "
                  "it holds a database); default: a temporary folder");
  args->node_binary = keel::sibling_path(keel::own_executable(), "keel-node");
  cmd->add_option("--node-binary", args->node_binary, "The keel-node to start")
    ->capture_default_str();
  cmd->add_option("--rate", args->rate, "Messages per second of each phase")
    ->capture_default_str();
  keel::cli::add_duration(*cmd, "--duration", args->duration,
                          "Measured length of each phase", false)
    ->default_str("20s");
  keel::cli::add_duration(*cmd, "--warmup", args->warmup,
                          "Warmup before each phase's measurement")
    ->default_str("3s");
  keel::cli::add_duration(*cmd, "--poll-interval", args->poll_interval,
                          "The dashboard's poll interval", false)
    ->default_str("1500ms");
  cmd->add_option("--connections", args->connections, "WebSocket connections")
    ->capture_default_str();
  cmd->add_option("--threads", args->threads, "Threads the load writes to")
    ->capture_default_str();
  cmd->add_flag("--json", args->output.json, "Print the report as JSON");
  cmd->add_option("--row-out", args->output.row_out,
                  "Append a row of the results table to this file");
  return {cmd, [args] { return run_dashboard(*args); }};
}

} // namespace keel_bench
