#include "keel/compat_errors.hpp"

#include <algorithm>
#include <iterator>

#include <nlohmann/json.hpp>

#include "json_text.hpp"

namespace keel::compat {

namespace {

using json = nlohmann::json;

/// One row of a mapping: Keel's code to the API's status, type and code.
struct row {
  const char* keel;
  unsigned status;
  const char* type;
  /// The API's code; null: Keel's.
  const char* code;
  bool retry;
};

/// Refusals: the message was not acknowledged. The 429 and 503s are safe
/// to resend with the same key; 422 (not 409, which the SDKs retry) for a
/// thread that cannot take the message.
constexpr row refusals[] = {
  {"bad_json", 400, "invalid_request_error", "invalid_json", false},
  {"missing_field", 400, "invalid_request_error", "invalid_value", false},
  {"wrong_type", 400, "invalid_request_error", "invalid_value", false},
  {"bad_value", 400, "invalid_request_error", "invalid_value", false},
  {"too_large", 400, "invalid_request_error", "string_above_max_length", false},
  {"invalid_utf8", 400, "invalid_request_error", nullptr, false},
  {"unauthorized", 401, "invalid_request_error", "invalid_api_key", false},
  {"forbidden", 403, "permission_error", nullptr, false},
  {"unknown_agent", 404, "invalid_request_error", "model_not_found", false},
  {"not_found", 404, "invalid_request_error", nullptr, false},
  {"thread_closed", 422, "invalid_request_error", nullptr, false},
  {"cancelled", 422, "invalid_request_error", nullptr, false},
  {"conflict", 422, "invalid_request_error", nullptr, false},
  {"thread_limit", 422, "invalid_request_error", nullptr, false},
  {"agent_limit", 422, "invalid_request_error", nullptr, false},
  {"agent_mismatch", 422, "invalid_request_error", nullptr, false},
  {"idempotency_key_reused", 422, "invalid_request_error", nullptr, false},
  {"rate_limited", 429, "rate_limit_error", "rate_limit_exceeded", true},
  {"overloaded", 503, "server_error", nullptr, true},
  {"unavailable", 503, "server_error", nullptr, true},
  {"draining", 503, "server_error", nullptr, true},
  {"not_owner", 503, "server_error", nullptr, true},
  {"storage_io", 503, "server_error", nullptr, true},
  {"timeout", 504, "server_error", nullptr, true},
};

/// Turn outcomes: final and stored, never retried.
constexpr row outcomes[] = {
  {"provider_failed", 502, "server_error", nullptr, false},
  {"provider_timeout", 504, "server_error", nullptr, false},
  {"turn_timeout", 504, "server_error", nullptr, false},
  {"credits_exhausted", 429, "insufficient_quota", "insufficient_quota", false},
  {"provider_unauthorized", 502, "server_error", nullptr, false},
  {"context_overflow", 400, "invalid_request_error", "context_length_exceeded",
   false},
  {"provider_rejected", 400, "invalid_request_error", nullptr, false},
  {"agent_paused", 503, "server_error", nullptr, false},
  {"cancelled", 422, "invalid_request_error", nullptr, false},
};

template <size_t N>
const row* find_row(const row (&rows)[N], const std::string& code) {
  auto i = std::find_if(std::begin(rows), std::end(rows),
                        [&](const row& r) { return code == r.keel; });
  return i == std::end(rows) ? nullptr : &*i;
}

api_error from_row(const row& r, const std::string& code, std::string message) {
  api_error result;
  result.status = r.status;
  result.type = r.type;
  result.code = r.code != nullptr ? r.code : code;
  result.message = std::move(message);
  result.should_retry = r.retry;
  result.retry_after = r.retry && r.status != 504 ? 1 : 0;
  return result;
}

/// Anthropic's statuses where they differ: 402 for an exhausted credit,
/// 529 for an overloaded node.
void anthropic_status(api wire, const std::string& code, api_error& err) {
  if (wire != api::anthropic)
    return;
  if (code == "credits_exhausted")
    err.status = 402;
  else if (code == "overloaded")
    err.status = 529;
}

json nullable(const std::string& x) {
  return x.empty() ? json(nullptr) : json(x);
}

json error_json(api wire, const api_error& err, const std::string& request_id) {
  if (wire == api::openai)
    return {{"error",
             {{"message", err.message},
              {"type", err.type},
              {"param", nullable(err.param)},
              {"code", nullable(err.code)}}}};
  return {{"type", "error"},
          {"error",
           {{"type", anthropic_type(err.status)}, {"message", err.message}}},
          {"request_id", nullable(request_id)}};
}

} // namespace

api_error bad_request(std::string code, std::string param,
                      std::string message) {
  api_error result;
  result.status = 400;
  result.type = "invalid_request_error";
  result.code = std::move(code);
  result.param = std::move(param);
  result.message = std::move(message);
  return result;
}

api_error refusal(api wire, const std::string& code, std::string message) {
  const row internal{"internal", 500, "server_error", nullptr, true};
  auto r = find_row(refusals, code);
  auto result = from_row(r != nullptr ? *r : internal, code,
                         std::move(message));
  anthropic_status(wire, code, result);
  return result;
}

api_error outcome_error(api wire, const std::string& code,
                        std::string message) {
  // Guard stops, failed turns and anything new: the node's own failure.
  const row other{"", 500, "server_error", nullptr, false};
  auto r = find_row(outcomes, code);
  auto result = from_row(r != nullptr ? *r : other, code, std::move(message));
  anthropic_status(wire, code, result);
  return result;
}

std::vector<std::pair<std::string, std::string>>
retry_headers(const api_error& err) {
  std::vector<std::pair<std::string, std::string>> result{
    {"x-should-retry", err.should_retry ? "true" : "false"}};
  if (err.should_retry && err.retry_after > 0) {
    result.emplace_back("Retry-After", std::to_string(err.retry_after));
    result.emplace_back("retry-after-ms",
                        std::to_string(err.retry_after * 1000));
  }
  return result;
}

std::string anthropic_type(unsigned status) {
  switch (status) {
    case 400: return "invalid_request_error";
    case 401: return "authentication_error";
    case 402: return "billing_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 413: return "request_too_large";
    case 429: return "rate_limit_error";
    case 504: return "timeout_error";
    case 529: return "overloaded_error";
    default: return status < 500 ? "invalid_request_error" : "api_error";
  }
}

std::string error_body(api wire, const api_error& err,
                       const std::string& request_id) {
  return json_text(error_json(wire, err, request_id));
}

std::string error_event(api wire, const api_error& err,
                        const std::string& request_id) {
  auto data = json_text(error_json(wire, err, request_id));
  if (wire == api::openai)
    return "data: " + data + "\n\n";
  return "event: error\ndata: " + data + "\n\n";
}

} // namespace keel::compat
