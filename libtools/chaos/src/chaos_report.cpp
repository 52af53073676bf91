#include <sstream>

#include "keel/text.hpp"
#include "keel/tools/chaos_run.hpp"

namespace keel::chaos {

namespace {

nlohmann::json report_figures(const recovery_figures& x) {
  return {{"samples", x.samples},
          {"p50_ms", x.p50_ms},
          {"p99_ms", x.p99_ms},
          {"max_ms", x.max_ms}};
}

nlohmann::json report_cluster(const cluster_report& c) {
  auto failovers = nlohmann::json::array();
  for (auto& f : c.failovers)
    failovers.push_back({{"at_ms", f.at.count()},
                         {"node", f.node},
                         {"step", f.how},
                         {"threads", f.threads},
                         {"time", report_figures(f.time)}});
  auto windows = nlohmann::json::array();
  for (auto& w : c.rebalances)
    windows.push_back({{"at_ms", w.at.count()},
                       {"step", w.step},
                       {"settled_after_ms", w.settled_after.count()}});
  return {{"nodes", c.nodes},
          {"failover", report_figures(c.failover)},
          {"failovers", failovers},
          {"rebalances", windows},
          {"latency",
           {{"rebalance", report_figures(c.rebalance_latency)},
            {"steady", report_figures(c.steady_latency)}}},
          {"declared_dead_exits", c.declared_dead_exits},
          {"counters",
           {{"declared_dead", c.declared_dead},
            {"claimed", c.claimed},
            {"handed_over", c.handed_over}}},
          {"verify",
           {{"exit_code", c.verify_exit}, {"output", c.verify_output}}},
          {"database_folder", c.database_folder}};
}

nlohmann::json report_internal(const std::vector<internal_error>& xs) {
  auto result = nlohmann::json::array();
  for (auto& x : xs)
    result.push_back({{"at_ms", x.at.count()},
                      {"client", x.client},
                      {"node", x.node},
                      {"thread", x.thread},
                      {"id", x.id},
                      {"outcome", x.outcome},
                      {"message", x.message}});
  return result;
}

/// Each `internal` frame on a line: when, who got it, about what, its text.
void render_internal(std::ostream& out, const std::vector<internal_error>& xs) {
  if (xs.empty())
    return;
  out << "  internal errors (" << xs.size()
      << "; each a bug of the node, logged by it):\n";
  for (auto& x : xs)
    out << "    " << human_duration(x.at) << "  client " << x.client
        << " on node " << x.node << ", " << (x.outcome ? "outcome of " : "")
        << (x.thread.empty() ? "-" : x.thread) << '/'
        << (x.id.empty() ? "-" : x.id) << ": " << x.message << '\n';
}

std::string report_ms(double x) {
  return fixed(x, 0) + " ms";
}

/// p50 / p99 / max of `x`, with its sample count.
std::string report_percentiles(const recovery_figures& x) {
  return "p50 " + report_ms(x.p50_ms) + ", p99 " + report_ms(x.p99_ms)
         + ", max " + report_ms(x.max_ms) + " (" + std::to_string(x.samples)
         + " samples)";
}

void render_cluster(std::ostream& out, const cluster_report& c) {
  out << "  cluster of " << c.nodes << " nodes: " << c.declared_dead_exits
      << " restarts after exit 75 (declared dead); the nodes running at the "
         "end declared "
      << c.declared_dead << " members dead, claimed " << c.claimed
      << " shards, handed over " << c.handed_over << '\n'
      << "  failover (death to the first answer on each of its threads): "
      << report_percentiles(c.failover) << '\n';
  for (auto& f : c.failovers)
    out << "    " << human_duration(f.at) << "  " << f.how << ' ' << f.node
        << ", " << f.threads << " threads: " << report_percentiles(f.time)
        << '\n';
  out << "  rebalances (" << c.rebalances.size() << "):\n";
  for (auto& w : c.rebalances)
    out << "    " << human_duration(w.at) << "  " << w.step
        << (w.settled_after.count() < 0
              ? std::string{": never settled"}
              : ": settled after "
                  + report_ms(static_cast<double>(w.settled_after.count())))
        << '\n';
  out << "  answer latency in rebalance windows: "
      << report_percentiles(c.rebalance_latency)
      << "\n  answer latency in the steady state: "
      << report_percentiles(c.steady_latency) << '\n'
      << "  keelctl verify --pg: exit " << c.verify_exit;
  auto first_line = c.verify_output.substr(0, c.verify_output.find('\n'));
  out << (first_line.empty() ? "" : ": " + first_line) << '\n';
  if (!c.database_folder.empty())
    out << "  PostgreSQL's folder kept in " << c.database_folder << '\n';
}

} // namespace

nlohmann::json to_json(const run_report& x) {
  auto steps = nlohmann::json::array();
  for (auto& s : x.steps)
    steps.push_back(
      {{"at_ms", s.at.count()}, {"step", s.what}, {"error", s.error}});
  auto timeline = nlohmann::json::array();
  for (size_t i = 0; i < x.timeline.size(); ++i)
    timeline.push_back({{"second", i},
                        {"answered", x.timeline[i].answered},
                        {"latency_p50_ms", x.timeline[i].latency_p50_ms},
                        {"latency_max_ms", x.timeline[i].latency_max_ms}});
  auto violations = nlohmann::json::array();
  for (auto& v : x.violations)
    violations.push_back({{"rule", v.rule}, {"text", v.text}});
  return {{"scenario", x.scenario},
          {"seed", x.seed},
          {"seconds", x.seconds},
          {"clean", x.clean()},
          {"messages",
           {{"sent", x.sent},
            {"acknowledged", x.acknowledged},
            {"unknown", x.unknown},
            {"refused", x.refused},
            {"resends", x.resends},
            {"outcomes", x.outcomes},
            {"lost", x.lost},
            {"duplicated", x.duplicated}}},
          {"reconnects", x.reconnects},
          {"unplanned_exits", x.unplanned_exits},
          {"kill_point_deaths", x.kill_point_deaths},
          {"errors_by_code", x.errors_by_code},
          {"internal_errors", report_internal(x.internal_errors)},
          {"recovery", report_figures(x.recovery)},
          {"throughput",
           {{"answered_per_s", x.answered_per_second},
            {"peak_per_s", x.peak_per_second}}},
          {"cluster",
           x.cluster.enabled ? report_cluster(x.cluster) : nlohmann::json{}},
          {"steps", steps},
          {"timeline", timeline},
          {"violations", violations}};
}

std::string render_text(const run_report& x) {
  std::ostringstream out;
  out << "scenario " << x.scenario << " (seed " << x.seed
      << "): " << (x.clean() ? "every invariant held" : "VIOLATED") << " in "
      << fixed(x.seconds, 1) << " s\n"
      << "  messages: " << x.sent << " sent, " << x.acknowledged
      << " acknowledged, " << x.refused << " refused, " << x.unknown
      << " unknown, " << x.resends << " resends, " << x.outcomes
      << " outcomes; lost " << x.lost << ", duplicated " << x.duplicated << '\n'
      << "  reconnects " << x.reconnects << ", unplanned node exits "
      << x.unplanned_exits << ", kill point deaths " << x.kill_point_deaths
      << '\n'
      << "  recovery (fault to the first answer on a thread, "
      << x.recovery.samples << " samples): p50 " << fixed(x.recovery.p50_ms, 0)
      << " ms, p99 " << fixed(x.recovery.p99_ms, 0) << " ms, max "
      << fixed(x.recovery.max_ms, 0) << " ms\n"
      << "  throughput: " << fixed(x.answered_per_second, 1)
      << " answered/s while sending (busiest second " << x.peak_per_second
      << ")\n";
  if (x.cluster.enabled)
    render_cluster(out, x.cluster);
  if (!x.errors_by_code.empty()) {
    out << "  error frames:";
    for (auto& [code, n] : x.errors_by_code)
      out << ' ' << code << ' ' << n;
    out << '\n';
  }
  render_internal(out, x.internal_errors);
  out << "  steps (" << x.steps.size() << "):\n";
  for (auto& s : x.steps)
    out << "    " << human_duration(s.at) << "  " << s.what
        << (s.error.empty() ? "" : "  FAILED: " + s.error) << '\n';
  for (auto& v : x.violations)
    out << "  " << v.rule << ": " << v.text << '\n';
  return out.str();
}

} // namespace keel::chaos
