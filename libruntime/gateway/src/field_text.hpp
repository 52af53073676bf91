#pragma once

// Text helpers for HTTP field values, shared by the request policy and the
// request head checks.

#include <algorithm>
#include <cctype>
#include <string_view>

namespace keel::field_text {

/// Whether `x` and `y` are equal ignoring ASCII case.
inline bool iequal(std::string_view x, std::string_view y) {
  return x.size() == y.size()
         && std::equal(x.begin(), x.end(), y.begin(), [](char a, char b) {
              return std::tolower(static_cast<unsigned char>(a))
                     == std::tolower(static_cast<unsigned char>(b));
            });
}

/// `x` without the spaces and tabs around it.
inline std::string_view trim(std::string_view x) {
  while (!x.empty() && (x.front() == ' ' || x.front() == '\t'))
    x.remove_prefix(1);
  while (!x.empty() && (x.back() == ' ' || x.back() == '\t'))
    x.remove_suffix(1);
  return x;
}

} // namespace keel::field_text
