#include <cerrno>
#include <cstdlib>

#include "keel/protocol.hpp"
#include "keel/tools/json_fields.hpp"
#include "keel/tools/ws_identity.hpp"
#include "ws_load_run.hpp"

namespace keel::bench::detail {

namespace {

/// An error frame's code and message, for a sample.
std::string describe(const nlohmann::json& body) {
  auto result = json_string(body, "code");
  auto message = json_string(body, "message");
  if (message.empty())
    message = json_string(body, "text");
  if (!message.empty())
    result += (result.empty() ? "" : ": ") + message;
  return result.empty() ? body.dump() : result;
}

} // namespace

connection::connection(load_run& run, net::io_context& ioc, size_t index)
  : run_(run),
    ws_(ioc),
    index_(index),
    id_prefix_(run.opts().message_prefix + std::to_string(index) + "-") {
  // nop
}

// -- connecting ---------------------------------------------------------------

void connection::start(const tcp::resolver::results_type& addrs) {
  beast::get_lowest_layer(ws_).expires_after(std::chrono::seconds{10});
  beast::get_lowest_layer(ws_).async_connect(
    addrs,
    [this](beast::error_code ec, const tcp::endpoint&) { on_connect(ec); });
}

void connection::on_connect(beast::error_code ec) {
  if (ec)
    return connect_failed(ec.message());
  beast::get_lowest_layer(ws_).socket().set_option(tcp::no_delay{true}, ec);
  beast::get_lowest_layer(ws_).expires_never();
  websocket::stream_base::timeout timeouts{
    std::chrono::seconds{10}, websocket::stream_base::none(), false};
  ws_.set_option(timeouts);
  keel::detail::set_client_identity(ws_, "keel-bench", run_.opts().node.token);
  ws_.text(true);
  auto host = run_.opts().node.host + ":"
              + std::to_string(run_.opts().node.port);
  ws_.async_handshake(res_, host, protocol::ws_path,
                      [this](beast::error_code ec) { on_handshake(ec); });
}

void connection::on_handshake(beast::error_code ec) {
  if (ec) {
    if (res_.result() == http::status::unauthorized) {
      closed_ = true;
      run_.on_connect_failed(
        caf::make_error(ec::unauthorized, "the node refused the token (401)"));
      return;
    }
    if (ec == websocket::error::upgrade_declined)
      return connect_failed("upgrade refused with HTTP "
                            + std::to_string(res_.result_int()));
    return connect_failed(ec.message());
  }
  ready_ = true;
  do_read();
  run_.on_ready();
}

void connection::connect_failed(const std::string& reason) {
  closed_ = true;
  run_.on_connect_failed(caf::make_error(ec::connection_failed, reason));
}

// -- sending ------------------------------------------------------------------

void connection::send_one(steady::time_point now) {
  auto thread = threads_[next_thread_++ % threads_.size()];
  message_state msg;
  msg.thread = thread;
  msg.order = run_.next_order(thread);
  msg.sent_at = now;
  msg.measured = run_.measuring(now);
  auto id = id_prefix_ + std::to_string(msgs_.size());
  msgs_.push_back(msg);
  ++in_flight_;
  run_.on_sent(msg.measured);
  enqueue(protocol::send_frame(run_.thread_name(thread), id, run_.text()));
}

bool connection::has_more() const noexcept {
  return !run_.opts().one_message_per_thread || msgs_.size() < threads_.size();
}

void connection::refill(steady::time_point now) {
  while (usable() && has_more() && in_flight_ < run_.opts().window
         && run_.may_send(now))
    send_one(now);
}

size_t connection::drop_in_flight() {
  auto n = in_flight_;
  in_flight_ = 0;
  return n;
}

void connection::enqueue(std::string frame) {
  out_.push_back(std::move(frame));
  if (!writing_)
    do_write();
}

void connection::do_write() {
  writing_ = true;
  ws_.async_write(net::buffer(out_.front()),
                  [this](beast::error_code ec, size_t) {
                    writing_ = false;
                    out_.pop_front();
                    if (ec) {
                      out_.clear();
                      if (closing_)
                        return finish_close();
                      return on_read_failed(ec);
                    }
                    if (closing_)
                      return do_close();
                    if (!out_.empty())
                      do_write();
                  });
}

// -- closing ------------------------------------------------------------------

void connection::close() {
  if (closed_ || closing_)
    return;
  if (!ready_) {
    beast::error_code ignored;
    beast::get_lowest_layer(ws_).socket().close(ignored);
    closed_ = true;
    return;
  }
  closing_ = true;
  run_.on_closing();
  if (!writing_)
    do_close();
}

void connection::do_close() {
  ws_.async_close(websocket::close_code::normal,
                  [this](beast::error_code) { finish_close(); });
}

void connection::finish_close() {
  if (closed_)
    return;
  closed_ = true;
  run_.on_closed();
}

// -- receiving ----------------------------------------------------------------

void connection::do_read() {
  ws_.async_read(buf_, [this](beast::error_code ec, size_t) {
    if (ec)
      return on_read_failed(ec);
    auto data = buf_.cdata();
    on_frame(
      std::string_view{static_cast<const char*>(data.data()), data.size()});
    buf_.consume(buf_.size());
    do_read();
  });
}

void connection::on_read_failed(beast::error_code ec) {
  if (closed_ || closing_)
    return;
  closed_ = true;
  std::string reason = ec == websocket::error::closed
                         ? "closed by the node (code "
                             + std::to_string(ws_.reason().code) + ")"
                         : ec.message();
  run_.on_lost(*this, "connection " + std::to_string(index_) + ": " + reason);
}

message_state* connection::find(const nlohmann::json& body, const char* key) {
  auto i = body.find(key);
  if (i == body.end() || !i->is_string())
    return nullptr;
  const auto& id = i->get_ref<const std::string&>();
  if (id.compare(0, id_prefix_.size(), id_prefix_) != 0)
    return nullptr;
  char* end = nullptr;
  auto str = id.c_str() + id_prefix_.size();
  errno = 0;
  auto index = std::strtoull(str, &end, 10);
  if (end == str || *end != '\0' || errno != 0 || index >= msgs_.size())
    return nullptr;
  return &msgs_[index];
}

void connection::on_frame(std::string_view text) {
  auto now = steady::now();
  auto frame = protocol::decode_server_frame(text);
  if (!frame)
    return run_.on_stray("undecodable frame: " + keel::render(frame.error()));
  const auto& type = frame->type;
  if (type == "ack") {
    if (auto msg = find(frame->body, "id"))
      run_.on_ack(*msg, now);
    else
      run_.on_stray("ack for an unknown id: " + frame->body.dump());
  } else if (type == "reply" || type == "error") {
    on_outcome_frame(type, frame->body, now);
  }
  // hello, status, pong and history frames carry nothing we measure.
}

void connection::on_outcome_frame(const std::string& type,
                                  const nlohmann::json& body,
                                  steady::time_point now) {
  auto is_error = type == "error";
  // Outcome frames carry the answered message's client id in `id`.
  auto msg = find(body, "id");
  if (!msg)
    return run_.on_stray(type
                         + " for no message of this run: " + describe(body));
  std::string_view provider;
  if (!is_error && run_.tracking()) {
    auto i = body.find("provider");
    if (i != body.end() && i->is_string())
      provider = i->get_ref<const std::string&>();
  }
  auto first = run_.on_outcome(
    *msg, is_error, is_error ? describe(body) : std::string{}, now, provider);
  if (first && in_flight_ > 0)
    --in_flight_;
  if (run_.flat_out())
    refill(now);
}

} // namespace keel::bench::detail
