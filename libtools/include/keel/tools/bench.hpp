#pragma once

// Benchmark and tool building blocks for keel-bench and keelctl: latency
// percentiles, a WebSocket load generator (with an optional fault injected
// mid-run, to time failover), an HTTP load generator for OpenAI-compatible
// chat completion servers, RocksDB's raw synced-write rate, process memory
// from /proc, and small parsing/formatting helpers. RocksDB and Boost.Beast
// stay out of this header.

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "keel/config.hpp"
#include "keel/error.hpp"
#include "keel/proc.hpp"
#include "keel/raw_write_probe.hpp"
#include "keel/tools/ws_client.hpp"

namespace keel::bench {

// -- latencies ----------------------------------------------------------------

/// Percentiles of a set of latencies, in milliseconds.
struct latency_summary {
  uint64_t count = 0;
  double p50 = 0;
  double p90 = 0;
  double p99 = 0;
  double max = 0;
  double mean = 0;
};

/// Collects latency samples and answers exact (nearest-rank) percentiles.
/// Keeps every sample: a benchmark run records at most a few million.
class latency_recorder {
public:
  /// Adds one sample.
  void record(std::chrono::nanoseconds latency);

  /// Number of samples.
  size_t count() const noexcept {
    return samples_.size();
  }

  /// Returns the nearest-rank percentile `q` (0 < q <= 1) in nanoseconds, or
  /// 0 when there are no samples.
  int64_t percentile(double q);

  /// Returns the summary in milliseconds.
  latency_summary summary();

private:
  void sort();

  std::vector<int64_t> samples_;
  bool sorted_ = true;
};

// -- traffic shared by the WebSocket and HTTP loads ---------------------------

/// When messages are sent and which are measured; the same for both loads.
struct traffic_options {
  /// Target total rate in messages per second (open loop: sending does not
  /// wait for answers); 0 sends flat out, keeping a window in flight.
  double rate = 0;
  /// When non-zero, the measured phase sends exactly this many messages;
  /// otherwise it lasts `duration`.
  uint64_t messages = 0;
  /// Length of the measured phase when `messages` is 0.
  std::chrono::milliseconds duration{10000};
  /// Traffic before the measured phase; checked but not measured.
  std::chrono::milliseconds warmup{2000};
  /// After sending stops, how long to wait for missing answers; also, while
  /// sending, how long without any outcome before the run gives up on a
  /// server that stopped answering.
  std::chrono::milliseconds drain_timeout{10000};
  /// Bytes of text per message.
  size_t text_bytes = 64;
};

// -- WebSocket load ---------------------------------------------------------------

/// A fault `run_load` injects at a fixed time, to measure how fast the node
/// fails over from one provider to the next.
struct fault_options {
  /// When, counted from the start of the measured phase; none: no fault.
  std::optional<std::chrono::milliseconds> at;
  /// Sent SIGKILL at `at` (e.g. the primary provider's server); 0: none.
  int kill_pid = 0;
  /// Appended to the text of every message sent from `at` on, e.g.
  /// keel-fault-llm's directive `[[fault:503]]`, which makes that server
  /// answer 503 to those messages.
  std::string text_suffix;
  /// The provider whose replies show that the node has failed over.
  std::string fallback_provider;
};

/// What `run_load` does.
struct load_options : traffic_options {
  /// The node (and token).
  endpoint node;
  /// WebSocket connections to open.
  size_t connections = 100;
  /// Distinct threads; thread `i` belongs to connection `i % connections`, so
  /// each thread's messages travel on one connection and their order is
  /// observable. Must be at least `connections`.
  size_t threads = 1000;
  /// Flat out: messages in flight (sent, not yet answered) per connection.
  size_t window = 8;
  /// Prefix of thread ids; a random one per run keeps runs apart.
  std::string thread_prefix;
  /// A fault to inject during the run, if `fault.at` is set.
  fault_options fault;
};

/// How the node went through the fault of `fault_options`. Times are in
/// milliseconds, on the load generator's clock.
struct failover_result {
  /// True when the fault was injected (the run lasted long enough).
  bool injected = false;
  /// Why injecting failed (e.g. kill failed), if it did.
  std::string fault_error;
  /// From the fault to the first reply by the fallback provider; negative
  /// when none came.
  double to_first_fallback = -1;
  /// Messages the fault touched: outcome at or after the fault (or none),
  /// sent before the first fallback reply arrived.
  uint64_t affected = 0;
  /// Of these, answered by an `error` frame or not at all.
  uint64_t affected_failed = 0;
  /// Send -> outcome of each affected message (-1 without an outcome), in
  /// send order (at most 50), with the provider that answered ("error" for
  /// error frames, "none" for no outcome).
  std::vector<std::pair<double, std::string>> affected_latencies;
  /// Send -> outcome over all affected messages.
  latency_summary affected_latency;
  /// Send -> reply of measured messages answered before the fault.
  latency_summary before;
  /// Send -> reply of messages sent after the first fallback reply.
  latency_summary after;
  /// Replies per provider to messages sent at or after the fault.
  std::map<std::string, uint64_t> replies_after_fault;
};

/// The outcome of `run_load`. Counts cover warmup and measured messages;
/// latencies and throughput cover the measured phase only.
struct load_result {
  /// Messages sent.
  uint64_t sent = 0;
  /// Messages acknowledged (first ack).
  uint64_t acked = 0;
  /// Messages answered by a `reply` frame.
  uint64_t answered = 0;
  /// Messages answered by an `error` frame.
  uint64_t errors = 0;
  /// Messages that got an outcome but never an ack.
  uint64_t missing_acks = 0;
  /// Messages without any outcome when the run ended.
  uint64_t missing_replies = 0;
  /// Acks or outcomes beyond the first for one message.
  uint64_t duplicates = 0;
  /// Frames naming a message id this run never sent.
  uint64_t unknown_ids = 0;
  /// Outcomes that arrived before the outcome of an earlier message of the
  /// same thread.
  uint64_t out_of_order = 0;
  /// Connections that closed or failed during the run.
  uint64_t connection_errors = 0;
  /// Messages sent in the measured phase.
  uint64_t measured_sent = 0;
  /// Measured messages answered by a reply.
  uint64_t measured_answered = 0;
  /// From the start of the measured phase to its last outcome.
  double measured_seconds = 0;
  /// measured_answered / measured_seconds.
  double answered_per_second = 0;
  /// Send -> ack, measured phase.
  latency_summary ack_latency;
  /// Send -> reply, measured phase.
  latency_summary reply_latency;
  /// The first few error frames and connection failures, for diagnosis.
  std::vector<std::string> error_samples;
  /// CPU time (user + system) this process spent during the run.
  double client_cpu_seconds = 0;
  /// The failover figures, when a fault was configured.
  failover_result failover;

  /// True when every message got exactly one ack and one reply, in order.
  bool clean() const noexcept;
};

/// Opens the connections, drives the load on one I/O thread (the calling
/// one) and returns the figures. Fails with `ec::connection_failed` or
/// `ec::unauthorized` when a connection cannot be opened, naming the node.
caf::expected<load_result> run_load(const load_options& opts);

// -- HTTP load ----------------------------------------------------------------

/// What `run_http_load` does: POST chat completions to an OpenAI-compatible
/// server through Keel's own HTTP client (`keel::llm_endpoint`), the client
/// a node uses for its providers, so that a server called directly and
/// one behind a gateway are measured alike.
struct http_load_options : traffic_options {
  /// The server: `base_url`, `model`, `api_key` and `headers` are used;
  /// `kind` is "openai" and `stream` false unless set otherwise. Its
  /// `max_concurrency` should exceed the calls in flight, or calls queue
  /// inside the client.
  provider_config server;
  /// Flat out: calls in flight; 1 calls sequentially, each call starting
  /// when the previous one ended.
  size_t window = 1;
  /// The system prompt of every request (as a node sends it).
  std::string system_prompt = "You are a helpful assistant.";
};

/// The outcome of `run_http_load`. Counts cover warmup and measured calls;
/// latencies and throughput cover the measured phase only.
struct http_load_result {
  /// Calls started.
  uint64_t sent = 0;
  /// Calls that returned a completion.
  uint64_t answered = 0;
  /// Calls that failed (HTTP error, transport failure, bad answer).
  uint64_t errors = 0;
  /// Calls without a result when the run ended.
  uint64_t missing = 0;
  /// Calls started in the measured phase.
  uint64_t measured_sent = 0;
  /// Measured calls that returned a completion.
  uint64_t measured_answered = 0;
  /// From the start of the measured phase to its last result.
  double measured_seconds = 0;
  /// measured_answered / measured_seconds.
  double answered_per_second = 0;
  /// Call -> completion, measured phase.
  latency_summary latency;
  /// The first few failures, for diagnosis.
  std::vector<std::string> error_samples;
  /// CPU time (user + system) this process spent during the run, the HTTP
  /// client's thread included.
  double client_cpu_seconds = 0;

  /// True when every call returned a completion.
  bool clean() const noexcept;
};

/// Checks the server with one call, then drives the load (pacing on the
/// calling thread, the HTTP client on one thread of its own). Fails with
/// `ec::config_invalid` for a bad `base_url`, `ec::connection_failed` when
/// the first call cannot connect, `ec::provider_failed` when it fails
/// otherwise (e.g. a gateway refusing the route).
caf::expected<http_load_result> run_http_load(const http_load_options& opts);

/// The HTTP report as JSON (for scripts).
nlohmann::json to_json(const http_load_options& opts,
                       const http_load_result& x);

/// The HTTP report as a readable table.
std::string render(const http_load_options& opts, const http_load_result& x);

// -- the whole report -------------------------------------------------------------

/// Figures taken from the node's `GET /api/v1/status`.
struct node_figures {
  /// False when the status endpoint could not be read.
  bool available = false;
  /// Why not, when not available.
  std::string reason;
  std::string name;
  uint64_t rss_bytes = 0;
  uint64_t peak_rss_bytes = 0;
  /// Store flushes (synced WriteBatches) during the load.
  uint64_t store_flushes = 0;
  std::string data_dir;
};

/// One keel-bench run.
struct report {
  load_options load_opts;
  load_result load;
  node_figures node;
  /// False when the raw measurement was skipped or failed.
  bool raw_available = false;
  /// Why not, when not available.
  std::string raw_reason;
  raw_write_result raw;

  /// answered msgs/s / raw synced writes/s, or 0 without a raw figure.
  double durable_ratio() const noexcept;
};

/// The report as JSON (for scripts).
nlohmann::json to_json(const report& x);

/// The report as a readable table.
std::string render(const report& x);

/// The header of the results table in docs/benchmarks.md (two lines).
std::string markdown_header();

/// The report as one row of that table, `label` naming the scenario.
std::string markdown_row(const report& x, const std::string& label);

/// What `run_benchmark` does.
struct benchmark_options {
  /// The load.
  load_options load;
  /// Measure RocksDB's raw synced-write rate before the load.
  bool raw = true;
  /// Where and how long; `concurrency` is set to the number of connections.
  raw_write_options raw_opts;
  /// When set, called with a line saying what the run does next.
  std::function<void(const std::string&)> progress;
};

/// One whole keel-bench run: reads the node's status, measures the raw
/// synced-write rate, drives the load, reads the status again. Fails when
/// the node cannot be reached or refuses the token; a missing status
/// endpoint or a failed raw measurement only leave those figures out.
caf::expected<report> run_benchmark(const benchmark_options& opts);

} // namespace keel::bench
