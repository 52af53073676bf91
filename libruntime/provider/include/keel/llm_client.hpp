#pragma once

// Asynchronous clients for real LLM HTTP APIs on Boost.Beast/Asio: the
// OpenAI-compatible chat completions API (`POST /v1/chat/completions`) and
// the Anthropic Messages API (`POST /v1/messages`), plain and streaming
// (server-sent events). HTTP/1.1 with keep-alive connection reuse, TLS via
// OpenSSL for https. Calls run on the threads of an `http_io`; no caller
// ever blocks. Handlers run on those I/O threads, so they must only hand
// results on (e.g. `caf::anon_send` to an actor) and never block.
//
// Request bodies, answer parsing and the mapping of context roles are in
// `keel/llm_wire.hpp`. A pooled keep-alive connection that fails before any
// byte of the answer arrived (the server closed it while idle) is replaced
// by a fresh one and the request sent again, once; a call never resends
// after answer bytes arrived.

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include <caf/expected.hpp>

#include "keel/completion.hpp"
#include "keel/config.hpp"
#include "keel/provider_policy.hpp"

namespace keel {

/// Owns the I/O threads every LLM endpoint of a node shares.
class http_io {
public:
  /// Starts `threads` I/O threads (at least one).
  explicit http_io(size_t threads = 1);

  /// Cancels every call in flight (their result handlers run with a
  /// transport failure) and joins the threads. Must not run on one of its
  /// own threads (i.e. not inside a handler). Endpoints may outlive it: their
  /// later calls fail at once, with the result handler run by the caller.
  ~http_io();

  http_io(const http_io&) = delete;
  http_io& operator=(const http_io&) = delete;

  struct impl;
  impl& get_impl() {
    return *impl_;
  }

private:
  // Shared with the endpoints, which keep the I/O context alive.
  std::shared_ptr<impl> impl_;
};

/// Why a call failed, with everything `classify` and the retry logic need.
struct call_failure {
  /// Status, body, transport error, parse failure (input of `classify`).
  provider_failure failure;
  /// The provider's Retry-After (or `retry-after-ms`), if it sent one.
  std::optional<std::chrono::milliseconds> retry_after;
  /// One line for humans and logs, e.g. "HTTP 429 from 127.0.0.1:4010:
  /// Rate limit exceeded" or "connection refused by 127.0.0.1:1".
  std::string message;
  /// True if streamed text had already reached `on_delta` when the call
  /// failed (a stream cut mid-answer).
  bool partial = false;
};

/// What one call ends with: the answer, or why there is none.
using call_result = std::variant<completion, call_failure>;

/// Receives streamed text as it arrives (only when streaming).
using delta_handler = std::function<void(std::string_view text)>;

/// Receives the result of a call, exactly once.
using result_handler = std::function<void(call_result result)>;

/// Cancels a call: its connection is closed and its result handler runs
/// with a failure ending in `why` (unless the result was delivered
/// already). Safe from any thread, at any time, any number of times.
using call_canceller = std::function<void(std::string why)>;

/// One configured HTTP provider: builds requests in its wire format, keeps a
/// pool of keep-alive connections to its host, limits concurrent calls to
/// `max_concurrency` (further calls wait, their wait counting against the
/// total timeout), and enforces the connect, first-byte and total timeouts.
/// Thread-safe.
class llm_endpoint {
public:
  /// Creates an endpoint for `cfg` (kind "openai" or "anthropic"). Fails
  /// with `ec::config_invalid` naming the key for a bad base_url, an
  /// unreadable ca_file or a non-HTTP kind.
  static caf::expected<std::shared_ptr<llm_endpoint>>
  make(http_io& io, const provider_config& cfg);

  virtual ~llm_endpoint();

  /// Starts one call answering `req` with at most `max_tokens` tokens (0:
  /// the configured `max_tokens`) and returns at once. Streams when the
  /// provider is configured with `stream: true`; then `on_delta` (if set)
  /// receives each piece of text as it arrives. A stream that ends without
  /// its terminal event (`[DONE]`, `message_stop`) is a failure (with
  /// `partial` set if text reached `on_delta`), never a completion.
  /// `on_done` runs exactly once, on an I/O thread; or at once on the
  /// caller's thread if the `http_io` is already gone. The call never
  /// outlives `req.time_budget_ms` (when set) nor the total timeout.
  /// Returns the call's canceller.
  virtual call_canceller complete(const completion_request& req,
                                  uint32_t max_tokens, delta_handler on_delta,
                                  result_handler on_done)
    = 0;

  /// The configured provider name.
  virtual const std::string& name() const = 0;
};

/// A JSON POST to an outbound URL (a webhook, a messaging API).
struct post_request {
  std::string body;
  /// Header fields besides Host, User-Agent, Content-Type and Accept.
  std::vector<std::pair<std::string, std::string>> headers;
};

/// Where a `post_endpoint` sends, and how long a send may take.
struct post_target {
  /// Names the endpoint in errors (e.g. "channel alerts").
  std::string name;
  /// http:// or https:// URL; its path is the request target.
  std::string url;
  /// Whole send, connecting included; connecting alone at most 5 s of it.
  std::chrono::milliseconds timeout{10000};
  /// PEM file of trusted CAs for https; empty uses the system's store.
  std::string ca_file;
  /// Sends in flight at once; further sends wait.
  size_t max_concurrency = 16;
};

/// One outbound URL on the same client as the LLM endpoints (keep-alive
/// pool, timeouts, TLS, one resend on a stale pooled connection). A 2xx
/// answer arrives as a `completion` whose `text` is the body; another
/// status as a `call_failure` with status, body and Retry-After; a send
/// over `timeout` as a timeout failure. Thread-safe.
class post_endpoint {
public:
  /// Fails with `ec::config_invalid` naming the URL or CA file.
  static caf::expected<std::shared_ptr<post_endpoint>>
  make(http_io& io, const post_target& target);

  virtual ~post_endpoint();

  /// Starts one send and returns at once; `on_done` runs exactly once, on
  /// an I/O thread (or at once on the caller's if the `http_io` is gone).
  virtual call_canceller post(post_request req, result_handler on_done) = 0;
};

} // namespace keel
