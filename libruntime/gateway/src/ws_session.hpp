#pragma once

// One WebSocket connection, over a plain or a TLS stream: the greeting, the
// read loop with its rate limit, the bounded send queue with its write
// timeout, and the close.

#include <atomic>
#include <deque>
#include <memory>
#include <optional>
#include <string>

#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>

#include "server_impl.hpp"

namespace keel::gateway {

using request = http::request<http::string_body>;
using plain_stream = beast::tcp_stream;
using tls_stream = beast::ssl_stream<beast::tcp_stream>;

/// A token bucket: `take` succeeds while the client stays within `per_second`
/// frames on average and `burst` at once.
class token_bucket {
public:
  explicit token_bucket(const rate_limit_config& cfg);

  /// Takes one token; false when the bucket is empty (always true when the
  /// limit is off).
  bool take(std::chrono::steady_clock::time_point now);

  /// Takes `n` tokens at once, below zero if need be: frames are refused
  /// until the bucket has refilled past one (nothing when the limit is
  /// off).
  void charge(double n);

private:
  double per_second_;
  double burst_;
  double tokens_;
  std::chrono::steady_clock::time_point last_;
};

template <class Stream>
class ws_session : public ws_link,
                   public std::enable_shared_from_this<ws_session<Stream>> {
public:
  ws_session(server_impl* srv, connection_id id, Stream&& stream);

  ~ws_session() override;

  const executor_type& executor() const override {
    return ex_;
  }

  /// Completes the upgrade for `req`. The connection holds a slot.
  void run(request req);

  void enqueue(std::string frame) override;

  bool accepting() const override {
    return accepting_.load();
  }

  bool reserve(size_t bytes) override;

  void deliver(std::string frame, bool answer) override;

  void overflow() override;

  void start_close(websocket::close_code code, const char* reason) override;

  void finish() override;

private:
  void drop_queue();
  void set_queued(size_t bytes);
  void close_hard();
  void on_accept(error_code err);
  void on_control(websocket::frame_type kind);
  void do_read();
  void on_read(error_code err, size_t);
  void handle_text();
  void do_write();
  void arm_write_timer();
  void on_write(error_code err, size_t);

  server_impl* srv_;
  connection_id id_;
  const executor_type ex_;
  websocket::stream<Stream> ws_;
  beast::flat_buffer buf_;
  std::optional<request> req_;
  std::deque<std::string> queue_;
  /// Bytes of the frames in `queue_` (changed only through `set_queued`,
  /// on the strand; `reserve` reads it from other threads).
  std::atomic<size_t> queued_bytes_{0};
  /// Bytes of frames `reserve` counted on their way to the queue.
  std::atomic<size_t> in_transit_{0};
  /// Open and not closing: frames for it are taken.
  std::atomic<bool> accepting_{false};
  token_bucket bucket_;
  std::unique_ptr<net::steady_timer> guard_;
  std::unique_ptr<net::steady_timer> write_timer_;
  error_code ignored_;
  bool writing_ = false;
  bool closing_ = false;
  bool opened_ = false;
  bool finished_ = false;
};

extern template class ws_session<plain_stream>;
extern template class ws_session<tls_stream>;

} // namespace keel::gateway
