#include <iomanip>
#include <sstream>

#include "keel/json_codec.hpp"
#include "keel/text.hpp"
#include "keel/tools/bench_recovery.hpp"

namespace keel::bench {

namespace {

double step_ms(const recovery_report& r, const std::string& name) {
  for (auto& step : r.steps)
    if (step.name == name)
      return static_cast<double>(step.micros) / 1000;
  return -1;
}

const char* const step_names[] = {"read_sessions",  "rebuild_tree",
                                  "suspend_active", "scan_undelivered",
                                  "resume_roots",   "resume_children"};

std::string verdict(const recovery_bench_result& x) {
  if (!x.verified)
    return "not run: " + x.verify_error;
  if (x.verify.value("ok", false))
    return "ok";
  return std::to_string(
           x.verify.value("violations", nlohmann::json::array()).size())
         + " violations";
}

} // namespace

nlohmann::json to_json(const recovery_bench_result& x) {
  auto& p = x.populated;
  nlohmann::json steps = nlohmann::json::array();
  for (auto& step : x.report.steps)
    steps.push_back({{"name", step.name},
                     {"count", step.count},
                     {"ms", static_cast<double>(step.micros) / 1000}});
  return {
    {"populated",
     {{"threads", p.threads},
      {"roots", p.roots},
      {"children", p.children},
      {"links", p.links},
      {"active", p.active},
      {"pending", p.pending},
      {"pending_roots", p.pending_roots},
      {"log_entries", p.log_entries},
      {"operations", p.operations},
      {"flushes", p.flushes},
      {"disk_bytes", p.disk_bytes},
      {"seconds", p.seconds}}},
    {"started_at", x.started_at},
    {"load_average", x.load_average},
    {"to_recovery_started_ms", x.to_recovery_started_ms},
    {"to_listening_ms", x.to_listening_ms},
    {"to_recovery_finished_ms", x.to_recovery_finished_ms},
    {"to_pending_answered_ms", x.to_pending_answered_ms},
    {"to_quiet_ms", x.to_quiet_ms},
    {"steps", std::move(steps)},
    {"report", to_json(x.report)},
    {"all_answered", x.all_answered},
    {"outcomes_expected", x.outcomes_expected},
    {"outcomes_seen", x.outcomes_seen},
    {"errors", x.errors},
    {"duplicate_answers", x.duplicate_answers},
    {"peak_rss_at_recovery_bytes", x.peak_rss_at_recovery},
    {"peak_rss_bytes", x.peak_rss_bytes},
    {"rss_bytes", x.rss_bytes},
    {"node_cpu_seconds", x.node_cpu_seconds},
    {"stop_ms", x.stop_ms},
    {"stop_exit_code", x.stop_exit_code},
    {"verified", x.verified},
    {"verify", x.verify},
    {"verify_ms", x.verify_ms},
    {"verify_error", x.verify_error},
    {"clean", x.clean()},
  };
}

std::string render(const recovery_bench_result& x) {
  auto& p = x.populated;
  std::ostringstream out;
  auto row = [&out](const std::string& label, const std::string& value) {
    out << std::left << std::setw(24) << label << value << '\n';
  };
  row("threads", std::to_string(p.threads) + " (" + std::to_string(p.roots)
                   + " roots, " + std::to_string(p.children) + " children, "
                   + std::to_string(p.active) + " ACTIVE)");
  row("pending messages", std::to_string(p.pending) + " ("
                            + std::to_string(p.pending_roots) + " in roots)");
  row("populated", fixed(p.seconds, 1) + " s, " + std::to_string(p.operations)
                     + " operations in " + std::to_string(p.flushes)
                     + " synced groups, " + human_bytes(p.disk_bytes)
                     + " on disk");
  row("load average", x.load_average + " (at the node's start)");
  row("start -> store open",
      fixed(x.to_recovery_started_ms, 0) + " ms (the report's started_at)");
  row("start -> listening", fixed(x.to_listening_ms, 0) + " ms");
  row("start -> recovered", fixed(x.to_recovery_finished_ms, 0) + " ms");
  for (auto& step : x.report.steps)
    row("  " + step.name, fixed(static_cast<double>(step.micros) / 1000, 1)
                            + " ms (" + std::to_string(step.count) + ")");
  row("start -> answered",
      fixed(x.to_pending_answered_ms, 0) + " ms (every pending message)");
  row("start -> quiet",
      fixed(x.to_quiet_ms, 0) + " ms (forwarded answers included)");
  row("outcomes", std::to_string(x.outcomes_seen) + " of "
                    + std::to_string(x.outcomes_expected) + " expected, "
                    + std::to_string(x.errors) + " errors, "
                    + std::to_string(x.duplicate_answers) + " duplicates"
                    + (x.all_answered ? "" : ", NOT ALL ANSWERED"));
  row("node peak RSS", human_bytes(x.peak_rss_at_recovery) + " at the report, "
                         + human_bytes(x.peak_rss_bytes) + " at the end (RSS "
                         + human_bytes(x.rss_bytes) + ")");
  row("node CPU", fixed(x.node_cpu_seconds, 2) + " s (user + system)");
  row("clean stop", fixed(x.stop_ms, 0) + " ms, exit code "
                      + std::to_string(x.stop_exit_code));
  row("keelctl verify",
      verdict(x) + " (" + fixed(x.verify_ms / 1000, 1) + " s)");
  for (auto& problem : x.report.problems)
    row("  problem", problem);
  row("result", x.clean() ? "clean" : "NOT CLEAN: see above");
  return out.str();
}

std::string recovery_markdown_header() {
  std::string head = "| threads | pending | on disk | start → store open "
                     "| start → listening | start → recovered |";
  std::string rule = "|---:|---:|---:|---:|---:|---:|";
  for (auto name : step_names) {
    head += std::string{" "} + name + " |";
    rule += "---:|";
  }
  head += " start → answered | peak RSS | verify |\n";
  rule += "---:|---:|---|\n";
  return head + rule;
}

std::string recovery_markdown_row(const recovery_bench_result& x) {
  auto ms = [](double v) {
    return v < 0 ? std::string{"-"} : fixed(v, 0) + " ms";
  };
  std::string row = "| " + std::to_string(x.populated.threads) + " | "
                    + std::to_string(x.populated.pending) + " | "
                    + human_bytes(x.populated.disk_bytes) + " | "
                    + ms(x.to_recovery_started_ms) + " | "
                    + ms(x.to_listening_ms) + " | "
                    + ms(x.to_recovery_finished_ms) + " |";
  for (auto name : step_names) {
    auto v = step_ms(x.report, name);
    row += " " + (v < 0 ? std::string{"-"} : fixed(v, 1) + " ms") + " |";
  }
  row += " " + ms(x.to_pending_answered_ms) + " | "
         + human_bytes(x.peak_rss_bytes) + " | " + verdict(x) + " |\n";
  return row;
}

} // namespace keel::bench
