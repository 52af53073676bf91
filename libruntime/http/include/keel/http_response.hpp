#pragma once

// What one HTTP exchange ends with: the answer (any status), or why there
// is none; and the readings of an answer that several clients share (its
// Retry-After, the human-readable part of an error body). Pure: no I/O.

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace keel {

/// Header fields in order, as (name, value).
using http_headers = std::vector<std::pair<std::string, std::string>>;

/// An answer, whatever its status.
struct http_client_response {
  unsigned status = 0;
  http_headers headers;
  /// The whole body; empty when it was streamed to a `body_reader`.
  std::string body;

  /// The value of the first field named `name` (in any case), or empty.
  std::string_view header(std::string_view name) const;

  /// True for a 2xx status.
  bool ok() const {
    return status / 100 == 2;
  }
};

/// Why an exchange has no answer.
enum class http_error : uint8_t {
  /// The peer refused the connection.
  connect_refused,
  /// The host name did not resolve.
  dns,
  /// The TLS handshake failed (certificate, protocol).
  tls,
  /// A timeout ran out (connect, first byte, total or the caller's budget).
  timeout,
  /// The connection was cut or closed early.
  reset,
  /// The body passed the endpoint's `max_body_bytes`.
  too_large,
  /// The caller cancelled, or the client shut down.
  cancelled,
  other,
};

/// An exchange that produced no (complete) answer.
struct http_failure {
  http_error error = http_error::other;
  /// One line for humans and logs, naming the peer, e.g. "connection
  /// refused by 127.0.0.1:1".
  std::string message;
  /// The socket, resolver or TLS error's own text, when one caused it.
  std::string cause;
  /// The head and the body so far of an answer that broke off or grew too
  /// large after its header (a streamed body is not kept).
  std::optional<http_client_response> partial;
};

/// What one exchange ends with, exactly once.
using http_result = std::variant<http_client_response, http_failure>;

/// The wait `res` asks for before the next request: `retry-after-ms` (as
/// some LLM APIs send) if it parses, else Retry-After (seconds or an HTTP
/// date, relative to `now`).
std::optional<std::chrono::milliseconds>
retry_after(const http_client_response& res,
            std::chrono::system_clock::time_point now);

/// The start of `body` on one line, for messages: at most 200 whole
/// characters ("..." added when cut), well-formed UTF-8 whatever the peer
/// sent.
std::string body_excerpt(std::string_view body);

/// The human-readable part of an error body: `error.message` (or `error`
/// as a string), else `message`, else the start of the body; as
/// `body_excerpt` makes it.
std::string error_summary(std::string_view body);

/// One line for an answer that is not a success: "HTTP 429 from
/// AUTHORITY", then ": " and its `error_summary` if that is not empty.
std::string status_text(const http_client_response& res,
                        std::string_view authority);

} // namespace keel
