#pragma once

// One request of the compatible API (`POST /v1/chat/completions`,
// `POST /v1/messages`) carried out on its HTTP connection. To the handler
// it is a client connection of its own: it opens, sends the message as a
// `send` frame, receives the thread's frames like a WebSocket client and
// closes when the request is answered. What goes out is keel::compat's:
// the whole body once the outcome is in, or server-sent events as the turn
// goes on. The client going away never cancels the turn.

#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "keel/compat_render.hpp"
#include "keel/compat_request.hpp"

#include "http_session.hpp"

namespace keel::gateway {

template <class Stream>
class compat_exchange
  : public ws_link,
    public std::enable_shared_from_this<compat_exchange<Stream>> {
public:
  using session_ptr = std::shared_ptr<http_session<Stream>>;

  compat_exchange(server_impl* srv, session_ptr session,
                  compat::compat_call call, std::string request_id);

  /// Opens the virtual connection and sends the message.
  void start();

  const executor_type& executor() const override;
  void enqueue(std::string frame) override;
  bool accepting() const override;
  bool reserve(size_t bytes) override;
  void deliver(std::string frame, bool answer) override;
  void overflow() override;
  void start_close(websocket::close_code code, const char* reason) override;
  void finish() override;

private:
  void on_frame(const nlohmann::json& frame);
  void on_ack(const nlohmann::json& frame);
  void on_history(const nlohmann::json& frame);
  void on_outcome(const nlohmann::json& frame);
  void ask_history(uint64_t after);
  void fail(const compat::api_error& err);
  void answer(unsigned status, std::string body, header_fields fields);
  void open_stream();
  void replay_early();
  void write(std::string events);
  void end_stream();
  void queue(std::string events);
  void do_write();
  void on_written(error_code err, bool chunk);
  void arm_keepalive();
  header_fields common_fields() const;

  server_impl* srv_;
  session_ptr session_;
  compat::compat_call call_;
  compat::exchange_info info_;
  std::string request_id_;
  connection_id conn_ = 0;
  net::steady_timer wait_timer_;
  net::steady_timer keepalive_timer_;
  std::optional<compat::stream_writer> writer_;
  /// Acknowledged; `seq` in `info_`.
  bool acked_ = false;
  /// A duplicate's history was checked (its text, its stored outcome);
  /// true at once for a new message.
  bool checked_ = false;
  /// The thread's frames that came before the ack and the check.
  std::vector<nlohmann::json> early_;
  /// The answer (a body or a stream's head) went out or is on its way.
  bool answered_ = false;
  bool finished_ = false;
  // The stream: its head, and the chunks queued behind the one in flight.
  http::response<http::empty_body> head_;
  std::optional<http::response_serializer<http::empty_body>> serializer_;
  std::deque<std::string> queue_;
  size_t queued_bytes_ = 0;
  bool writing_ = false;
  bool head_written_ = false;
  bool ending_ = false;
};

extern template class compat_exchange<plain_stream>;
extern template class compat_exchange<tls_stream>;

} // namespace keel::gateway
