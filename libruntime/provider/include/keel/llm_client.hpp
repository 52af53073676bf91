#pragma once

// Asynchronous clients for real LLM HTTP APIs: the OpenAI-compatible
// chat completions API (`POST /v1/chat/completions`) and
// the Anthropic Messages API (`POST /v1/messages`), plain and streaming
// (server-sent events), over the node's HTTP client (`keel/http_client.hpp`:
// keep-alive connections, TLS, timeouts, the one resend on a stale pooled
// connection). Calls run on the threads of an `http_io`; no caller ever
// blocks. Handlers run on those I/O threads, so they must only hand results
// on (e.g. `caf::anon_send` to an actor) and never block.
//
// Request bodies, answer parsing and the mapping of context roles are in
// `keel/llm_wire.hpp`.

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
#include "keel/http_client.hpp"
#include "keel/provider_policy.hpp"

namespace keel {

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
  /// True if the call failed inside a 2xx event stream (cut, ended early,
  /// an error event), with or without text.
  bool in_stream = false;
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
using call_canceller = http_canceller;

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
  /// the `output_token_limit` of the provider's and the request's
  /// parameters) and returns at once. The request's parameters go over the
  /// provider's (`overlay`). Streams when the
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

} // namespace keel
