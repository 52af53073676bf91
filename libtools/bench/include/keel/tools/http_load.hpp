#pragma once

// The HTTP load generator of `keel-bench --http`: chat completions to an
// OpenAI-compatible server, paced like the WebSocket load, and its report.

#include <cstddef>
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "keel/config.hpp"
#include "keel/error.hpp"
#include "keel/tools/latency.hpp"
#include "keel/tools/traffic.hpp"

namespace keel::bench {

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

/// The outcome of `run_http_load`: the counts of `traffic_result`, in
/// calls (the HTTP client's thread counts in `client_cpu_seconds`).
struct http_load_result : traffic_result {
  /// Calls without a result when the run ended.
  uint64_t missing = 0;
  /// Call -> completion, measured phase.
  latency_summary latency;

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

} // namespace keel::bench
