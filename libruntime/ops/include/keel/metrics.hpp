#pragma once

// The node's Prometheus metrics (prometheus-cpp). Counters and histograms
// are recorded where things happen: each record is an atomic add (a
// histogram also takes its own uncontended lock; a labelled series is
// looked up in its family, under the family's lock). Gauges of the node's state
// (live conversations, stored threads, connections, breakers, dead letters) are
// set from the actors' own figures just before each scrape, `keel_ready` and
// `keel_draining` by the node's health check. One `node_metrics` per actor
// system: tests read their own node's values.

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

namespace keel {

/// A provider breaker's state as the `keel_provider_breaker_state` gauge
/// shows it.
enum class breaker_gauge { closed = 0, half_open = 1, open = 2 };

/// The figures set just before a scrape; those of a component that did not
/// answer are missing (their gauges keep their last values).
struct metrics_snapshot {
  std::optional<uint64_t> live_conversations;
  std::optional<uint64_t> stored_threads;
  uint64_t connections_open = 0;
  uint64_t connections_total = 0;
  uint64_t queued_bytes = 0;
  std::optional<uint64_t> dead_letters_pending;
  /// Breaker state by provider name.
  std::map<std::string, breaker_gauge> breakers;
};

class node_metrics {
public:
  node_metrics();

  /// A message was stored and acknowledged (`keel_messages_accepted_total`).
  void accepted();
  /// A turn answered a message (`keel_messages_answered_total`).
  void answered();
  /// A message was answered with the error `code`
  /// (`keel_messages_failed_total{code}`).
  void failed(const std::string& code);
  /// Frame in to acknowledgement out (`keel_ack_latency_seconds`).
  void ack_latency(double seconds);
  /// Acceptance to the answer's commit (`keel_reply_latency_seconds`).
  void reply_latency(double seconds);
  /// One store flush (`keel_store_flush_seconds`,
  /// `keel_store_batch_operations`, `keel_store_flush_failures_total`).
  void store_flush(double seconds, uint64_t operations, bool ok);
  /// One call to a provider (`keel_provider_calls_total{provider,
  /// error_class, outcome}`); `error_class` is "none" for a success.
  void provider_call(const std::string& provider,
                     const std::string& error_class, bool ok);
  /// Tokens one model call of `agent` took from `provider`
  /// (`keel_tokens_total{agent,provider,kind}`, kind `input` or `output`;
  /// a call that reported none counts its estimate).
  void tokens(const std::string& agent, const std::string& provider,
              uint64_t input, uint64_t output);
  /// A supervisor restarted one of its children
  /// (`keel_supervisor_restarts_total{supervisor}`; the supervisor's name:
  /// `root`, `providers`, `pool NAME`, `conversations`).
  void restarted(const std::string& supervisor);

  /// Sets the gauges from `snap`.
  void update(const metrics_snapshot& snap);

  /// Sets `keel_ready` and `keel_draining` (the node's health check).
  void health(bool ready, bool draining);

  /// Every metric in the Prometheus text exposition format (0.0.4).
  std::string exposition() const;

  /// Content type of `exposition()`.
  static const char* content_type();

private:
  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Counter& accepted_;
  prometheus::Counter& answered_;
  prometheus::Family<prometheus::Counter>& failed_;
  prometheus::Histogram& ack_latency_;
  prometheus::Histogram& reply_latency_;
  prometheus::Histogram& flush_seconds_;
  prometheus::Histogram& batch_operations_;
  prometheus::Counter& flush_failures_;
  prometheus::Family<prometheus::Counter>& provider_calls_;
  prometheus::Family<prometheus::Counter>& restarts_;
  prometheus::Family<prometheus::Counter>& tokens_;
  prometheus::Gauge& live_conversations_;
  prometheus::Gauge& stored_threads_;
  prometheus::Gauge& connections_;
  prometheus::Counter& connections_total_;
  prometheus::Gauge& queued_bytes_;
  prometheus::Gauge& dead_letters_pending_;
  prometheus::Gauge& ready_;
  prometheus::Gauge& draining_;
  prometheus::Family<prometheus::Gauge>& breakers_;
  /// Guards `connections_total_seen_` (scrapes may overlap).
  mutable std::mutex mtx_;
  uint64_t connections_total_seen_ = 0;
};

} // namespace keel
