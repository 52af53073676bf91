#include "keel/compat_render.hpp"

#include "event_format.hpp"
#include "json_text.hpp"

namespace keel::compat {

namespace format {

std::string event(api wire, const json& data) {
  auto text = json_text(data);
  if (wire == api::openai)
    return "data: " + text + "\n\n";
  return "event: " + data.value("type", "") + "\ndata: " + text + "\n\n";
}

std::string comment(std::string_view text) {
  return ": " + std::string{text} + "\n\n";
}

json keel_member(const exchange_info& info, const json& reply) {
  return {{"thread", info.thread},
          {"seq", info.seq},
          {"reply_seq", reply.value("seq", uint64_t{0})},
          {"provider", reply.value("provider", "")},
          {"duplicate", info.duplicate}};
}

std::pair<uint64_t, uint64_t> tokens_of(const json& reply) {
  auto usage = reply.value("usage", json::object());
  if (!usage.is_object())
    return {0, 0};
  return {usage.value("input_tokens", uint64_t{0}),
          usage.value("output_tokens", uint64_t{0})};
}

} // namespace format

using json = nlohmann::json;

namespace {

/// True if `frame` is about the message `info` answers.
bool about(const exchange_info& info, const json& frame) {
  return frame.value("thread", "") == info.thread
         && frame.value("reply_to", uint64_t{0}) == info.seq;
}

api_error outcome_of(const exchange_info& info, const json& frame) {
  return outcome_error(info.wire, frame.value("code", "internal"),
                       frame.value("message", ""));
}

} // namespace

std::string answer_id(const exchange_info& info) {
  auto name = info.thread + "." + std::to_string(info.seq);
  return info.wire == api::openai ? "chatcmpl-" + name : "msg_" + name;
}

http_answer final_answer(const exchange_info& info, const json& outcome) {
  http_answer result;
  if (outcome.value("type", "") == "reply") {
    auto body = info.wire == api::openai
                  ? format::openai_body(info, outcome)
                  : format::anthropic_body(info, outcome);
    result.body = json_text(body);
    return result;
  }
  auto err = outcome_of(info, outcome);
  result.status = err.status;
  result.body = error_body(info.wire, err, info.request_id);
  result.should_retry = err.should_retry;
  result.retry_after = err.retry_after;
  return result;
}

stream_writer::stream_writer(exchange_info info) : info_(std::move(info)) {
  // nop
}

std::string stream_writer::open() {
  auto ack = "keel-ack thread=" + info_.thread
             + " seq=" + std::to_string(info_.seq)
             + " duplicate=" + (info_.duplicate ? "true" : "false");
  return format::comment(ack)
         + (info_.wire == api::openai ? format::openai_open(info_)
                                      : format::anthropic_open(info_));
}

std::string stream_writer::on_frame(const json& frame) {
  if (done_ || !frame.is_object() || !about(info_, frame))
    return {};
  auto type = frame.value("type", "");
  if (type == "delta")
    return on_delta(frame);
  if (type == "reply")
    return on_reply(frame);
  if (type == "error") {
    done_ = true;
    return error_event(info_.wire, outcome_of(info_, frame), info_.request_id);
  }
  if (type == "status") {
    auto state = frame.value("state", "");
    if (state == "stream_interrupted" && !sent_.empty())
      return interrupted();
    return format::comment("keel-status " + state);
  }
  if (type == "tool")
    return format::comment("keel-tool " + frame.value("tool", ""));
  return {};
}

std::string stream_writer::on_delta(const json& frame) {
  auto attempt = frame.value("attempt", uint64_t{1});
  if (attempt != attempt_) {
    // A later attempt starts the answer over: fine while none of the
    // earlier one went out.
    if (!sent_.empty())
      return interrupted();
    attempt_ = attempt;
  }
  auto text = frame.value("text", "");
  if (text.empty())
    return {};
  sent_ += text;
  return info_.wire == api::openai ? format::openai_text(info_, text)
                                   : format::anthropic_text(info_, text);
}

std::string stream_writer::on_reply(const json& frame) {
  auto text = frame.value("text", "");
  // The stored answer is the truth: what went out must begin it.
  if (text.compare(0, sent_.size(), sent_) != 0)
    return interrupted();
  std::string result;
  if (text.size() > sent_.size()) {
    auto rest = std::string_view{text}.substr(sent_.size());
    result = info_.wire == api::openai ? format::openai_text(info_, rest)
                                       : format::anthropic_text(info_, rest);
  }
  done_ = true;
  return result
         + (info_.wire == api::openai ? format::openai_finish(info_, frame)
                                      : format::anthropic_finish(info_, frame));
}

std::string stream_writer::interrupted() {
  api_error err;
  err.status = 502;
  err.type = "server_error";
  err.code = "stream_interrupted";
  err.message = "the answer was cut off; send the request again with the "
                "same Idempotency-Key for the complete answer";
  err.should_retry = true;
  return fail(err);
}

std::string stream_writer::fail(const api_error& err) {
  done_ = true;
  return error_event(info_.wire, err, info_.request_id);
}

std::string stream_writer::keepalive() const {
  if (info_.wire == api::openai)
    return format::comment("keep-alive");
  return format::event(api::anthropic, {{"type", "ping"}});
}

} // namespace keel::compat
