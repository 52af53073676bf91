#pragma once

// The gateway's network side: a Boost.Beast WebSocket + HTTP server on its
// own I/O thread(s). It decodes and validates client frames itself (bad
// frames are answered here and never reach the actors) and hands valid ones
// to a `gateway_handler`. No actors here; the bridge actor implements the
// handler.

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>

#include "keel/config.hpp"
#include "keel/error.hpp"
#include "keel/protocol.hpp"

namespace keel {

/// Identifies one client connection (WebSocket or HTTP) for its lifetime.
using connection_id = uint64_t;

/// Receives events from the server. Called on I/O threads: implementations
/// must return quickly and never block. They may call `ws_server::send` and
/// `ws_server::respond` directly (the server holds no lock while calling
/// them), but never `ws_server::stop` (it joins the I/O threads), and must not
/// hold the last reference to the server.
class gateway_handler {
public:
  virtual ~gateway_handler();

  /// A WebSocket connection was accepted (after auth) and greeted.
  virtual void on_open(connection_id conn) = 0;

  /// A valid client frame arrived (pings are answered by the server itself).
  virtual void on_frame(connection_id conn, protocol::client_frame frame) = 0;

  /// The connection is gone; further sends to it are dropped. Called exactly
  /// once for every connection that saw `on_open`, at the latest in `stop()`.
  virtual void on_close(connection_id conn) = 0;

  /// An HTTP request for a path under `/api/` that the request policy
  /// allowed with the admin role (keel/gateway_policy.hpp). Answer it with
  /// `ws_server::respond(request, ...)`, exactly once.
  virtual void on_http(uint64_t request, const std::string& method,
                       const std::string& target, const std::string& body)
    = 0;
};

/// Server counters.
struct ws_server_stats {
  uint64_t connections_open = 0;
  uint64_t connections_total = 0;
  uint64_t frames_in = 0;
  uint64_t frames_out = 0;
  uint64_t bad_frames = 0;
  uint64_t slow_client_disconnects = 0;
  uint64_t rate_limited_frames = 0;
  /// Bytes queued for clients, all connections together.
  uint64_t queued_bytes = 0;
};

/// Bytes of an answer frame (`ws_server::send_answer`) that cost one token
/// of its connection's rate limit.
constexpr size_t answer_bytes_per_token = 64 * 1024;

/// A file the server serves itself to any `GET` of its path (the
/// dashboard's page and scripts, built into the node).
struct static_file {
  std::string content_type;
  std::string_view body;
};

/// A model of the compatible API's `/v1/models`: an agent.
struct served_model {
  std::string id;
  std::string description;
};

/// Static files by path (`/`, `/app.js`, ...).
using static_files = std::map<std::string, static_file, std::less<>>;

class ws_server {
public:
  /// Binds, listens and starts the I/O threads (serving TLS only when
  /// `cfg.tls` is enabled). Fails with `ec::connection_failed` naming the
  /// address when it cannot bind, `ec::config_invalid` when the certificate
  /// or key cannot be loaded. Serves itself, without auth: `GET /healthz`
  /// and `GET /readyz` (see `set_health`) and `files`. `/metrics` goes to
  /// the handler like an `/api/` request (admin role).
  static caf::expected<std::unique_ptr<ws_server>>
  start(const gateway_config& cfg, std::shared_ptr<gateway_handler> handler,
        const std::string& node_name, static_files files = {});

  virtual ~ws_server();

  /// The bound port (useful with port 0).
  virtual uint16_t port() const = 0;

  /// Queues a text frame for a connection. Thread-safe, never blocks; frames
  /// for a closed connection are dropped. A connection whose queued frames,
  /// those on their way to its queue counted too, exceed
  /// `max_queued_bytes` is closed (1008, "client too slow") and the frame
  /// dropped.
  virtual void send(connection_id conn, std::string frame) = 0;

  /// Like `send`, for the answer to one of the connection's own requests
  /// whose size the client chose (a `history` page): the frame also takes
  /// a token of the connection's rate limit per `answer_bytes_per_token`
  /// bytes, so that a client within its frames per second cannot make the
  /// node write more than `rate_limit.per_second` x 64 KiB a second.
  virtual void send_answer(connection_id conn, std::string frame) = 0;

  /// True while the connection is open and not closing: a frame for it
  /// would be queued. Lets the handler skip rendering an answer nobody
  /// will read. Thread-safe.
  virtual bool connected(connection_id conn) const = 0;

  /// Answers an HTTP request handed to `on_http`. Thread-safe.
  virtual void respond(uint64_t request, unsigned status,
                       std::string content_type, std::string body)
    = 0;

  /// Counters (thread-safe snapshot).
  virtual ws_server_stats stats() const = 0;

  /// What `/healthz` (200 while `live`, else 503) and `/readyz` (200 while
  /// `ready` and not draining, else 503) answer from now on. Both start
  /// false: nothing is known until the node's first check. Thread-safe.
  virtual void set_health(bool live, bool ready) = 0;

  /// The models `GET /v1/models` lists from now on (the node's agents),
  /// created now. Thread-safe.
  virtual void set_models(std::vector<served_model> models) = 0;

  /// Starts the drain before a stop: WebSocket upgrades are refused (503)
  /// and `send`, `spawn` and `cancel` frames answered with the error
  /// `draining`; everything else, including the replies of turns under
  /// way, still flows until `stop`. Idempotent, thread-safe.
  virtual void start_drain() = 0;

  /// True once `start_drain` was called.
  virtual bool draining() const = 0;

  /// Stops accepting, closes all connections (1001) and joins the threads.
  /// Idempotent; the destructor calls it. Takes at most a few seconds even
  /// when clients do not answer the close handshake.
  virtual void stop() = 0;
};

} // namespace keel
