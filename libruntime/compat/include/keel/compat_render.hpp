#pragma once

// Answers of the OpenAI- and Anthropic-compatible HTTP API, rendered from
// the frames Keel sends a client about its message (docs/protocol.md):
// the whole body once the outcome is in, or a stream of server-sent events
// as the turn goes on. Pure: the gateway writes what this returns.

#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "keel/compat_errors.hpp"

namespace keel::compat {

/// What an answer says of the Keel message it answers.
struct exchange_info {
  api wire = api::openai;
  /// The model as the request named it.
  std::string model;
  std::string thread;
  /// The message's seq (from its ack): answers are named after it, so a
  /// duplicate gets the same id.
  uint64_t seq = 0;
  /// The message was a duplicate of one Keel had.
  bool duplicate = false;
  /// Unix seconds of the answer (`created`).
  int64_t created = 0;
  /// OpenAI streams: a usage chunk before `[DONE]`.
  bool include_usage = false;
  /// The request's `x-request-id`, quoted in Anthropic's error bodies.
  std::string request_id;
};

/// The answer's id: `chatcmpl-THREAD.SEQ` or `msg_THREAD.SEQ`.
std::string answer_id(const exchange_info& info);

/// A non-streamed answer: the status, the body, and the retry hint.
struct http_answer {
  unsigned status = 200;
  std::string body;
  bool should_retry = false;
  uint32_t retry_after = 0;
};

/// The answer to a non-streamed request from its outcome frame (a `reply`,
/// or an `error` with `reply_to`): a chat.completion or message body, or
/// the outcome's error.
http_answer final_answer(const exchange_info& info,
                         const nlohmann::json& outcome);

/// The events of a streamed answer. Frames about other messages are left
/// out. Text goes out as it arrives; if an attempt is cut after some of it
/// went out, the stream ends with the error `stream_interrupted` (chunks
/// cannot be taken back; a resend with the same key gets the whole
/// answer), never with a partial answer passed off as complete.
class stream_writer {
public:
  explicit stream_writer(exchange_info info);

  /// The events that open the stream, once the message is acknowledged.
  std::string open();

  /// The events for one frame of the thread; empty if none.
  std::string on_frame(const nlohmann::json& frame);

  /// A keep-alive while nothing else goes out: OpenAI's `: keep-alive`
  /// comment, Anthropic's `ping` event.
  std::string keepalive() const;

  /// An error before the outcome (the wait timed out, the node stops): its
  /// event; the stream is done.
  std::string fail(const api_error& err);

  /// True once the stream is complete: nothing more goes out.
  bool done() const {
    return done_;
  }

private:
  std::string on_delta(const nlohmann::json& frame);
  std::string on_reply(const nlohmann::json& frame);
  std::string interrupted();

  exchange_info info_;
  /// The attempt whose text went out; 0 before any.
  uint64_t attempt_ = 0;
  /// The text that went out.
  std::string sent_;
  bool done_ = false;
};

} // namespace keel::compat
