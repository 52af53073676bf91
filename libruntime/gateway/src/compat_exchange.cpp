#include "compat_exchange.hpp"

#include "keel/compat_history.hpp"
#include "keel/protocol.hpp"
#include "keel/text.hpp"

namespace keel::gateway {

namespace {

using json = nlohmann::json;

/// The correlation id of the history requests an exchange makes.
constexpr const char* history_id = "keel-compat-history";

} // namespace

template <class Stream>
compat_exchange<Stream>::compat_exchange(server_impl* srv, session_ptr session,
                                         compat::compat_call call,
                                         std::string request_id)
  : srv_(srv),
    session_(std::move(session)),
    call_(std::move(call)),
    request_id_(std::move(request_id)),
    wait_timer_(session_->executor()),
    keepalive_timer_(session_->executor()) {
  info_.wire = call_.wire;
  info_.model = call_.model;
  info_.thread = call_.thread;
  info_.include_usage = call_.include_usage;
  info_.request_id = request_id_;
  info_.created = wall_clock_millis() / 1000;
}

template <class Stream>
void compat_exchange<Stream>::start() {
  conn_ = srv_->next_connection_id();
  srv_->add(conn_, std::weak_ptr<ws_link>{this->shared_from_this()});
  srv_->handler().on_open(conn_);
  protocol::client_frame send;
  send.type = protocol::client_frame_type::send;
  send.thread = call_.thread;
  send.id = call_.message_id;
  send.text = call_.text;
  // `default` names whichever agent the node answers with by default.
  if (call_.model != "default")
    send.agent = call_.model;
  srv_->handler().on_frame(conn_, std::move(send));
  wait_timer_.expires_after(srv_->cfg().compat.wait_timeout);
  wait_timer_.async_wait([self = this->shared_from_this()](error_code err) {
    if (err || self->finished_)
      return;
    self->fail(compat::refusal(self->info_.wire, "timeout",
                               "no outcome within gateway.compat."
                               "wait_timeout; send the request again with "
                               "the same Idempotency-Key to join the turn"));
  });
}

// -- frames from the handler --------------------------------------------------

template <class Stream>
void compat_exchange<Stream>::on_frame(const json& frame) {
  auto type = frame.value("type", "");
  auto id = frame.value("id", "");
  if (type == "ack" && id == call_.message_id)
    return on_ack(frame);
  if (type == "history" && id == history_id)
    return on_history(frame);
  if (type == "error" && !frame.contains("reply_to")
      && (id == call_.message_id || id == history_id))
    return fail(compat::refusal(info_.wire, frame.value("code", "internal"),
                                frame.value("message", "")));
  if (!acked_ || !checked_) {
    // The thread's events may overtake the ack, and a duplicate's wait for
    // its history check: kept for after them.
    early_.push_back(frame);
    return;
  }
  if (writer_) {
    write(writer_->on_frame(frame));
    if (writer_->done())
      end_stream();
    return;
  }
  if (answered_)
    return;
  auto reply_to = frame.value("reply_to", uint64_t{0});
  if ((type == "reply" || type == "error") && reply_to == info_.seq
      && frame.value("thread", "") == info_.thread)
    on_outcome(frame);
}

template <class Stream>
void compat_exchange<Stream>::on_ack(const json& frame) {
  acked_ = true;
  info_.seq = frame.value("seq", uint64_t{0});
  info_.duplicate = frame.value("duplicate", false);
  checked_ = !info_.duplicate;
  if (info_.duplicate) {
    // Answered already, in flight, or sent with another text: the history
    // tells.
    ask_history(info_.seq - 1);
    return;
  }
  if (call_.stream)
    open_stream();
  replay_early();
}

template <class Stream>
void compat_exchange<Stream>::replay_early() {
  auto frames = std::move(early_);
  early_.clear();
  for (auto& frame : frames)
    on_frame(frame);
}

template <class Stream>
void compat_exchange<Stream>::ask_history(uint64_t after) {
  protocol::client_frame f;
  f.type = protocol::client_frame_type::history;
  f.id = history_id;
  f.thread = info_.thread;
  f.after = after;
  f.limit = protocol::max_history_limit;
  srv_->handler().on_frame(conn_, std::move(f));
}

template <class Stream>
void compat_exchange<Stream>::on_history(const json& frame) {
  auto found = compat::find_message(frame, info_.thread, info_.seq);
  if (found.text && *found.text != call_.text)
    return fail(compat::refusal(info_.wire, "idempotency_key_reused",
                                "this Idempotency-Key was sent with another "
                                "message; use a new key for a new message"));
  if (!found.outcome && found.more)
    return ask_history(found.last_seq);
  checked_ = true;
  if (call_.stream)
    open_stream();
  if (found.outcome)
    on_frame(*found.outcome);
  // Still in flight: its outcome comes as it would.
  replay_early();
}

template <class Stream>
void compat_exchange<Stream>::on_outcome(const json& frame) {
  auto result = compat::final_answer(info_, frame);
  compat::api_error hint;
  hint.should_retry = result.should_retry;
  hint.retry_after = result.retry_after;
  auto fields = common_fields();
  if (result.status != 200)
    for (auto& field : compat::retry_headers(hint))
      fields.push_back(std::move(field));
  answer(result.status, std::move(result.body), std::move(fields));
}

template <class Stream>
void compat_exchange<Stream>::fail(const compat::api_error& err) {
  if (writer_) {
    write(writer_->fail(err));
    end_stream();
    return;
  }
  if (answered_)
    return;
  auto fields = common_fields();
  for (auto& field : compat::retry_headers(err))
    fields.push_back(std::move(field));
  answer(err.status, compat::error_body(info_.wire, err, request_id_),
         std::move(fields));
}

template <class Stream>
void compat_exchange<Stream>::answer(unsigned status, std::string body,
                                     header_fields fields) {
  answered_ = true;
  session_->answer(status, "application/json", std::move(body), fields);
  finish();
}

template <class Stream>
header_fields compat_exchange<Stream>::common_fields() const {
  header_fields result{{"x-request-id", request_id_},
                       {"Keel-Thread", info_.thread}};
  if (info_.wire == compat::api::anthropic)
    result.emplace_back("request-id", request_id_);
  if (acked_)
    result.emplace_back("Keel-Seq", std::to_string(info_.seq));
  if (info_.duplicate)
    result.emplace_back("Keel-Duplicate", "true");
  if (!call_.earlier.empty())
    result.emplace_back("Keel-Ignored-Messages",
                        std::to_string(call_.earlier.size()));
  return result;
}

// -- the stream ---------------------------------------------------------------

template <class Stream>
void compat_exchange<Stream>::open_stream() {
  if (writer_)
    return;
  answered_ = true;
  writer_.emplace(info_);
  head_.result(http::status::ok);
  head_.version(session_->version());
  head_.set(http::field::server, "keel");
  head_.set(http::field::content_type, "text/event-stream");
  head_.set(http::field::cache_control, "no-cache");
  for (auto& [name, value] : common_fields())
    head_.set(name, value);
  head_.keep_alive(session_->keep_alive());
  head_.chunked(true);
  serializer_.emplace(head_);
  auto& stream = session_->stream();
  beast::get_lowest_layer(stream).expires_after(srv_->cfg().write_timeout);
  http::async_write_header(stream, *serializer_,
                           [self = this->shared_from_this()](error_code err,
                                                             size_t) {
                             self->head_written_ = true;
                             self->on_written(err, false);
                           });
  writing_ = true;
  write(writer_->open());
  arm_keepalive();
}

template <class Stream>
void compat_exchange<Stream>::write(std::string events) {
  if (ending_ || events.empty())
    return;
  queue(std::move(events));
}

template <class Stream>
void compat_exchange<Stream>::end_stream() {
  if (ending_)
    return;
  queue({}); // The empty piece stands for the last chunk.
  ending_ = true;
}

template <class Stream>
void compat_exchange<Stream>::queue(std::string events) {
  queued_bytes_ += events.size();
  queue_.push_back(std::move(events));
  if (queued_bytes_ > srv_->cfg().max_queued_bytes && queue_.size() > 1)
    return overflow();
  if (!writing_)
    do_write();
}

template <class Stream>
void compat_exchange<Stream>::do_write() {
  writing_ = true;
  auto& stream = session_->stream();
  beast::get_lowest_layer(stream).expires_after(srv_->cfg().write_timeout);
  auto done = [self = this->shared_from_this()](error_code err, size_t) {
    self->on_written(err, true);
  };
  if (queue_.front().empty())
    net::async_write(stream, http::make_chunk_last(), std::move(done));
  else
    net::async_write(stream, http::make_chunk(net::buffer(queue_.front())),
                     std::move(done));
}

template <class Stream>
void compat_exchange<Stream>::on_written(error_code err, bool chunk) {
  writing_ = false;
  if (err) {
    // The client went away; the turn goes on without it.
    queue_.clear();
    keepalive_timer_.cancel();
    session_->resume(false);
    finish();
    return;
  }
  if (chunk) {
    auto last = queue_.front().empty();
    queued_bytes_ -= queue_.front().size();
    queue_.pop_front();
    if (last) {
      keepalive_timer_.cancel();
      session_->resume(head_.keep_alive());
      finish();
      return;
    }
  }
  if (!queue_.empty())
    do_write();
  else
    beast::get_lowest_layer(session_->stream()).expires_never();
}

template <class Stream>
void compat_exchange<Stream>::arm_keepalive() {
  keepalive_timer_.expires_after(srv_->cfg().compat.keepalive);
  keepalive_timer_.async_wait(
    [self = this->shared_from_this()](error_code err) {
      if (err || self->ending_)
        return;
      if (self->queue_.empty())
        self->write(self->writer_->keepalive());
      self->arm_keepalive();
    });
}

// -- the link -----------------------------------------------------------------

template <class Stream>
const executor_type& compat_exchange<Stream>::executor() const {
  return session_->executor();
}

template <class Stream>
void compat_exchange<Stream>::enqueue(std::string frame) {
  auto parsed = json::parse(frame, nullptr, false);
  if (parsed.is_object())
    on_frame(parsed);
}

template <class Stream>
bool compat_exchange<Stream>::accepting() const {
  return !finished_;
}

template <class Stream>
bool compat_exchange<Stream>::reserve(size_t) {
  // The stream's queue is bounded where it is written (`write`).
  return true;
}

template <class Stream>
void compat_exchange<Stream>::deliver(std::string frame, bool) {
  enqueue(std::move(frame));
}

template <class Stream>
void compat_exchange<Stream>::overflow() {
  srv_->ctr().slow_client_disconnects.fetch_add(1, std::memory_order_relaxed);
  queue_.clear();
  ending_ = true;
  keepalive_timer_.cancel();
  session_->shutdown();
  finish();
}

template <class Stream>
void compat_exchange<Stream>::start_close(websocket::close_code, const char*) {
  fail(compat::refusal(info_.wire, "unavailable", "the node is stopping"));
}

template <class Stream>
void compat_exchange<Stream>::finish() {
  if (finished_)
    return;
  finished_ = true;
  wait_timer_.cancel();
  srv_->remove_ws(conn_);
  srv_->handler().on_close(conn_);
}

template class compat_exchange<plain_stream>;
template class compat_exchange<tls_stream>;

} // namespace keel::gateway
