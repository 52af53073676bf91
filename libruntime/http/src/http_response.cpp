#include "keel/http_response.hpp"

#include <algorithm>
#include <cctype>

#include <nlohmann/json.hpp>

#include "keel/provider_policy.hpp"
#include "keel/text.hpp"

namespace keel {

namespace {

using json = nlohmann::json;

/// Longest excerpt of a body that goes into a message.
constexpr size_t excerpt_chars = 200;

bool same_name(std::string_view x, std::string_view y) {
  return x.size() == y.size()
         && std::equal(x.begin(), x.end(), y.begin(), [](char a, char b) {
              return std::tolower(static_cast<unsigned char>(a))
                     == std::tolower(static_cast<unsigned char>(b));
            });
}

/// The string member `key` of `obj`, or null.
const std::string* string_member(const json& obj, const char* key) {
  auto i = obj.find(key);
  return i != obj.end() && i->is_string() ? i->get_ptr<const std::string*>()
                                          : nullptr;
}

} // namespace

std::string_view http_client_response::header(std::string_view name) const {
  for (auto& [key, value] : headers)
    if (same_name(key, name))
      return value;
  return {};
}

std::optional<std::chrono::milliseconds>
retry_after(const http_client_response& res,
            std::chrono::system_clock::time_point now) {
  if (auto ms = res.header("retry-after-ms"); !ms.empty()) {
    try {
      return std::chrono::milliseconds{
        static_cast<int64_t>(std::stod(std::string{ms}))};
    } catch (const std::exception&) {
      // Unparseable: fall back to Retry-After.
    }
  }
  if (auto value = res.header("retry-after"); !value.empty())
    return parse_retry_after(value, now);
  return std::nullopt;
}

std::string body_excerpt(std::string_view text) {
  auto result = sanitize_utf8(text, excerpt_chars);
  auto cut = sanitize_utf8(text, excerpt_chars + 1).size() != result.size();
  for (auto& c : result)
    if (c == '\n' || c == '\r' || c == '\t')
      c = ' ';
  while (!result.empty() && result.back() == ' ')
    result.pop_back();
  if (cut)
    result += "...";
  return result;
}

std::string error_summary(std::string_view body) {
  auto j = json::parse(body.begin(), body.end(), nullptr, false);
  if (j.is_object()) {
    if (auto err = j.find("error"); err != j.end()) {
      if (auto msg = err->is_object() ? string_member(*err, "message")
                                      : nullptr)
        return body_excerpt(*msg);
      if (err->is_string())
        return body_excerpt(err->get<std::string>());
    }
    if (auto msg = string_member(j, "message"))
      return body_excerpt(*msg);
  }
  return body_excerpt(body);
}

std::string status_text(const http_client_response& res,
                        std::string_view authority) {
  auto result = "HTTP " + std::to_string(res.status) + " from "
                + std::string{authority};
  auto summary = error_summary(res.body);
  if (!summary.empty())
    result += ": " + summary;
  return result;
}

} // namespace keel
