#pragma once

// Lenient reads of the node's JSON answers for the tools: a missing or
// mistyped field reads as empty, so that one odd field does not stop a
// report.

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace keel {

/// The string at `key` of `j`; "" when there is no string there.
std::string json_string(const nlohmann::json& j, const char* key);

/// The non-negative integer at `path` (keys of nested objects); 0 when there
/// is none there (the tools read counts, sizes, sequence numbers and
/// milliseconds, which are never negative or fractional).
uint64_t json_number(const nlohmann::json& j,
                     std::initializer_list<const char*> path);

/// The number (integer or fractional) at `path`; none when there is no
/// number there (e.g. `cpu_seconds` of a node too old to report it).
std::optional<double> json_double(const nlohmann::json& j,
                                  std::initializer_list<const char*> path);

} // namespace keel
