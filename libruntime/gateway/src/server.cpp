#include "server_impl.hpp"

#include <algorithm>
#include <climits>
#include <iostream>

#include <malloc.h>

#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/websocket.hpp>
#include <openssl/ssl.h>

#include "keel/text.hpp"

// jemalloc's control call, present when the binary links jemalloc
// (keel-node does), else null.
extern "C" int mallctl(const char* name, void* old_value, size_t* old_size,
                       void* new_value, size_t new_size) __attribute__((weak));

namespace keel {

gateway_handler::~gateway_handler() {
  // nop
}

ws_server::~ws_server() {
  // nop
}

} // namespace keel

namespace keel::gateway {

namespace {

/// How long `stop()` waits for connections to wind down.
constexpr auto stop_deadline = 5s;

/// Freed queues at least this big are handed back to the OS at once.
constexpr size_t trim_threshold = 1 << 20;

/// Keyless compatible API requests remembered for the SDKs' retries.
constexpr size_t recent_compat_requests = 100'000;

} // namespace

ws_link::~ws_link() {
  // nop
}

http_link::~http_link() {
  // nop
}

void release_memory(size_t freed) {
  if (freed < trim_threshold)
    return;
  // jemalloc (keel-node's allocator) purges every arena; glibc trims.
  if (mallctl != nullptr)
    mallctl("arena.4096.purge", nullptr, nullptr, nullptr, 0); // all arenas
  else
    malloc_trim(0);
}

server_impl::server_impl(const gateway_config& cfg,
                         std::shared_ptr<gateway_handler> handler,
                         std::string node, static_files files)
  : cfg_(cfg),
    handler_(std::move(handler)),
    node_(std::move(node)),
    files_(std::move(files)),
    unauthenticated_(cfg.max_unauthenticated,
                     cfg.max_unauthenticated_per_address),
    recent_(std::chrono::duration_cast<std::chrono::milliseconds>(
              cfg.compat.retry_window),
            recent_compat_requests),
    acceptor_(net::make_strand(ioc_)),
    accept_retry_(acceptor_.get_executor()),
    work_(net::make_work_guard(ioc_)) {
  limits_.max_text_bytes = cfg_.max_text_bytes;
}

server_impl::~server_impl() {
  stop();
}

ws_server_stats server_impl::stats() const {
  ws_server_stats result;
  result.connections_open = ctr_.connections_open.load();
  result.connections_total = ctr_.connections_total.load();
  result.frames_in = ctr_.frames_in.load();
  result.frames_out = ctr_.frames_out.load();
  result.bad_frames = ctr_.bad_frames.load();
  result.slow_client_disconnects = ctr_.slow_client_disconnects.load();
  result.rate_limited_frames = ctr_.rate_limited_frames.load();
  result.queued_bytes
    = static_cast<uint64_t>(std::max<int64_t>(ctr_.queued_bytes.load(), 0));
  return result;
}

void server_impl::set_health(bool live, bool ready) {
  live_ = live;
  ready_ = ready;
}

void server_impl::start_drain() {
  draining_ = true;
}

const static_file* server_impl::file(std::string_view path) const {
  auto i = files_.find(path);
  return i != files_.end() ? &i->second : nullptr;
}

// -- connections and requests -------------------------------------------------

void server_impl::admit(connection_id id, const tcp::socket& socket) {
  error_code err;
  auto address = socket.remote_endpoint(err).address().to_string();
  std::shared_ptr<http_link> leaving;
  {
    std::lock_guard<std::mutex> guard{mtx_};
    auto oldest = unauthenticated_.admit(id, err ? std::string{} : address);
    if (!oldest)
      return;
    if (auto i = http_.find(*oldest); i != http_.end())
      leaving = i->second.lock();
  }
  if (leaving)
    net::post(leaving->executor(), [leaving] { leaving->shutdown(); });
}

bool server_impl::promote(connection_id id) {
  {
    std::lock_guard<std::mutex> guard{mtx_};
    if (!unauthenticated_.remove(id))
      return false;
  }
  auto n = slots_.fetch_add(1);
  if (n >= cfg_.max_connections) {
    slots_.fetch_sub(1);
    return false;
  }
  return true;
}

void server_impl::release_slot() {
  slots_.fetch_sub(1);
}

void server_impl::leave_unauthenticated(connection_id id) {
  std::lock_guard<std::mutex> guard{mtx_};
  unauthenticated_.remove(id);
}

void server_impl::ws_opened() {
  ctr_.connections_open.fetch_add(1);
  ctr_.connections_total.fetch_add(1, std::memory_order_relaxed);
}

void server_impl::ws_closed() {
  ctr_.connections_open.fetch_sub(1);
}

void server_impl::add(connection_id id, std::weak_ptr<ws_link> ptr) {
  std::lock_guard<std::mutex> guard{mtx_};
  ws_.emplace(id, std::move(ptr));
}

void server_impl::add(connection_id id, std::weak_ptr<http_link> ptr) {
  std::lock_guard<std::mutex> guard{mtx_};
  http_.emplace(id, std::move(ptr));
}

void server_impl::remove_ws(connection_id id) {
  std::lock_guard<std::mutex> guard{mtx_};
  ws_.erase(id);
}

void server_impl::remove_http(connection_id id) {
  std::lock_guard<std::mutex> guard{mtx_};
  http_.erase(id);
}

uint64_t server_impl::add_request(std::weak_ptr<http_link> ptr) {
  std::lock_guard<std::mutex> guard{mtx_};
  auto id = ++next_request_;
  requests_.emplace(id, std::move(ptr));
  return id;
}

bool server_impl::remove_request(uint64_t id) {
  std::lock_guard<std::mutex> guard{mtx_};
  return requests_.erase(id) > 0;
}

void server_impl::set_models(std::vector<served_model> models) {
  auto now = wall_clock_millis() / 1000;
  std::vector<compat::model_entry> entries;
  for (auto& model : models)
    entries.push_back({std::move(model.id), std::move(model.description), now});
  std::lock_guard<std::mutex> guard{models_mtx_};
  models_ = std::move(entries);
}

std::vector<compat::model_entry> server_impl::models() const {
  std::lock_guard<std::mutex> guard{models_mtx_};
  return models_;
}

compat::request_identity
server_impl::compat_identity(const compat::compat_call& call,
                             std::string_view token, std::string_view body) {
  std::lock_guard<std::mutex> guard{recent_mtx_};
  return compat::identity_for(call, token, body, recent_,
                              std::chrono::steady_clock::now(), random_hex(16));
}

// -- listening ----------------------------------------------------------------

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

/// Loads the certificate and key and fixes the oldest protocol version; TLS
/// below 1.2 is never offered.
caf::error server_impl::setup_tls() {
  const auto& tls = cfg_.tls;
  if (!tls.enabled())
    return caf::none;
  auto fail = [](const std::string& what, const error_code& err) {
    return caf::make_error(ec::config_invalid,
                           "gateway.tls: " + what + ": " + err.message());
  };
  tls_ = std::make_unique<ssl::context>(ssl::context::tls_server);
  error_code err;
  tls_->set_options(ssl::context::default_workarounds | ssl::context::no_sslv2
                      | ssl::context::no_sslv3 | ssl::context::no_tlsv1
                      | ssl::context::no_tlsv1_1 | ssl::context::single_dh_use,
                    err);
  auto min = tls.min_version == "1.3" ? TLS1_3_VERSION : TLS1_2_VERSION;
  SSL_CTX_set_min_proto_version(tls_->native_handle(), min);
  if (tls_->use_certificate_chain_file(tls.certificate_file, err))
    return fail("cannot load certificate_file '" + tls.certificate_file + "'",
                err);
  if (tls_->use_private_key_file(tls.key_file, ssl::context::pem, err))
    return fail("cannot load key_file '" + tls.key_file + "'", err);
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
  if (auto bytes = cfg_.socket_send_buffer; bytes > 0)
    socket.set_option(net::socket_base::send_buffer_size(
                        static_cast<int>(std::min<size_t>(bytes, INT_MAX))),
                      ignored);
  auto id = next_id_.fetch_add(1) + 1;
  admit(id, socket);
  if (tls_)
    start_https(this, id, std::move(socket), *tls_);
  else
    start_http(this, id, std::move(socket));
  do_accept();
}

// -- sending and answering ----------------------------------------------------

std::shared_ptr<ws_link> server_impl::find_ws(connection_id conn) const {
  std::lock_guard<std::mutex> guard{mtx_};
  auto i = ws_.find(conn);
  return i != ws_.end() ? i->second.lock() : nullptr;
}

void server_impl::send(connection_id conn, std::string frame) {
  forward(conn, std::move(frame), false);
}

void server_impl::send_answer(connection_id conn, std::string frame) {
  forward(conn, std::move(frame), true);
}

bool server_impl::connected(connection_id conn) const {
  auto session = find_ws(conn);
  return !stopping() && session && session->accepting();
}

/// Hands a frame to its connection's strand, counted against the
/// connection's queue from here on: frames on their way take memory too.
void server_impl::forward(connection_id conn, std::string frame, bool answer) {
  if (stopping())
    return;
  auto session = find_ws(conn);
  if (!session || !session->accepting())
    return;
  // Runs inline when called from this connection's own strand (the handler
  // answering a frame), otherwise queues a small task on it.
  auto ex = session->executor();
  if (!session->reserve(frame.size())) {
    net::dispatch(ex, [s = std::move(session)] { s->overflow(); });
    return;
  }
  net::dispatch(ex, [s = std::move(session), f = std::move(frame),
                     answer]() mutable { s->deliver(std::move(f), answer); });
}

void server_impl::respond(uint64_t request, unsigned status,
                          std::string content_type, std::string body) {
  if (stopping())
    return;
  std::shared_ptr<http_link> session;
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

// -- stopping -----------------------------------------------------------------

std::vector<std::shared_ptr<ws_link>> server_impl::live_ws() {
  std::vector<std::shared_ptr<ws_link>> result;
  std::lock_guard<std::mutex> guard{mtx_};
  for (auto& kvp : ws_)
    if (auto ptr = kvp.second.lock())
      result.push_back(std::move(ptr));
  return result;
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
  std::vector<std::shared_ptr<http_link>> http;
  {
    std::lock_guard<std::mutex> guard{mtx_};
    for (auto& kvp : http_)
      if (auto ptr = kvp.second.lock())
        http.push_back(std::move(ptr));
  }
  for (auto& s : live_ws()) {
    net::post(s->executor(), [s] {
      s->start_close(websocket::close_code::going_away, "server shutting down");
    });
  }
  for (auto& s : http)
    net::post(s->executor(), [s] { s->shutdown(); });
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
  for (auto& s : live_ws())
    s->finish();
}

} // namespace keel::gateway

namespace keel {

caf::expected<std::unique_ptr<ws_server>>
ws_server::start(const gateway_config& cfg,
                 std::shared_ptr<gateway_handler> handler,
                 const std::string& node_name, static_files files) {
  if (!handler)
    return caf::make_error(ec::unavailable, "ws_server: no handler");
  try {
    auto srv = std::make_unique<gateway::server_impl>(
      cfg, std::move(handler), node_name, std::move(files));
    if (auto err = srv->setup_tls())
      return err;
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
