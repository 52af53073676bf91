#pragma once

// Small text and time utilities shared across the runtime.

#include <cstdint>
#include <string>
#include <string_view>

#include "keel/types.hpp"

namespace keel {

/// Returns true if `str` is well-formed UTF-8 (no overlongs, no surrogates).
bool valid_utf8(std::string_view str);

/// Milliseconds since the Unix epoch, from the system clock.
millis wall_clock_millis();

/// Replaces every occurrence of `from` in `str` with `to`.
std::string replace_all(std::string str, std::string_view from,
                        std::string_view to);

} // namespace keel
