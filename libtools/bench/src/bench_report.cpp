#include <sstream>

#include "keel/text.hpp"
#include "keel/tools/bench.hpp"
#include "report_format.hpp"

namespace keel::bench {

using namespace detail;

double report::durable_ratio() const noexcept {
  if (!raw_available || raw.writes_per_second <= 0)
    return 0;
  return load.answered_per_second / raw.writes_per_second;
}

double report::floor_ratio() const noexcept {
  auto node_ms = node_cpu_ms_per_message();
  auto floor_ms = floor_available ? floor.cpu_ms_per_message() : 0;
  if (node_ms < 0 || floor_ms <= 0)
    return -1;
  return node_ms / floor_ms;
}

double report::node_cpu_ms_per_message() const noexcept {
  if (!node.cpu_available || load.measured_answered == 0)
    return -1;
  return node.cpu_seconds * 1000.0
         / static_cast<double>(load.measured_answered);
}

// -- JSON ---------------------------------------------------------------------

namespace {

nlohmann::json null_if_negative(double x) {
  return x >= 0 ? nlohmann::json(x) : nlohmann::json(nullptr);
}

nlohmann::json to_json(const failover_result& x, const fault_options& f) {
  nlohmann::json j;
  j["at_s"] = f.at ? f.at->count() / 1000.0 : 0.0;
  j["kill_pid"] = f.kill_pid;
  j["text_suffix"] = f.text_suffix;
  j["fallback_provider"] = f.fallback_provider;
  j["injected"] = x.injected;
  if (!x.fault_error.empty())
    j["fault_error"] = x.fault_error;
  j["to_first_fallback_ms"] = null_if_negative(x.to_first_fallback);
  j["affected"] = x.affected;
  j["affected_failed"] = x.affected_failed;
  auto list = nlohmann::json::array();
  for (auto& [ms, by] : x.affected_latencies)
    list.push_back({{"latency_ms", null_if_negative(ms)}, {"outcome", by}});
  j["affected_messages"] = std::move(list);
  j["affected_latency_ms"] = latency_json(x.affected_latency);
  j["before_latency_ms"] = latency_json(x.before);
  j["after_latency_ms"] = latency_json(x.after);
  j["replies_after_fault"] = x.replies_after_fault;
  return j;
}

nlohmann::json config_json(const load_options& o) {
  auto j = traffic_json(o, o.window);
  j["node"] = o.node.host + ":" + std::to_string(o.node.port);
  j["connections"] = o.connections;
  j["threads"] = o.threads;
  j["thread_prefix"] = o.thread_prefix;
  return j;
}

nlohmann::json node_json(const node_figures& x) {
  if (!x.available)
    return {{"unavailable", x.reason}};
  return {{"name", x.name},
          {"rss_bytes", x.rss_bytes},
          {"peak_rss_bytes", x.peak_rss_bytes},
          {"store_flushes", x.store_flushes},
          {"data_dir", x.data_dir}};
}

void add_raw_json(nlohmann::json& j, const report& x) {
  if (!x.raw_available) {
    j["raw"] = {{"unavailable", x.raw_reason}};
    j["durable_ratio"] = nullptr;
    return;
  }
  j["raw"] = {{"path", x.raw.path},
              {"concurrency", x.raw.concurrency},
              {"value_bytes", x.raw.value_bytes},
              {"writes", x.raw.writes},
              {"seconds", x.raw.seconds},
              {"writes_per_second", x.raw.writes_per_second}};
  j["durable_ratio"] = x.durable_ratio();
}

void add_floor_json(nlohmann::json& j, const report& x) {
  if (!x.floor_available) {
    j["cpu_floor"] = {{"unavailable", x.floor_reason}};
    j["cpu_floor_ratio"] = nullptr;
    return;
  }
  const auto& f = x.floor;
  j["cpu_floor"] = {{"path", f.path},
                    {"rate", f.rate},
                    {"reached_rate", f.reached_rate()},
                    {"writes_per_message", f.writes_per_message},
                    {"value_bytes", f.value_bytes},
                    {"messages", f.messages},
                    {"seconds", f.seconds},
                    {"cpu_seconds", f.cpu_seconds},
                    {"cpu_ms_per_message", f.cpu_ms_per_message()}};
  j["cpu_floor_ratio"] = null_if_negative(x.floor_ratio());
}

} // namespace

nlohmann::json to_json(const report& x) {
  const auto& o = x.load_opts;
  const auto& l = x.load;
  nlohmann::json j;
  j["config"] = config_json(o);
  j["messages"] = messages_json(l);
  add_traffic_json(j, l, l.clean());
  j["ack_latency_ms"] = latency_json(l.ack_latency);
  j["reply_latency_ms"] = latency_json(l.reply_latency);
  if (o.fault.at)
    j["failover"] = to_json(l.failover, o.fault);
  j["node"] = node_json(x.node);
  j["node_cpu_seconds"] = x.node.cpu_available
                            ? nlohmann::json(x.node.cpu_seconds)
                            : nlohmann::json(nullptr);
  j["node_cpu_ms_per_message"] = null_if_negative(x.node_cpu_ms_per_message());
  add_raw_json(j, x);
  add_floor_json(j, x);
  return j;
}

// -- text ---------------------------------------------------------------------

namespace {

/// What the fault is, for its row.
std::string fault_what(const fault_options& f) {
  std::string what;
  if (f.kill_pid > 0)
    what = "SIGKILL to process " + std::to_string(f.kill_pid);
  if (!f.text_suffix.empty())
    what += (what.empty() ? "" : ", ") + std::string{"text suffix \""}
            + f.text_suffix + "\"";
  return what;
}

/// How the failover went: the time to the first fallback reply and the
/// messages the fault touched.
void render_recovery(std::ostream& out, const failover_result& x,
                     const fault_options& f) {
  table_row(out, "failover",
            x.to_first_fallback >= 0
              ? fixed(x.to_first_fallback, 1)
                  + " ms from the fault to the first reply by "
                  + f.fallback_provider
              : "no reply by " + f.fallback_provider + " after the fault");
  table_row(out, "affected",
            std::to_string(x.affected)
              + " messages (outcome after the fault, sent "
                "before the first fallback reply), "
              + std::to_string(x.affected_failed) + " of them failed");
  table_row(out, "  latency", latency_line(x.affected_latency));
  std::string list;
  for (auto& [ms, by] : x.affected_latencies)
    list += (list.empty() ? "" : ", ")
            + (ms >= 0 ? fixed(ms, 1) : std::string{"-"}) + " (" + by + ")";
  if (!list.empty())
    table_row(out, "  each (ms)", list);
}

void render(std::ostream& out, const failover_result& x,
            const fault_options& f) {
  auto at = fixed(f.at ? f.at->count() / 1000.0 : 0.0, 1);
  table_row(out, "fault",
            (x.injected ? "" : "NOT injected: ") + fault_what(f) + " at " + at
              + " s into the measured phase");
  if (!x.fault_error.empty())
    table_row(out, "fault error", x.fault_error);
  if (!x.injected)
    return;
  render_recovery(out, x, f);
  table_row(out, "before fault", latency_line(x.before));
  table_row(out, "after failover", latency_line(x.after));
  std::string by;
  for (auto& [name, n] : x.replies_after_fault)
    by += (by.empty() ? "" : ", ") + name + " " + std::to_string(n);
  table_row(out, "replies after", by.empty() ? "none" : by);
}

std::string run_line(const load_options& o) {
  std::string mode = o.rate > 0 ? "paced at " + fixed(o.rate, 0) + " msg/s"
                                : "flat out (window " + std::to_string(o.window)
                                    + " per connection)";
  return std::to_string(o.connections) + " connections, "
         + std::to_string(o.threads) + " threads, " + mode + ", "
         + length_str(o) + " after " + seconds_str(o.warmup) + " warmup";
}

/// The messages, the checks, the throughput and the latencies.
void render_counts(std::ostream& out, const load_result& l) {
  table_row(out, "messages",
            "sent " + std::to_string(l.sent) + ", acked "
              + std::to_string(l.acked) + ", answered "
              + std::to_string(l.answered) + ", errors "
              + std::to_string(l.errors));
  table_row(out, "checks",
            "missing acks " + std::to_string(l.missing_acks)
              + ", missing replies " + std::to_string(l.missing_replies)
              + ", duplicates " + std::to_string(l.duplicates)
              + ", unknown ids " + std::to_string(l.unknown_ids)
              + ", out of order " + std::to_string(l.out_of_order)
              + ", connection errors " + std::to_string(l.connection_errors));
  table_row(out, "throughput",
            fixed(l.answered_per_second, 1) + " answered msgs/s ("
              + std::to_string(l.measured_answered) + " measured msgs in "
              + fixed(l.measured_seconds, 2) + " s)");
  table_row(out, "ack latency", latency_line(l.ack_latency));
  table_row(out, "reply latency", latency_line(l.reply_latency));
}

/// The node's CPU over the measured phase, per answered message.
std::string node_cpu_line(const report& x) {
  if (!x.node.cpu_available)
    return "unavailable (the node's status has no cpu_seconds)";
  auto line = fixed(x.node.cpu_seconds, 2)
              + " s from the start of the measured phase to the end";
  auto per_message = x.node_cpu_ms_per_message();
  if (per_message >= 0)
    line += ", " + fixed(per_message, 3) + " ms per answered message";
  return line;
}

void render_node(std::ostream& out, const report& x) {
  const auto& node = x.node;
  const auto& l = x.load;
  if (!node.available) {
    table_row(out, "node status", "unavailable: " + node.reason);
    return;
  }
  std::string flushes = std::to_string(node.store_flushes)
                        + " store flushes during the run";
  if (node.store_flushes > 0 && l.sent > 0)
    flushes += " (" + fixed(static_cast<double>(l.sent) / node.store_flushes, 2)
               + " msgs per flush)";
  table_row(out, "node memory",
            "peak RSS " + human_bytes(node.peak_rss_bytes) + ", RSS now "
              + human_bytes(node.rss_bytes));
  table_row(out, "node store", flushes);
  table_row(out, "node CPU", node_cpu_line(x));
}

void render_raw(std::ostream& out, const report& x) {
  if (!x.raw_available) {
    table_row(out, "raw RocksDB", "not measured: " + x.raw_reason);
    return;
  }
  table_row(out, "raw RocksDB",
            fixed(x.raw.writes_per_second, 1) + " synced writes/s ("
              + std::to_string(x.raw.concurrency) + " writers, "
              + std::to_string(x.raw.value_bytes) + "-byte values, "
              + fixed(x.raw.seconds, 1) + " s)");
  table_row(out, "durable ratio",
            fixed(x.durable_ratio(), 3)
              + " (answered msgs/s / raw synced "
                "writes/s)");
}

void render_floor(std::ostream& out, const report& x) {
  if (!x.floor_available) {
    table_row(out, "CPU floor", "not measured: " + x.floor_reason);
    return;
  }
  const auto& f = x.floor;
  table_row(out, "CPU floor",
            fixed(f.cpu_ms_per_message(), 3) + " ms per message ("
              + std::to_string(f.writes_per_message)
              + " synced RocksDB writes each, alone, at "
              + fixed(f.reached_rate(), 0) + " msg/s, "
              + std::to_string(f.value_bytes) + "-byte values, "
              + fixed(f.seconds, 1) + " s)");
  auto ratio = x.floor_ratio();
  table_row(out, "floor ratio",
            ratio >= 0 ? fixed(ratio, 2) + " (node CPU per message / the floor)"
                       : "n/a (no node CPU figure)");
}

} // namespace

std::string render(const report& x) {
  const auto& o = x.load_opts;
  const auto& l = x.load;
  std::ostringstream out;
  table_row(out, "run", run_line(o));
  table_row(out, "node",
            o.node.host + ":" + std::to_string(o.node.port)
              + (x.node.available ? " (" + x.node.name + ")" : ""));
  render_counts(out, l);
  if (o.fault.at)
    render(out, l.failover, o.fault);
  render_node(out, x);
  if (o.rate > 0)
    render_floor(out, x);
  else
    render_raw(out, x);
  table_row(out, "client CPU",
            fixed(l.client_cpu_seconds, 2) + " s (keel-bench itself)");
  table_row(out, "result",
            l.clean() ? "clean: every message got exactly one "
                        "ack and one reply, in order"
                      : "NOT CLEAN: see the checks above");
  sample_rows(out, l);
  return out.str();
}

// -- the results table --------------------------------------------------------

std::string markdown_header() {
  return "| date | scenario | connections / threads | load "
         "| answered msgs/s | ack p50 / p99 (ms) | reply p50 / p99 (ms) "
         "| node peak RSS | node CPU ms/msg | raw synced writes/s "
         "| durable ratio | clean | CPU floor ms/msg |\n"
         "|---|---|---|---|---|---|---|---|---|---|---|---|---|\n";
}

std::string markdown_row(const report& x, const std::string& label) {
  const auto& o = x.load_opts;
  const auto& l = x.load;
  std::string load = o.rate > 0
                       ? fixed(o.rate, 0) + " msg/s"
                       : "flat out, window " + std::to_string(o.window);
  auto cell = [](const std::string& str) { return " " + str + " |"; };
  std::string row = "|";
  row += cell(utc_date());
  row += cell(label);
  row
    += cell(std::to_string(o.connections) + " / " + std::to_string(o.threads));
  row += cell(load);
  row += cell(fixed(l.answered_per_second, 0));
  row
    += cell(fixed(l.ack_latency.p50, 2) + " / " + fixed(l.ack_latency.p99, 2));
  row += cell(fixed(l.reply_latency.p50, 2) + " / "
              + fixed(l.reply_latency.p99, 2));
  row += cell(x.node.available ? human_bytes(x.node.peak_rss_bytes) : "n/a");
  auto cpu = x.node_cpu_ms_per_message();
  row += cell(cpu >= 0 ? fixed(cpu, 3) : "n/a");
  row += cell(x.raw_available ? fixed(x.raw.writes_per_second, 0) : "n/a");
  row += cell(x.raw_available ? fixed(x.durable_ratio(), 2) : "n/a");
  row += cell(l.clean() ? "yes" : "NO");
  row += cell(x.floor_available ? fixed(x.floor.cpu_ms_per_message(), 3)
                                : "n/a");
  return row + "\n";
}

} // namespace keel::bench
