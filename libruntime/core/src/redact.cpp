#include "keel/redact.hpp"

#include <algorithm>
#include <cstring>

namespace keel {

std::vector<std::string> secret_list(std::vector<std::string> secrets) {
  secrets.erase(std::remove_if(secrets.begin(), secrets.end(),
                               [](const std::string& x) {
                                 return x.size() < min_secret_length;
                               }),
                secrets.end());
  std::sort(secrets.begin(), secrets.end(), [](auto& a, auto& b) {
    return a.size() != b.size() ? a.size() > b.size() : a < b;
  });
  secrets.erase(std::unique(secrets.begin(), secrets.end()), secrets.end());
  return secrets;
}

namespace {

// The length of the first (so longest) of `secrets` that starts at `pos`
// of `text`, or 0.
size_t match_at(std::string_view text, size_t pos,
                const std::vector<std::string>& secrets) {
  for (auto& secret : secrets)
    if (text.size() - pos >= secret.size()
        && std::memcmp(text.data() + pos, secret.data(), secret.size()) == 0)
      return secret.size();
  return 0;
}

} // namespace

std::string redact(std::string_view text,
                   const std::vector<std::string>& secrets) {
  // The common case, text naming no secret, costs one search per secret.
  auto found = std::any_of(secrets.begin(), secrets.end(), [&](auto& x) {
    return !x.empty() && text.find(x) != std::string_view::npos;
  });
  if (!found)
    return std::string{text};
  std::string result;
  result.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) {
    if (auto n = match_at(text, pos, secrets); n > 0) {
      result += redacted_mark;
      pos += n;
    } else {
      result += text[pos++];
    }
  }
  return result;
}

} // namespace keel
