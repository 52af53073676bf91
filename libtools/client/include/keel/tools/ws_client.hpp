#pragma once

// A small blocking WebSocket and HTTP client with timeouts (Boost.Beast),
// for keelctl and the process tests. Not for hot paths.

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "keel/endpoint.hpp"
#include "keel/error.hpp"

namespace keel {

/// An HTTP response.
struct http_response {
  unsigned status = 0;
  std::string content_type;
  std::string body;
};

/// Performs one HTTP request (Connection: close), over TLS when `ep.tls`
/// (the node's certificate checked against `ep.ca_file`, or the system's
/// store, and against `ep.host`). Fails with
/// `ec::connection_failed` ("cannot reach HOST:PORT: reason") when the node
/// cannot be reached, or a timeout error after `timeout`.
caf::expected<http_response>
http_request(const endpoint& ep, const std::string& method,
             const std::string& target, const std::string& body = {},
             std::chrono::milliseconds timeout = std::chrono::seconds{10});

/// Rewrites a failure to reach or use `node` as the line the tools print:
/// `ec::connection_failed` becomes "cannot reach node at HOST:PORT: REASON"
/// and `ec::unauthorized` "the node refused the token (401)"; other errors
/// pass unchanged.
caf::error describe_node_error(const endpoint& node, const caf::error& err);

/// Calls one of the node's JSON endpoints (`/api/v1/...`, with the
/// endpoint's token) and returns the JSON object it answers with. Fails as
/// `describe_node_error` describes; an error answer (HTTP 4xx/5xx with the
/// protocol's error object) keeps its code and message (`not_found`,
/// `unavailable`, ...); anything else that is not a JSON object fails with
/// `ec::protocol_violation`.
caf::expected<nlohmann::json>
api_call(const endpoint& node, const std::string& method,
         const std::string& target, const std::string& body = {},
         std::chrono::milliseconds timeout = std::chrono::seconds{10});

/// A received WebSocket message.
struct ws_message {
  /// True for a text frame, false for binary.
  bool text = true;
  std::string payload;
};

class ws_client {
public:
  /// Connects and upgrades on `path` (token as `Authorization: Bearer`),
  /// over TLS when `ep.tls` (checked as `http_request` does). Fails with
  /// `ec::connection_failed` naming the address when the node cannot be
  /// reached or its certificate is refused, `ec::config_invalid` when
  /// `ep.ca_file` cannot be loaded, `ec::unauthorized` on 401, and the HTTP
  /// status otherwise.
  static caf::expected<std::unique_ptr<ws_client>>
  connect(const endpoint& ep, const std::string& path = "/ws",
          std::chrono::milliseconds timeout = std::chrono::seconds{10});

  virtual ~ws_client();

  /// Sends a text frame (no UTF-8 check: tests send invalid UTF-8 on purpose).
  virtual caf::error send_text(std::string_view payload) = 0;

  /// Sends a binary frame.
  virtual caf::error send_binary(std::string_view payload) = 0;

  /// Waits for the next message. Fails with `ec::unavailable` and the close
  /// code in the message ("closed by peer: 1009 ...") when the server closed
  /// the connection, and with `ec::timeout` after `timeout`.
  virtual caf::expected<ws_message>
  receive(std::chrono::milliseconds timeout = std::chrono::seconds{10}) = 0;

  /// The close code the server sent, once the connection is closed.
  virtual std::optional<uint16_t> close_code() const = 0;

  /// Closes the connection politely (1000).
  virtual void close() = 0;
};

} // namespace keel
