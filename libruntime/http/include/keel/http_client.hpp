#pragma once

// The node's HTTP client, on Boost.Beast/Asio (inside): HTTP/1.1 with a
// pool of keep-alive connections per endpoint, TLS via OpenSSL for https,
// connect, first-byte and total timeouts, a limit of exchanges in flight
// and cancellation. It answers an HTTP response, whatever its status; what
// a status or a body means is the caller's (the LLM providers, the
// outbound channels). Exchanges run on the threads of an `http_io`; no
// caller ever blocks. Handlers run on those I/O threads, so they must only
// hand results on (e.g. `caf::anon_send` to an actor) and never block.
//
// A pooled keep-alive connection that fails before any byte of the answer
// arrived (the server closed it while idle) is replaced by a fresh one and
// the request sent again, once; an exchange never resends after answer
// bytes arrived.

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include <caf/expected.hpp>

#include "keel/http_response.hpp"
#include "keel/http_url.hpp"

namespace keel {

/// Owns the I/O threads every HTTP endpoint of a node shares.
class http_io {
public:
  /// Starts `threads` I/O threads (at least one).
  explicit http_io(size_t threads = 1);

  /// Cancels every exchange in flight (their handlers run with a failure)
  /// and joins the threads. Must not run on one of its own threads (i.e.
  /// not inside a handler). Endpoints may outlive it: their later exchanges
  /// fail at once, with the handler run by the caller.
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

/// What a `body_reader` wants after a piece of the body.
enum class body_step : uint8_t {
  /// Keep reading.
  more,
  /// The reader has its answer: the exchange ends with the response once
  /// the rest of the body is read (so that the connection can be reused),
  /// or after a grace of one second (or a cancel), closing the connection.
  enough,
  /// The reader gave up: the connection is closed and the exchange ends at
  /// once with the response.
  stop,
};

/// Hands a response's body to the caller as it arrives instead of
/// collecting it (e.g. server-sent events). The endpoint's
/// `max_body_bytes` counts every body byte read all the same.
struct body_reader {
  /// Called once with the response's head (status and headers, no body):
  /// true streams the body to `on_body`, false collects it as usual.
  std::function<bool(const http_client_response& head)> wants;
  /// Called with each new piece of a streamed body.
  std::function<body_step(std::string_view piece)> on_body;
};

/// One request to an endpoint.
struct http_client_request {
  std::string method = "POST";
  /// Empty: the endpoint's URL target.
  std::string target;
  /// Fields besides Host and User-Agent, set in order (a field replaces an
  /// earlier one of the same name).
  http_headers headers;
  std::string body;
  /// When positive and shorter than the endpoint's total timeout, bounds
  /// the exchange instead; its timeout then says "the N left of
  /// BUDGET_OWNER".
  std::chrono::milliseconds time_budget{0};
  std::string budget_owner = "its budget";
  /// Streams the body (see `body_reader`) when set.
  body_reader reader;
};

/// One endpoint: where it sends, and how long an exchange may take.
struct http_endpoint_config {
  /// Names the endpoint's settings in errors (e.g. "providers.p1").
  std::string name;
  http_url url;
  /// PEM file of trusted CAs for https; empty uses the system's store.
  std::string ca_file;
  /// Exchanges in flight at once (at least one); further ones wait, their
  /// wait counting against the total timeout.
  size_t max_concurrency = 16;
  /// Connecting (resolving and the TLS handshake included).
  std::chrono::milliseconds connect_timeout{5000};
  /// From the request written to the first byte of the answer.
  std::chrono::milliseconds first_byte_timeout{30000};
  /// The whole exchange, waiting for a slot included.
  std::chrono::milliseconds total_timeout{120000};
  /// An answer whose body passes this fails as `too_large` without more
  /// of it read.
  size_t max_body_bytes = 8 << 20;
};

/// Receives the result of an exchange, exactly once.
using http_result_handler = std::function<void(http_result result)>;

/// Cancels an exchange: its connection is closed and its handler runs with
/// a `cancelled` failure whose message ends in `why` (unless the result was
/// delivered already). Safe from any thread, at any time, any number of
/// times.
using http_canceller = std::function<void(std::string why)>;

/// One HTTP endpoint with its pool of keep-alive connections. Thread-safe.
class http_endpoint {
public:
  /// Fails with `ec::config_invalid` ("NAME.ca_file: cannot load ...") for
  /// an unreadable CA file, or with `ec::unavailable` once `io` shut down.
  static caf::expected<std::shared_ptr<http_endpoint>>
  make(http_io& io, http_endpoint_config cfg);

  virtual ~http_endpoint();

  /// Starts one exchange and returns at once with its canceller. `on_done`
  /// runs exactly once, on an I/O thread; or at once on the caller's
  /// thread if the `http_io` is already gone.
  virtual http_canceller
  send(http_client_request req, http_result_handler on_done)
    = 0;

  virtual const http_endpoint_config& config() const = 0;
};

} // namespace keel
