// Client frame decoding (keel::protocol::decode_client_frame), the first
// thing the gateway does with a client's text frame. Properties: no
// exception escapes; a valid frame obeys the documented field rules and
// limits, and re-encoding it with the client encoders decodes to the same
// frame; a refusal has a documented code and a message, and its error frame
// is a valid server frame carrying the same code.

#include <algorithm>
#include <iterator>

#include "fuzz_check.hpp"
#include "keel/protocol.hpp"
#include "keel/types.hpp"

using namespace keel;
using namespace keel::protocol;
using keel::fuzz::require;

namespace {

constexpr decode_limits limits{4096};

std::string encode(const client_frame& x) {
  switch (x.type) {
    case client_frame_type::send: return send_frame(x.thread, x.id, x.text);
    case client_frame_type::subscribe: return subscribe_frame(x.thread, x.id);
    case client_frame_type::unsubscribe:
      return unsubscribe_frame(x.thread, x.id);
    case client_frame_type::history:
      return history_request_frame(x.thread, x.id, x.after, x.limit);
    case client_frame_type::spawn: return spawn_frame(x.thread, x.child, x.id);
    case client_frame_type::cancel: return cancel_frame(x.thread, x.id);
    case client_frame_type::ping: return ping_frame(x.id);
  }
  keel::fuzz::fail("decoded an unknown frame type");
}

bool same(const client_frame& x, const client_frame& y) {
  return x.type == y.type && x.id == y.id && x.thread == y.thread
         && x.text == y.text && x.after == y.after && x.limit == y.limit
         && x.child == y.child;
}

void check_valid(const client_frame& x) {
  auto type = x.type;
  bool needs_id = type == client_frame_type::send
                  || type == client_frame_type::spawn;
  require(x.id.empty() ? !needs_id : valid_client_id(x.id),
          "a decoded frame's id is missing or invalid");
  require(!reserved_client_id(x.id), "a decoded frame has a reserved id");
  require(type == client_frame_type::ping ? x.thread.empty()
                                          : valid_thread_id(x.thread),
          "a decoded frame's thread is invalid");
  require(type != client_frame_type::send
            || (!x.text.empty() && x.text.size() <= limits.max_text_bytes),
          "a decoded send's text is empty or over the limit");
  require(x.limit >= 1 && x.limit <= max_history_limit,
          "a decoded history limit is out of range");
  require(type != client_frame_type::spawn
            || (valid_thread_id(x.child) && x.child != x.thread),
          "a decoded spawn's child is invalid");
  auto again = decode_client_frame(encode(x), limits);
  auto* y = std::get_if<client_frame>(&again);
  require(y != nullptr, "a re-encoded valid frame does not decode");
  require(same(x, *y), "a re-encoded frame decodes to another frame");
}

void check_refused(const frame_error& err) {
  static constexpr std::string_view codes[]
    = {"bad_json",  "bad_frame", "unknown_type", "missing_field", "wrong_type",
       "bad_value", "too_large", "invalid_utf8", "bad_request"};
  require(std::find(std::begin(codes), std::end(codes), err.code)
            != std::end(codes),
          "a refusal has an undocumented code");
  require(!err.message.empty(), "a refusal has no message");
  require(err.id.empty() || valid_client_id(err.id),
          "a refusal echoes an invalid id");
  require(err.thread.empty() || valid_thread_id(err.thread),
          "a refusal echoes an invalid thread");
  auto frame = decode_server_frame(error_frame(err));
  require(frame && frame->type == "error"
            && frame->body.value("code", "") == err.code,
          "the error frame of a refusal is not a valid server frame");
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return keel::fuzz::guarded([&] {
    auto result = decode_client_frame(keel::fuzz::as_text(data, size), limits);
    if (auto* frame = std::get_if<client_frame>(&result))
      check_valid(*frame);
    else
      check_refused(std::get<frame_error>(result));
  });
}
