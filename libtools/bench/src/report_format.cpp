#include "report_format.hpp"

#include <cstdio>
#include <ctime>

#include "keel/text.hpp"

namespace keel::bench::detail {

nlohmann::json latency_json(const latency_summary& x) {
  return {{"count", x.count}, {"p50", x.p50}, {"p90", x.p90},
          {"p99", x.p99},     {"max", x.max}, {"mean", x.mean}};
}

std::string seconds_str(std::chrono::milliseconds x) {
  return fixed(x.count() / 1000.0, 1) + " s";
}

std::string latency_line(const latency_summary& x) {
  if (x.count == 0)
    return "no samples";
  return "p50 " + fixed(x.p50, 2) + " ms   p90 " + fixed(x.p90, 2)
         + " ms   p99 " + fixed(x.p99, 2) + " ms   max " + fixed(x.max, 2)
         + " ms";
}

void table_row(std::ostream& out, const char* label, const std::string& value) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%-15s", label);
  out << buf << value << '\n';
}

std::string length_str(const traffic_options& o) {
  return o.messages > 0 ? std::to_string(o.messages) + " measured messages"
                        : seconds_str(o.duration) + " measured";
}

nlohmann::json traffic_json(const traffic_options& o, size_t window) {
  return {
    {"rate", o.rate > 0 ? nlohmann::json(o.rate) : nlohmann::json("flat out")},
    {"window", window},
    {"messages", o.messages},
    {"duration_s", o.messages > 0 ? 0.0 : o.duration.count() / 1000.0},
    {"warmup_s", o.warmup.count() / 1000.0},
    {"text_bytes", o.text_bytes},
  };
}

void add_traffic_json(nlohmann::json& j, const traffic_result& x, bool clean) {
  j["clean"] = clean;
  j["measured_seconds"] = x.measured_seconds;
  j["answered_per_second"] = x.answered_per_second;
  j["client_cpu_seconds"] = x.client_cpu_seconds;
  j["error_samples"] = x.error_samples;
}

std::string utc_date() {
  char date[16];
  auto now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  std::strftime(date, sizeof(date), "%Y-%m-%d", &utc);
  return date;
}

void sample_rows(std::ostream& out, const traffic_result& x) {
  for (auto& sample : x.error_samples)
    table_row(out, "  sample", sample);
}

nlohmann::json messages_json(const load_result& l) {
  return {
    {"sent", l.sent},
    {"acked", l.acked},
    {"answered", l.answered},
    {"errors", l.errors},
    {"missing_acks", l.missing_acks},
    {"missing_replies", l.missing_replies},
    {"duplicates", l.duplicates},
    {"unknown_ids", l.unknown_ids},
    {"out_of_order", l.out_of_order},
    {"connection_errors", l.connection_errors},
    {"measured_sent", l.measured_sent},
    {"measured_answered", l.measured_answered},
  };
}

} // namespace keel::bench::detail
