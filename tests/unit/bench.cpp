#define CAF_SUITE bench
#include <caf/test/unit_test.hpp>

#include "keel/text.hpp"
#include "keel/tools/bench.hpp"
#include "keel/tools/bench_memory.hpp"
#include "keel/tools/bench_recovery.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>

#include "keel/protocol.hpp"
#include "keel/store.hpp"
#include "keel/tools/verify.hpp"
#include "keel/ws_server.hpp"

#include "keel/tools/fault_llm_server.hpp"
#include "temp_dir.hpp"

using namespace keel;
using namespace std::chrono_literals;

namespace {

/// How the fake gateway answers `send` frames.
enum class answer_mode {
  /// Ack, then reply.
  normal,
  /// Ack, then an `error` outcome.
  error,
  /// Ack, then the reply twice.
  duplicate_reply,
  /// Ack; per thread, the reply of every first message of a pair is held
  /// back and sent after the reply of the second.
  swap_pairs,
  /// Ack, then reply naming provider "fallback" if the text contains
  /// "[fail]", else "primary" (a node failing over).
  tag_provider,
};

/// A gateway that answers like a node would, without actors or storage.
class fake_node : public gateway_handler {
public:
  explicit fake_node(answer_mode mode) : mode_(mode) {
    // nop
  }

  ws_server* server = nullptr;

  void on_open(connection_id) override {
    // nop
  }

  void on_close(connection_id) override {
    // nop
  }

  /// Answers `GET /api/v1/status` with the figures the benchmarks read:
  /// every thread that got a message is live, each costing 1 KiB of RSS.
  void on_http(uint64_t request, const std::string&, const std::string& target,
               const std::string&) override {
    if (target != "/api/v1/status") {
      server->respond(request, 404, "text/plain", "not here");
      return;
    }
    nlohmann::json body;
    {
      std::lock_guard<std::mutex> guard{mtx_};
      body["rss_bytes"] = (100u << 20) + 1024 * sends_.size();
      body["threads"] = {{"active", sends_.size()}, {"passivations", 0}};
      body["cpu_seconds"] = 0.5 * static_cast<double>(seq_);
    }
    body["gateway"] = {{"connections_open", server->stats().connections_open}};
    server->respond(request, 200, "application/json", body.dump());
  }

  /// Messages received per thread.
  std::map<std::string, size_t> sends() {
    std::lock_guard<std::mutex> guard{mtx_};
    return sends_;
  }

  void on_frame(connection_id conn, protocol::client_frame frame) override {
    if (frame.type != protocol::client_frame_type::send)
      return;
    log_entry reply;
    {
      std::lock_guard<std::mutex> guard{mtx_};
      ++sends_[frame.thread];
      reply.seq = ++seq_;
      reply.reply_to = reply.seq;
    }
    reply.kind = log_kind::reply;
    reply.client_id = frame.id;
    reply.text = "echo: " + frame.text;
    reply.provider
      = frame.text.find("[fail]") == std::string::npos ? "primary" : "fallback";
    server->send(conn,
                 protocol::ack_frame(frame.thread, frame.id, reply.seq, false));
    switch (mode_) {
      case answer_mode::normal:
      case answer_mode::tag_provider: break;
      case answer_mode::error:
        reply.kind = log_kind::error;
        reply.code = "provider_failed";
        break;
      case answer_mode::duplicate_reply:
        server->send(conn, protocol::outcome_frame(frame.thread, reply));
        break;
      case answer_mode::swap_pairs: {
        std::lock_guard<std::mutex> guard{mtx_};
        auto& held = held_[frame.thread];
        if (!held) {
          held = reply;
          return;
        }
        server->send(conn, protocol::outcome_frame(frame.thread, reply));
        server->send(conn, protocol::outcome_frame(frame.thread, *held));
        held.reset();
        return;
      }
    }
    server->send(conn, protocol::outcome_frame(frame.thread, reply));
  }

private:
  answer_mode mode_;
  std::mutex mtx_;
  seq_t seq_ = 0;
  std::map<std::string, std::optional<log_entry>> held_;
  std::map<std::string, size_t> sends_;
};

struct fixture {
  std::shared_ptr<fake_node> node;
  std::unique_ptr<ws_server> server;

  void start(answer_mode mode, size_t max_connections = 10000) {
    node = std::make_shared<fake_node>(mode);
    gateway_config cfg;
    cfg.port = 0;
    cfg.max_connections = max_connections;
    auto srv = ws_server::start(cfg, node, "fake");
    CAF_REQUIRE(srv);
    server = std::move(*srv);
    node->server = server.get();
  }

  /// A fixed number of messages, no warmup: the run ends when the last
  /// outcome arrives, so no clock decides the result.
  bench::load_options load(size_t connections, size_t threads,
                           uint64_t messages, size_t window) {
    bench::load_options opts;
    opts.node.host = "127.0.0.1";
    opts.node.port = server->port();
    opts.connections = connections;
    opts.threads = threads;
    opts.messages = messages;
    opts.window = window;
    opts.warmup = 0ms;
    return opts;
  }

  ~fixture() {
    if (server)
      server->stop();
  }
};

} // namespace

CAF_TEST(percentiles use the nearest rank) {
  bench::latency_recorder rec;
  CAF_CHECK_EQUAL(rec.percentile(0.5), 0);
  for (int i = 100; i >= 1; --i)
    rec.record(std::chrono::milliseconds{i});
  CAF_CHECK_EQUAL(rec.count(), 100u);
  CAF_CHECK_EQUAL(rec.percentile(0.50), 50'000'000);
  CAF_CHECK_EQUAL(rec.percentile(0.99), 99'000'000);
  CAF_CHECK_EQUAL(rec.percentile(1.0), 100'000'000);
  CAF_CHECK_EQUAL(rec.percentile(0.001), 1'000'000);
  auto sum = rec.summary();
  CAF_CHECK_EQUAL(sum.count, 100u);
  CAF_CHECK_EQUAL(sum.p50, 50.0);
  CAF_CHECK_EQUAL(sum.p90, 90.0);
  CAF_CHECK_EQUAL(sum.p99, 99.0);
  CAF_CHECK_EQUAL(sum.max, 100.0);
  CAF_CHECK_EQUAL(sum.mean, 50.5);
}

CAF_TEST(memory usage comes from proc) {
  auto mem = read_memory_usage();
  CAF_REQUIRE(mem);
  CAF_CHECK_GREATER(mem->rss_bytes, 0u);
  CAF_CHECK_GREATER_OR_EQUAL(mem->peak_rss_bytes, mem->rss_bytes);
  auto missing = read_memory_usage(-1);
  CAF_CHECK_EQUAL(missing.error(), ec::not_found);
}

CAF_TEST(cpu time comes from proc) {
  // Burn some CPU so that even a coarse clock tick has passed.
  volatile uint64_t sink = 0;
  auto until = std::chrono::steady_clock::now() + 50ms;
  while (std::chrono::steady_clock::now() < until)
    for (int i = 0; i < 10000; ++i)
      sink = sink + static_cast<uint64_t>(i);
  auto cpu = read_cpu_seconds();
  CAF_REQUIRE(cpu);
  CAF_CHECK_GREATER(*cpu, 0.0);
  auto again = read_cpu_seconds(getpid());
  CAF_REQUIRE(again);
  CAF_CHECK_GREATER_OR_EQUAL(*again, *cpu);
  auto missing = read_cpu_seconds(-1);
  CAF_REQUIRE(!missing);
  CAF_CHECK_EQUAL(missing.error(), ec::not_found);
}

namespace {

/// The cells of a markdown table row.
size_t cell_count(const std::string& row) {
  auto line = row.substr(0, row.find('\n'));
  return static_cast<size_t>(std::count(line.begin(), line.end(), '|')) - 1;
}

/// A finished run of 1,000 measured answers with the node's figures.
bench::report sample_report() {
  bench::report x;
  x.load_opts.connections = 100;
  x.load_opts.threads = 1000;
  x.load_opts.rate = 1000;
  x.load.sent = x.load.acked = x.load.answered = 1200;
  x.load.measured_sent = x.load.measured_answered = 1000;
  x.load.measured_seconds = 1;
  x.load.answered_per_second = 1000;
  x.node.available = true;
  x.node.name = "n1";
  x.node.peak_rss_bytes = 200u << 20;
  x.node.cpu_available = true;
  x.node.cpu_seconds = 1.5;
  return x;
}

} // namespace

CAF_TEST(the report shows the node CPU per answered message) {
  auto x = sample_report();
  CAF_CHECK_EQUAL(x.node_cpu_ms_per_message(), 1.5);
  auto j = bench::to_json(x);
  CAF_CHECK_EQUAL(j["node_cpu_seconds"].get<double>(), 1.5);
  CAF_CHECK_EQUAL(j["node_cpu_ms_per_message"].get<double>(), 1.5);
  CAF_CHECK_EQUAL(j["node"]["peak_rss_bytes"].get<uint64_t>(), 200u << 20);
  CAF_CHECK_EQUAL(j["answered_per_second"].get<double>(), 1000.0);
  auto text = bench::render(x);
  CAF_CHECK_NOT_EQUAL(text.find("node CPU       1.50 s from the start of the "
                                "measured phase to the end, 1.500 ms per "
                                "answered message"),
                      std::string::npos);
  CAF_CHECK_NOT_EQUAL(text.find("node memory    peak RSS 200.0 MiB"),
                      std::string::npos);
  auto header = bench::markdown_header();
  CAF_CHECK_NOT_EQUAL(header.find("| node peak RSS | node CPU ms/msg |"),
                      std::string::npos);
  auto row = bench::markdown_row(x, "rate-1000");
  CAF_CHECK_EQUAL(cell_count(row), cell_count(header));
  CAF_CHECK_EQUAL(cell_count(header.substr(header.find('\n') + 1)),
                  cell_count(header));
  CAF_CHECK_NOT_EQUAL(row.find("| rate-1000 | 100 / 1000 | 1000 msg/s | 1000 "),
                      std::string::npos);
  CAF_CHECK_NOT_EQUAL(row.find("| 200.0 MiB | 1.500 | n/a | n/a | yes |"),
                      std::string::npos);
  // Without the node's CPU figure: null, n/a, and said so.
  x.node.cpu_available = false;
  CAF_CHECK_LESS(x.node_cpu_ms_per_message(), 0.0);
  j = bench::to_json(x);
  CAF_CHECK(j["node_cpu_seconds"].is_null());
  CAF_CHECK(j["node_cpu_ms_per_message"].is_null());
  CAF_CHECK_NOT_EQUAL(bench::markdown_row(x, "r").find("| 200.0 MiB | n/a |"),
                      std::string::npos);
  CAF_CHECK_NOT_EQUAL(bench::render(x).find("node CPU       unavailable"),
                      std::string::npos);
}

CAF_TEST(a paced report shows the CPU floor and the node ratio to it) {
  auto x = sample_report();
  x.floor_available = true;
  x.floor.rate = 1000;
  x.floor.writes_per_message = 2;
  x.floor.value_bytes = 200;
  // The disk kept 800 of the 1,000 messages a second asked for.
  x.floor.messages = 2400;
  x.floor.seconds = 3;
  x.floor.cpu_seconds = 0.6;
  CAF_CHECK_EQUAL(x.floor.cpu_ms_per_message(), 0.25);
  CAF_CHECK_EQUAL(x.floor.reached_rate(), 800.0);
  CAF_CHECK_EQUAL(x.floor_ratio(), 6.0);
  auto j = bench::to_json(x);
  CAF_CHECK_EQUAL(j["cpu_floor"]["cpu_ms_per_message"].get<double>(), 0.25);
  CAF_CHECK_EQUAL(j["cpu_floor"]["messages"].get<uint64_t>(), 2400u);
  CAF_CHECK_EQUAL(j["cpu_floor"]["rate"].get<double>(), 1000.0);
  CAF_CHECK_EQUAL(j["cpu_floor"]["reached_rate"].get<double>(), 800.0);
  CAF_CHECK_EQUAL(j["cpu_floor_ratio"].get<double>(), 6.0);
  auto text = bench::render(x);
  CAF_CHECK_NOT_EQUAL(text.find("CPU floor      0.250 ms per message (2 synced "
                                "RocksDB writes each, alone, at 800 msg/s, "
                                "200-byte values, 3.0 s)"),
                      std::string::npos);
  CAF_CHECK_NOT_EQUAL(text.find("floor ratio    6.00 (node CPU per message / "
                                "the floor)"),
                      std::string::npos);
  CAF_CHECK_EQUAL(text.find("raw RocksDB"), std::string::npos);
  auto row = bench::markdown_row(x, "rate-1000");
  CAF_CHECK_EQUAL(cell_count(row), cell_count(bench::markdown_header()));
  CAF_CHECK_NOT_EQUAL(row.find("| n/a | n/a | yes | 0.250 |"),
                      std::string::npos);
  // Without the node's CPU: no ratio. Flat out: the raw rate instead.
  x.node.cpu_available = false;
  CAF_CHECK_LESS(x.floor_ratio(), 0.0);
  j = bench::to_json(x);
  CAF_CHECK(j["cpu_floor_ratio"].is_null());
  CAF_CHECK_NOT_EQUAL(bench::render(x).find("floor ratio    n/a"),
                      std::string::npos);
  x.load_opts.rate = 0;
  x.floor_available = false;
  x.floor_reason = "measured in paced runs only";
  text = bench::render(x);
  CAF_CHECK_EQUAL(text.find("CPU floor"), std::string::npos);
  CAF_CHECK_NOT_EQUAL(text.find("raw RocksDB    not measured"),
                      std::string::npos);
  auto flat = bench::to_json(x);
  CAF_CHECK_EQUAL(flat["cpu_floor"]["unavailable"],
                  "measured in paced runs only");
}

CAF_TEST(paced synced writes keep their rate and leave no database behind) {
  test::temp_dir tmp{"keel-paced"};
  paced_write_options opts;
  opts.dir = tmp.str() + "/raw";
  opts.rate = 200;
  opts.duration = 250ms;
  auto before = std::chrono::steady_clock::now();
  auto res = measure_paced_synced_writes(opts);
  CAF_REQUIRE(res);
  // One message every 5 ms, each due time taken from the start (not from
  // the last write): at most 50 fit in 250 ms, all of them unless the disk
  // falls behind.
  CAF_CHECK_GREATER(res->messages, 0u);
  CAF_CHECK_LESS_OR_EQUAL(res->messages, 50u);
  CAF_CHECK_GREATER_OR_EQUAL(res->seconds, 0.245);
  CAF_CHECK_GREATER_OR_EQUAL(std::chrono::steady_clock::now() - before, 245ms);
  CAF_CHECK_EQUAL(res->writes_per_message, 2u);
  CAF_CHECK_LESS_OR_EQUAL(res->reached_rate(), 200.0 * 50 / 49);
  CAF_CHECK(!std::filesystem::exists(res->path));
  CAF_CHECK(!std::filesystem::exists(opts.dir));
  // A pace no disk keeps (2,000,000 synced writes a second) still ends
  // when the duration has passed, with the messages it managed.
  opts.rate = 1e6;
  opts.duration = 100ms;
  auto behind = measure_paced_synced_writes(opts);
  CAF_REQUIRE(behind);
  CAF_CHECK_LESS(behind->messages, 100000u);
  CAF_CHECK_LESS(behind->seconds, 10.0);
  CAF_CHECK_LESS(behind->reached_rate(), 1e6);
  // Bad options and an unusable folder are named.
  opts.rate = 0;
  auto no_rate = measure_paced_synced_writes(opts);
  CAF_REQUIRE(!no_rate);
  CAF_CHECK_EQUAL(no_rate.error(), ec::config_invalid);
  // Not one message in the duration (and a pace too long to compute).
  opts.rate = 1e-12;
  auto too_slow = measure_paced_synced_writes(opts);
  CAF_REQUIRE(!too_slow);
  CAF_CHECK_EQUAL(too_slow.error(), ec::config_invalid);
  opts.rate = 200;
  std::ofstream{tmp.str() + "/file"} << "x";
  opts.dir = tmp.str() + "/file/raw";
  auto unusable = measure_paced_synced_writes(opts);
  CAF_REQUIRE(!unusable);
  CAF_CHECK_EQUAL(unusable.error(), ec::storage_open_failed);
  CAF_CHECK_NOT_EQUAL(render(unusable.error()).find(opts.dir),
                      std::string::npos);
}

CAF_TEST(the memory reports show bytes per thread and per connection) {
  bench::idle_threads_result t;
  t.threads = 1000;
  t.load.sent = t.load.acked = t.load.answered = 1000;
  t.rss_before = 100u << 20;
  t.after.rss_bytes = (100u << 20) + 1000 * 8192;
  t.after.settled = true;
  t.live_after = 1000;
  t.passivation_checked = true;
  t.passivate_wait = 30s;
  t.rss_after_wait = 101u << 20;
  CAF_CHECK_EQUAL(t.bytes_per_thread(), 8192.0);
  CAF_CHECK(t.clean());
  auto header = bench::memory_markdown_header();
  auto row = bench::markdown_row(t, "idle-threads");
  CAF_CHECK_EQUAL(cell_count(row), cell_count(header));
  CAF_CHECK_NOT_EQUAL(row.find("| 8.0 KiB (8192 B) per thread | 30s later: 0 "
                               "live, RSS 101.0 MiB | yes |"),
                      std::string::npos);
  auto j = bench::to_json(t);
  CAF_CHECK_EQUAL(j["bytes_per_thread"].get<double>(), 8192.0);
  CAF_CHECK_EQUAL(j["after_wait"]["live"].get<uint64_t>(), 0u);
  CAF_CHECK_NOT_EQUAL(bench::render(t).find("per thread     8.0 KiB (8192 B)"),
                      std::string::npos);
  bench::idle_connections_result c;
  c.requested = c.opened = 2000;
  c.rss_before = 100u << 20;
  c.after.rss_bytes = (100u << 20) + 2000 * 3072;
  CAF_CHECK_EQUAL(c.bytes_per_connection(), 3072.0);
  CAF_CHECK(c.clean());
  row = bench::markdown_row(c, "idle-connections");
  CAF_CHECK_EQUAL(cell_count(row), cell_count(header));
  CAF_CHECK_NOT_EQUAL(row.find("| 2000 connections, 2000 opened, 0 refused, 0 "
                               "failed |"),
                      std::string::npos);
  CAF_CHECK_NOT_EQUAL(row.find("| 3.0 KiB (3072 B) per connection |"),
                      std::string::npos);
  c.refused = 1;
  CAF_CHECK(!c.clean());
  CAF_CHECK_EQUAL(bench::to_json(c)["clean"].get<bool>(), false);
}

CAF_TEST(node errors read as one clear line) {
  endpoint ep;
  ep.host = "127.0.0.1";
  ep.port = 8080;
  auto refused = describe_node_error(
    ep, caf::make_error(ec::connection_failed,
                        "cannot reach 127.0.0.1:8080: Connection refused"));
  CAF_CHECK_EQUAL(refused, ec::connection_failed);
  CAF_CHECK_EQUAL(error_message(refused),
                  "cannot reach node at 127.0.0.1:8080: connection refused");
  auto token = describe_node_error(ep, caf::make_error(ec::unauthorized));
  CAF_CHECK_EQUAL(error_message(token), "the node refused the token (401)");
  auto other = describe_node_error(ep, caf::make_error(ec::timeout, "slow"));
  CAF_CHECK_EQUAL(error_message(other), "slow");
}

CAF_TEST(readable sizes and durations) {
  CAF_CHECK_EQUAL(human_bytes(512), "512 B");
  CAF_CHECK_EQUAL(human_bytes(3 * 1024 * 1024 / 2), "1.5 MiB");
  CAF_CHECK_EQUAL(human_duration(std::chrono::milliseconds{850}), "850 ms");
  CAF_CHECK_EQUAL(human_duration(std::chrono::milliseconds{3'723'000}),
                  "1h 2m 3s");
  CAF_CHECK_EQUAL(human_duration(std::chrono::milliseconds{60'000}), "1m 0s");
  CAF_CHECK_EQUAL(human_duration(std::chrono::milliseconds{1500}), "1.5s");
  CAF_CHECK_EQUAL(human_duration(std::chrono::milliseconds{2000}), "2s");
  CAF_CHECK_EQUAL(human_duration(std::chrono::milliseconds{12'250}), "12.25s");
}

CAF_TEST(an unreachable node fails the load with a clear message) {
  // Bind and release a port so that nothing listens on it.
  fixture f;
  f.start(answer_mode::normal);
  auto opts = f.load(1, 1, 1, 1);
  f.server->stop();
  f.server.reset();
  auto res = bench::run_load(opts);
  CAF_REQUIRE(!res);
  CAF_CHECK_EQUAL(res.error(), ec::connection_failed);
  CAF_CHECK_EQUAL(error_message(res.error()), "cannot reach node at 127.0.0.1:"
                                                + std::to_string(opts.node.port)
                                                + ": connection refused");
}

CAF_TEST_FIXTURE_SCOPE(bench_load_tests, fixture)

CAF_TEST(a clean run counts every ack and reply once) {
  start(answer_mode::normal);
  auto res = bench::run_load(load(4, 10, 200, 3));
  CAF_REQUIRE(res);
  CAF_CHECK_EQUAL(res->sent, 200u);
  CAF_CHECK_EQUAL(res->measured_sent, 200u);
  CAF_CHECK_EQUAL(res->acked, 200u);
  CAF_CHECK_EQUAL(res->answered, 200u);
  CAF_CHECK_EQUAL(res->measured_answered, 200u);
  CAF_CHECK_EQUAL(res->ack_latency.count, 200u);
  CAF_CHECK_EQUAL(res->reply_latency.count, 200u);
  CAF_CHECK_EQUAL(res->errors, 0u);
  CAF_CHECK_EQUAL(res->missing_acks, 0u);
  CAF_CHECK_EQUAL(res->missing_replies, 0u);
  CAF_CHECK_EQUAL(res->duplicates, 0u);
  CAF_CHECK_EQUAL(res->out_of_order, 0u);
  CAF_CHECK(res->clean());
  CAF_CHECK_GREATER(res->answered_per_second, 0.0);
}

CAF_TEST(error outcomes are counted and make the run unclean) {
  start(answer_mode::error);
  auto res = bench::run_load(load(2, 2, 20, 2));
  CAF_REQUIRE(res);
  CAF_CHECK_EQUAL(res->sent, 20u);
  CAF_CHECK_EQUAL(res->acked, 20u);
  CAF_CHECK_EQUAL(res->errors, 20u);
  CAF_CHECK_EQUAL(res->answered, 0u);
  CAF_CHECK_EQUAL(res->missing_replies, 0u);
  CAF_CHECK_EQUAL(res->reply_latency.count, 0u);
  CAF_CHECK(!res->clean());
  CAF_CHECK(!res->error_samples.empty());
}

CAF_TEST(a second reply for a message is a duplicate) {
  start(answer_mode::duplicate_reply);
  auto res = bench::run_load(load(1, 1, 10, 1));
  CAF_REQUIRE(res);
  CAF_CHECK_EQUAL(res->answered, 10u);
  // The last message's second reply may arrive after the run ended.
  CAF_CHECK_GREATER_OR_EQUAL(res->duplicates, 9u);
  CAF_CHECK(!res->clean());
}

CAF_TEST(replies out of thread order are detected) {
  start(answer_mode::swap_pairs);
  // One connection, two threads, window 4: every pair of a thread is in
  // flight together, so the held reply is always released.
  auto res = bench::run_load(load(1, 2, 8, 4));
  CAF_REQUIRE(res);
  CAF_CHECK_EQUAL(res->answered, 8u);
  CAF_CHECK_EQUAL(res->out_of_order, 4u);
  CAF_CHECK(!res->clean());
}

CAF_TEST(a fault mid - run is timed up to the first fallback reply) {
  start(answer_mode::tag_provider);
  auto opts = load(1, 1, 20, 1);
  // At once: the first message is already out, every later one carries the
  // tag, so exactly 19 are answered by the fallback after the fault.
  opts.fault.at = 0ms;
  opts.fault.text_suffix = " [fail]";
  opts.fault.fallback_provider = "fallback";
  auto res = bench::run_load(opts);
  CAF_REQUIRE(res);
  CAF_CHECK(res->clean());
  const auto& fo = res->failover;
  CAF_CHECK(fo.injected);
  CAF_CHECK(fo.fault_error.empty());
  CAF_CHECK_GREATER_OR_EQUAL(fo.to_first_fallback, 0.0);
  CAF_CHECK_EQUAL(fo.replies_after_fault.count("primary"), 0u);
  CAF_CHECK_EQUAL(fo.replies_after_fault.at("fallback"), 19u);
  CAF_CHECK_GREATER_OR_EQUAL(fo.affected, 1u);
  CAF_CHECK_LESS_OR_EQUAL(fo.affected, 2u);
  CAF_CHECK_EQUAL(fo.affected_failed, 0u);
  CAF_CHECK_EQUAL(fo.affected_latencies.size(), fo.affected);
  CAF_CHECK_EQUAL(fo.after.count + fo.affected + fo.before.count, 20u);
}

CAF_TEST(one message per thread reaches every thread exactly once) {
  start(answer_mode::normal);
  auto opts = load(3, 10, 10, 4);
  opts.one_message_per_thread = true;
  size_t hooks = 0;
  opts.on_measure_start = [&hooks] { ++hooks; };
  auto res = bench::run_load(opts);
  CAF_REQUIRE(res);
  CAF_CHECK(res->clean());
  CAF_CHECK_EQUAL(res->sent, 10u);
  CAF_CHECK_EQUAL(hooks, 1u);
  auto sends = node->sends();
  CAF_CHECK_EQUAL(sends.size(), 10u);
  for (auto& [thread, n] : sends)
    CAF_CHECK_EQUAL(n, 1u);
}

CAF_TEST(the benchmark reads the node CPU at the start of the measured phase) {
  start(answer_mode::normal);
  bench::benchmark_options opts;
  opts.load = load(2, 4, 40, 2);
  opts.raw = false;
  auto res = bench::run_benchmark(opts);
  CAF_REQUIRE(res);
  CAF_CHECK(res->load.clean());
  // The fake node reports 0.5 s per message received: read once the
  // measured phase started (off the load's thread, so any number of the
  // 40 may be in by then) and at the end, after all 40: a whole number of
  // messages' worth, at most all of them.
  CAF_REQUIRE(res->node.cpu_available);
  auto halves = res->node.cpu_seconds * 2;
  CAF_CHECK_EQUAL(halves, std::floor(halves));
  CAF_CHECK_GREATER_OR_EQUAL(res->node.cpu_seconds, 0.0);
  CAF_CHECK_LESS_OR_EQUAL(res->node.cpu_seconds, 20.0);
  CAF_CHECK_EQUAL(res->node_cpu_ms_per_message(),
                  res->node.cpu_seconds * 1000.0 / 40);
}

CAF_TEST(idle threads are measured per live thread) {
  start(answer_mode::normal);
  bench::idle_threads_options opts;
  opts.load = load(4, 1, 1, 2);
  opts.load.threads = 50;
  opts.passivate_wait = 10ms;
  auto res = bench::run_idle_threads(opts);
  CAF_REQUIRE(res);
  CAF_CHECK(res->clean());
  CAF_CHECK_EQUAL(res->load.sent, 50u);
  CAF_CHECK_EQUAL(res->live_after, 50u);
  CAF_CHECK_EQUAL(res->bytes_per_thread(), 1024.0);
  CAF_CHECK(res->after.settled);
  CAF_CHECK(res->passivation_checked);
  CAF_CHECK_EQUAL(res->live_after_wait, 50u);
  for (auto& [thread, n] : node->sends())
    CAF_CHECK_EQUAL(n, 1u);
}

CAF_TEST(idle connections open and close and are counted) {
  start(answer_mode::normal);
  bench::idle_connections_options opts;
  opts.node.host = "127.0.0.1";
  opts.node.port = server->port();
  opts.connections = 300;
  opts.concurrency = 50;
  opts.hold = 50ms;
  auto res = bench::run_idle_connections(opts);
  CAF_REQUIRE(res);
  CAF_CHECK(res->clean());
  CAF_CHECK_EQUAL(res->opened, 300u);
  CAF_CHECK_EQUAL(res->source_addresses, 1u);
  CAF_CHECK_EQUAL(res->node_connections_after, 300u);
  CAF_CHECK_GREATER(res->fd_limit, 300u);
  // More than the open files limit allows: refused before connecting.
  opts.connections = res->fd_limit;
  auto too_many = bench::run_idle_connections(opts);
  CAF_REQUIRE(!too_many);
  CAF_CHECK_EQUAL(too_many.error(), ec::config_invalid);
  CAF_CHECK_NOT_EQUAL(error_message(too_many.error()).find("hard limit"),
                      std::string::npos);
}

CAF_TEST(connections the node refuses make the idle run unclean) {
  start(answer_mode::normal, 10);
  bench::idle_connections_options opts;
  opts.node.host = "127.0.0.1";
  opts.node.port = server->port();
  opts.connections = 20;
  opts.hold = 10ms;
  auto res = bench::run_idle_connections(opts);
  CAF_REQUIRE(res);
  CAF_CHECK(!res->clean());
  CAF_CHECK_LESS_OR_EQUAL(res->opened, 10u);
  CAF_CHECK_GREATER(res->refused + res->failed, 0u);
}

CAF_TEST(the fault can kill a process) {
  auto child = fork();
  CAF_REQUIRE_GREATER_OR_EQUAL(child, 0);
  if (child == 0) {
    pause();
    _exit(0);
  }
  start(answer_mode::tag_provider);
  auto opts = load(1, 1, 5, 1);
  opts.fault.at = 0ms;
  opts.fault.kill_pid = child;
  opts.fault.fallback_provider = "fallback";
  auto res = bench::run_load(opts);
  int status = 0;
  CAF_CHECK_EQUAL(waitpid(child, &status, 0), child);
  CAF_CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  CAF_REQUIRE(res);
  CAF_CHECK(res->failover.injected);
  // Nothing failed over: the fallback never answered.
  CAF_CHECK_LESS(res->failover.to_first_fallback, 0.0);
}

CAF_TEST_FIXTURE_SCOPE_END()

namespace {

/// A fixed number of sequential calls, no warmup (no clock decides).
bench::http_load_options http_load(const fault_llm::fault_llm_server& server,
                                   uint64_t messages) {
  bench::http_load_options opts;
  opts.server.base_url = server.base_url() + "/v1";
  opts.server.model = "gpt-4o-mini";
  opts.server.stream = false;
  opts.server.headers["x-bench"] = "1";
  opts.messages = messages;
  opts.warmup = 0ms;
  return opts;
}

} // namespace

CAF_TEST(the HTTP load counts every call) {
  fault_llm::fault_llm_server server;
  auto opts = http_load(server, 20);
  auto res = bench::run_http_load(opts);
  CAF_REQUIRE(res);
  CAF_CHECK_EQUAL(res->sent, 20u);
  CAF_CHECK_EQUAL(res->answered, 20u);
  CAF_CHECK_EQUAL(res->measured_answered, 20u);
  CAF_CHECK_EQUAL(res->latency.count, 20u);
  CAF_CHECK_EQUAL(res->errors, 0u);
  CAF_CHECK_EQUAL(res->missing, 0u);
  CAF_CHECK(res->clean());
  // The probe call, then the load.
  CAF_CHECK_EQUAL(server.requests(), 21u);
  // Paced, several calls in flight.
  opts.rate = 500;
  opts.window = 4;
  res = bench::run_http_load(opts);
  CAF_REQUIRE(res);
  CAF_CHECK_EQUAL(res->answered, 20u);
  CAF_CHECK(res->clean());
}

CAF_TEST(HTTP failures are counted and make the run unclean) {
  fault_llm::fault_llm_server::options sopts;
  // The probe passes; three of the ten calls fail.
  for (auto spec : {"ok", "503", "ok", "503", "503"})
    sopts.script.push_back(*fault_llm::parse_fault(spec));
  fault_llm::fault_llm_server server{sopts};
  auto res = bench::run_http_load(http_load(server, 10));
  CAF_REQUIRE(res);
  CAF_CHECK_EQUAL(res->sent, 10u);
  CAF_CHECK_EQUAL(res->errors, 3u);
  CAF_CHECK_EQUAL(res->answered, 7u);
  CAF_CHECK_EQUAL(res->latency.count, 7u);
  CAF_CHECK(!res->clean());
  CAF_CHECK(!res->error_samples.empty());
}

CAF_TEST(an HTTP server that refuses or cannot be reached fails the run) {
  std::string dead_url;
  {
    fault_llm::fault_llm_server refusing;
    refusing.set_default(*fault_llm::parse_fault("400"));
    auto res = bench::run_http_load(http_load(refusing, 1));
    CAF_REQUIRE(!res);
    CAF_CHECK_EQUAL(res.error(), ec::provider_failed);
    dead_url = refusing.base_url();
  }
  bench::http_load_options opts;
  opts.server.base_url = dead_url;
  opts.server.model = "m";
  opts.messages = 1;
  auto res = bench::run_http_load(opts);
  CAF_REQUIRE(!res);
  CAF_CHECK_EQUAL(res.error(), ec::connection_failed);
}

// -- the recovery benchmark's populate step
// ------------------------------------

namespace {

bench::populate_options small_population(const std::string& dir) {
  bench::populate_options opts;
  opts.db_dir = dir;
  opts.threads = 50;
  opts.children_fraction = 0.2;
  opts.pending_fraction = 0.2;
  opts.active_fraction = 0.6;
  opts.turns = 2;
  opts.user_bytes = 40;
  opts.reply_bytes = 120;
  opts.group_ops = 16; // Several groups even for 50 threads.
  opts.seed = 7;
  return opts;
}

} // namespace

CAF_TEST(populate writes threads as a crashed node leaves them) {
  test::temp_dir tmp{"keel-populate"};
  auto dir = tmp.str() + "/db";
  auto pop = bench::populate_crashed_store(small_population(dir));
  CAF_REQUIRE(pop);
  CAF_CHECK_EQUAL(pop->threads, 50u);
  CAF_CHECK_EQUAL(pop->roots, 40u);
  CAF_CHECK_EQUAL(pop->children, 10u);
  CAF_CHECK_EQUAL(pop->links, 10u);
  CAF_CHECK_EQUAL(pop->active, 30u);
  CAF_CHECK_EQUAL(pop->pending, 10u);
  // Two exchanges per thread, plus the pending messages.
  CAF_CHECK_EQUAL(pop->log_entries, 50u * 4 + 10);
  CAF_CHECK_GREATER(pop->flushes, 1u);
  CAF_CHECK_GREATER(pop->disk_bytes, 0u);
  auto db = store::open(dir);
  CAF_REQUIRE(db);
  auto sessions = (*db)->sessions();
  CAF_REQUIRE(sessions);
  CAF_REQUIRE_EQUAL(sessions->size(), 50u);
  std::map<std::string, std::string> parent_of;
  size_t active = 0;
  for (size_t i = 0; i < sessions->size(); ++i) {
    auto& rec = (*sessions)[i];
    CAF_CHECK_EQUAL(rec.thread, bench::populated_thread_id(i));
    active += rec.state == session_state::active ? 1 : 0;
    CAF_CHECK(rec.state != session_state::closed);
    if (!rec.parent.empty()) {
      // Spawned by an earlier thread; the children come last.
      CAF_CHECK_LESS(rec.parent, rec.thread);
      CAF_CHECK_GREATER_OR_EQUAL(i, 40u);
      parent_of[rec.thread] = rec.parent;
    }
  }
  CAF_CHECK_EQUAL(active, 30u);
  CAF_CHECK_EQUAL(parent_of.size(), 10u);
  auto links = (*db)->tree_links();
  CAF_REQUIRE(links);
  CAF_CHECK_EQUAL(links->size(), 10u);
  for (auto& link : *links)
    CAF_CHECK_EQUAL(parent_of[link.child], link.parent);
  // One unanswered message in each pending thread, and only there.
  auto inbox = (*db)->inbox_counts();
  CAF_REQUIRE(inbox);
  CAF_CHECK_EQUAL(inbox->size(), 10u);
  std::map<std::string, uint64_t> pending_outcomes;
  std::map<std::string, seq_t> pending_seq;
  for (auto& exp : pop->expected)
    if (exp.pending_seq != 0)
      pending_seq[exp.thread] = exp.pending_seq;
  for (auto& [thread, count] : *inbox) {
    CAF_CHECK_EQUAL(count, 1u);
    CAF_CHECK_EQUAL(pending_seq.count(thread), 1u);
    // Each pending message is answered by its thread, then (forwarded) by
    // every ancestor.
    for (auto t = thread; !t.empty();
         t = parent_of.count(t) > 0 ? parent_of[t] : std::string{})
      ++pending_outcomes[t];
  }
  CAF_CHECK_EQUAL(pending_outcomes.size(), pop->expected.size());
  for (auto& exp : pop->expected) {
    CAF_CHECK_EQUAL(exp.outcomes, pending_outcomes[exp.thread]);
    auto page = (*db)->history(exp.thread, 0, 100);
    CAF_REQUIRE(page);
    CAF_CHECK_EQUAL(page->entries.back().seq, exp.after);
    if (exp.pending_seq == 0)
      continue;
    CAF_CHECK_EQUAL(page->entries.size(), 5u);
    CAF_CHECK_EQUAL(page->entries.back().kind, log_kind::user);
    CAF_CHECK_EQUAL(page->entries.back().seq, exp.pending_seq);
    CAF_CHECK_EQUAL(page->entries.back().text.size(), 40u);
    CAF_CHECK_EQUAL(page->entries[1].kind, log_kind::reply);
    CAF_CHECK_EQUAL(page->entries[1].text.size(), 120u);
  }
  // Valid data but for the ACTIVE sessions, which only a recovery fixes.
  auto report = verify_store(**db);
  CAF_REQUIRE(report);
  CAF_CHECK_EQUAL(report->violations.size(), 30u);
  for (auto& v : report->violations)
    CAF_CHECK_EQUAL(v.rule, "active_session");
  CAF_CHECK_EQUAL(report->pending, 10u);
  CAF_CHECK_EQUAL(report->answered, 100u);
}

CAF_TEST(populate is deterministic and wants a fresh folder) {
  test::temp_dir tmp{"keel-populate"};
  auto first
    = bench::populate_crashed_store(small_population(tmp.str() + "/a"));
  auto second
    = bench::populate_crashed_store(small_population(tmp.str() + "/b"));
  CAF_REQUIRE(first && second);
  CAF_REQUIRE_EQUAL(first->expected.size(), second->expected.size());
  for (size_t i = 0; i < first->expected.size(); ++i) {
    CAF_CHECK_EQUAL(first->expected[i].thread, second->expected[i].thread);
    CAF_CHECK_EQUAL(first->expected[i].outcomes, second->expected[i].outcomes);
  }
  auto again
    = bench::populate_crashed_store(small_population(tmp.str() + "/a"));
  CAF_REQUIRE(!again);
  CAF_CHECK_EQUAL(again.error(), ec::config_invalid);
  // One thread stays a root whatever the fractions say.
  auto opts = small_population(tmp.str() + "/c");
  opts.threads = 3;
  opts.children_fraction = 1;
  opts.pending_fraction = 1;
  opts.active_fraction = 0;
  auto tiny = bench::populate_crashed_store(opts);
  CAF_REQUIRE(tiny);
  CAF_CHECK_EQUAL(tiny->roots, 1u);
  CAF_CHECK_EQUAL(tiny->children, 2u);
  CAF_CHECK_EQUAL(tiny->pending, 3u);
  CAF_CHECK_EQUAL(tiny->active, 0u);
  // The root answers its own message and both children's.
  CAF_CHECK_EQUAL(tiny->expected.front().outcomes, 3u);
}
