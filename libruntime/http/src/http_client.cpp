#include "keel/http_client.hpp"

#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <deque>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_set>
#include <vector>

#include <boost/asio/bind_executor.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>

#include "keel/error.hpp"
#include "keel/text.hpp"
#include "keel/tls_client.hpp"

namespace keel {

namespace {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
namespace ssl = net::ssl;
using tcp = net::ip::tcp;
using error_code = boost::system::error_code;
using clock_type = std::chrono::steady_clock;
using strand_type = net::strand<net::io_context::executor_type>;
using namespace std::chrono_literals;

/// Idle connections older than this are closed instead of reused: servers
/// drop idle keep-alive connections after a while (often 60 s or more, Node
/// after 5 s; the liveness check catches those).
constexpr auto idle_keep = 30s;

/// Read buffers of idle connections above this are released.
constexpr size_t idle_buffer_bytes = 64 * 1024;

/// After a body reader had enough, time the server gets to end the HTTP
/// body (so that the connection can be reused) before the response is
/// delivered anyway and the connection closed.
constexpr auto finish_grace = 1s;

/// Maps a socket, resolver or TLS error to what callers tell apart.
http_error error_of(const error_code& err) {
  if (err == net::error::connection_refused)
    return http_error::connect_refused;
  if (err == net::error::host_not_found
      || err == net::error::host_not_found_try_again
      || err == net::error::no_data || err == net::error::no_recovery
      || err == net::error::service_not_found)
    return http_error::dns;
  if (err == net::error::timed_out)
    return http_error::timeout;
  // A peer closing without close_notify is a cut connection, not a TLS
  // problem.
  if (err == ssl::error::stream_truncated)
    return http_error::reset;
  if (err.category() == net::error::get_ssl_category())
    return http_error::tls;
  if (err == net::error::connection_reset || err == net::error::broken_pipe
      || err == net::error::eof || err == net::error::connection_aborted
      || err == http::error::end_of_stream
      || err == http::error::partial_message)
    return http_error::reset;
  return http_error::other;
}

/// True for the errors of a keep-alive connection the server had already
/// closed when we sent on it.
bool stale_connection_error(const error_code& err) {
  return error_of(err) == http_error::reset;
}

/// One keep-alive connection (plain TCP or TLS) with its read buffer.
struct connection {
  connection(net::io_context& ioc, ssl::context* tls_ctx) {
    if (tls_ctx != nullptr)
      tls.emplace(ioc, *tls_ctx);
    else
      plain.emplace(ioc);
  }

  tcp::socket& socket() {
    return tls ? tls->next_layer() : *plain;
  }

  /// Calls `f` with the stream to read and write.
  template <class F>
  void with_stream(F&& f) {
    if (tls)
      f(*tls);
    else
      f(*plain);
  }

  void close() {
    error_code ignored;
    socket().close(ignored);
  }

  /// Checks without blocking that the server has neither closed the idle
  /// connection nor sent anything on it (a TLS close_notify, garbage).
  bool still_open() {
    if (!socket().is_open())
      return false;
    char byte;
    auto n = ::recv(socket().native_handle(), &byte, 1,
                    MSG_PEEK | MSG_DONTWAIT);
    return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
  }

  std::optional<tcp::socket> plain;
  std::optional<ssl::stream<tcp::socket>> tls;
  beast::flat_buffer buffer;
  clock_type::time_point idle_since;
};

class endpoint_impl;
class exchange;

} // namespace

// -- I/O threads --------------------------------------------------------------

struct http_io::impl : std::enable_shared_from_this<http_io::impl> {
  net::io_context ioc;
  net::executor_work_guard<net::io_context::executor_type> work{
    net::make_work_guard(ioc)};
  std::vector<std::thread> threads;
  std::mutex mtx;
  bool stopping = false;
  std::vector<std::weak_ptr<endpoint_impl>> endpoints;

  /// Registers an endpoint for cancellation at shutdown; false if stopping.
  bool add(const std::shared_ptr<endpoint_impl>& ep) {
    std::lock_guard<std::mutex> guard{mtx};
    if (stopping)
      return false;
    endpoints.erase(std::remove_if(endpoints.begin(), endpoints.end(),
                                   [](auto& x) { return x.expired(); }),
                    endpoints.end());
    endpoints.push_back(ep);
    return true;
  }

  void shutdown();
};

namespace {

// -- endpoints ----------------------------------------------------------------

class endpoint_impl : public http_endpoint,
                      public std::enable_shared_from_this<endpoint_impl> {
public:
  endpoint_impl(std::shared_ptr<http_io::impl> io, http_endpoint_config cfg,
                std::unique_ptr<ssl::context> tls_ctx)
    : io_(std::move(io)),
      cfg_(std::move(cfg)),
      port_str_(std::to_string(cfg_.url.port)),
      tls_ctx_(std::move(tls_ctx)),
      max_active_(std::max<size_t>(1, cfg_.max_concurrency)) {
    // nop
  }

  http_canceller send(http_client_request req,
                      http_result_handler on_done) override;

  const http_endpoint_config& config() const override {
    return cfg_;
  }

  // -- for exchanges ----------------------------------------------------------

  net::io_context& ioc() {
    return io_->ioc;
  }

  const http_url& url() const {
    return cfg_.url;
  }

  const std::string& port_str() const {
    return port_str_;
  }

  ssl::context* tls_ctx() {
    return tls_ctx_.get();
  }

  /// Takes the most recently used live idle connection, if any.
  std::unique_ptr<connection> take_idle() {
    auto now = clock_type::now();
    std::lock_guard<std::mutex> guard{mtx_};
    while (!idle_.empty()) {
      auto conn = std::move(idle_.back());
      idle_.pop_back();
      if (now - conn->idle_since < idle_keep && conn->still_open())
        return conn;
      conn->close();
    }
    return nullptr;
  }

  /// Returns a connection whose last answer was read completely.
  void put_idle(std::unique_ptr<connection> conn) {
    if (conn->buffer.size() > 0) {
      // Bytes beyond the answer: the connection is out of step.
      conn->close();
      return;
    }
    if (conn->buffer.capacity() > idle_buffer_bytes)
      conn->buffer.shrink_to_fit();
    conn->idle_since = clock_type::now();
    std::lock_guard<std::mutex> guard{mtx_};
    if (stopping_) {
      conn->close();
      return;
    }
    if (idle_.size() >= max_active_) {
      idle_.front()->close();
      idle_.erase(idle_.begin());
    }
    idle_.push_back(std::move(conn));
  }

  /// Gives up the exchange's slot or place in the queue, starting the next
  /// waiting exchange.
  void leave(exchange& x);

  /// Forgets an exchange that is completely done (its connection too).
  void forget(const std::shared_ptr<exchange>& x) {
    std::lock_guard<std::mutex> guard{mtx_};
    live_.erase(x);
  }

  /// Cancels every exchange and closes idle connections (http_io shutdown).
  void shutdown();

private:
  // Declared first: destroyed last, after the sockets that use it.
  std::shared_ptr<http_io::impl> io_;
  http_endpoint_config cfg_;
  std::string port_str_;
  std::unique_ptr<ssl::context> tls_ctx_;
  size_t max_active_;

  // Guards everything below. Never held while running a handler.
  std::mutex mtx_;
  bool stopping_ = false;
  size_t active_ = 0;
  std::deque<std::shared_ptr<exchange>> waiting_;
  std::vector<std::unique_ptr<connection>> idle_;
  std::unordered_set<std::shared_ptr<exchange>> live_;
};

// -- exchanges ----------------------------------------------------------------

/// One exchange: waits for a slot, gets a connection (pooled or new),
/// writes the request, reads the answer (collected or streamed to the
/// reader) and delivers the result exactly once. Every step runs on the
/// exchange's strand.
class exchange : public std::enable_shared_from_this<exchange> {
public:
  exchange(std::shared_ptr<endpoint_impl> ep, http_client_request req,
           http_result_handler on_done)
    : ep_(std::move(ep)),
      strand_(net::make_strand(ep_->ioc())),
      timer_(strand_),
      budget_cut_(req.time_budget.count() > 0
                  && req.time_budget < cfg().total_timeout),
      limit_(budget_cut_ ? req.time_budget : cfg().total_timeout),
      deadline_(clock_type::now() + limit_),
      budget_owner_(std::move(req.budget_owner)),
      reader_(std::move(req.reader)),
      on_done_(std::move(on_done)) {
    build_request(req);
  }

  ~exchange() {
    // Only reached undelivered if the I/O context dropped our handlers.
    if (!delivered_)
      deliver(failure(http_error::cancelled, "call to " + host()
                                               + " abandoned: the HTTP "
                                                 "client shut down"));
  }

  // -- guarded by the endpoint's mutex ---------------------------------------

  bool queued = false;
  bool holds_slot = false;

  // -- entry points -----------------------------------------------------------

  /// Arms the total timeout and, with `start`, begins at once.
  void begin(bool start) {
    net::post(strand_, [self = shared_from_this(), start] {
      self->arm(self->deadline_);
      if (start)
        self->start();
    });
  }

  /// Begins once a slot is free (called from another exchange's strand).
  void resume() {
    net::post(strand_, [self = shared_from_this()] { self->start(); });
  }

  /// Fails the exchange at once, closing its connection (http_io shutdown,
  /// or its caller gave up); `why` ends the failure's message.
  void cancel(std::string why) {
    net::post(strand_, [self = shared_from_this(), why = std::move(why)] {
      if (self->phase_ == phase::finishing) {
        // The reader has its answer; only the end of the body is missing.
        self->complete();
        return;
      }
      self->fail(
        self->failure(http_error::cancelled,
                      "call to " + self->host() + " cancelled: " + why));
    });
  }

  /// Fails an exchange that never got going (the client is shut down).
  /// Runs on the caller's thread: nothing else knows the exchange yet.
  void reject() {
    deliver(
      failure(http_error::cancelled,
              "call to " + host() + " refused: the HTTP client is shut down"));
  }

private:
  enum class phase {
    queued,
    connecting,
    sending,
    waiting,
    reading,
    /// The reader had enough; reading the end of the body.
    finishing,
    finished,
  };

  const http_endpoint_config& cfg() const {
    return ep_->config();
  }

  const std::string& host() const {
    return ep_->url().authority;
  }

  template <class F>
  auto bind(F f) {
    return net::bind_executor(strand_, std::move(f));
  }

  void build_request(http_client_request& req) {
    auto verb = http::string_to_verb(req.method);
    req_.method(verb == http::verb::unknown ? http::verb::post : verb);
    req_.target(req.target.empty() ? ep_->url().target : req.target);
    req_.version(11);
    req_.set(http::field::host, ep_->url().host_header);
    req_.set(http::field::user_agent, "keel");
    for (auto& [key, value] : req.headers)
      req_.set(key, value);
    req_.body() = std::move(req.body);
    req_.prepare_payload();
  }

  // -- timers -----------------------------------------------------------------

  /// The limit a timed-out exchange ran into, for its message.
  std::string limit_text() const {
    if (budget_cut_)
      return "the " + human_duration(limit_) + " left of " + budget_owner_;
    return "the total timeout of " + human_duration(limit_);
  }

  void arm(clock_type::time_point at) {
    timer_.expires_at(std::min(at, deadline_));
    timer_.async_wait(bind([self = shared_from_this()](error_code err) {
      if (err || self->timer_.expiry() > clock_type::now())
        return; // Cancelled or re-armed.
      self->on_timeout();
    }));
  }

  void on_timeout() {
    auto total = clock_type::now() >= deadline_;
    std::string what;
    switch (phase_) {
      case phase::finished: return;
      case phase::finishing: complete(); return;
      case phase::queued:
        what = "no free slot for " + host() + " within " + limit_text()
               + " (max_concurrency " + std::to_string(cfg().max_concurrency)
               + ")";
        break;
      case phase::connecting:
        what = total ? "connecting to " + host() + " exceeded " + limit_text()
                     : "connecting to " + host() + " timed out after "
                         + human_duration(cfg().connect_timeout);
        break;
      case phase::sending:
        what = "sending the request to " + host() + " exceeded " + limit_text();
        break;
      case phase::waiting:
        what = total ? "no answer from " + host() + " within " + limit_text()
                     : "no answer from " + host() + " within "
                         + human_duration(cfg().first_byte_timeout)
                         + " of sending the request";
        break;
      case phase::reading:
        what = "the answer from " + host() + " did not complete within "
               + limit_text();
        break;
    }
    fail(failure(http_error::timeout, std::move(what)));
  }

  // -- connecting -------------------------------------------------------------

  void start() {
    if (phase_ != phase::queued)
      return; // Already failed (e.g. timed out while queued).
    conn_ = ep_->take_idle();
    if (conn_) {
      reused_ = true;
      send();
    } else {
      connect();
    }
  }

  void connect() {
    phase_ = phase::connecting;
    arm(clock_type::now() + cfg().connect_timeout);
    conn_ = std::make_unique<connection>(ep_->ioc(), ep_->tls_ctx());
    auto& host_name = ep_->url().host;
    error_code err;
    auto addr = net::ip::make_address(host_name, err);
    if (!err) {
      // An address needs no resolver (and no resolver thread).
      endpoints_.assign(1, tcp::endpoint{addr, ep_->url().port});
      connect_to_endpoints();
      return;
    }
    resolver_.emplace(strand_);
    resolver_->async_resolve(
      host_name, ep_->port_str(),
      bind([self = shared_from_this()](error_code err,
                                       tcp::resolver::results_type results) {
        self->on_resolve(err, std::move(results));
      }));
  }

  void on_resolve(error_code err, tcp::resolver::results_type results) {
    if (phase_ != phase::connecting)
      return;
    if (err) {
      fail(failure(err,
                   "cannot resolve " + ep_->url().host + ": " + err.message()));
      return;
    }
    endpoints_.assign(results.begin(), results.end());
    connect_to_endpoints();
  }

  void connect_to_endpoints() {
    net::async_connect(
      conn_->socket(), endpoints_,
      bind([self = shared_from_this()](error_code err, const tcp::endpoint&) {
        self->on_connect(err);
      }));
  }

  void on_connect(error_code err) {
    if (phase_ != phase::connecting)
      return;
    if (err) {
      auto what = err == net::error::connection_refused
                    ? "connection refused by " + host()
                    : "cannot connect to " + host() + ": " + err.message();
      fail(failure(err, std::move(what)));
      return;
    }
    conn_->socket().set_option(tcp::no_delay(true), err);
    if (!conn_->tls) {
      send();
      return;
    }
    auto& stream = *conn_->tls;
    set_tls_peer(stream, ep_->url().host);
    stream.async_handshake(ssl::stream_base::client,
                           bind([self = shared_from_this()](error_code err) {
                             self->on_handshake(err);
                           }));
  }

  void on_handshake(error_code err) {
    if (phase_ != phase::connecting)
      return;
    if (err) {
      auto what = "TLS handshake with " + host() + " failed: "
                  + tls_failure_reason(err, conn_->tls->native_handle());
      fail(failure(err, std::move(what)));
      return;
    }
    send();
  }

  /// Drops a pooled connection that turned out dead and connects anew.
  void retry_fresh() {
    retried_ = true;
    reused_ = false;
    conn_->close();
    conn_.reset(); // No operation is pending on it: we are in its handler.
    connect();
  }

  // -- exchanging -------------------------------------------------------------

  void send() {
    phase_ = phase::sending;
    arm(deadline_);
    header_seen_ = false;
    broken_ = false;
    // Not eager: an eager parser asks for more input after each chunk's
    // trailing CRLF, so a read would complete only with the next chunk and
    // a streamed body would lag behind.
    // The body limit counts every body byte the parser reads, a streamed
    // body's included (its pieces are handed on and dropped as they come):
    // an answer past `max_body_bytes` fails before more of it is read.
    parser_.emplace();
    parser_->body_limit(cfg().max_body_bytes);
    conn_->with_stream([this](auto& stream) {
      http::async_write(
        stream, req_, bind([self = shared_from_this()](error_code err, size_t) {
          self->on_write(err);
        }));
    });
  }

  void on_write(error_code err) {
    if (phase_ != phase::sending)
      return;
    if (err) {
      if (reused_ && !retried_) {
        retry_fresh();
        return;
      }
      fail(failure(err, "sending the request to " + host()
                          + " failed: " + err.message()));
      return;
    }
    phase_ = phase::waiting;
    arm(clock_type::now() + cfg().first_byte_timeout);
    read();
  }

  void read() {
    conn_->with_stream([this](auto& stream) {
      http::async_read_some(
        stream, conn_->buffer, *parser_,
        bind([self = shared_from_this()](error_code err, size_t) {
          self->on_read(err);
        }));
    });
  }

  void on_read(error_code err) {
    if (phase_ == phase::finishing) {
      on_finishing(err);
      return;
    }
    if (phase_ != phase::waiting && phase_ != phase::reading)
      return;
    if (phase_ == phase::waiting && parser_->got_some()) {
      phase_ = phase::reading;
      arm(deadline_);
    }
    if (err)
      broken_ = true;
    if (parser_->is_header_done() && !header_seen_)
      on_header();
    if (header_seen_)
      hand_on_body();
    if (phase_ != phase::reading && phase_ != phase::waiting)
      return; // The reader stopped or had enough.
    if (err) {
      on_read_error(err);
      return;
    }
    if (parser_->is_done()) {
      complete();
      return;
    }
    read();
  }

  void on_header() {
    header_seen_ = true;
    auto& res = parser_->get();
    head_.status = res.result_int();
    for (auto& field : res)
      head_.headers.emplace_back(std::string{field.name_string()},
                                 std::string{field.value()});
    streaming_ = reader_.wants && reader_.on_body && reader_.wants(head_);
  }

  /// Hands newly arrived body bytes of a streamed answer to the reader.
  void hand_on_body() {
    if (!streaming_)
      return;
    auto& body = parser_->get().body();
    if (body.empty())
      return;
    body_bytes_ += body.size();
    auto step = reader_.on_body(body);
    body.clear();
    if (step == body_step::stop) {
      broken_ = true; // Closes the connection.
      complete();
    } else if (step == body_step::enough) {
      if (parser_->is_done() || broken_) {
        complete();
        return;
      }
      // Deliver with the end of the body, so that the connection is back
      // in the pool before the caller can start the next exchange.
      phase_ = phase::finishing;
      arm(clock_type::now() + finish_grace);
      read();
    }
  }

  void on_read_error(const error_code& err) {
    if (err == http::error::body_limit) {
      auto f = failure(http_error::too_large,
                       "unusable answer from " + host()
                         + ": the answer is larger than "
                         + std::to_string(cfg().max_body_bytes) + " bytes");
      f.partial = answer_so_far();
      fail(std::move(f));
      return;
    }
    if (!parser_->got_some() && reused_ && !retried_
        && stale_connection_error(err)) {
      // The server closed the pooled connection before it saw our request.
      retry_fresh();
      return;
    }
    if (!header_seen_) {
      auto what = parser_->got_some()
                    ? "the answer from " + host()
                        + " broke off: " + err.message()
                    : host() + " closed the connection without answering: "
                        + err.message();
      fail(failure(err, std::move(what)));
      return;
    }
    auto received = streaming_ ? body_bytes_ : parser_->get().body().size();
    auto f = failure(err, "the answer from " + host() + " broke off after "
                            + std::to_string(received)
                            + " bytes: " + err.message());
    f.partial = answer_so_far();
    fail(std::move(f));
  }

  void on_finishing(const error_code& err) {
    if (err)
      broken_ = true;
    parser_->get().body().clear();
    if (err || parser_->is_done())
      complete();
    else
      read();
  }

  // -- results ----------------------------------------------------------------

  http_failure failure(http_error kind, std::string message) {
    http_failure f;
    f.error = kind;
    f.message = std::move(message);
    return f;
  }

  http_failure failure(const error_code& err, std::string message) {
    auto f = failure(error_of(err), std::move(message));
    f.cause = err.message();
    return f;
  }

  /// The head and, unless streamed, the body read so far.
  http_client_response answer_so_far() {
    auto result = std::move(head_);
    if (header_seen_ && !streaming_)
      result.body = std::move(parser_->get().body());
    return result;
  }

  /// True if the answer was read completely from a connection that stays
  /// open, so the next exchange may use it.
  bool reusable() const {
    return !broken_ && parser_->is_done() && parser_->get().keep_alive();
  }

  /// Delivers the response; pools the connection if its answer was read
  /// completely.
  void complete() {
    phase_ = phase::finished;
    timer_.cancel();
    if (reusable())
      ep_->put_idle(std::move(conn_));
    else
      conn_->close();
    auto result = answer_so_far();
    ep_->leave(*this);
    ep_->forget(shared_from_this());
    deliver(std::move(result));
  }

  void fail(http_failure f) {
    if (delivered_)
      return;
    if (conn_)
      conn_->close(); // A pooled connection was moved out before.
    phase_ = phase::finished;
    timer_.cancel();
    if (resolver_)
      resolver_->cancel();
    ep_->leave(*this);
    ep_->forget(shared_from_this());
    deliver(std::move(f));
  }

  void deliver(http_result result) {
    if (delivered_)
      return;
    delivered_ = true;
    auto handler = std::move(on_done_);
    on_done_ = nullptr;
    reader_ = body_reader{};
    if (!handler)
      return;
    try {
      handler(std::move(result));
    } catch (...) {
      // Handlers must not throw; nothing sensible to do here.
    }
  }

  std::shared_ptr<endpoint_impl> ep_;
  strand_type strand_;
  net::steady_timer timer_;
  std::optional<tcp::resolver> resolver_;
  std::vector<tcp::endpoint> endpoints_;
  /// True if the caller's time budget, not the total timeout, limits us.
  bool budget_cut_;
  std::chrono::milliseconds limit_;
  clock_type::time_point deadline_;
  std::string budget_owner_;
  phase phase_ = phase::queued;
  http::request<http::string_body> req_;
  std::optional<http::response_parser<http::string_body>> parser_;
  std::unique_ptr<connection> conn_;
  bool reused_ = false;
  bool retried_ = false;
  bool header_seen_ = false;
  /// A read failed or the reader stopped: the connection cannot be reused.
  bool broken_ = false;
  /// The status and headers, once the header arrived.
  http_client_response head_;
  bool streaming_ = false;
  /// Body bytes handed to the reader.
  size_t body_bytes_ = 0;
  bool delivered_ = false;
  body_reader reader_;
  http_result_handler on_done_;
};

http_canceller endpoint_impl::send(http_client_request req,
                                   http_result_handler on_done) {
  auto x = std::make_shared<exchange>(shared_from_this(), std::move(req),
                                      std::move(on_done));
  http_canceller canceller
    = [weak = std::weak_ptr<exchange>{x}](std::string why) {
        if (auto ptr = weak.lock())
          ptr->cancel(std::move(why));
      };
  {
    std::lock_guard<std::mutex> guard{mtx_};
    if (!stopping_) {
      live_.insert(x);
      bool start = active_ < max_active_;
      if (start) {
        ++active_;
        x->holds_slot = true;
      } else {
        x->queued = true;
        waiting_.push_back(x);
      }
      x->begin(start);
      return canceller;
    }
  }
  // Stopped: fail here, on the caller's thread (there are no I/O threads).
  x->reject();
  return canceller;
}

void endpoint_impl::leave(exchange& x) {
  std::shared_ptr<exchange> next;
  {
    std::lock_guard<std::mutex> guard{mtx_};
    if (x.queued) {
      x.queued = false;
      auto i = std::find_if(waiting_.begin(), waiting_.end(),
                            [&](auto& y) { return y.get() == &x; });
      if (i != waiting_.end())
        waiting_.erase(i);
      return;
    }
    if (!x.holds_slot)
      return;
    x.holds_slot = false;
    if (waiting_.empty()) {
      --active_;
      return;
    }
    next = std::move(waiting_.front());
    waiting_.pop_front();
    next->queued = false;
    next->holds_slot = true;
  }
  next->resume();
}

void endpoint_impl::shutdown() {
  std::vector<std::shared_ptr<exchange>> exchanges;
  std::vector<std::unique_ptr<connection>> idle;
  {
    std::lock_guard<std::mutex> guard{mtx_};
    stopping_ = true;
    exchanges.assign(live_.begin(), live_.end());
    idle.swap(idle_);
  }
  for (auto& conn : idle)
    conn->close();
  for (auto& x : exchanges)
    x->cancel("the HTTP client is shutting down");
}

} // namespace

void http_io::impl::shutdown() {
  std::vector<std::shared_ptr<endpoint_impl>> eps;
  {
    std::lock_guard<std::mutex> guard{mtx};
    stopping = true;
    for (auto& weak : endpoints)
      if (auto ep = weak.lock())
        eps.push_back(std::move(ep));
    endpoints.clear();
  }
  for (auto& ep : eps)
    ep->shutdown();
  eps.clear();
  // The threads return once every cancelled operation has completed.
  work.reset();
  for (auto& t : threads) {
    if (t.get_id() == std::this_thread::get_id())
      t.detach();
    else if (t.joinable())
      t.join();
  }
  threads.clear();
}

http_io::http_io(size_t threads) : impl_(std::make_shared<impl>()) {
  auto n = std::max<size_t>(1, threads);
  impl_->threads.reserve(n);
  for (size_t i = 0; i < n; ++i)
    impl_->threads.emplace_back([io = impl_.get()] {
      for (;;) {
        try {
          io->ioc.run();
          return;
        } catch (...) {
          // A handler threw (ours do not); keep serving the others.
        }
      }
    });
}

http_io::~http_io() {
  impl_->shutdown();
}

http_endpoint::~http_endpoint() {
  // nop
}

namespace {

caf::expected<std::shared_ptr<http_endpoint>>
make_endpoint(http_io& io, http_endpoint_config cfg) {
  std::unique_ptr<ssl::context> tls_ctx;
  if (cfg.url.tls) {
    auto ctx = make_tls_client_context(cfg.ca_file);
    if (!ctx)
      return caf::make_error(ec::config_invalid,
                             cfg.name
                               + ".ca_file: " + error_message(ctx.error()));
    tls_ctx = std::move(*ctx);
  }
  auto& impl = io.get_impl();
  auto ep = std::make_shared<endpoint_impl>(impl.shared_from_this(),
                                            std::move(cfg), std::move(tls_ctx));
  if (!impl.add(ep))
    return caf::make_error(ec::unavailable, "the HTTP client is shut down");
  return std::shared_ptr<http_endpoint>{std::move(ep)};
}

} // namespace

caf::expected<std::shared_ptr<http_endpoint>>
http_endpoint::make(http_io& io, http_endpoint_config cfg) {
  auto name = cfg.name;
  try {
    return make_endpoint(io, std::move(cfg));
  } catch (const std::exception& e) {
    // OpenSSL could not set up a context, or memory ran out.
    return caf::make_error(ec::config_invalid,
                           name
                             + ": cannot set up the HTTP client: " + e.what());
  }
}

} // namespace keel
