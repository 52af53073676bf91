#include "keel/metrics.hpp"

#include <prometheus/text_serializer.h>

namespace keel {

namespace {

using prometheus::Histogram;

// Latencies from 0.5 ms to 60 s: an ack takes a synced write (about a
// millisecond), a reply a provider call (up to a minute).
Histogram::BucketBoundaries latency_buckets() {
  return {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
          0.25,   0.5,   1,      2.5,   5,    10,    30,   60};
}

// A flush takes a synced write: 0.1 ms (no sync) to 5 s (a stalled disk).
Histogram::BucketBoundaries flush_buckets() {
  return {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01,
          0.025,  0.05,    0.1,    0.5,   1,      5};
}

// Operations per flush: group commit batches up to thousands.
Histogram::BucketBoundaries batch_buckets() {
  return {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096};
}

template <class Builder>
auto& family(Builder builder, prometheus::Registry& registry,
             const std::string& name, const std::string& help) {
  return builder.Name(name).Help(help).Register(registry);
}

prometheus::Counter& counter(prometheus::Registry& registry,
                             const std::string& name, const std::string& help) {
  return family(prometheus::BuildCounter(), registry, name, help).Add({});
}

prometheus::Gauge& gauge(prometheus::Registry& registry,
                         const std::string& name, const std::string& help) {
  return family(prometheus::BuildGauge(), registry, name, help).Add({});
}

Histogram& histogram(prometheus::Registry& registry, const std::string& name,
                     const std::string& help,
                     Histogram::BucketBoundaries buckets) {
  return family(prometheus::BuildHistogram(), registry, name, help)
    .Add({}, std::move(buckets));
}

} // namespace

node_metrics::node_metrics()
  : registry_(std::make_shared<prometheus::Registry>()),
    accepted_(counter(*registry_, "keel_messages_accepted_total",
                      "Messages stored and acknowledged.")),
    answered_(counter(*registry_, "keel_messages_answered_total",
                      "Messages a turn answered.")),
    failed_(family(prometheus::BuildCounter(), *registry_,
                   "keel_messages_failed_total",
                   "Messages answered with an error, by error code.")),
    ack_latency_(histogram(*registry_, "keel_ack_latency_seconds",
                           "From a message frame in to its acknowledgement "
                           "out.",
                           latency_buckets())),
    reply_latency_(histogram(*registry_, "keel_reply_latency_seconds",
                             "From a message's acceptance to its answer's "
                             "commit.",
                             latency_buckets())),
    flush_seconds_(histogram(*registry_, "keel_store_flush_seconds",
                             "Duration of one store flush (a synced write).",
                             flush_buckets())),
    batch_operations_(histogram(*registry_, "keel_store_batch_operations",
                                "Operations written by one store flush.",
                                batch_buckets())),
    flush_failures_(counter(*registry_, "keel_store_flush_failures_total",
                            "Store flushes that failed.")),
    provider_calls_(family(prometheus::BuildCounter(), *registry_,
                           "keel_provider_calls_total",
                           "Calls to providers by provider, error class and "
                           "outcome.")),
    restarts_(family(prometheus::BuildCounter(), *registry_,
                     "keel_supervisor_restarts_total",
                     "Children restarted, by supervisor path.")),
    tokens_(family(prometheus::BuildCounter(), *registry_, "keel_tokens_total",
                   "Tokens of model calls, by agent, provider and kind "
                   "(input, output).")),
    live_conversations_(gauge(*registry_, "keel_conversations_live",
                              "Conversations running on this node.")),
    stored_threads_(
      gauge(*registry_, "keel_threads_stored", "Threads in the store.")),
    connections_(gauge(*registry_, "keel_gateway_connections",
                       "Open client connections.")),
    connections_total_(counter(*registry_, "keel_gateway_connections_total",
                               "Client connections accepted.")),
    queued_bytes_(gauge(*registry_, "keel_gateway_queued_bytes",
                        "Bytes queued for clients, all connections.")),
    dead_letters_pending_(gauge(*registry_, "keel_dead_letters_pending",
                                "Dead letters waiting for a retry.")),
    ready_(gauge(*registry_, "keel_ready",
                 "1 when the node is ready (recovered, store writable, not "
                 "draining).")),
    draining_(gauge(*registry_, "keel_draining",
                    "1 while the node drains before it stops.")),
    breakers_(family(prometheus::BuildGauge(), *registry_,
                     "keel_provider_breaker_state",
                     "Breaker per provider: 0 closed, 1 half open, 2 "
                     "open.")) {
  // nop
}

void node_metrics::accepted() {
  accepted_.Increment();
}

void node_metrics::answered() {
  answered_.Increment();
}

void node_metrics::failed(const std::string& code) {
  failed_.Add({{"code", code}}).Increment();
}

void node_metrics::ack_latency(double seconds) {
  ack_latency_.Observe(seconds);
}

void node_metrics::reply_latency(double seconds) {
  reply_latency_.Observe(seconds);
}

void node_metrics::store_flush(double seconds, uint64_t operations, bool ok) {
  if (!ok) {
    flush_failures_.Increment();
    return;
  }
  flush_seconds_.Observe(seconds);
  batch_operations_.Observe(static_cast<double>(operations));
}

void node_metrics::provider_call(const std::string& provider,
                                 const std::string& error_class, bool ok) {
  provider_calls_
    .Add({{"provider", provider},
          {"error_class", error_class},
          {"outcome", ok ? "ok" : "failed"}})
    .Increment();
}

void node_metrics::tokens(const std::string& agent, const std::string& provider,
                          uint64_t input, uint64_t output) {
  auto add = [&](const char* kind, uint64_t n) {
    tokens_.Add({{"agent", agent}, {"provider", provider}, {"kind", kind}})
      .Increment(static_cast<double>(n));
  };
  add("input", input);
  add("output", output);
}

void node_metrics::restarted(const std::string& supervisor) {
  restarts_.Add({{"supervisor", supervisor}}).Increment();
}

void node_metrics::update(const metrics_snapshot& snap) {
  auto set = [](prometheus::Gauge& gauge, std::optional<uint64_t> value) {
    if (value)
      gauge.Set(static_cast<double>(*value));
  };
  set(live_conversations_, snap.live_conversations);
  set(stored_threads_, snap.stored_threads);
  set(dead_letters_pending_, snap.dead_letters_pending);
  connections_.Set(static_cast<double>(snap.connections_open));
  queued_bytes_.Set(static_cast<double>(snap.queued_bytes));
  for (auto& [provider, state] : snap.breakers)
    breakers_.Add({{"provider", provider}}).Set(static_cast<double>(state));
  std::lock_guard<std::mutex> guard{mtx_};
  if (snap.connections_total > connections_total_seen_) {
    connections_total_.Increment(
      static_cast<double>(snap.connections_total - connections_total_seen_));
    connections_total_seen_ = snap.connections_total;
  }
}

void node_metrics::health(bool ready, bool draining) {
  ready_.Set(ready ? 1 : 0);
  draining_.Set(draining ? 1 : 0);
}

std::string node_metrics::exposition() const {
  return prometheus::TextSerializer{}.Serialize(registry_->Collect());
}

const char* node_metrics::content_type() {
  return "text/plain; version=0.0.4; charset=utf-8";
}

} // namespace keel
