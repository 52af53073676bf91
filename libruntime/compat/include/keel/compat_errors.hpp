#pragma once

// Errors of the OpenAI- and Anthropic-compatible HTTP API:
// each Keel refusal and each turn outcome as the status, type and code the
// official SDKs act on, and whether they should send the request again
// (`x-should-retry`, which the SDKs obey before anything else).

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace keel::compat {

/// The API a request came in by.
enum class api : uint8_t {
  /// OpenAI Chat Completions (and Keel's own HTTP send).
  openai,
  /// Anthropic Messages.
  anthropic,
};

/// One error as the API reports it.
struct api_error {
  unsigned status = 500;
  /// OpenAI's `error.type` (invalid_request_error, rate_limit_error,
  /// server_error, ...); Anthropic's follows the status (`anthropic_type`).
  std::string type;
  /// OpenAI's `error.code`: Keel's code, or the one OpenAI's clients know
  /// for it (context_length_exceeded, insufficient_quota).
  std::string code;
  /// The request field at fault (`error.param`); empty: null.
  std::string param;
  std::string message;
  /// Whether sending the request again can help (`x-should-retry`).
  bool should_retry = false;
  /// For a retryable error: seconds to wait first (`Retry-After`); 0: none.
  uint32_t retry_after = 0;
};

/// A request refused before it reached Keel: 400 naming the field `param`.
api_error bad_request(std::string code, std::string param, std::string message);

/// A message Keel refused before acknowledging it (an `error` frame without
/// `reply_to`), by its code: the statuses the SDKs retry (429, 5xx) only
/// where resending with the same key is safe and can succeed.
api_error refusal(api wire, const std::string& code, std::string message);

/// A turn that ended in an error outcome, by its code: final and stored, so
/// never to be retried; `message` is what the user reads.
api_error outcome_error(api wire, const std::string& code, std::string message);

/// The header fields of an error answer that say whether and when to
/// retry: `x-should-retry`, and `Retry-After` with `retry-after-ms` when the
/// error says how long to wait.
std::vector<std::pair<std::string, std::string>>
retry_headers(const api_error& err);

/// Anthropic's error type for `status` (invalid_request_error,
/// authentication_error, billing_error, ..., overloaded_error for 529).
std::string anthropic_type(unsigned status);

/// The error's body: OpenAI's `{"error":{message,type,param,code}}`, or
/// Anthropic's `{"type":"error","error":{type,message},"request_id"}`.
std::string error_body(api wire, const api_error& err,
                       const std::string& request_id);

/// The error as an event of a stream already under way: OpenAI's
/// `data: {"error":...}`, Anthropic's `event: error`.
std::string error_event(api wire, const api_error& err,
                        const std::string& request_id);

} // namespace keel::compat
