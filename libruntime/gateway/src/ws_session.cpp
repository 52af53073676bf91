#include "ws_session.hpp"

#include "internal_errors.hpp"

#include "keel/text.hpp"

#include <iostream>

#include <boost/asio/post.hpp>

namespace keel::gateway {

namespace {

/// Time a closing WebSocket gets for the close handshake before its socket
/// is closed hard (a stalled peer never completes it).
constexpr auto close_grace = 2s;

/// Read buffers above this are released after a message instead of kept.
constexpr size_t keep_buffer_bytes = 64 * 1024;

/// Frames that start work on the node: refused while it drains.
bool starts_work(protocol::client_frame_type type) {
  using protocol::client_frame_type;
  return type == client_frame_type::send || type == client_frame_type::spawn
         || type == client_frame_type::cancel;
}

} // namespace

// -- token_bucket -------------------------------------------------------------

token_bucket::token_bucket(const rate_limit_config& cfg)
  : per_second_(cfg.per_second),
    burst_(static_cast<double>(std::max<size_t>(cfg.burst, 1))),
    tokens_(burst_),
    last_(std::chrono::steady_clock::now()) {
  // nop
}

bool token_bucket::take(std::chrono::steady_clock::time_point now) {
  if (per_second_ <= 0)
    return true;
  std::chrono::duration<double> elapsed = now - last_;
  last_ = now;
  tokens_ = std::min(burst_, tokens_ + elapsed.count() * per_second_);
  if (tokens_ < 1)
    return false;
  tokens_ -= 1;
  return true;
}

void token_bucket::charge(double n) {
  if (per_second_ > 0)
    tokens_ -= n;
}

// -- ws_session: lifetime -----------------------------------------------------

template <class Stream>
ws_session<Stream>::ws_session(server_impl* srv, connection_id id,
                               Stream&& stream)
  : srv_(srv),
    id_(id),
    ex_(stream.get_executor()),
    ws_(std::move(stream)),
    bucket_(srv->cfg().rate_limit) {
  // nop
}

template <class Stream>
ws_session<Stream>::~ws_session() {
  finish();
  set_queued(0);
}

template <class Stream>
void ws_session<Stream>::run(request req) {
  srv_->add(id_, std::weak_ptr<ws_link>{this->shared_from_this()});
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
  // Beast answers pings itself, before any frame reaches on_read: control
  // frames are charged to the rate limit here.
  ws_.control_callback([this](websocket::frame_type kind, beast::string_view) {
    on_control(kind);
  });
  ws_.read_message_max(srv_->cfg().max_frame_bytes);
  ws_.text(true);
  req_ = std::move(req);
  ws_.async_accept(*req_, beast::bind_front_handler(&ws_session::on_accept,
                                                    this->shared_from_this()));
}

template <class Stream>
void ws_session<Stream>::start_close(websocket::close_code code,
                                     const char* reason) {
  if (closing_ || finished_)
    return;
  closing_ = true;
  accepting_ = false;
  if (!opened_) {
    // Still in the handshake: there is no WebSocket to close yet.
    beast::get_lowest_layer(ws_).socket().close(ignored_);
    return;
  }
  guard_ = std::make_unique<net::steady_timer>(ws_.get_executor());
  guard_->expires_after(close_grace);
  guard_->async_wait([self = this->shared_from_this()](error_code err) {
    if (!err && !self->finished_)
      self->close_hard();
  });
  // Beast runs the close after a pending write; new writes stop here.
  ws_.async_close(websocket::close_reason{code, reason},
                  [self = this->shared_from_this()](error_code err) {
                    if (err)
                      self->close_hard();
                  });
}

template <class Stream>
void ws_session<Stream>::finish() {
  if (finished_)
    return;
  finished_ = true;
  accepting_ = false;
  drop_queue();
  if (guard_)
    guard_->cancel();
  if (write_timer_)
    write_timer_->cancel();
  srv_->remove_ws(id_);
  srv_->release_slot();
  if (opened_) {
    srv_->ws_closed();
    try {
      srv_->handler().on_close(id_);
    } catch (const std::exception& e) {
      std::cerr << "keel gateway: handler on_close threw: " << e.what() << '\n';
    }
  }
}

/// Keeps the server's total of queued bytes in step with this queue.
template <class Stream>
void ws_session<Stream>::set_queued(size_t bytes) {
  srv_->ctr().queued_bytes.fetch_add(
    static_cast<int64_t>(bytes) - static_cast<int64_t>(queued_bytes_.load()),
    std::memory_order_relaxed);
  queued_bytes_ = bytes;
}

template <class Stream>
void ws_session<Stream>::close_hard() {
  beast::get_lowest_layer(ws_).socket().close(ignored_);
}

/// Frees the queued frames, keeping the one being written: its buffer is in
/// use until the write completes (with an error once the socket is closed).
template <class Stream>
void ws_session<Stream>::drop_queue() {
  auto before = queued_bytes_.load();
  auto keep = writing_ && !queue_.empty() ? 1 : 0;
  queue_.erase(queue_.begin() + keep, queue_.end());
  set_queued(keep != 0 ? queue_.front().size() : 0);
  queue_.shrink_to_fit();
  release_memory(before - queued_bytes_);
}

template <class Stream>
void ws_session<Stream>::on_accept(error_code err) {
  req_.reset();
  if (err || closing_ || srv_->stopping()) {
    close_hard();
    finish();
    return;
  }
  opened_ = true;
  accepting_ = true;
  srv_->ws_opened();
  enqueue(protocol::hello_frame(srv_->node()));
  try {
    srv_->handler().on_open(id_);
  } catch (const std::exception& e) {
    std::cerr << "keel gateway: handler on_open threw: " << e.what() << '\n';
  }
  do_read();
}

// -- ws_session: reading ------------------------------------------------------

/// A ping or pong costs a token like any frame; one beyond the limit
/// closes the connection (1008): unlike a text frame it cannot be dropped
/// with an error frame, Beast has answered it already.
template <class Stream>
void ws_session<Stream>::on_control(websocket::frame_type kind) {
  if (kind == websocket::frame_type::close || closing_
      || bucket_.take(std::chrono::steady_clock::now()))
    return;
  srv_->ctr().rate_limited_frames.fetch_add(1, std::memory_order_relaxed);
  // Called inside Beast's read: close once it has returned.
  net::post(ex_, [self = this->shared_from_this()] {
    self->start_close(websocket::close_code::policy_error,
                      "rate limit exceeded by control frames");
  });
}

template <class Stream>
void ws_session<Stream>::do_read() {
  ws_.async_read(buf_, beast::bind_front_handler(&ws_session::on_read,
                                                 this->shared_from_this()));
}

template <class Stream>
void ws_session<Stream>::on_read(error_code err, size_t) {
  if (err) {
    // Closed by the peer, by us, too big (Beast sent 1009), invalid UTF-8
    // (Beast sent 1007), or the socket failed.
    close_hard();
    finish();
    return;
  }
  auto& ctr = srv_->ctr();
  ctr.frames_in.fetch_add(1, std::memory_order_relaxed);
  if (!bucket_.take(std::chrono::steady_clock::now())) {
    // Pings count too: answering them costs the node as much as any frame.
    ctr.rate_limited_frames.fetch_add(1, std::memory_order_relaxed);
    const auto& limit = srv_->cfg().rate_limit;
    enqueue(protocol::error_frame(
      "rate_limited",
      "too many frames: this node accepts "
        + fixed(limit.per_second,
                limit.per_second == static_cast<int64_t>(limit.per_second) ? 0
                                                                           : 2)
        + " per second per connection (bursts of " + std::to_string(limit.burst)
        + "); frame dropped"));
  } else if (!ws_.got_text()) {
    ctr.bad_frames.fetch_add(1, std::memory_order_relaxed);
    enqueue(protocol::error_frame("binary_frame",
                                  "binary frames are not supported; send "
                                  "JSON text frames"));
  } else {
    handle_text();
  }
  buf_.consume(buf_.size());
  if (buf_.capacity() > keep_buffer_bytes)
    buf_.shrink_to_fit();
  do_read();
}

template <class Stream>
void ws_session<Stream>::handle_text() {
  auto data = buf_.data();
  std::string_view text{static_cast<const char*>(data.data()), data.size()};
  auto result = protocol::decode_client_frame(text, srv_->limits());
  auto frame = std::get_if<protocol::client_frame>(&result);
  if (!frame) {
    srv_->ctr().bad_frames.fetch_add(1, std::memory_order_relaxed);
    enqueue(protocol::error_frame(std::get<protocol::frame_error>(result)));
    return;
  }
  if (frame->type == protocol::client_frame_type::ping) {
    enqueue(protocol::pong_frame(frame->id));
    return;
  }
  if (closing_)
    return;
  if (srv_->draining() && starts_work(frame->type)) {
    enqueue(protocol::error_frame("draining",
                                  "the node is stopping and takes no new "
                                  "work; send again to another node or "
                                  "after its restart",
                                  frame->id, frame->thread));
    return;
  }
  try {
    srv_->handler().on_frame(id_, std::move(*frame));
  } catch (const std::exception& e) {
    enqueue(protocol::error_frame(
      "internal",
      std::string{"the node failed to handle a frame: "} + e.what()));
  }
}

// -- ws_session: writing ------------------------------------------------------

template <class Stream>
void ws_session<Stream>::enqueue(std::string frame) {
  if (!opened_ || closing_ || finished_)
    return;
  log_if_internal("WebSocket", id_, frame);
  set_queued(queued_bytes_ + frame.size());
  queue_.push_back(std::move(frame));
  // One frame alone never counts as slow (a history page may be larger
  // than the cap); frames piling up behind it do.
  if (queued_bytes_ > srv_->cfg().max_queued_bytes && queue_.size() > 1) {
    overflow();
    return;
  }
  if (!writing_)
    do_write();
}

template <class Stream>
bool ws_session<Stream>::reserve(size_t bytes) {
  auto backlog = in_transit_.fetch_add(bytes) + queued_bytes_.load();
  if (backlog > 0 && backlog + bytes > srv_->cfg().max_queued_bytes) {
    in_transit_.fetch_sub(bytes);
    return false;
  }
  return true;
}

template <class Stream>
void ws_session<Stream>::deliver(std::string frame, bool answer) {
  in_transit_.fetch_sub(frame.size());
  if (answer)
    bucket_.charge(static_cast<double>(frame.size())
                   / static_cast<double>(answer_bytes_per_token));
  enqueue(std::move(frame));
}

template <class Stream>
void ws_session<Stream>::overflow() {
  if (closing_ || finished_)
    return;
  srv_->ctr().slow_client_disconnects.fetch_add(1, std::memory_order_relaxed);
  drop_queue();
  start_close(websocket::close_code::policy_error, "client too slow");
}

template <class Stream>
void ws_session<Stream>::do_write() {
  writing_ = true;
  arm_write_timer();
  ws_.async_write(net::buffer(queue_.front()),
                  beast::bind_front_handler(&ws_session::on_write,
                                            this->shared_from_this()));
}

/// Beast's timeouts cover idle reads only: a peer that stops reading would
/// hold its queue forever. A write that does not complete within
/// `write_timeout` closes the socket hard, which fails the write and frees
/// the queue.
template <class Stream>
void ws_session<Stream>::arm_write_timer() {
  if (!write_timer_)
    write_timer_ = std::make_unique<net::steady_timer>(ex_);
  write_timer_->expires_after(srv_->cfg().write_timeout);
  write_timer_->async_wait([self = this->shared_from_this()](error_code err) {
    if (err || !self->writing_ || self->finished_)
      return;
    self->srv_->ctr().slow_client_disconnects.fetch_add(
      1, std::memory_order_relaxed);
    self->closing_ = true;
    self->accepting_ = false;
    self->drop_queue();
    self->close_hard();
  });
}

template <class Stream>
void ws_session<Stream>::on_write(error_code err, size_t) {
  writing_ = false;
  if (write_timer_)
    write_timer_->cancel();
  if (err) {
    // The pending read fails too once the socket is closed.
    close_hard();
    auto freed = queued_bytes_.load();
    queue_.clear();
    queue_.shrink_to_fit();
    set_queued(0);
    release_memory(freed);
    return;
  }
  srv_->ctr().frames_out.fetch_add(1, std::memory_order_relaxed);
  if (!queue_.empty()) {
    set_queued(queued_bytes_ - queue_.front().size());
    queue_.pop_front();
  }
  if (!queue_.empty() && !closing_)
    do_write();
}

template class ws_session<plain_stream>;
template class ws_session<tls_stream>;

} // namespace keel::gateway
