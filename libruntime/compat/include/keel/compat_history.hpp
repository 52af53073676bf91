#pragma once

// A duplicate request finds its message in the thread's history: the text
// it was sent with (the same key with another text is refused) and, if the
// message was answered already, its outcome in the form of the frame the
// thread sent then (docs/protocol.md#history).

#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace keel::compat {

/// What a history page says of one message.
struct message_record {
  /// The message's text, if the page holds the message.
  std::optional<std::string> text;
  /// Its outcome as a `reply` or `error` frame (with `reply_to`), if the
  /// page holds it.
  std::optional<nlohmann::json> outcome;
  /// The page's last seq and whether entries follow it.
  uint64_t last_seq = 0;
  bool more = false;
};

/// Looks for message `seq` of `thread` and its outcome in a `history`
/// frame.
message_record find_message(const nlohmann::json& page,
                            const std::string& thread, uint64_t seq);

} // namespace keel::compat
