// The reports of keel-bench's memory runs: JSON, a readable table, and rows
// of the memory table in docs/benchmarks.md.

#include <sstream>

#include "keel/text.hpp"
#include "keel/tools/bench_memory.hpp"
#include "report_format.hpp"

namespace keel::bench {

using namespace detail;

namespace {

/// A signed byte figure, readable ("-1.5 KiB").
std::string signed_bytes(double x) {
  auto magnitude = static_cast<uint64_t>(x < 0 ? -x : x);
  return (x < 0 ? "-" : "") + human_bytes(magnitude);
}

/// A per-item figure: "7.9 KiB (8090 B)".
std::string per_item(double x) {
  return signed_bytes(x) + " (" + fixed(x, 0) + " B)";
}

nlohmann::json settled_json(const settled_rss& x) {
  return {{"rss_bytes", x.rss_bytes},
          {"settle_seconds", x.seconds},
          {"settled", x.settled}};
}

std::string settled_line(const settled_rss& x) {
  return human_bytes(x.rss_bytes)
         + (x.settled ? " (settled after " : " (still growing after ")
         + fixed(x.seconds, 1) + " s)";
}

void problem_rows(std::ostream& out, const std::vector<std::string>& list) {
  for (auto& problem : list)
    table_row(out, "  problem", problem);
}

std::string md_cell(const std::string& str) {
  return " " + str + " |";
}

} // namespace

// -- idle threads
// ---------------------------------------------------------------

nlohmann::json to_json(const idle_threads_result& x) {
  const auto& l = x.load;
  nlohmann::json j;
  j["mode"] = "idle-threads";
  j["threads"] = x.threads;
  j["messages"] = messages_json(l);
  j["clean"] = x.clean();
  j["rss_before_bytes"] = x.rss_before;
  j["rss_after"] = settled_json(x.after);
  j["bytes_per_thread"] = x.bytes_per_thread();
  j["live_before"] = x.live_before;
  j["live_after"] = x.live_after;
  if (x.passivation_checked)
    j["after_wait"] = {{"wait_s", x.passivate_wait.count() / 1000.0},
                       {"live", x.live_after_wait},
                       {"passivations", x.passivations_during_wait},
                       {"rss_bytes", x.rss_after_wait}};
  j["problems"] = x.problems;
  j["error_samples"] = l.error_samples;
  return j;
}

std::string render(const idle_threads_result& x) {
  const auto& l = x.load;
  std::ostringstream out;
  table_row(out, "run",
            std::to_string(x.threads) + " fresh threads, one message each, "
              + std::to_string(l.sent) + " sent, " + std::to_string(l.answered)
              + " answered, " + std::to_string(l.errors) + " errors");
  table_row(out, "checks",
            "missing replies " + std::to_string(l.missing_replies)
              + ", duplicates " + std::to_string(l.duplicates)
              + ", connection errors " + std::to_string(l.connection_errors));
  table_row(out, "live threads",
            std::to_string(x.live_before) + " before, "
              + std::to_string(x.live_after) + " after");
  table_row(out, "node RSS",
            human_bytes(x.rss_before) + " before, " + settled_line(x.after)
              + " after");
  table_row(out, "per thread", per_item(x.bytes_per_thread()));
  if (x.passivation_checked)
    table_row(out, "after wait",
              human_duration(x.passivate_wait)
                + " later: " + std::to_string(x.live_after_wait) + " live ("
                + std::to_string(x.passivations_during_wait)
                + " passivated meanwhile), RSS "
                + human_bytes(x.rss_after_wait));
  table_row(out, "result", x.clean() ? "clean" : "NOT CLEAN");
  problem_rows(out, x.problems);
  sample_rows(out, l);
  return out.str();
}

std::string markdown_row(const idle_threads_result& x,
                         const std::string& label) {
  std::string afterwards = "n/a";
  if (x.passivation_checked)
    afterwards = human_duration(x.passivate_wait)
                 + " later: " + std::to_string(x.live_after_wait)
                 + " live, RSS " + human_bytes(x.rss_after_wait);
  std::string row = "|";
  row += md_cell(utc_date());
  row += md_cell(label);
  row += md_cell(std::to_string(x.threads) + " threads, one message each, "
                 + std::to_string(x.load.sent) + " sent");
  row += md_cell(human_bytes(x.rss_before));
  row += md_cell(human_bytes(x.after.rss_bytes));
  row += md_cell(per_item(x.bytes_per_thread()) + " per thread");
  row += md_cell(afterwards);
  row += md_cell(x.clean() ? "yes" : "NO");
  return row + "\n";
}

// -- idle connections
// -----------------------------------------------------------

nlohmann::json to_json(const idle_connections_result& x) {
  nlohmann::json j;
  j["mode"] = "idle-connections";
  j["requested"] = x.requested;
  j["opened"] = x.opened;
  j["refused"] = x.refused;
  j["failed"] = x.failed;
  j["lost"] = x.lost;
  j["source_addresses"] = x.source_addresses;
  j["fd_limit"] = x.fd_limit;
  j["open_seconds"] = x.open_seconds;
  j["clean"] = x.clean();
  j["rss_before_bytes"] = x.rss_before;
  j["rss_after"] = settled_json(x.after);
  j["bytes_per_connection"] = x.bytes_per_connection();
  j["node_connections_before"] = x.node_connections_before;
  j["node_connections_after"] = x.node_connections_after;
  j["after_close"] = {{"rss_bytes", x.rss_after_close},
                      {"node_connections", x.node_connections_after_close}};
  j["problems"] = x.problems;
  j["error_samples"] = x.error_samples;
  return j;
}

std::string render(const idle_connections_result& x) {
  std::ostringstream out;
  table_row(out, "run",
            std::to_string(x.requested)
              + " idle connections: " + std::to_string(x.opened) + " opened in "
              + fixed(x.open_seconds, 1) + " s, " + std::to_string(x.refused)
              + " refused by the node (503), " + std::to_string(x.failed)
              + " failed, " + std::to_string(x.lost) + " lost while open");
  table_row(out, "client",
            (x.source_addresses > 0
               ? std::to_string(x.source_addresses) + " source addresses"
               : std::string{"the kernel's source address"})
              + ", open files limit "
              + (x.fd_limit > 0 ? std::to_string(x.fd_limit) : "unlimited"));
  table_row(out, "node conns",
            std::to_string(x.node_connections_before) + " open before, "
              + std::to_string(x.node_connections_after) + " with them, "
              + std::to_string(x.node_connections_after_close)
              + " after closing");
  table_row(out, "node RSS",
            human_bytes(x.rss_before) + " before, " + settled_line(x.after)
              + " with them open, " + human_bytes(x.rss_after_close)
              + " after closing");
  table_row(out, "per conn", per_item(x.bytes_per_connection()));
  table_row(out, "result", x.clean() ? "clean" : "NOT CLEAN");
  problem_rows(out, x.problems);
  for (auto& sample : x.error_samples)
    table_row(out, "  sample", sample);
  return out.str();
}

std::string markdown_row(const idle_connections_result& x,
                         const std::string& label) {
  std::string row = "|";
  row += md_cell(utc_date());
  row += md_cell(label);
  row += md_cell(std::to_string(x.requested) + " connections, "
                 + std::to_string(x.opened) + " opened, "
                 + std::to_string(x.refused) + " refused, "
                 + std::to_string(x.failed) + " failed");
  row += md_cell(human_bytes(x.rss_before));
  row += md_cell(human_bytes(x.after.rss_bytes));
  row += md_cell(per_item(x.bytes_per_connection()) + " per connection");
  row += md_cell("closed: RSS " + human_bytes(x.rss_after_close));
  row += md_cell(x.clean() ? "yes" : "NO");
  return row + "\n";
}

std::string memory_markdown_header() {
  return "| date | scenario | what | node RSS before | node RSS after "
         "| per thread / connection | afterwards | clean |\n"
         "|---|---|---|---|---|---|---|---|\n";
}

std::string memory_failure_row(const std::string& label,
                               const std::string& what,
                               const std::string& reason) {
  std::string row = "|";
  row += md_cell(utc_date());
  row += md_cell(label);
  row += md_cell(what);
  row += md_cell("n/a");
  row += md_cell("n/a");
  row += md_cell("not measured");
  // A cell must not end the row early.
  std::string text = "failed: " + reason;
  for (auto& c : text)
    if (c == '|' || c == '\n')
      c = ' ';
  row += md_cell(text);
  row += md_cell("NO");
  return row + "\n";
}

} // namespace keel::bench
