#pragma once

// Requests of the OpenAI- and Anthropic-compatible HTTP API as Keel
// messages: which thread, which message id, which agent,
// the new user message, and how the client wants the answer. Reading is
// pure; the gateway acts on the result.

#include <cstdint>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "keel/compat_errors.hpp"

namespace keel::compat {

/// The request's header fields that concern Keel.
struct request_headers {
  /// `Keel-Thread`.
  std::string thread;
  /// `Idempotency-Key`.
  std::string idempotency_key;
  /// `X-Stainless-Retry-Count`: the SDKs' retry number (0 on a first try).
  uint32_t retry_count = 0;
};

/// One earlier message of the request: with a thread it is ignored (the
/// thread's stored context is the truth); without one it seeds the new
/// thread's context.
struct seed_message {
  /// "system", "user", "assistant" or "tool" (OpenAI's "developer" reads as
  /// "system").
  std::string role;
  std::string text;
};

/// A request read as one Keel message.
struct compat_call {
  api wire = api::openai;
  /// The model as the request named it: the agent, echoed in answers.
  std::string model;
  /// The thread: the header's, else `metadata.keel_thread`; empty: none
  /// given (a one-shot request, on a new thread).
  std::string thread;
  /// The message id: `Idempotency-Key`, else `metadata.keel_message_id`,
  /// made a valid Keel id (`message_id_for`); empty: none given.
  std::string message_id;
  /// The new message: the text of the request's last message, the user's.
  std::string text;
  /// The messages before it (in order).
  std::vector<seed_message> earlier;
  /// Answer as a stream of server-sent events.
  bool stream = false;
  /// OpenAI: `stream_options.include_usage`, a usage chunk before `[DONE]`.
  bool include_usage = false;
  /// The SDKs' retry number of this request (0 on a first try).
  uint32_t retry_count = 0;
};

/// Limits of reading.
struct request_limits {
  /// Longest new message in bytes (`gateway.max_text_bytes`).
  size_t max_text_bytes = 64 * 1024;
};

/// Reads a `POST /v1/chat/completions` body; a request Keel cannot serve as
/// asked is a 400 naming the field (`n` > 1, `logprobs`, audio, images and
/// files, client-side `tools`, `store: false`, a last message that is not
/// the user's).
std::variant<compat_call, api_error>
read_chat_request(std::string_view body, const request_headers& headers,
                  const request_limits& limits);

/// Reads a `POST /v1/messages` body (Anthropic Messages) likewise.
std::variant<compat_call, api_error>
read_messages_request(std::string_view body, const request_headers& headers,
                      const request_limits& limits);

/// The Keel message id for an idempotency key: the key itself if it is a
/// valid client id not starting with `agent:`, else `ik:` and the first 40
/// hex digits of its SHA-256.
std::string message_id_for(const std::string& key);

/// The hex SHA-256 of `data`.
std::string sha256_hex(std::string_view data);

} // namespace keel::compat
