#pragma once

// The outbound channels' formats: what Keel sends through a channel and
// what the answer means. Pure: the sending is `keel/channel_client.hpp`'s.
//
// webhook: `POST url` with a JSON event, a reply
//   {"event":"reply","id":KEY,"thread":T,"seq":N,"reply_to":M,"text":...,
//    "at":MS}
// or a notice to the owner
//   {"event":"notice","id":KEY,"kind":K,"severity":S,"subject":...,
//    "text":...,"at":MS}
// and the headers `Idempotency-Key: KEY`, `X-Keel-Event: reply`,
// `X-Keel-Timestamp: UNIX_SECONDS` and, with a secret,
// `X-Keel-Signature: sha256=HEX`, the HMAC-SHA256 of
// `timestamp + "." + body` under the secret. Any 2xx is the delivery.
//
// telegram: `POST url/bot<token>/sendMessage` with
//   {"chat_id":..., "text":..., "parse_mode":...}
// (`Idempotency-Key` too, which the Bot API ignores and a relay may use).
// A notice goes as plain text, "[SEVERITY] KIND: SUBJECT" and its text.
// `{"ok":true,...}` is the delivery.
//
// The idempotency key is the same for every attempt of one message to one
// channel, across restarts, so a receiver can drop repeats.

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "keel/config.hpp"
#include "keel/delivery_policy.hpp"
#include "keel/http_response.hpp"
#include "keel/types.hpp"

namespace keel {

/// One message for a channel.
struct outbound_message {
  /// The event type (`X-Keel-Event`): "reply" or "notice".
  std::string event = "reply";
  /// The idempotency key (see `reply_idempotency_key`).
  std::string id;
  std::string thread;
  /// The reply's log entry, and the user message it answers.
  seq_t seq = 0;
  seq_t reply_to = 0;
  std::string text;
  /// When the reply was committed (the notice raised).
  epoch_ms at = 0;
  /// A notice's kind, severity and subject.
  std::string kind;
  std::string severity;
  std::string subject;
};

/// The message of notice `x` (its idempotency key
/// `keel:notice:KIND:SUBJECT:AT`).
outbound_message notice_message(const owner_notice& x);

/// The idempotency key of reply `seq` of `thread` on `channel`:
/// `keel:CHANNEL:THREAD:SEQ`.
std::string reply_idempotency_key(const std::string& channel,
                                  const std::string& thread, seq_t seq);

/// One HTTP send: the body and the headers besides the fixed ones.
struct channel_send {
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;
};

/// Builds the send of `msg` to `cfg` at `now`; `plain_text`: Telegram gets
/// the text with its Markdown stripped and no `parse_mode`.
channel_send build_send(const channel_config& cfg, const outbound_message& msg,
                        bool plain_text, epoch_ms now);

/// The URL sends to `cfg` go to (Telegram's includes the token: never log
/// it).
std::string send_url(const channel_config& cfg);

/// What one send came to.
struct send_result {
  bool delivered = false;
  /// Why not, when not delivered.
  send_failure failure;
  /// One line for logs and dead letters, without secrets (e.g. "HTTP 429
  /// from 127.0.0.1:9000: Too Many Requests: retry after 2").
  std::string description;
};

/// Reads the answer of a send to a channel of `kind` at `peer` ("host:port",
/// named in the description): a 2xx (Telegram: with `"ok": true`)
/// delivers; 429, 408, 5xx, timeouts and cut connections are transient
/// (Retry-After from the header, or Telegram's `parameters.retry_after`);
/// Telegram's 400 "can't parse entities" is a parse error; any other answer
/// is a rejection (an answer cut short still counts by its status).
send_result read_send_answer(channel_kind kind, const http_result& answer,
                             std::string_view peer);

/// Lowercase hex HMAC-SHA256 of `data` under `key`.
std::string hmac_sha256_hex(std::string_view key, std::string_view data);

} // namespace keel
