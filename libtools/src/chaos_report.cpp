#include <sstream>

#include "keel/text.hpp"
#include "keel/tools/chaos_run.hpp"

namespace keel::chaos {

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
          {"recovery",
           {{"samples", x.recovery.samples},
            {"p50_ms", x.recovery.p50_ms},
            {"p99_ms", x.recovery.p99_ms},
            {"max_ms", x.recovery.max_ms}}},
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
      << fixed(x.recovery.max_ms, 0) << " ms\n";
  if (!x.errors_by_code.empty()) {
    out << "  error frames:";
    for (auto& [code, n] : x.errors_by_code)
      out << ' ' << code << ' ' << n;
    out << '\n';
  }
  out << "  steps (" << x.steps.size() << "):\n";
  for (auto& s : x.steps)
    out << "    " << human_duration(s.at) << "  " << s.what
        << (s.error.empty() ? "" : "  FAILED: " + s.error) << '\n';
  for (auto& v : x.violations)
    out << "  " << v.rule << ": " << v.text << '\n';
  return out.str();
}

} // namespace keel::chaos
