#include "keel/ws_server.hpp"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <iostream>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>
#include <vector>

#include <boost/asio/dispatch.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/websocket.hpp>

namespace keel {

gateway_handler::~gateway_handler() {
  // nop
}

ws_server::~ws_server() {
  // nop
}

namespace {

namespace beast = boost::beast;
namespace http = beast::http;
namespace websocket = beast::websocket;
namespace net = boost::asio;
using tcp = net::ip::tcp;
using error_code = beast::error_code;
using request = http::request<http::string_body>;
using namespace std::chrono_literals;

/// Time allowed to read one HTTP request (headers and body).
constexpr auto http_read_timeout = 30s;

/// Time the `/api/` handler has to answer before the client gets a 504.
constexpr auto api_timeout = 10s;

/// Time a closing WebSocket gets for the close handshake before its socket
/// is closed hard (a stalled peer never completes it).
constexpr auto close_grace = 2s;

/// How long `stop()` waits for connections to wind down.
constexpr auto stop_deadline = 5s;

/// Read buffers above this are released after a message instead of kept.
constexpr size_t keep_buffer_bytes = 64 * 1024;

class server_impl;

// -- HTTP helpers -------------------------------------------------------------

std::string_view path_of(std::string_view target) {
  return target.substr(0, target.find('?'));
}

int hex_value(char c) {
  if (c >= '0' && c <= '9')
    return c - '0';
  if (c >= 'a' && c <= 'f')
    return c - 'a' + 10;
  if (c >= 'A' && c <= 'F')
    return c - 'A' + 10;
  return -1;
}

/// Returns the percent-decoded value of query parameter `key`, if present.
std::optional<std::string> query_param(std::string_view target,
                                       std::string_view key) {
  auto q = target.find('?');
  if (q == std::string_view::npos)
    return std::nullopt;
  auto query = target.substr(q + 1);
  while (!query.empty()) {
    auto amp = query.find('&');
    auto part = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view{}
                                          : query.substr(amp + 1);
    auto eq = part.find('=');
    if (part.substr(0, eq) != key)
      continue;
    std::string result;
    if (eq == std::string_view::npos)
      return result;
    auto value = part.substr(eq + 1);
    for (size_t i = 0; i < value.size(); ++i) {
      if (value[i] == '%' && i + 2 < value.size()
          && hex_value(value[i + 1]) >= 0 && hex_value(value[i + 2]) >= 0) {
        result += static_cast<char>(hex_value(value[i + 1]) * 16
                                    + hex_value(value[i + 2]));
        i += 2;
      } else if (value[i] == '+') {
        result += ' ';
      } else {
        result += value[i];
      }
    }
    return result;
  }
  return std::nullopt;
}

/// Compares in time independent of where the inputs differ, so response
/// timing does not leak how much of a guessed token was right.
bool constant_time_equal(std::string_view x, std::string_view y) {
  if (x.size() != y.size())
    return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < x.size(); ++i)
    diff |= static_cast<unsigned char>(x[i] ^ y[i]);
  return diff == 0;
}

/// Checks `Authorization: Bearer TOKEN` or `?token=TOKEN`.
bool authorized(const request& req, const std::string& token) {
  if (token.empty())
    return true;
  auto auth = req[http::field::authorization];
  constexpr beast::string_view prefix = "Bearer ";
  if (auth.size() > prefix.size()
      && beast::iequals(auth.substr(0, prefix.size()), prefix)) {
    auto given = auth.substr(prefix.size());
    if (constant_time_equal({given.data(), given.size()}, token))
      return true;
  }
  auto target = req.target();
  if (auto given = query_param({target.data(), target.size()}, "token"))
    return constant_time_equal(*given, token);
  return false;
}

// -- server state shared by the sessions --------------------------------------

class ws_session;
class http_session;

struct counters {
  std::atomic<uint64_t> connections_open{0};
  std::atomic<uint64_t> connections_total{0};
  std::atomic<uint64_t> frames_in{0};
  std::atomic<uint64_t> frames_out{0};
  std::atomic<uint64_t> bad_frames{0};
  std::atomic<uint64_t> slow_client_disconnects{0};
};

class server_impl : public ws_server {
public:
  server_impl(const gateway_config& cfg,
              std::shared_ptr<gateway_handler> handler, std::string node)
    : cfg_(cfg),
      handler_(std::move(handler)),
      node_(std::move(node)),
      acceptor_(net::make_strand(ioc_)),
      accept_retry_(acceptor_.get_executor()),
      work_(net::make_work_guard(ioc_)) {
    limits_.max_text_bytes = cfg_.max_text_bytes;
  }

  ~server_impl() override {
    stop();
  }

  caf::error listen();

  void launch();

  uint16_t port() const override {
    return port_;
  }

  void send(connection_id conn, std::string frame) override;

  void respond(uint64_t request, unsigned status, std::string content_type,
               std::string body) override;

  ws_server_stats stats() const override {
    ws_server_stats result;
    result.connections_open = ctr_.connections_open.load();
    result.connections_total = ctr_.connections_total.load();
    result.frames_in = ctr_.frames_in.load();
    result.frames_out = ctr_.frames_out.load();
    result.bad_frames = ctr_.bad_frames.load();
    result.slow_client_disconnects = ctr_.slow_client_disconnects.load();
    return result;
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

  bool stopping() const {
    return stopping_.load();
  }

  connection_id next_id() {
    return next_id_.fetch_add(1) + 1;
  }

  /// Takes a WebSocket slot; false when `max_connections` are open.
  bool reserve_slot() {
    auto n = ctr_.connections_open.fetch_add(1);
    if (n >= cfg_.max_connections) {
      ctr_.connections_open.fetch_sub(1);
      return false;
    }
    return true;
  }

  void release_slot() {
    ctr_.connections_open.fetch_sub(1);
  }

  void add(connection_id id, std::weak_ptr<ws_session> ptr) {
    std::lock_guard<std::mutex> guard{mtx_};
    ws_.emplace(id, std::move(ptr));
  }

  void add(connection_id id, std::weak_ptr<http_session> ptr) {
    std::lock_guard<std::mutex> guard{mtx_};
    http_.emplace(id, std::move(ptr));
  }

  void remove_ws(connection_id id) {
    std::lock_guard<std::mutex> guard{mtx_};
    ws_.erase(id);
  }

  void remove_http(connection_id id) {
    std::lock_guard<std::mutex> guard{mtx_};
    http_.erase(id);
  }

  uint64_t add_request(std::weak_ptr<http_session> ptr) {
    std::lock_guard<std::mutex> guard{mtx_};
    auto id = ++next_request_;
    requests_.emplace(id, std::move(ptr));
    return id;
  }

  /// Returns true if the request was still pending (and is no more).
  bool remove_request(uint64_t id) {
    std::lock_guard<std::mutex> guard{mtx_};
    return requests_.erase(id) > 0;
  }

private:
  void do_accept();

  void on_accept(error_code err, tcp::socket socket);

  gateway_config cfg_;
  protocol::decode_limits limits_;
  std::shared_ptr<gateway_handler> handler_;
  std::string node_;
  counters ctr_;
  std::atomic<bool> stopping_{false};
  std::atomic<uint64_t> next_id_{0};
  uint16_t port_ = 0;

  // Guards the three maps below. Never held while calling the handler.
  std::mutex mtx_;
  std::unordered_map<connection_id, std::weak_ptr<ws_session>> ws_;
  std::unordered_map<connection_id, std::weak_ptr<http_session>> http_;
  std::unordered_map<uint64_t, std::weak_ptr<http_session>> requests_;
  uint64_t next_request_ = 0;

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

// -- WebSocket sessions -------------------------------------------------------

class ws_session : public std::enable_shared_from_this<ws_session> {
public:
  ws_session(server_impl* srv, connection_id id, beast::tcp_stream&& stream)
    : srv_(srv), id_(id), ex_(stream.get_executor()), ws_(std::move(stream)) {
    // nop
  }

  ~ws_session() {
    finish();
  }

  /// The connection's strand (safe to read from any thread).
  const beast::tcp_stream::executor_type& executor() const {
    return ex_;
  }

  /// Completes the upgrade for `req`. The caller reserved a slot.
  void run(request req) {
    srv_->add(id_, weak_from_this());
    beast::get_lowest_layer(ws_).expires_never();
    websocket::stream_base::timeout opts;
    opts.handshake_timeout = 10s;
    // Pings an idle peer and drops one that stays silent: dead and stalled
    // peers go away even when nothing is sent to them.
    opts.idle_timeout = 120s;
    opts.keep_alive_pings = true;
    ws_.set_option(opts);
    ws_.set_option(
      websocket::stream_base::decorator([](websocket::response_type& res) {
        res.set(http::field::server, "keel");
      }));
    ws_.read_message_max(srv_->cfg().max_frame_bytes);
    ws_.text(true);
    req_ = std::move(req);
    ws_.async_accept(*req_, beast::bind_front_handler(&ws_session::on_accept,
                                                      shared_from_this()));
  }

  /// Queues a frame. Runs on the strand.
  void enqueue(std::string frame) {
    if (!opened_ || closing_ || finished_)
      return;
    queued_bytes_ += frame.size();
    queue_.push_back(std::move(frame));
    if (queued_bytes_ > srv_->cfg().max_queued_bytes) {
      srv_->ctr().slow_client_disconnects.fetch_add(1,
                                                    std::memory_order_relaxed);
      drop_queue();
      start_close(websocket::close_code::policy_error, "client too slow");
      return;
    }
    if (!writing_)
      do_write();
  }

  /// Closes the connection politely, then hard after a grace period. Runs on
  /// the strand.
  void start_close(websocket::close_code code, const char* reason) {
    if (closing_ || finished_)
      return;
    closing_ = true;
    if (!opened_) {
      // Still in the handshake: there is no WebSocket to close yet.
      beast::get_lowest_layer(ws_).socket().close(ignored_);
      return;
    }
    guard_ = std::make_unique<net::steady_timer>(ws_.get_executor());
    guard_->expires_after(close_grace);
    guard_->async_wait([self = shared_from_this()](error_code err) {
      if (!err && !self->finished_)
        beast::get_lowest_layer(self->ws_).socket().close(self->ignored_);
    });
    // Beast runs the close after a pending write; new writes stop here.
    ws_.async_close(websocket::close_reason{code, reason},
                    [self = shared_from_this()](error_code err) {
                      if (err)
                        beast::get_lowest_layer(self->ws_).socket().close(
                          self->ignored_);
                    });
  }

  /// Unregisters the connection and tells the handler, once. Runs on the
  /// strand, or anywhere once the I/O threads are gone.
  void finish() {
    if (finished_)
      return;
    finished_ = true;
    drop_queue();
    if (guard_)
      guard_->cancel();
    srv_->remove_ws(id_);
    srv_->release_slot();
    if (opened_) {
      try {
        srv_->handler().on_close(id_);
      } catch (const std::exception& e) {
        std::cerr << "keel gateway: handler on_close threw: " << e.what()
                  << '\n';
      }
    }
  }

private:
  /// Frees the queued frames, keeping the one being written: its buffer is
  /// in use until the write completes (with an error once the socket is
  /// closed).
  void drop_queue() {
    auto keep = writing_ && !queue_.empty() ? 1 : 0;
    queue_.erase(queue_.begin() + keep, queue_.end());
    queued_bytes_ = keep != 0 ? queue_.front().size() : 0;
    queue_.shrink_to_fit();
  }

  void on_accept(error_code err) {
    req_.reset();
    if (err || closing_ || srv_->stopping()) {
      beast::get_lowest_layer(ws_).socket().close(ignored_);
      finish();
      return;
    }
    opened_ = true;
    srv_->ctr().connections_total.fetch_add(1, std::memory_order_relaxed);
    enqueue(protocol::hello_frame(srv_->node()));
    try {
      srv_->handler().on_open(id_);
    } catch (const std::exception& e) {
      std::cerr << "keel gateway: handler on_open threw: " << e.what() << '\n';
    }
    do_read();
  }

  void do_read() {
    ws_.async_read(buf_, beast::bind_front_handler(&ws_session::on_read,
                                                   shared_from_this()));
  }

  void on_read(error_code err, size_t) {
    if (err) {
      // Closed by the peer, by us, too big (Beast sent 1009), invalid UTF-8
      // (Beast sent 1007), or the socket failed.
      beast::get_lowest_layer(ws_).socket().close(ignored_);
      finish();
      return;
    }
    auto& ctr = srv_->ctr();
    ctr.frames_in.fetch_add(1, std::memory_order_relaxed);
    if (!ws_.got_text()) {
      ctr.bad_frames.fetch_add(1, std::memory_order_relaxed);
      enqueue(protocol::error_frame("binary_frame",
                                    "binary frames are not supported; send "
                                    "JSON text frames"));
    } else {
      auto data = buf_.data();
      std::string_view text{static_cast<const char*>(data.data()), data.size()};
      auto result = protocol::decode_client_frame(text, srv_->limits());
      if (auto frame = std::get_if<protocol::client_frame>(&result)) {
        if (frame->type == protocol::client_frame_type::ping) {
          enqueue(protocol::pong_frame(frame->id));
        } else if (!closing_) {
          try {
            srv_->handler().on_frame(id_, std::move(*frame));
          } catch (const std::exception& e) {
            enqueue(protocol::error_frame(
              "internal",
              std::string{"the node failed to handle a frame: "} + e.what()));
          }
        }
      } else {
        ctr.bad_frames.fetch_add(1, std::memory_order_relaxed);
        enqueue(protocol::error_frame(std::get<protocol::frame_error>(result)));
      }
    }
    buf_.consume(buf_.size());
    if (buf_.capacity() > keep_buffer_bytes)
      buf_.shrink_to_fit();
    do_read();
  }

  void do_write() {
    writing_ = true;
    ws_.async_write(net::buffer(queue_.front()),
                    beast::bind_front_handler(&ws_session::on_write,
                                              shared_from_this()));
  }

  void on_write(error_code err, size_t) {
    writing_ = false;
    if (err) {
      // The pending read fails too once the socket is closed.
      beast::get_lowest_layer(ws_).socket().close(ignored_);
      queue_.clear();
      queued_bytes_ = 0;
      return;
    }
    srv_->ctr().frames_out.fetch_add(1, std::memory_order_relaxed);
    if (!queue_.empty()) {
      queued_bytes_ -= queue_.front().size();
      queue_.pop_front();
    }
    if (!queue_.empty() && !closing_)
      do_write();
  }

  server_impl* srv_;
  connection_id id_;
  const beast::tcp_stream::executor_type ex_;
  websocket::stream<beast::tcp_stream> ws_;
  beast::flat_buffer buf_;
  std::optional<request> req_;
  std::deque<std::string> queue_;
  /// Bytes of the frames in `queue_`.
  size_t queued_bytes_ = 0;
  std::unique_ptr<net::steady_timer> guard_;
  error_code ignored_;
  bool writing_ = false;
  bool closing_ = false;
  bool opened_ = false;
  bool finished_ = false;
};

// -- HTTP sessions ------------------------------------------------------------

std::string json_error(const char* code, const std::string& message) {
  return protocol::error_frame(code, message);
}

class http_session : public std::enable_shared_from_this<http_session> {
public:
  http_session(server_impl* srv, connection_id id, tcp::socket&& socket)
    : srv_(srv),
      id_(id),
      ex_(socket.get_executor()),
      stream_(std::move(socket)) {
    // nop
  }

  ~http_session() {
    srv_->remove_http(id_);
    if (pending_ != 0)
      srv_->remove_request(pending_);
  }

  void run() {
    srv_->add(id_, weak_from_this());
    net::dispatch(stream_.get_executor(),
                  beast::bind_front_handler(&http_session::do_read,
                                            shared_from_this()));
  }

  /// Closes the socket. Runs on the strand.
  void shutdown() {
    shut_down_ = true;
    if (timer_)
      timer_->cancel();
    if (!handed_off_)
      stream_.socket().close(ignored_);
  }

  /// Delivers the handler's answer to request `id`. Runs on the strand.
  void deliver(uint64_t id, unsigned status, std::string content_type,
               std::string body) {
    if (pending_ != id || shut_down_)
      return;
    pending_ = 0;
    if (timer_)
      timer_->cancel();
    reply(static_cast<http::status>(status), std::move(content_type),
          std::move(body));
  }

  /// The connection's strand (safe to read from any thread).
  const beast::tcp_stream::executor_type& executor() const {
    return ex_;
  }

private:
  void do_read() {
    if (shut_down_ || srv_->stopping())
      return;
    parser_.emplace();
    parser_->header_limit(16 * 1024);
    parser_->body_limit(srv_->cfg().max_frame_bytes);
    stream_.expires_after(http_read_timeout);
    http::async_read(stream_, buf_, *parser_,
                     beast::bind_front_handler(&http_session::on_read,
                                               shared_from_this()));
  }

  void on_read(error_code err, size_t) {
    if (err == http::error::body_limit) {
      keep_alive_ = false;
      reply(http::status::payload_too_large, "application/json",
            json_error("too_large",
                       "request body exceeds "
                         + std::to_string(srv_->cfg().max_frame_bytes)
                         + " bytes"));
      return;
    }
    if (err) {
      stream_.socket().close(ignored_);
      return;
    }
    route(parser_->release());
  }

  void route(request req) {
    keep_alive_ = req.keep_alive();
    version_ = req.version();
    auto target = req.target();
    auto path = path_of({target.data(), target.size()});
    if (websocket::is_upgrade(req))
      return upgrade(req, path);
    if (path == "/healthz")
      return healthz(req);
    if (path == protocol::ws_path)
      return reply(http::status::upgrade_required, "application/json",
                   json_error("bad_request",
                              "this path only accepts WebSocket upgrades"));
    if (path.substr(0, 5) == "/api/")
      return api_request(req);
    not_found(path);
  }

  /// Hands a WebSocket upgrade of the protocol path to a new `ws_session`.
  /// A refused upgrade gets an HTTP answer, then the connection closes.
  void upgrade(request& req, std::string_view path) {
    const auto& cfg = srv_->cfg();
    if (path != protocol::ws_path) {
      keep_alive_ = false;
      return not_found(path);
    }
    if (!authorized(req, cfg.token)) {
      keep_alive_ = false;
      return unauthorized();
    }
    if (srv_->stopping()) {
      keep_alive_ = false;
      return reply(http::status::service_unavailable, "application/json",
                   json_error("unavailable", "the node is shutting down"));
    }
    if (!srv_->reserve_slot()) {
      keep_alive_ = false;
      return reply(http::status::service_unavailable, "application/json",
                   json_error("overloaded",
                              "too many connections (limit "
                                + std::to_string(cfg.max_connections) + ")"));
    }
    stream_.expires_never();
    handed_off_ = true;
    srv_->remove_http(id_);
    auto ws = std::make_shared<ws_session>(srv_, id_, std::move(stream_));
    ws->run(std::move(req));
  }

  void healthz(const request& req) {
    if (req.method() != http::verb::get)
      return reply(http::status::method_not_allowed, "application/json",
                   json_error("bad_request", "use GET /healthz"));
    nlohmann::json body{{"status", "ok"}, {"node", srv_->node()}};
    reply(http::status::ok, "application/json",
          body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  }

  /// Passes an `/api/` request to the handler, which answers through
  /// `deliver`; if it does not answer in time, the client gets a 504.
  void api_request(const request& req) {
    if (!authorized(req, srv_->cfg().token))
      return unauthorized();
    pending_ = srv_->add_request(weak_from_this());
    start_api_timer();
    // Nothing reads the socket while the handler works: no expiry.
    stream_.expires_never();
    auto id = pending_;
    try {
      srv_->handler().on_http(id, std::string{req.method_string()},
                              std::string{req.target()}, req.body());
    } catch (const std::exception& e) {
      if (srv_->remove_request(id))
        deliver(id, 500, "application/json", json_error("internal", e.what()));
    }
  }

  /// Answers 504 unless the handler answers the pending request first.
  void start_api_timer() {
    if (!timer_)
      timer_ = std::make_unique<net::steady_timer>(stream_.get_executor());
    timer_->expires_after(api_timeout);
    timer_->async_wait(
      [self = shared_from_this(), id = pending_](error_code err) {
        if (err || self->pending_ != id || !self->srv_->remove_request(id))
          return;
        self->pending_ = 0;
        self->reply(http::status::gateway_timeout, "application/json",
                    json_error("timeout", "the node did not answer in time"));
      });
  }

  void not_found(std::string_view path) {
    reply(http::status::not_found, "application/json",
          json_error("not_found", "no such path: " + std::string{path}));
  }

  void unauthorized() {
    res_ = {};
    res_.set(http::field::www_authenticate, "Bearer");
    reply(http::status::unauthorized, "application/json",
          json_error("unauthorized", "missing or wrong token (send "
                                     "'Authorization: Bearer TOKEN' or "
                                     "'?token=TOKEN')"),
          false);
  }

  void reply(http::status status, std::string content_type, std::string body,
             bool fresh = true) {
    if (fresh)
      res_ = {};
    res_.result(status);
    res_.version(version_);
    res_.set(http::field::server, "keel");
    res_.set(http::field::content_type, content_type);
    res_.body() = std::move(body);
    res_.keep_alive(keep_alive_ && !srv_->stopping());
    res_.prepare_payload();
    stream_.expires_after(http_read_timeout);
    http::async_write(stream_, res_,
                      beast::bind_front_handler(&http_session::on_write,
                                                shared_from_this()));
  }

  void on_write(error_code err, size_t) {
    if (err || !res_.keep_alive()) {
      stream_.socket().shutdown(tcp::socket::shutdown_send, ignored_);
      stream_.socket().close(ignored_);
      return;
    }
    res_ = {};
    do_read();
  }

  server_impl* srv_;
  connection_id id_;
  const beast::tcp_stream::executor_type ex_;
  beast::tcp_stream stream_;
  beast::flat_buffer buf_;
  std::optional<http::request_parser<http::string_body>> parser_;
  http::response<http::string_body> res_;
  std::unique_ptr<net::steady_timer> timer_;
  uint64_t pending_ = 0;
  unsigned version_ = 11;
  bool keep_alive_ = false;
  bool shut_down_ = false;
  // The stream moved to a ws_session: never touch it again.
  bool handed_off_ = false;
  error_code ignored_;
};

// -- server -------------------------------------------------------------------

caf::error server_impl::listen() {
  auto where = cfg_.host + ":" + std::to_string(cfg_.port);
  error_code err;
  tcp::endpoint ep;
  if (auto addr = net::ip::make_address(cfg_.host, err); !err) {
    ep = tcp::endpoint{addr, cfg_.port};
  } else {
    // A host name such as "localhost": listen on its first address.
    tcp::resolver resolver{ioc_};
    auto results = resolver.resolve(cfg_.host, std::to_string(cfg_.port),
                                    tcp::resolver::passive, err);
    if (err || results.empty())
      return caf::make_error(ec::connection_failed,
                             "cannot listen on " + where + ": cannot resolve '"
                               + cfg_.host + "'"
                               + (err ? ": " + err.message() : ""));
    ep = results.begin()->endpoint();
  }
  if (acceptor_.open(ep.protocol(), err)
      || acceptor_.set_option(net::socket_base::reuse_address(true), err)
      || acceptor_.bind(ep, err)
      || acceptor_.listen(net::socket_base::max_listen_connections, err))
    return caf::make_error(ec::connection_failed,
                           "cannot listen on " + where + ": " + err.message());
  port_ = acceptor_.local_endpoint(err).port();
  return caf::none;
}

void server_impl::launch() {
  do_accept();
  auto n = std::max<size_t>(cfg_.io_threads, 1);
  threads_running_ = n;
  threads_.reserve(n);
  for (size_t i = 0; i < n; ++i)
    threads_.emplace_back([this] {
      for (;;) {
        try {
          ioc_.run();
          break;
        } catch (const std::exception& e) {
          // A handler threw past every boundary: keep serving.
          std::cerr << "keel gateway: I/O thread caught: " << e.what() << '\n';
        }
      }
      std::lock_guard<std::mutex> guard{stop_mtx_};
      if (--threads_running_ == 0)
        threads_done_cv_.notify_all();
    });
}

void server_impl::do_accept() {
  acceptor_.async_accept(net::make_strand(ioc_),
                         beast::bind_front_handler(&server_impl::on_accept,
                                                   this));
}

void server_impl::on_accept(error_code err, tcp::socket socket) {
  if (stopping() || !acceptor_.is_open())
    return;
  if (err) {
    // Out of file descriptors, or similar: back off instead of spinning.
    accept_retry_.expires_after(50ms);
    accept_retry_.async_wait([this](error_code e) {
      if (!e && !stopping())
        do_accept();
    });
    return;
  }
  error_code ignored;
  socket.set_option(tcp::no_delay(true), ignored);
  std::make_shared<http_session>(this, next_id(), std::move(socket))->run();
  do_accept();
}

void server_impl::send(connection_id conn, std::string frame) {
  if (stopping())
    return;
  std::shared_ptr<ws_session> session;
  {
    std::lock_guard<std::mutex> guard{mtx_};
    auto i = ws_.find(conn);
    if (i == ws_.end())
      return;
    session = i->second.lock();
  }
  if (!session)
    return;
  // Runs inline when called from this connection's own strand (the handler
  // answering a frame), otherwise queues a small task on it.
  auto ex = session->executor();
  net::dispatch(ex, [s = std::move(session), f = std::move(frame)]() mutable {
    s->enqueue(std::move(f));
  });
}

void server_impl::respond(uint64_t request, unsigned status,
                          std::string content_type, std::string body) {
  if (stopping())
    return;
  std::shared_ptr<http_session> session;
  {
    std::lock_guard<std::mutex> guard{mtx_};
    auto i = requests_.find(request);
    if (i == requests_.end())
      return;
    session = i->second.lock();
    requests_.erase(i);
  }
  if (!session)
    return;
  auto ex = session->executor();
  net::dispatch(ex,
                [s = std::move(session), request, status,
                 ct = std::move(content_type), b = std::move(body)]() mutable {
                  s->deliver(request, status, std::move(ct), std::move(b));
                });
}

void server_impl::stop() {
  std::unique_lock<std::mutex> lock{stop_mtx_};
  if (stopped_)
    return;
  stopped_ = true;
  stopping_ = true;
  net::post(acceptor_.get_executor(), [this] {
    error_code ignored;
    acceptor_.close(ignored);
    accept_retry_.cancel();
  });
  std::vector<std::shared_ptr<ws_session>> ws;
  std::vector<std::shared_ptr<http_session>> http;
  {
    std::lock_guard<std::mutex> guard{mtx_};
    for (auto& kvp : ws_)
      if (auto ptr = kvp.second.lock())
        ws.push_back(std::move(ptr));
    for (auto& kvp : http_)
      if (auto ptr = kvp.second.lock())
        http.push_back(std::move(ptr));
  }
  for (auto& s : ws) {
    net::post(s->executor(), [s] {
      s->start_close(websocket::close_code::going_away, "server shutting down");
    });
  }
  for (auto& s : http)
    net::post(s->executor(), [s] { s->shutdown(); });
  ws.clear();
  http.clear();
  // Without the work guard, run() returns once every connection is gone.
  work_.reset();
  threads_done_cv_.wait_for(lock, stop_deadline,
                            [this] { return threads_running_ == 0; });
  lock.unlock();
  ioc_.stop();
  for (auto& t : threads_)
    if (t.joinable())
      t.join();
  threads_.clear();
  // Connections that did not finish in time: tell the handler now, since
  // their handlers will never run (no I/O thread is left).
  {
    std::lock_guard<std::mutex> guard{mtx_};
    for (auto& kvp : ws_)
      if (auto ptr = kvp.second.lock())
        ws.push_back(std::move(ptr));
  }
  for (auto& s : ws)
    s->finish();
}

} // namespace

caf::expected<std::unique_ptr<ws_server>>
ws_server::start(const gateway_config& cfg,
                 std::shared_ptr<gateway_handler> handler,
                 const std::string& node_name) {
  if (!handler)
    return caf::make_error(ec::unavailable, "ws_server: no handler");
  try {
    auto srv = std::make_unique<server_impl>(cfg, std::move(handler),
                                             node_name);
    if (auto err = srv->listen())
      return err;
    srv->launch();
    return std::unique_ptr<ws_server>{std::move(srv)};
  } catch (const std::exception& e) {
    return caf::make_error(ec::connection_failed,
                           "cannot start the gateway on " + cfg.host + ":"
                             + std::to_string(cfg.port) + ": " + e.what());
  }
}

} // namespace keel
