#include "keel/compat_history.hpp"

namespace keel::compat {

using json = nlohmann::json;

namespace {

/// The frame the thread sent for outcome entry `entry`: `reply` with the
/// turn's usage, or the `error` it stored.
json outcome_frame_of(const json& entry, const std::string& thread) {
  json frame{{"type", entry.value("kind", "")},
             {"thread", thread},
             {"seq", entry.value("seq", uint64_t{0})},
             {"reply_to", entry.value("reply_to", uint64_t{0})},
             {"id", entry.value("client_id", "")}};
  if (frame["type"] == "error") {
    frame["code"] = entry.value("code", "");
    frame["message"] = entry.value("text", "");
    return frame;
  }
  frame["text"] = entry.value("text", "");
  frame["provider"] = entry.value("provider", "");
  frame["usage"]
    = {{"input_tokens", entry.value("input_tokens", uint64_t{0})},
       {"output_tokens", entry.value("output_tokens", uint64_t{0})}};
  return frame;
}

} // namespace

message_record find_message(const json& page, const std::string& thread,
                            uint64_t seq) {
  message_record result;
  result.more = page.value("more", false);
  auto entries = page.value("entries", json::array());
  for (auto& entry : entries) {
    if (!entry.is_object())
      continue;
    auto at = entry.value("seq", uint64_t{0});
    result.last_seq = std::max(result.last_seq, at);
    auto kind = entry.value("kind", "");
    if (kind == "user" && at == seq)
      result.text = entry.value("text", "");
    else if ((kind == "reply" || kind == "error")
             && entry.value("reply_to", uint64_t{0}) == seq)
      result.outcome = outcome_frame_of(entry, thread);
  }
  return result;
}

} // namespace keel::compat
