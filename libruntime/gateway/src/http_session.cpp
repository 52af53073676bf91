#include "http_session.hpp"

#include "compat_exchange.hpp"
#include "internal_errors.hpp"

#include "keel/compat_models.hpp"
#include "keel/compat_request.hpp"
#include "keel/http_head.hpp"
#include "keel/text.hpp"

#include <type_traits>

#include <boost/asio/dispatch.hpp>

namespace keel::gateway {

namespace {

/// Time allowed to read one HTTP request (headers and body) on an
/// authenticated connection, and to write an answer. Before the token
/// check `gateway.header_timeout` applies instead.
constexpr auto http_read_timeout = 30s;

/// Bytes of a request's head (request line and header fields) accepted;
/// more get 431.
constexpr size_t header_limit = 16 * 1024;

/// Bytes asked of the stream at a time while reading a head.
constexpr size_t head_read_bytes = 4096;

/// Time the `/api/` handler has to answer before the client gets a 504.
constexpr auto api_timeout = 10s;

std::string json_error(const std::string& code, const std::string& message) {
  return protocol::error_frame(code, message);
}

std::string_view view(beast::string_view x) {
  return {x.data(), x.size()};
}

/// Whether Beast refused what it read (a bad request line, field or
/// chunk), rather than the peer going away mid-request.
bool refused_by_parser(error_code err) {
  return err.category()
           == http::make_error_code(http::error::bad_target).category()
         && err != http::error::end_of_stream
         && err != http::error::partial_message;
}

template <class Stream>
constexpr bool is_tls = std::is_same_v<Stream, tls_stream>;

/// The parts of `req` the request policy decides on; an upgrade's ticket
/// is redeemed here (once, whatever the policy then decides).
request_facts facts_of(const request& req, bool tls, ws_ticket_store& tickets) {
  request_facts facts;
  facts.method = view(req.method_string());
  facts.target = view(req.target());
  facts.upgrade = websocket::is_upgrade(req);
  facts.tls = tls;
  facts.authorization = view(req[http::field::authorization]);
  facts.origin = view(req[http::field::origin]);
  facts.host = view(req[http::field::host]);
  facts.content_type = view(req[http::field::content_type]);
  facts.api_key = view(req["x-api-key"]);
  if (facts.upgrade)
    facts.ticket = tickets.check(facts.target);
  return facts;
}

/// The API a compatible request speaks, by its path.
compat::api wire_of(std::string_view path) {
  return path == "/v1/messages" ? compat::api::anthropic : compat::api::openai;
}

/// A refusal of the request policy in the API's terms, its status kept.
compat::api_error refusal_of(const request_decision& decision,
                             std::string_view path) {
  auto err = compat::refusal(wire_of(path), decision.code, decision.message);
  err.status = decision.status;
  return err;
}

/// `X-Stainless-Retry-Count` as a number (0 when absent or not one).
uint32_t retry_count_of(const request& req) {
  auto text = view(req["x-stainless-retry-count"]);
  uint32_t result = 0;
  for (auto c : text) {
    if (c < '0' || c > '9' || result > 1000)
      return 0;
    result = result * 10 + static_cast<uint32_t>(c - '0');
  }
  return result;
}

} // namespace

template <class Stream>
http_session<Stream>::http_session(server_impl* srv, connection_id id,
                                   Stream&& stream)
  : srv_(srv), id_(id), ex_(stream.get_executor()), stream_(std::move(stream)) {
  // nop
}

template <class Stream>
http_session<Stream>::~http_session() {
  srv_->remove_http(id_);
  if (pending_ != 0)
    srv_->remove_request(pending_);
  if (handed_off_)
    return;
  if (authenticated_)
    srv_->release_slot();
  else
    srv_->leave_unauthenticated(id_);
}

template <class Stream>
void http_session<Stream>::run() {
  srv_->add(id_, std::weak_ptr<http_link>{this->shared_from_this()});
  if constexpr (is_tls<Stream>) {
    expire_read();
    stream_.async_handshake(ssl::stream_base::server,
                            [self = this->shared_from_this()](error_code err) {
                              // A failed handshake (plain HTTP, an old
                              // protocol version) closes this connection only.
                              if (err)
                                self->close_socket();
                              else
                                self->do_read();
                            });
  } else {
    net::dispatch(ex_, beast::bind_front_handler(&http_session::do_read,
                                                 this->shared_from_this()));
  }
}

template <class Stream>
void http_session<Stream>::close_socket() {
  beast::get_lowest_layer(stream_).socket().close(ignored_);
}

template <class Stream>
void http_session<Stream>::shutdown() {
  shut_down_ = true;
  if (timer_)
    timer_->cancel();
  if (!handed_off_)
    close_socket();
}

template <class Stream>
void http_session<Stream>::deliver(uint64_t id, unsigned status,
                                   std::string content_type, std::string body) {
  if (pending_ != id || shut_down_)
    return;
  pending_ = 0;
  if (timer_)
    timer_->cancel();
  log_if_internal("HTTP", id_, body);
  reply(static_cast<http::status>(status), std::move(content_type),
        std::move(body));
}

// -- reading and routing ------------------------------------------------------

template <class Stream>
void http_session<Stream>::do_read() {
  if (shut_down_ || srv_->stopping())
    return;
  parser_.emplace();
  parser_->header_limit(header_limit);
  // Chat histories outgrow a frame: `/v1/` takes larger bodies, and
  // `route` holds the others to `max_frame_bytes`.
  auto& cfg = srv_->cfg();
  parser_->body_limit(cfg.compat.enabled ? std::max(cfg.max_frame_bytes,
                                                    cfg.compat.max_body_bytes)
                                         : cfg.max_frame_bytes);
  expire_read();
  read_head();
}

/// Reads until the head is complete and checked (keel/http_head.hpp), then
/// lets Beast parse it, from the buffer, and the body.
template <class Stream>
void http_session<Stream>::read_head() {
  auto data = buf_.data();
  auto head = check_request_head(
    {static_cast<const char*>(data.data()), data.size()}, header_limit);
  if (head.outcome == head_check::verdict::refused)
    return malformed(head.status, std::move(head.message));
  if (head.outcome == head_check::verdict::complete)
    return http::async_read(
      stream_, buf_, *parser_,
      beast::bind_front_handler(&http_session::on_read,
                                this->shared_from_this()));
  stream_.async_read_some(
    buf_.prepare(head_read_bytes),
    beast::bind_front_handler(&http_session::on_head_bytes,
                              this->shared_from_this()));
}

template <class Stream>
void http_session<Stream>::on_head_bytes(error_code err, size_t n) {
  if (err || shut_down_)
    return close_socket();
  buf_.commit(n);
  read_head();
}

/// Arms the read timeout: short until the connection authenticated.
template <class Stream>
void http_session<Stream>::expire_read() {
  auto& stream = beast::get_lowest_layer(stream_);
  if (authenticated_)
    stream.expires_after(http_read_timeout);
  else
    stream.expires_after(srv_->cfg().header_timeout);
}

template <class Stream>
void http_session<Stream>::on_read(error_code err, size_t) {
  if (err == http::error::body_limit)
    return body_too_large();
  if (err == http::error::header_limit)
    return malformed(431, "the request's header fields exceed "
                            + std::to_string(header_limit) + " bytes");
  if (refused_by_parser(err))
    return malformed(400, "malformed HTTP request: " + err.message());
  if (err) {
    close_socket();
    return;
  }
  route(parser_->release());
}

template <class Stream>
void http_session<Stream>::route(request req) {
  keep_alive_ = req.keep_alive();
  version_ = req.version();
  // Every path, probes and files included: a page on a name that
  // rebinds to this node reads nothing of it.
  if (auto host = check_host(view(req[http::field::host]), srv_->cfg());
      !host.allowed)
    return refuse(host);
  auto path = path_of(view(req.target()));
  if (!websocket::is_upgrade(req) && serve_itself(req, path))
    return;
  if (path == protocol::ws_path && !websocket::is_upgrade(req))
    return reply(http::status::upgrade_required, "application/json",
                 json_error("bad_request",
                            "this path only accepts WebSocket upgrades"));
  auto compat = srv_->cfg().compat.enabled && !websocket::is_upgrade(req)
                && path.substr(0, 4) == "/v1/";
  if (!compat && req.body().size() > srv_->cfg().max_frame_bytes)
    return body_too_large();
  if (!websocket::is_upgrade(req) && path.substr(0, 5) != "/api/"
      && path != "/metrics" && !compat)
    return not_found(path);
  if (websocket::is_upgrade(req) && path != protocol::ws_path) {
    keep_alive_ = false;
    return not_found(path);
  }
  auto facts = facts_of(req, is_tls<Stream>, srv_->tickets());
  facts.compat = compat;
  auto decision = check_request(facts, srv_->cfg());
  if (!decision.allowed && compat)
    return compat_refuse(wire_of(path), refusal_of(decision, path), "");
  if (!decision.allowed)
    return refuse(decision);
  if (!authenticated_) {
    authenticated_ = srv_->promote(id_);
    if (!authenticated_)
      return overloaded();
  }
  if (websocket::is_upgrade(req))
    return upgrade(req, path);
  if (compat)
    return compat_request(req, path, facts);
  if (path == ws_ticket_path) {
    auto answer = srv_->tickets().answer_request(facts.method);
    return reply(static_cast<http::status>(answer.status), "application/json",
                 std::move(answer.body));
  }
  api_request(req);
}

/// Hands a WebSocket upgrade to a new `ws_session`, with this connection's
/// slot. A refused upgrade gets an HTTP answer, then the connection closes.
template <class Stream>
void http_session<Stream>::upgrade(request& req, std::string_view) {
  if (srv_->stopping() || srv_->draining()) {
    keep_alive_ = false;
    return reply(http::status::service_unavailable, "application/json",
                 json_error("draining", "the node is shutting down"));
  }
  beast::get_lowest_layer(stream_).expires_never();
  handed_off_ = true;
  srv_->remove_http(id_);
  auto ws = std::make_shared<ws_session<Stream>>(srv_, id_, std::move(stream_));
  ws->run(std::move(req));
}

/// Answers what the server serves without the handler: the probes and the
/// static files. False if `path` is none of them.
template <class Stream>
bool http_session<Stream>::serve_itself(const request& req,
                                        std::string_view path) {
  if (path == "/healthz")
    probe(req, path, srv_->live(), "ok", "unresponsive");
  else if (path == "/readyz")
    probe(req, path, srv_->ready(), "ready",
          srv_->draining() ? "draining" : "not_ready");
  else if (auto file = srv_->file(path))
    serve_file(req, *file);
  else
    return false;
  return true;
}

/// A probe: 200 with `{"status": up}` while `ok`, else 503 with `down`.
template <class Stream>
void http_session<Stream>::probe(const request& req, std::string_view path,
                                 bool ok, const char* up, const char* down) {
  if (req.method() != http::verb::get)
    return reply(http::status::method_not_allowed, "application/json",
                 json_error("bad_request", "use GET " + std::string{path}));
  nlohmann::json body{{"status", ok ? up : down}, {"node", srv_->node()}};
  reply(ok ? http::status::ok : http::status::service_unavailable,
        "application/json",
        body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}

template <class Stream>
void http_session<Stream>::serve_file(const request& req,
                                      const static_file& file) {
  if (req.method() != http::verb::get)
    return reply(http::status::method_not_allowed, "application/json",
                 json_error("bad_request", "use GET"));
  // The page loads nothing from elsewhere and cannot be framed; an upgraded
  // node must not be mixed with cached files of the last one.
  res_ = {};
  res_.set("Content-Security-Policy",
           "default-src 'self'; script-src 'self'; style-src 'self'; "
           "img-src 'self'; connect-src 'self'; frame-ancestors 'none'; "
           "base-uri 'none'; form-action 'none'");
  res_.set("X-Content-Type-Options", "nosniff");
  res_.set(http::field::cache_control, "no-cache");
  reply(http::status::ok, file.content_type, std::string{file.body}, false);
}

/// Passes an `/api/` request to the handler, which answers through
/// `deliver`; if it does not answer in time, the client gets a 504.
template <class Stream>
void http_session<Stream>::api_request(const request& req) {
  pending_
    = srv_->add_request(std::weak_ptr<http_link>{this->shared_from_this()});
  start_api_timer();
  // Nothing reads the socket while the handler works: no expiry.
  beast::get_lowest_layer(stream_).expires_never();
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
template <class Stream>
void http_session<Stream>::start_api_timer() {
  if (!timer_)
    timer_ = std::make_unique<net::steady_timer>(ex_);
  timer_->expires_after(api_timeout);
  timer_->async_wait(
    [self = this->shared_from_this(), id = pending_](error_code err) {
      if (err || self->pending_ != id || !self->srv_->remove_request(id))
        return;
      self->pending_ = 0;
      self->reply(http::status::gateway_timeout, "application/json",
                  json_error("timeout", "the node did not answer in time"));
    });
}

// -- the compatible API
// --------------------------------------------------------

/// Reads a request of the compatible API and hands it to a new
/// `compat_exchange`, which answers it; refuses what it cannot carry out.
template <class Stream>
void http_session<Stream>::compat_request(const request& req,
                                          std::string_view path,
                                          const request_facts& facts) {
  auto wire = wire_of(path);
  auto request_id = "req_" + random_hex(24);
  if (path == "/v1/models" || path.substr(0, 11) == "/v1/models/")
    return compat_models(req, path, request_id);
  auto post = req.method() == http::verb::post;
  if (!post || (path != "/v1/chat/completions" && path != "/v1/messages"))
    return compat_refuse(
      wire,
      compat::refusal(wire, "not_found",
                      "no such endpoint: " + std::string{req.method_string()}
                        + " " + std::string{path}),
      request_id);
  if (srv_->draining() || srv_->stopping())
    return compat_refuse(
      wire, compat::refusal(wire, "draining", "the node is shutting down"),
      request_id);
  compat::request_headers headers;
  headers.thread = std::string{view(req["keel-thread"])};
  headers.idempotency_key = std::string{view(req["idempotency-key"])};
  headers.retry_count = retry_count_of(req);
  compat::request_limits limits;
  limits.max_text_bytes = srv_->cfg().max_text_bytes;
  auto read = wire == compat::api::anthropic
                ? compat::read_messages_request(req.body(), headers, limits)
                : compat::read_chat_request(req.body(), headers, limits);
  if (auto err = std::get_if<compat::api_error>(&read))
    return compat_refuse(wire, *err, request_id);
  auto call = std::get<compat::compat_call>(std::move(read));
  auto token = bearer_token(facts.authorization);
  auto id = srv_->compat_identity(call, token.empty() ? facts.api_key : token,
                                  req.body());
  call.thread = std::move(id.thread);
  call.message_id = std::move(id.message_id);
  // The exchange's own timers bound the wait from here on.
  beast::get_lowest_layer(stream_).expires_never();
  std::make_shared<compat_exchange<Stream>>(srv_, this->shared_from_this(),
                                            std::move(call), request_id)
    ->start();
}

/// `GET /v1/models[/ID]`: the node's agents, in Anthropic's shape for a
/// request that carries `anthropic-version`.
template <class Stream>
void http_session<Stream>::compat_models(const request& req,
                                         std::string_view path,
                                         const std::string& request_id) {
  auto wire = req.count("anthropic-version") != 0 ? compat::api::anthropic
                                                  : compat::api::openai;
  if (req.method() != http::verb::get)
    return compat_refuse(
      wire, compat::refusal(wire, "not_found", "use GET " + std::string{path}),
      request_id);
  header_fields fields{{"x-request-id", request_id}};
  auto models = srv_->models();
  if (path == "/v1/models")
    return answer(200, "application/json", compat::models_body(wire, models),
                  fields);
  auto id = path.substr(11);
  for (auto& model : models)
    if (model.id == id)
      return answer(200, "application/json", compat::model_body(wire, model),
                    fields);
  auto err = compat::refusal(wire, "unknown_agent",
                             "the model '" + std::string{id}
                               + "' does not exist: a model is an agent");
  err.param = "model";
  compat_refuse(wire, err, request_id);
}

template <class Stream>
void http_session<Stream>::compat_refuse(compat::api wire,
                                         const compat::api_error& err,
                                         const std::string& request_id) {
  auto fields = compat::retry_headers(err);
  if (!request_id.empty())
    fields.emplace_back("x-request-id", request_id);
  if (err.status == 401)
    fields.emplace_back("WWW-Authenticate", "Bearer");
  answer(err.status, "application/json",
         compat::error_body(wire, err, request_id), fields);
}

template <class Stream>
void http_session<Stream>::answer(unsigned status, std::string content_type,
                                  std::string body,
                                  const header_fields& fields) {
  res_ = {};
  for (auto& [name, value] : fields)
    res_.set(name, value);
  reply(static_cast<http::status>(status), std::move(content_type),
        std::move(body), false);
}

template <class Stream>
void http_session<Stream>::resume(bool reusable) {
  if (!reusable || shut_down_ || srv_->stopping()) {
    auto& sock = beast::get_lowest_layer(stream_).socket();
    sock.shutdown(tcp::socket::shutdown_send, ignored_);
    sock.close(ignored_);
    return;
  }
  res_ = {};
  do_read();
}

// -- answering ----------------------------------------------------------------

/// A body past the limit of its path: answered, then closed (the rest of
/// it is not read).
template <class Stream>
void http_session<Stream>::body_too_large() {
  keep_alive_ = false;
  reply(http::status::payload_too_large, "application/json",
        json_error("too_large", "request body exceeds "
                                  + std::to_string(srv_->cfg().max_frame_bytes)
                                  + " bytes (gateway.max_frame_bytes; under "
                                    "/v1/, gateway.compat.max_body_bytes)"));
}

template <class Stream>
void http_session<Stream>::not_found(std::string_view path) {
  reply(http::status::not_found, "application/json",
        json_error("not_found", "no such path: " + std::string{path}));
}

template <class Stream>
void http_session<Stream>::refuse(const request_decision& decision) {
  keep_alive_ = false;
  res_ = {};
  if (decision.challenge)
    res_.set(http::field::www_authenticate, "Bearer");
  reply(static_cast<http::status>(decision.status), "application/json",
        json_error(decision.code, decision.message), false);
}

/// A request that passed the token check finds every slot of
/// `max_connections` taken (or its connection was closed to make room).
template <class Stream>
void http_session<Stream>::overloaded() {
  keep_alive_ = false;
  reply(http::status::service_unavailable, "application/json",
        json_error("overloaded", "too many connections; try again later"));
}

/// A request the gateway cannot read safely: answered, then closed (what
/// follows it on the connection cannot be trusted to be a request).
template <class Stream>
void http_session<Stream>::malformed(unsigned status, std::string message) {
  keep_alive_ = false;
  reply(static_cast<http::status>(status), "application/json",
        json_error(status == 431 ? "too_large" : "bad_request",
                   std::move(message)));
}

template <class Stream>
void http_session<Stream>::reply(http::status status, std::string content_type,
                                 std::string body, bool fresh) {
  if (fresh)
    res_ = {};
  res_.result(status);
  res_.version(version_);
  res_.set(http::field::server, "keel");
  res_.set(http::field::content_type, content_type);
  res_.body() = std::move(body);
  res_.keep_alive(keep_alive_ && !srv_->stopping());
  res_.prepare_payload();
  beast::get_lowest_layer(stream_).expires_after(http_read_timeout);
  http::async_write(stream_, res_,
                    beast::bind_front_handler(&http_session::on_write,
                                              this->shared_from_this()));
}

template <class Stream>
void http_session<Stream>::on_write(error_code err, size_t) {
  resume(!err && res_.keep_alive());
}

template class http_session<plain_stream>;
template class http_session<tls_stream>;

// -- starting sessions --------------------------------------------------------

void start_http(server_impl* srv, connection_id id, tcp::socket socket) {
  std::make_shared<http_session<plain_stream>>(srv, id,
                                               plain_stream{std::move(socket)})
    ->run();
}

void start_https(server_impl* srv, connection_id id, tcp::socket socket,
                 ssl::context& tls) {
  std::make_shared<http_session<tls_stream>>(
    srv, id, tls_stream{plain_stream{std::move(socket)}, tls})
    ->run();
}

} // namespace keel::gateway
