#pragma once

// The text of a JSON value the compatible API sends: compact, and a string
// that is not well-formed UTF-8 (a provider's text) has its bad bytes
// replaced rather than failing the answer.

#include <string>

#include <nlohmann/json.hpp>

namespace keel::compat {

inline std::string json_text(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

} // namespace keel::compat
