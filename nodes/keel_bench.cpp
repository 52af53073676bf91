// keel-bench: drives a running node over WebSocket and reports throughput,
// ack and reply latency, the node's peak RSS, and Keel's durable message
// rate as a ratio of RocksDB's raw synced-write rate; optionally injects a
// fault mid-run (kills a process, or tags messages with a fault directive)
// and reports how the node failed over. With --http URL it instead POSTs
// chat completions to an OpenAI-compatible server (a mock, or a gateway in
// front of one) and reports their latency. With --idle-threads N or
// --idle-connections N it measures the node's memory per live idle thread or
// per idle WebSocket connection instead. `keel-bench recovery` instead
// fills a fresh data folder with threads as a crashed node leaves them,
// starts a keel-node on it and times its recovery. The work is in libtools
// (keel/tools/bench.hpp, keel/tools/bench_memory.hpp,
// keel/tools/bench_recovery.hpp); this file wires up the modes of
// keel_bench_load.cpp, keel_bench_memory.cpp and keel_bench_recovery.cpp.
//
// Exit codes: 0 clean run, 1 a check failed (missing, duplicate or
// reordered acks/replies, error frames, failed calls) or the run failed,
// 2 bad arguments, 3 the node or server cannot be reached or refuses the
// token.

#include <fstream>
#include <iostream>

#include <CLI/CLI.hpp>

#include "keel_bench.hpp"

namespace keel_bench {

int fail_run(const caf::error& err) {
  std::cerr << "keel-bench: " << keel::readable_message(err) << '\n';
  bool unreachable = err == keel::ec::connection_failed
                     || err == keel::ec::unauthorized
                     || err == keel::ec::timeout;
  return unreachable ? exit_unreachable : exit_failed;
}

namespace {

bool fail_write(const std::string& path) {
  std::cerr << "keel-bench: cannot write " << path << '\n';
  return false;
}

/// What to write before a row of the table `header` heads: nothing when
/// `path`'s last table already has that header, else the header (after a
/// blank line when the file holds another table), so that rows of the load
/// and of the memory runs can share one file.
std::string header_needed(const std::string& path, const std::string& header) {
  auto first_line = header.substr(0, header.find('\n'));
  std::ifstream in{path};
  std::string line;
  std::string previous;
  std::string last_header;
  bool empty = true;
  // A table's header is the line above its rule ("|---|...").
  while (std::getline(in, line)) {
    empty = false;
    if (line.rfind("|-", 0) == 0 || line.rfind("|:-", 0) == 0)
      last_header = previous;
    previous = line;
  }
  if (last_header == first_line)
    return {};
  return (empty ? "" : "\n") + header;
}

} // namespace

bool output_report(const output_args& out, const nlohmann::json& json,
                   const std::string& text, const std::string& header,
                   const std::function<std::string()>& row) {
  if (out.json)
    std::cout << json.dump(2) << '\n';
  else
    std::cout << text;
  if (!out.json_out.empty()) {
    std::ofstream file{out.json_out};
    file << json.dump(2) << '\n';
    if (!file)
      return fail_write(out.json_out);
  }
  if (!out.row_out.empty()) {
    auto before = header_needed(out.row_out, header);
    std::ofstream file{out.row_out, std::ios::app};
    file << before << row();
    if (!file)
      return fail_write(out.row_out);
  }
  return true;
}

void say(const std::string& line) {
  std::cerr << "keel-bench: " << line << std::endl;
}

} // namespace keel_bench

int main(int argc, char** argv) {
  using namespace keel_bench;
  CLI::App app{"keel-bench: drives a Keel node over WebSocket and measures "
               "throughput, ack and reply latency, peak RSS, the node's CPU "
               "per answered message, and the durable message rate relative "
               "to RocksDB's raw synced-write rate; or (--idle-threads, "
               "--idle-connections) the node's memory per live idle thread "
               "or per idle connection."};
  auto load = add_load_mode(app);
  auto recovery = add_recovery_command(app);
  auto dashboard = add_dashboard_command(app);
  try {
    app.parse(argc, argv);
    load.check();
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : exit_usage;
  }
  if (recovery.app->parsed())
    return recovery.run();
  if (dashboard.app->parsed())
    return dashboard.run();
  return load.run();
}
