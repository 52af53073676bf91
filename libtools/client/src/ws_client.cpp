#include "keel/tools/ws_client.hpp"

#include <cctype>
#include <type_traits>

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <boost/beast/websocket.hpp>
#include <boost/beast/websocket/ssl.hpp>

#include <nlohmann/json.hpp>

#include "keel/text.hpp"
#include "keel/tls_client.hpp"
#include "keel/tools/ws_identity.hpp"

namespace keel {

ws_client::~ws_client() {
  // nop
}

namespace {

namespace beast = boost::beast;
namespace http = beast::http;
namespace websocket = beast::websocket;
namespace net = boost::asio;
namespace ssl = net::ssl;
using tcp = net::ip::tcp;
using error_code = beast::error_code;
using plain_stream = beast::tcp_stream;
using tls_stream = beast::ssl_stream<beast::tcp_stream>;

template <class Stream>
constexpr bool is_tls = std::is_same_v<Stream, tls_stream>;
using clock_type = std::chrono::steady_clock;
using namespace std::chrono_literals;

/// Largest message the client accepts (history pages can be big).
constexpr size_t max_message_bytes = 256 * 1024 * 1024;

/// Runs `ioc` until `done` is set or `deadline` passes. Returns `done`.
bool run_until(net::io_context& ioc, const bool& done,
               clock_type::time_point deadline) {
  while (!done) {
    if (ioc.stopped())
      ioc.restart();
    if (ioc.run_one_until(deadline) == 0) {
      if (done)
        break;
      if (clock_type::now() >= deadline)
        return false;
      if (ioc.stopped() && !done) {
        // No work left although the operation has not completed: cannot
        // happen while an operation is pending, but never spin.
        return false;
      }
    }
  }
  return true;
}

/// Runs all remaining handlers (after a cancellation) for at most a moment.
void drain(net::io_context& ioc) {
  ioc.restart();
  ioc.run_for(1s);
}

/// Runs `ioc` until the operation on `stream` that sets `done` (its handler
/// sets `err`) completes or `deadline` passes; then the operation is
/// cancelled by closing the socket and `err` reads beast::error::timeout.
void finish_or_close(net::io_context& ioc, beast::tcp_stream& stream,
                     const bool& done, error_code& err,
                     clock_type::time_point deadline) {
  if (run_until(ioc, done, deadline))
    return;
  stream.socket().close(err);
  drain(ioc);
  err = beast::error::timeout;
}

/// Opens a TCP connection to `ep` by `deadline`, or explains why not.
caf::error connect_tcp(net::io_context& ioc, beast::tcp_stream& stream,
                       const endpoint& ep, clock_type::time_point deadline,
                       std::chrono::milliseconds timeout) {
  auto fail = [&](const std::string& reason) {
    return caf::make_error(ec::connection_failed,
                           "cannot reach " + to_string(ep) + ": " + reason);
  };
  tcp::resolver resolver{ioc};
  tcp::resolver::results_type endpoints;
  error_code err;
  bool done = false;
  resolver.async_resolve(ep.host, std::to_string(ep.port),
                         [&](error_code e, tcp::resolver::results_type r) {
                           err = e;
                           endpoints = std::move(r);
                           done = true;
                         });
  if (!run_until(ioc, done, deadline)) {
    resolver.cancel();
    drain(ioc);
    return fail("name resolution timed out after " + human_duration(timeout));
  }
  if (err)
    return fail(err.message());
  done = false;
  stream.expires_at(deadline);
  stream.async_connect(endpoints, [&](error_code e, const tcp::endpoint&) {
    err = e;
    done = true;
  });
  finish_or_close(ioc, stream, done, err, deadline + 1s);
  if (err == beast::error::timeout)
    return fail("timed out after " + human_duration(timeout));
  if (err)
    return fail(err.message());
  stream.socket().set_option(tcp::no_delay(true), err);
  return caf::none;
}

/// The TLS context for `ep`, or nothing for a plain endpoint.
caf::expected<std::unique_ptr<ssl::context>>
client_context(const endpoint& ep) {
  if (!ep.tls)
    return std::unique_ptr<ssl::context>{};
  return make_tls_client_context(ep.ca_file);
}

/// Makes a stream over a new socket of `ioc`; `tls` is set for a TLS one.
template <class Stream>
Stream make_stream(net::io_context& ioc, ssl::context* tls) {
  if constexpr (is_tls<Stream>)
    return Stream{ioc, *tls};
  else
    return Stream{ioc};
}

/// Opens a TCP connection to `ep` on `stream` and, for TLS, completes the
/// handshake with the peer's certificate checked against `ep.host`.
template <class Stream>
caf::error connect_stream(net::io_context& ioc, Stream& stream,
                          const endpoint& ep, clock_type::time_point deadline,
                          std::chrono::milliseconds timeout) {
  auto& lowest = beast::get_lowest_layer(stream);
  if (auto err = connect_tcp(ioc, lowest, ep, deadline, timeout))
    return err;
  if constexpr (is_tls<Stream>) {
    set_tls_peer(stream, ep.host);
    error_code err;
    bool done = false;
    stream.async_handshake(ssl::stream_base::client, [&](error_code e) {
      err = e;
      done = true;
    });
    finish_or_close(ioc, lowest, done, err, deadline + 1s);
    if (err == beast::error::timeout)
      return caf::make_error(ec::connection_failed,
                             "cannot reach " + to_string(ep)
                               + ": the TLS handshake timed out after "
                               + human_duration(timeout));
    if (err)
      return caf::make_error(
        ec::connection_failed,
        "cannot reach " + to_string(ep) + ": the TLS handshake failed: "
          + tls_failure_reason(err, stream.native_handle()));
  }
  return caf::none;
}

/// Turns the body of one of our JSON error responses into its message.
std::string body_message(const std::string& body) {
  auto j = nlohmann::json::parse(body, nullptr, false);
  if (j.is_object()) {
    auto i = j.find("message");
    if (i != j.end() && i->is_string())
      return i->get<std::string>();
  }
  return body.size() > 200 ? body.substr(0, 200) + "..." : body;
}

/// The error for a refused WebSocket upgrade: its HTTP status as our code,
/// with the status line and the body's message.
caf::error upgrade_refused(const endpoint& ep,
                           const websocket::response_type& res) {
  auto status = res.result_int();
  auto msg = to_string(ep) + " refused the WebSocket upgrade: HTTP "
             + std::to_string(status) + " " + std::string{res.reason()};
  if (!res.body().empty())
    msg += ": " + body_message(res.body());
  switch (status) {
    case 401: return caf::make_error(ec::unauthorized, std::move(msg));
    case 404: return caf::make_error(ec::not_found, std::move(msg));
    case 503: return caf::make_error(ec::unavailable, std::move(msg));
    default: return caf::make_error(ec::protocol_violation, std::move(msg));
  }
}

template <class Stream>
class client_impl : public ws_client {
public:
  client_impl(endpoint ep, std::unique_ptr<ssl::context> tls)
    : ep_(std::move(ep)),
      tls_(std::move(tls)),
      ws_(make_stream<Stream>(ioc_, tls_.get())) {
    // nop
  }

  ~client_impl() override {
    close();
  }

  caf::error connect(const std::string& path,
                     std::chrono::milliseconds timeout) {
    auto deadline = clock_type::now() + timeout;
    auto& stream = beast::get_lowest_layer(ws_);
    if (auto err = connect_stream(ioc_, ws_.next_layer(), ep_, deadline,
                                  timeout))
      return err;
    detail::set_client_identity(ws_, "keel-client", ep_.token);
    ws_.read_message_max(max_message_bytes);
    websocket::response_type res;
    error_code err;
    bool done = false;
    ws_.async_handshake(res, to_string(ep_), path, [&](error_code e) {
      err = e;
      done = true;
    });
    finish_or_close(ioc_, stream, done, err, deadline + 1s);
    if (err == websocket::error::upgrade_declined)
      return upgrade_refused(ep_, res);
    if (err == beast::error::timeout)
      return caf::make_error(ec::connection_failed,
                             "cannot reach " + to_string(ep_)
                               + ": WebSocket handshake timed out after "
                               + human_duration(timeout));
    if (err)
      return caf::make_error(ec::connection_failed,
                             "cannot reach " + to_string(ep_)
                               + ": WebSocket handshake failed: "
                               + err.message());
    // From here on, timeouts are per call (run_until), not per stream.
    stream.expires_never();
    open_ = true;
    return caf::none;
  }

  caf::error send_text(std::string_view payload) override {
    return write(true, payload);
  }

  caf::error send_binary(std::string_view payload) override {
    return write(false, payload);
  }

  caf::expected<ws_message>
  receive(std::chrono::milliseconds timeout) override {
    if (!open_ && !read_pending_ && !read_done_)
      return closed_error();
    if (!read_pending_ && !read_done_)
      start_read();
    // A read that times out stays pending: the next call picks it up, so
    // the stream never sees a cancelled read.
    if (!run_until(ioc_, read_done_, clock_type::now() + timeout))
      return caf::make_error(ec::timeout, "no message from " + to_string(ep_)
                                            + " within "
                                            + human_duration(timeout));
    read_done_ = false;
    if (read_err_) {
      on_failure(read_err_);
      return closed_error();
    }
    ws_message msg;
    msg.text = ws_.got_text();
    msg.payload = beast::buffers_to_string(buf_.data());
    buf_.consume(buf_.size());
    return msg;
  }

  std::optional<uint16_t> close_code() const override {
    return close_code_;
  }

  void close() override {
    if (open_) {
      open_ = false;
      bool done = false;
      ws_.async_close(websocket::close_code::normal,
                      [&](error_code) { done = true; });
      // A pending read consumes the server's close frame; wait for both.
      run_until(ioc_, done, clock_type::now() + 2s);
      if (read_pending_)
        run_until(ioc_, read_done_, clock_type::now() + 1s);
    }
    error_code ignored;
    auto& sock = beast::get_lowest_layer(ws_).socket();
    if (sock.is_open()) {
      sock.close(ignored);
      drain(ioc_);
    }
  }

private:
  caf::error write(bool text, std::string_view payload) {
    if (!open_)
      return closed_error();
    ws_.binary(!text);
    error_code err;
    bool done = false;
    ws_.async_write(net::buffer(payload.data(), payload.size()),
                    [&](error_code e, size_t) {
                      err = e;
                      done = true;
                    });
    if (!run_until(ioc_, done, clock_type::now() + 30s)) {
      // The peer stopped reading: the stream cannot be used any more.
      open_ = false;
      beast::get_lowest_layer(ws_).socket().close(err);
      drain(ioc_);
      failure_ = "sending to " + to_string(ep_) + " timed out";
      return caf::make_error(ec::timeout, failure_);
    }
    if (err) {
      on_failure(err);
      return closed_error();
    }
    return caf::none;
  }

  void start_read() {
    read_pending_ = true;
    ws_.async_read(buf_, [this](error_code e, size_t) {
      read_err_ = e;
      read_pending_ = false;
      read_done_ = true;
    });
  }

  void on_failure(const error_code& err) {
    open_ = false;
    if (!failure_.empty())
      return;
    // Beast records the peer's close frame even when answering it failed
    // (the peer may close its socket right after sending it).
    auto reason = ws_.reason();
    if (err == websocket::error::closed
        || reason.code != websocket::close_code::none) {
      close_code_ = static_cast<uint16_t>(reason.code);
      failure_ = "connection closed by peer: " + std::to_string(reason.code);
      if (!reason.reason.empty())
        failure_ += " " + std::string{reason.reason.c_str()};
    } else {
      failure_ = "connection to " + to_string(ep_) + " lost: " + err.message();
    }
  }

  caf::error closed_error() const {
    return caf::make_error(ec::unavailable,
                           failure_.empty() ? "connection closed" : failure_);
  }

  // Declared first: destroyed last, after everything that uses it.
  net::io_context ioc_;
  endpoint ep_;
  std::unique_ptr<ssl::context> tls_;
  websocket::stream<Stream> ws_;
  beast::flat_buffer buf_;
  std::optional<uint16_t> close_code_;
  std::string failure_;
  error_code read_err_;
  bool open_ = false;
  bool read_pending_ = false;
  bool read_done_ = false;
};

} // namespace

namespace {

template <class Stream>
caf::expected<std::unique_ptr<ws_client>>
connect_client(const endpoint& ep, std::unique_ptr<ssl::context> tls,
               const std::string& path, std::chrono::milliseconds timeout) {
  auto result = std::make_unique<client_impl<Stream>>(ep, std::move(tls));
  if (auto err = result->connect(path, timeout))
    return err;
  return std::unique_ptr<ws_client>{std::move(result)};
}

} // namespace

caf::expected<std::unique_ptr<ws_client>>
ws_client::connect(const endpoint& ep, const std::string& path,
                   std::chrono::milliseconds timeout) {
  try {
    auto tls = client_context(ep);
    if (!tls)
      return std::move(tls.error());
    if (*tls)
      return connect_client<tls_stream>(ep, std::move(*tls), path, timeout);
    return connect_client<plain_stream>(ep, nullptr, path, timeout);
  } catch (const std::exception& e) {
    return caf::make_error(ec::connection_failed,
                           "cannot reach " + to_string(ep) + ": " + e.what());
  }
}

namespace {

using string_request = http::request<http::string_body>;

string_request make_request(const endpoint& ep, const std::string& method,
                            const std::string& target,
                            const std::string& body) {
  string_request req;
  req.method_string(method);
  req.target(target);
  req.version(11);
  req.set(http::field::host, to_string(ep));
  req.set(http::field::user_agent, "keel-client");
  req.set(http::field::connection, "close");
  if (!ep.token.empty())
    req.set(http::field::authorization, "Bearer " + ep.token);
  // The admin API takes JSON only (a cross-site form cannot send it).
  if (!body.empty() || method == "POST")
    req.set(http::field::content_type, "application/json");
  req.body() = body;
  req.prepare_payload();
  return req;
}

/// Writes `req` and reads the response into `parser` by `deadline`; a
/// timeout shows as beast::error::timeout.
template <class Stream>
error_code exchange(net::io_context& ioc, Stream& stream, string_request& req,
                    http::response_parser<http::string_body>& parser,
                    clock_type::time_point deadline) {
  beast::flat_buffer buf;
  error_code err;
  bool done = false;
  beast::get_lowest_layer(stream).expires_at(deadline);
  http::async_write(stream, req, [&](error_code e, size_t) {
    err = e;
    if (err) {
      done = true;
      return;
    }
    http::async_read(stream, buf, parser, [&](error_code e2, size_t) {
      err = e2;
      done = true;
    });
  });
  finish_or_close(ioc, beast::get_lowest_layer(stream), done, err,
                  deadline + 1s);
  return err;
}

template <class Stream>
caf::expected<http_response>
request_on(const endpoint& ep, ssl::context* tls, const std::string& method,
           const std::string& target, const std::string& body,
           std::chrono::milliseconds timeout) {
  auto deadline = clock_type::now() + timeout;
  net::io_context ioc;
  auto stream = make_stream<Stream>(ioc, tls);
  if (auto err = connect_stream(ioc, stream, ep, deadline, timeout))
    return err;
  auto req = make_request(ep, method, target, body);
  http::response_parser<http::string_body> parser;
  parser.body_limit(max_message_bytes);
  auto err = exchange(ioc, stream, req, parser, deadline);
  if (err == beast::error::timeout)
    return caf::make_error(ec::timeout, to_string(ep) + " did not answer "
                                          + method + " " + target + " within "
                                          + human_duration(timeout));
  if (err)
    return caf::make_error(ec::connection_failed,
                           method + " " + target + " on " + to_string(ep)
                             + " failed: " + err.message());
  auto res = parser.release();
  http_response result;
  result.status = res.result_int();
  result.content_type = std::string{res[http::field::content_type]};
  result.body = std::move(res.body());
  // Connection: close; no TLS close_notify is waited for.
  error_code ignored;
  beast::get_lowest_layer(stream).socket().shutdown(tcp::socket::shutdown_both,
                                                    ignored);
  return result;
}

} // namespace

caf::expected<http_response>
http_request(const endpoint& ep, const std::string& method,
             const std::string& target, const std::string& body,
             std::chrono::milliseconds timeout) {
  try {
    auto tls = client_context(ep);
    if (!tls)
      return std::move(tls.error());
    if (*tls)
      return request_on<tls_stream>(ep, tls->get(), method, target, body,
                                    timeout);
    return request_on<plain_stream>(ep, nullptr, method, target, body, timeout);
  } catch (const std::exception& e) {
    return caf::make_error(ec::connection_failed,
                           "cannot reach " + to_string(ep) + ": " + e.what());
  }
}

caf::error describe_node_error(const endpoint& node, const caf::error& err) {
  auto address = node.host + ":" + std::to_string(node.port);
  if (err == ec::connection_failed) {
    // Keep only the reason, whatever prefix the layer below added.
    auto reason = error_message(err);
    for (auto prefix : {"cannot reach node at " + address + ": ",
                        "cannot reach " + address + ": "})
      if (reason.compare(0, prefix.size(), prefix) == 0)
        reason.erase(0, prefix.size());
    if (!reason.empty())
      reason[0] = static_cast<char>(
        std::tolower(static_cast<unsigned char>(reason[0])));
    return caf::make_error(ec::connection_failed,
                           "cannot reach node at " + address + ": " + reason);
  }
  if (err == ec::unauthorized)
    return caf::make_error(ec::unauthorized,
                           "the node refused the token (401)");
  return err;
}

namespace {

// Maps an error object's wire code back to our error code.
ec code_from_name(const std::string& name) {
  for (auto i = 1; i <= static_cast<int>(ec::timeout); ++i)
    if (name == to_string(static_cast<ec>(i)))
      return static_cast<ec>(i);
  return ec::unavailable;
}

} // namespace

caf::expected<nlohmann::json>
api_call(const endpoint& node, const std::string& method,
         const std::string& target, const std::string& body,
         std::chrono::milliseconds timeout) {
  auto res = http_request(node, method, target, body, timeout);
  if (!res)
    return describe_node_error(node, res.error());
  if (res->status == 401)
    return describe_node_error(node, caf::make_error(ec::unauthorized));
  auto j = nlohmann::json::parse(res->body, nullptr, false);
  auto what = method + " " + target;
  if (res->status != 200) {
    if (j.is_object() && j.value("type", "") == "error")
      return caf::make_error(code_from_name(j.value("code", "")),
                             j.value("message", what + " failed"));
    auto excerpt = res->body.substr(0, 200);
    return caf::make_error(
      ec::unavailable, what + " answered HTTP " + std::to_string(res->status)
                         + (excerpt.empty() ? "" : ": " + excerpt));
  }
  if (j.is_discarded() || !j.is_object())
    return caf::make_error(ec::protocol_violation,
                           what + ": the body is not a JSON object");
  return j;
}

} // namespace keel
