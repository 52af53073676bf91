#include <sstream>

#include "keel/text.hpp"
#include "keel/tools/http_load.hpp"
#include "report_format.hpp"

namespace keel::bench {

using namespace detail;

nlohmann::json to_json(const http_load_options& opts,
                       const http_load_result& x) {
  nlohmann::json j;
  j["config"] = traffic_json(opts, opts.window);
  j["config"]["url"] = opts.server.base_url;
  j["config"]["model"] = opts.server.model;
  j["config"]["headers"] = opts.server.headers;
  j["calls"] = {{"sent", x.sent},
                {"answered", x.answered},
                {"errors", x.errors},
                {"missing", x.missing},
                {"measured_sent", x.measured_sent},
                {"measured_answered", x.measured_answered}};
  add_traffic_json(j, x, x.clean());
  j["latency_ms"] = latency_json(x.latency);
  return j;
}

namespace {

std::string http_mode(const http_load_options& opts) {
  if (opts.rate > 0)
    return "paced at " + fixed(opts.rate, 0) + " calls/s";
  if (opts.window == 1)
    return "sequential (one call at a time)";
  return "flat out (" + std::to_string(opts.window) + " calls in flight)";
}

std::string server_line(const provider_config& server) {
  std::string headers;
  for (auto& [key, value] : server.headers)
    headers += (headers.empty() ? " (" : ", ") + key + ": " + value;
  return server.base_url + (headers.empty() ? "" : headers + ")");
}

} // namespace

std::string render(const http_load_options& opts, const http_load_result& x) {
  std::ostringstream out;
  auto row = [&](const char* label, const std::string& value) {
    table_row(out, label, value);
  };
  row("run", "HTTP chat completions, " + http_mode(opts) + ", "
               + length_str(opts) + " after " + seconds_str(opts.warmup)
               + " warmup");
  row("server", server_line(opts.server));
  row("calls", "sent " + std::to_string(x.sent) + ", answered "
                 + std::to_string(x.answered) + ", errors "
                 + std::to_string(x.errors) + ", missing "
                 + std::to_string(x.missing));
  row("throughput", fixed(x.answered_per_second, 1) + " answered calls/s ("
                      + std::to_string(x.measured_answered)
                      + " measured calls in " + fixed(x.measured_seconds, 2)
                      + " s)");
  row("latency", latency_line(x.latency));
  row("client CPU", fixed(x.client_cpu_seconds, 2)
                      + " s (keel-bench itself, HTTP client included)");
  row("result", x.clean() ? "clean: every call returned a completion"
                          : "NOT CLEAN: see the counts above");
  sample_rows(out, x);
  return out.str();
}

} // namespace keel::bench
