#include "keel/llm_client.hpp"

#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <deque>
#include <mutex>
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

#include "keel/llm_wire.hpp"
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

/// After a streamed answer's terminal event, time the server gets to end
/// the HTTP body (so that the connection can be reused) before the answer
/// is delivered anyway and the connection closed.
constexpr auto finish_grace = 1s;

/// Maps a socket, resolver or TLS error to what `classify` understands.
transport_error transport_of(const error_code& err) {
  if (err == net::error::connection_refused)
    return transport_error::connect_refused;
  if (err == net::error::host_not_found
      || err == net::error::host_not_found_try_again
      || err == net::error::no_data || err == net::error::no_recovery
      || err == net::error::service_not_found)
    return transport_error::dns;
  if (err == net::error::timed_out)
    return transport_error::timeout;
  // A peer closing without close_notify is a cut connection, not a TLS
  // problem.
  if (err == ssl::error::stream_truncated)
    return transport_error::reset;
  if (err.category() == net::error::get_ssl_category())
    return transport_error::tls;
  if (err == net::error::connection_reset || err == net::error::broken_pipe
      || err == net::error::eof || err == net::error::connection_aborted
      || err == http::error::end_of_stream
      || err == http::error::partial_message)
    return transport_error::reset;
  return transport_error::other;
}

/// True for the errors of a keep-alive connection the server had already
/// closed when we sent on it.
bool stale_connection_error(const error_code& err) {
  return transport_of(err) == transport_error::reset;
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
class call;

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

// -- endpoints and calls ------------------------------------------------------

using header_list = std::vector<std::pair<std::string, std::string>>;

class endpoint_impl : public llm_endpoint,
                      public post_endpoint,
                      public std::enable_shared_from_this<endpoint_impl> {
public:
  endpoint_impl(std::shared_ptr<http_io::impl> io, provider_config cfg,
                wire::api api, wire::base_url url,
                std::unique_ptr<ssl::context> tls_ctx)
    : io_(std::move(io)),
      cfg_(std::move(cfg)),
      api_(api),
      url_(std::move(url)),
      port_str_(std::to_string(url_.port)),
      tls_ctx_(std::move(tls_ctx)),
      max_active_(std::max<size_t>(1, cfg_.max_concurrency)) {
    // nop
  }

  call_canceller complete(const completion_request& req, uint32_t max_tokens,
                          delta_handler on_delta,
                          result_handler on_done) override;

  call_canceller post(post_request req, result_handler on_done) override;

  const std::string& name() const override {
    return cfg_.name;
  }

  // -- for calls --------------------------------------------------------------

  net::io_context& ioc() {
    return io_->ioc;
  }

  const provider_config& cfg() const {
    return cfg_;
  }

  wire::api api() const {
    return api_;
  }

  const wire::base_url& url() const {
    return url_;
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

  /// Gives up the call's slot or place in the queue, starting the next
  /// waiting call.
  void leave(call& c);

  /// Forgets a call that is completely done (its connection too).
  void forget(const std::shared_ptr<call>& c) {
    std::lock_guard<std::mutex> guard{mtx_};
    live_.erase(c);
  }

  /// Cancels every call and closes idle connections (http_io shutdown).
  void shutdown();

private:
  /// Starts `c` now or queues it for a slot; fails it at once if stopped.
  call_canceller launch(const std::shared_ptr<call>& c);

  // Declared first: destroyed last, after the sockets that use it.
  std::shared_ptr<http_io::impl> io_;
  provider_config cfg_;
  wire::api api_;
  wire::base_url url_;
  std::string port_str_;
  std::unique_ptr<ssl::context> tls_ctx_;
  size_t max_active_;

  // Guards everything below. Never held while running a handler.
  std::mutex mtx_;
  bool stopping_ = false;
  size_t active_ = 0;
  std::deque<std::shared_ptr<call>> waiting_;
  std::vector<std::unique_ptr<connection>> idle_;
  std::unordered_set<std::shared_ptr<call>> live_;
};

/// One call: waits for a slot, gets a connection (pooled or new), writes the
/// request, reads the answer (streamed or not) and delivers the result
/// exactly once. Every step runs on the call's strand.
class call : public std::enable_shared_from_this<call> {
public:
  call(std::shared_ptr<endpoint_impl> ep, std::string body, header_list headers,
       std::chrono::milliseconds time_budget, delta_handler on_delta,
       result_handler on_done)
    : ep_(std::move(ep)),
      strand_(net::make_strand(ep_->ioc())),
      timer_(strand_),
      budget_cut_(time_budget.count() > 0
                  && time_budget < ep_->cfg().total_timeout),
      limit_(budget_cut_ ? time_budget : ep_->cfg().total_timeout),
      deadline_(clock_type::now() + limit_),
      stream_(ep_->cfg().stream),
      decoder_(ep_->api()),
      on_delta_(std::move(on_delta)),
      on_done_(std::move(on_done)) {
    build_request(std::move(body), headers);
  }

  ~call() {
    // Only reached undelivered if the I/O context dropped our handlers.
    if (!delivered_)
      deliver(failure(transport_error::other, "call to " + host()
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

  /// Begins once a slot is free (called from another call's strand).
  void resume() {
    net::post(strand_, [self = shared_from_this()] { self->start(); });
  }

  /// Fails the call at once, closing its connection (http_io shutdown, or
  /// its caller gave up); `why` ends the failure's message.
  void cancel(std::string why) {
    net::post(strand_, [self = shared_from_this(), why = std::move(why)] {
      if (self->phase_ == phase::finishing) {
        // The answer is complete; only the end of the body is missing.
        self->succeed(std::move(self->decoder_.result()));
        return;
      }
      self->fail(
        self->failure(transport_error::other,
                      "call to " + self->host() + " cancelled: " + why));
    });
  }

  /// Fails a call that never got going (the client is shut down). Runs on
  /// the caller's thread: nothing else knows the call yet.
  void reject() {
    deliver(
      failure(transport_error::other,
              "call to " + host() + " refused: the HTTP client is shut down"));
  }

private:
  enum class phase {
    queued,
    connecting,
    sending,
    waiting,
    reading,
    /// A stream's terminal event arrived; reading the end of the body.
    finishing,
    finished,
  };

  const std::string& host() const {
    return ep_->url().authority;
  }

  template <class F>
  auto bind(F f) {
    return net::bind_executor(strand_, std::move(f));
  }

  void build_request(std::string body, const header_list& headers) {
    auto& cfg = ep_->cfg();
    req_.method(http::verb::post);
    req_.target(ep_->url().target);
    req_.version(11);
    req_.set(http::field::host, ep_->url().host_header);
    req_.set(http::field::user_agent, "keel");
    req_.set(http::field::content_type, "application/json");
    req_.set(http::field::accept,
             stream_ ? "text/event-stream" : "application/json");
    if (ep_->api() == wire::api::openai) {
      if (!cfg.api_key.empty())
        req_.set(http::field::authorization, "Bearer " + cfg.api_key);
    } else if (ep_->api() == wire::api::anthropic) {
      if (!cfg.api_key.empty())
        req_.set("x-api-key", cfg.api_key);
      req_.set("anthropic-version", "2023-06-01");
    }
    for (auto& [key, value] : cfg.headers)
      req_.set(key, value);
    for (auto& [key, value] : headers)
      req_.set(key, value);
    req_.body() = std::move(body);
    req_.prepare_payload();
  }

  // -- timers -----------------------------------------------------------------

  /// The limit a timed-out call ran into, for its message.
  std::string limit_text() const {
    if (budget_cut_)
      return "the " + human_duration(limit_) + " left of its turn";
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
    auto& cfg = ep_->cfg();
    auto total = clock_type::now() >= deadline_;
    std::string what;
    switch (phase_) {
      case phase::finished: return;
      case phase::finishing: succeed(std::move(decoder_.result())); return;
      case phase::queued:
        what = "no free slot for " + host() + " within " + limit_text()
               + " (max_concurrency " + std::to_string(cfg.max_concurrency)
               + ")";
        break;
      case phase::connecting:
        what = total ? "connecting to " + host() + " exceeded " + limit_text()
                     : "connecting to " + host() + " timed out after "
                         + human_duration(cfg.connect_timeout);
        break;
      case phase::sending:
        what = "sending the request to " + host() + " exceeded " + limit_text();
        break;
      case phase::waiting:
        what = total ? "no answer from " + host() + " within " + limit_text()
                     : "no answer from " + host() + " within "
                         + human_duration(cfg.first_byte_timeout)
                         + " of sending the request";
        break;
      case phase::reading:
        what = "the answer from " + host() + " did not complete within "
               + limit_text();
        break;
    }
    fail(failure(transport_error::timeout, std::move(what)));
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
    arm(clock_type::now() + ep_->cfg().connect_timeout);
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
    // streamed text would lag behind.
    // The body limit counts every body byte the parser reads, a streamed
    // answer's included (its events are consumed and dropped as they come):
    // an answer past `max_response_bytes` fails before more of it is read.
    parser_.emplace();
    parser_->body_limit(ep_->cfg().max_response_bytes);
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
    arm(clock_type::now() + ep_->cfg().first_byte_timeout);
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
      consume_body();
    if (phase_ != phase::reading && phase_ != phase::waiting)
      return; // The stream failed or ended.
    if (err) {
      on_read_error(err);
      return;
    }
    if (parser_->is_done()) {
      on_message_done();
      return;
    }
    read();
  }

  void on_header() {
    header_seen_ = true;
    auto& res = parser_->get();
    status_ = res.result_int();
    if (auto ms = res["retry-after-ms"]; !ms.empty()) {
      try {
        retry_after_ = std::chrono::milliseconds{
          static_cast<int64_t>(std::stod(std::string{ms}))};
      } catch (const std::exception&) {
        // Unparseable: fall back to Retry-After.
      }
    }
    if (!retry_after_) {
      if (auto ra = res[http::field::retry_after]; !ra.empty())
        retry_after_ = parse_retry_after({ra.data(), ra.size()},
                                         std::chrono::system_clock::now());
    }
    auto type = res[http::field::content_type];
    streaming_ = status_ / 100 == 2 && stream_
                 && type.find("text/event-stream") != beast::string_view::npos;
  }

  /// Feeds newly arrived body bytes of a streamed answer to the decoder.
  void consume_body() {
    if (!streaming_)
      return;
    auto& body = parser_->get().body();
    if (body.empty())
      return;
    sse_.feed(body, [this](std::string_view event, std::string_view data) {
      on_event(event, data);
    });
    body.clear();
    after_events();
  }

  void on_event(std::string_view event, std::string_view data) {
    if (stream_step_ != wire::stream_decoder::step::more)
      return; // Ignore anything after the end.
    stream_step_ = decoder_.on_event(event, data, delta_);
    if (!delta_.empty()) {
      if (on_delta_) {
        delta_sent_ = true;
        try {
          on_delta_(delta_);
        } catch (...) {
          // Handlers must not throw; the call goes on.
        }
      }
      delta_.clear();
    }
  }

  void after_events() {
    using step = wire::stream_decoder::step;
    if (stream_step_ == step::failed) {
      if (decoder_.provider_error()) {
        call_failure f;
        f.failure.body = decoder_.error_body();
        f.message = host() + " reported an error in the stream: "
                    + wire::error_summary(decoder_.error_body());
        f.failure.causes.push_back(f.message);
        fail(std::move(f));
      } else {
        fail(unparseable(decoder_.error()));
      }
    } else if (stream_step_ == step::done) {
      if (parser_->is_done() || broken_) {
        succeed(std::move(decoder_.result()));
        return;
      }
      // Deliver with the end of the body, so that the connection is back
      // in the pool before the caller can start the next call.
      phase_ = phase::finishing;
      arm(clock_type::now() + finish_grace);
      read();
    }
  }

  void on_read_error(const error_code& err) {
    if (err == http::error::body_limit) {
      fail(unparseable("the answer is larger than "
                       + std::to_string(ep_->cfg().max_response_bytes)
                       + " bytes (providers[].max_response_bytes)"));
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
    if (status_ / 100 != 2) {
      // Keep what the error answer said, even cut.
      http_failure();
      return;
    }
    if (streaming_) {
      end_stream(&err);
      return;
    }
    fail(failure(err, "the answer from " + host() + " broke off after "
                        + std::to_string(parser_->get().body().size())
                        + " bytes: " + err.message()));
  }

  void on_message_done() {
    auto& res = parser_->get();
    if (status_ / 100 != 2) {
      http_failure();
      return;
    }
    if (streaming_) {
      end_stream(nullptr);
      return;
    }
    completion result;
    std::string error;
    if (!wire::parse_answer(ep_->api(), res.body(), result, error)) {
      fail(unparseable(std::move(error)));
      return;
    }
    // Asked to stream but answered at once: the text is one delta.
    if (stream_ && on_delta_ && !result.text.empty()) {
      delta_sent_ = true;
      try {
        on_delta_(result.text);
      } catch (...) {
        // Handlers must not throw; the call goes on.
      }
    }
    succeed(std::move(result));
  }

  /// The body of a streamed answer ended, cleanly or with `err`. Its last
  /// event may lack the blank line that ends it.
  void end_stream(const error_code* err) {
    sse_.finish([this](std::string_view event, std::string_view data) {
      on_event(event, data);
    });
    if (stream_step_ != wire::stream_decoder::step::more) {
      after_events();
      return;
    }
    auto what = "the stream from " + host()
                + (err ? " broke off before " : " ended before ")
                + terminal_name() + " ("
                + std::to_string(decoder_.result().text.size())
                + " characters received)";
    if (err)
      fail(failure(*err, what + ": " + err->message()));
    else
      fail(failure(transport_error::reset, std::move(what)));
  }

  void on_finishing(const error_code& err) {
    if (err)
      broken_ = true;
    parser_->get().body().clear();
    if (err || parser_->is_done())
      succeed(std::move(decoder_.result()));
    else
      read();
  }

  const char* terminal_name() const {
    return ep_->api() == wire::api::openai ? "[DONE]" : "message_stop";
  }

  // -- results ----------------------------------------------------------------

  call_failure failure(transport_error kind, std::string message) {
    call_failure f;
    f.failure.transport = kind;
    f.failure.causes.push_back(message);
    f.message = std::move(message);
    return f;
  }

  call_failure failure(const error_code& err, std::string message) {
    auto f = failure(transport_of(err), std::move(message));
    f.failure.causes.push_back(err.message());
    return f;
  }

  call_failure unparseable(std::string what) {
    call_failure f;
    f.failure.unparseable = true;
    f.failure.status = status_;
    f.failure.causes.push_back(what);
    f.message = "unusable answer from " + host() + ": " + std::move(what);
    return f;
  }

  void http_failure() {
    call_failure f;
    f.failure.status = status_;
    f.failure.body = std::move(parser_->get().body());
    f.retry_after = retry_after_;
    f.message = "HTTP " + std::to_string(status_) + " from " + host();
    auto summary = wire::error_summary(f.failure.body);
    if (!summary.empty())
      f.message += ": " + summary;
    if (reusable()) {
      phase_ = phase::finished;
      ep_->put_idle(std::move(conn_));
    }
    fail(std::move(f));
  }

  /// Delivers the answer; pools the connection if its answer was read
  /// completely.
  void succeed(completion result) {
    if (result.model.empty())
      result.model = ep_->cfg().model;
    result.provider = ep_->cfg().name;
    phase_ = phase::finished;
    timer_.cancel();
    if (reusable())
      ep_->put_idle(std::move(conn_));
    else
      conn_->close();
    ep_->leave(*this);
    ep_->forget(shared_from_this());
    deliver(std::move(result));
  }

  /// True if the answer was read completely from a connection that stays
  /// open, so the next call may use it.
  bool reusable() const {
    return !broken_ && parser_->is_done() && parser_->get().keep_alive();
  }

  void fail(call_failure f) {
    if (delivered_)
      return;
    f.partial = delta_sent_;
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

  void deliver(call_result result) {
    if (delivered_)
      return;
    delivered_ = true;
    auto handler = std::move(on_done_);
    on_done_ = nullptr;
    on_delta_ = nullptr;
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
  phase phase_ = phase::queued;
  bool stream_;
  http::request<http::string_body> req_;
  std::optional<http::response_parser<http::string_body>> parser_;
  std::unique_ptr<connection> conn_;
  bool reused_ = false;
  bool retried_ = false;
  bool header_seen_ = false;
  /// A read failed: the connection cannot be reused.
  bool broken_ = false;
  unsigned status_ = 0;
  std::optional<std::chrono::milliseconds> retry_after_;
  bool streaming_ = false;
  wire::sse_parser sse_;
  wire::stream_decoder decoder_;
  wire::stream_decoder::step stream_step_ = wire::stream_decoder::step::more;
  std::string delta_;
  bool delta_sent_ = false;
  bool delivered_ = false;
  delta_handler on_delta_;
  result_handler on_done_;
};

call_canceller
endpoint_impl::complete(const completion_request& req, uint32_t max_tokens,
                        delta_handler on_delta, result_handler on_done) {
  auto body = wire::request_body(api_, cfg_.model, req,
                                 max_tokens > 0 ? max_tokens : cfg_.max_tokens,
                                 cfg_.stream);
  return launch(
    std::make_shared<call>(shared_from_this(), std::move(body), header_list{},
                           std::chrono::milliseconds{req.time_budget_ms},
                           std::move(on_delta), std::move(on_done)));
}

call_canceller endpoint_impl::post(post_request req, result_handler on_done) {
  return launch(std::make_shared<call>(
    shared_from_this(), std::move(req.body), std::move(req.headers),
    std::chrono::milliseconds{0}, nullptr, std::move(on_done)));
}

call_canceller endpoint_impl::launch(const std::shared_ptr<call>& c) {
  call_canceller canceller = [weak = std::weak_ptr<call>{c}](std::string why) {
    if (auto ptr = weak.lock())
      ptr->cancel(std::move(why));
  };
  {
    std::lock_guard<std::mutex> guard{mtx_};
    if (!stopping_) {
      live_.insert(c);
      bool start = active_ < max_active_;
      if (start) {
        ++active_;
        c->holds_slot = true;
      } else {
        c->queued = true;
        waiting_.push_back(c);
      }
      c->begin(start);
      return canceller;
    }
  }
  // Stopped: fail here, on the caller's thread (there are no I/O threads).
  c->reject();
  return canceller;
}

void endpoint_impl::leave(call& c) {
  std::shared_ptr<call> next;
  {
    std::lock_guard<std::mutex> guard{mtx_};
    if (c.queued) {
      c.queued = false;
      auto i = std::find_if(waiting_.begin(), waiting_.end(),
                            [&](auto& x) { return x.get() == &c; });
      if (i != waiting_.end())
        waiting_.erase(i);
      return;
    }
    if (!c.holds_slot)
      return;
    c.holds_slot = false;
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
  std::vector<std::shared_ptr<call>> calls;
  std::vector<std::unique_ptr<connection>> idle;
  {
    std::lock_guard<std::mutex> guard{mtx_};
    stopping_ = true;
    calls.assign(live_.begin(), live_.end());
    idle.swap(idle_);
  }
  for (auto& conn : idle)
    conn->close();
  for (auto& c : calls)
    c->cancel("the HTTP client is shutting down");
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

llm_endpoint::~llm_endpoint() {
  // nop
}

post_endpoint::~post_endpoint() {
  // nop
}

namespace {

/// The endpoint for `cfg` speaking `api`; `key` names a setting in errors.
template <class KeyName>
caf::expected<std::shared_ptr<endpoint_impl>>
make_endpoint(http_io& io, const provider_config& cfg, wire::api api,
              KeyName key) {
  auto url = wire::parse_base_url(cfg.base_url, api);
  if (!url)
    return caf::make_error(ec::config_invalid,
                           key("base_url") + ": " + error_message(url.error()));
  std::unique_ptr<ssl::context> tls_ctx;
  if (url->tls) {
    auto ctx = make_tls_client_context(cfg.ca_file);
    if (!ctx)
      return caf::make_error(
        ec::config_invalid, key("ca_file") + ": " + error_message(ctx.error()));
    tls_ctx = std::move(*ctx);
  }
  auto& impl = io.get_impl();
  auto ep = std::make_shared<endpoint_impl>(
    impl.shared_from_this(), cfg, api, std::move(*url), std::move(tls_ctx));
  if (!impl.add(ep))
    return caf::make_error(ec::unavailable, "the HTTP client is shut down");
  return ep;
}

caf::expected<std::shared_ptr<llm_endpoint>>
make_llm_endpoint(http_io& io, const provider_config& cfg) {
  auto key = [&](const char* name) {
    return "providers." + cfg.name + "." + name;
  };
  wire::api api;
  if (cfg.kind == "openai")
    api = wire::api::openai;
  else if (cfg.kind == "anthropic")
    api = wire::api::anthropic;
  else
    return caf::make_error(ec::config_invalid,
                           key("kind") + ": '" + cfg.kind
                             + "' is not an HTTP provider kind (expected "
                               "openai or anthropic)");
  auto ep = make_endpoint(io, cfg, api, key);
  if (!ep)
    return std::move(ep.error());
  return std::shared_ptr<llm_endpoint>{std::move(*ep)};
}

} // namespace

caf::expected<std::shared_ptr<post_endpoint>>
post_endpoint::make(http_io& io, const post_target& target) {
  provider_config cfg;
  cfg.name = target.name;
  cfg.kind = "json";
  cfg.base_url = target.url;
  cfg.ca_file = target.ca_file;
  cfg.stream = false;
  cfg.max_concurrency = target.max_concurrency;
  cfg.total_timeout = target.timeout;
  cfg.first_byte_timeout = target.timeout;
  cfg.connect_timeout = std::min<std::chrono::milliseconds>(target.timeout, 5s);
  auto key = [&](std::string_view name) {
    return target.name + "." + std::string{name == "base_url" ? "url" : name};
  };
  try {
    auto ep = make_endpoint(io, cfg, wire::api::json, key);
    if (!ep)
      return std::move(ep.error());
    return std::shared_ptr<post_endpoint>{std::move(*ep)};
  } catch (const std::exception& e) {
    return caf::make_error(ec::config_invalid,
                           target.name
                             + ": cannot set up the HTTP client: " + e.what());
  }
}

caf::expected<std::shared_ptr<llm_endpoint>>
llm_endpoint::make(http_io& io, const provider_config& cfg) {
  try {
    return make_llm_endpoint(io, cfg);
  } catch (const std::exception& e) {
    // OpenSSL could not set up a context, or memory ran out.
    return caf::make_error(ec::config_invalid, "providers." + cfg.name
                                                 + ": cannot set up the "
                                                   "HTTP client: "
                                                 + e.what());
  }
}

} // namespace keel
