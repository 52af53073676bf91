#pragma once

// The gateway server's shared state: counters, connection slots, the
// registries of live sessions and pending API requests, and the I/O
// threads. The sessions (ws_session.hpp, http_session.hpp) hold a pointer
// to it; it outlives them.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/websocket.hpp>

#include "keel/compat_models.hpp"
#include "keel/compat_request.hpp"
#include "keel/connection_budget.hpp"
#include "keel/recent_requests.hpp"
#include "keel/ws_server.hpp"
#include "keel/ws_ticket.hpp"

namespace keel::gateway {

namespace beast = boost::beast;
namespace http = beast::http;
namespace websocket = beast::websocket;
namespace net = boost::asio;
namespace ssl = net::ssl;
using tcp = net::ip::tcp;
using error_code = beast::error_code;
using executor_type = net::any_io_executor;
using namespace std::chrono_literals;

/// What the server needs of a WebSocket session, whatever its stream.
class ws_link {
public:
  virtual ~ws_link();
  /// The connection's strand (safe to read from any thread).
  virtual const executor_type& executor() const = 0;
  /// Queues a frame. Runs on the strand.
  virtual void enqueue(std::string frame) = 0;
  /// True while the connection is open and not closing. Any thread.
  virtual bool accepting() const = 0;
  /// Counts `bytes` on their way to the queue. Any thread. False, counting
  /// nothing, when they would take what is queued and on its way past
  /// `max_queued_bytes` (a lone frame always fits).
  virtual bool reserve(size_t bytes) = 0;
  /// Queues a frame `reserve` counted; an answer (`ws_server::send_answer`)
  /// also takes its tokens from the rate limit. Runs on the strand.
  virtual void deliver(std::string frame, bool answer) = 0;
  /// Closes the connection as too slow: a frame did not fit. Runs on the
  /// strand.
  virtual void overflow() = 0;
  /// Closes politely, then hard after a grace period. Runs on the strand.
  virtual void start_close(websocket::close_code code, const char* reason) = 0;
  /// Unregisters and tells the handler, once.
  virtual void finish() = 0;
};

/// What the server needs of an HTTP session, whatever its stream.
class http_link {
public:
  virtual ~http_link();
  virtual const executor_type& executor() const = 0;
  /// Closes the socket. Runs on the strand.
  virtual void shutdown() = 0;
  /// Delivers the handler's answer to request `id`. Runs on the strand.
  virtual void deliver(uint64_t id, unsigned status, std::string content_type,
                       std::string body)
    = 0;
};

struct counters {
  std::atomic<uint64_t> connections_open{0};
  std::atomic<uint64_t> connections_total{0};
  std::atomic<uint64_t> frames_in{0};
  std::atomic<uint64_t> frames_out{0};
  std::atomic<uint64_t> bad_frames{0};
  std::atomic<uint64_t> slow_client_disconnects{0};
  std::atomic<uint64_t> rate_limited_frames{0};
  std::atomic<int64_t> queued_bytes{0};
};

class server_impl : public ws_server {
public:
  server_impl(const gateway_config& cfg,
              std::shared_ptr<gateway_handler> handler, std::string node,
              static_files files);

  ~server_impl() override;

  caf::error listen();

  caf::error setup_tls();

  void launch();

  uint16_t port() const override {
    return port_;
  }

  void send(connection_id conn, std::string frame) override;

  void send_answer(connection_id conn, std::string frame) override;

  bool connected(connection_id conn) const override;

  void respond(uint64_t request, unsigned status, std::string content_type,
               std::string body) override;

  ws_server_stats stats() const override;

  void set_health(bool live, bool ready) override;

  void set_models(std::vector<served_model> models) override;

  /// The models of `/v1/models`, as `set_models` gave them.
  std::vector<compat::model_entry> models() const;

  void start_drain() override;

  bool draining() const override {
    return draining_.load();
  }

  void stop() override;

  // -- for the sessions -------------------------------------------------------

  const gateway_config& cfg() const {
    return cfg_;
  }

  const protocol::decode_limits& limits() const {
    return limits_;
  }

  gateway_handler& handler() {
    return *handler_;
  }

  const std::string& node() const {
    return node_;
  }

  counters& ctr() {
    return ctr_;
  }

  /// The WebSocket tickets issued and not yet used.
  ws_ticket_store& tickets() {
    return tickets_;
  }

  bool stopping() const {
    return stopping_.load();
  }

  bool live() const {
    return live_.load();
  }

  bool ready() const {
    return ready_.load() && !draining_.load();
  }

  /// The static file at `path`, or null.
  const static_file* file(std::string_view path) const;

  /// Moves connection `id` from the unauthenticated budget to a slot of
  /// `max_connections`, once it passed the token check. False when it left
  /// the budget already (closed to make room) or every slot is taken.
  bool promote(connection_id id);

  /// Gives a slot of `max_connections` back.
  void release_slot();

  /// Takes a connection that closed before it authenticated out of the
  /// unauthenticated budget.
  void leave_unauthenticated(connection_id id);

  /// Marks a WebSocket connection as open (for the stats).
  void ws_opened();

  void ws_closed();

  void add(connection_id id, std::weak_ptr<ws_link> ptr);

  void add(connection_id id, std::weak_ptr<http_link> ptr);

  void remove_ws(connection_id id);

  void remove_http(connection_id id);

  uint64_t add_request(std::weak_ptr<http_link> ptr);

  /// Returns true if the request was still pending (and is no more).
  bool remove_request(uint64_t id);

  /// A fresh connection id (a compatible API request's virtual client).
  connection_id next_connection_id() {
    return next_id_.fetch_add(1) + 1;
  }

  /// The Keel message a compatible API request becomes
  /// (`compat::identity_for`, the keyless requests remembered here).
  compat::request_identity compat_identity(const compat::compat_call& call,
                                           std::string_view token,
                                           std::string_view body);

private:
  void do_accept();

  void on_accept(error_code err, tcp::socket socket);

  /// Puts a fresh connection into the unauthenticated budget and closes
  /// the one that makes room for it, if any.
  void admit(connection_id id, const tcp::socket& socket);

  std::vector<std::shared_ptr<ws_link>> live_ws();

  std::shared_ptr<ws_link> find_ws(connection_id conn) const;

  void forward(connection_id conn, std::string frame, bool answer);

  gateway_config cfg_;
  protocol::decode_limits limits_;
  std::shared_ptr<gateway_handler> handler_;
  std::string node_;
  counters ctr_;
  ws_ticket_store tickets_;
  std::atomic<size_t> slots_{0};
  std::atomic<bool> stopping_{false};
  std::atomic<bool> draining_{false};
  std::atomic<bool> live_{false};
  std::atomic<bool> ready_{false};
  static_files files_;
  std::atomic<uint64_t> next_id_{0};
  uint16_t port_ = 0;
  std::unique_ptr<ssl::context> tls_;

  // Guards the three maps and the budget below. Never held while calling
  // the handler.
  mutable std::mutex mtx_;
  connection_budget unauthenticated_;
  std::unordered_map<connection_id, std::weak_ptr<ws_link>> ws_;
  std::unordered_map<connection_id, std::weak_ptr<http_link>> http_;
  std::unordered_map<uint64_t, std::weak_ptr<http_link>> requests_;
  uint64_t next_request_ = 0;

  // The compatible API's models.
  mutable std::mutex models_mtx_;
  std::vector<compat::model_entry> models_;

  // Keyless requests of the compatible API, for the SDKs' retries.
  std::mutex recent_mtx_;
  compat::recent_requests recent_;

  // Serializes stop() calls and tracks the I/O threads winding down.
  std::mutex stop_mtx_;
  std::condition_variable threads_done_cv_;
  size_t threads_running_ = 0;
  bool stopped_ = false;
  std::vector<std::thread> threads_;

  // Declared last: destroyed first, so pending handlers (and the sessions
  // they keep alive) go away while the state above is still valid.
  net::io_context ioc_;
  tcp::acceptor acceptor_;
  net::steady_timer accept_retry_;
  net::executor_work_guard<net::io_context::executor_type> work_;
};

/// Returns memory freed by a dropped queue to the operating system (glibc
/// keeps freed blocks otherwise), when `freed` bytes make it worth a call.
void release_memory(size_t freed);

/// An HTTP session on a plain socket, started on a fresh connection that
/// is in the unauthenticated budget.
void start_http(server_impl* srv, connection_id id, tcp::socket socket);

/// An HTTP session behind TLS: the handshake first (its failure closes this
/// connection only).
void start_https(server_impl* srv, connection_id id, tcp::socket socket,
                 ssl::context& tls);

} // namespace keel::gateway
