#pragma once

// Durations and byte sizes as configuration files write them: an integer
// immediately followed by a unit ("250ms", "64KiB"). Each kind has one table
// of units, which both the parser and the renderer use.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <caf/timespan.hpp>

namespace keel {

/// Parses a whole string of decimal digits (no sign, no unit). Returns
/// `std::nullopt` for anything else or when the value exceeds 64 bits.
std::optional<uint64_t> parse_digits(std::string_view str);

/// Parses a duration written as an integer immediately followed by a unit:
/// `ns`, `us`, `ms`, `s`, `m` or `h` (e.g. "250ms", "5s", "2m", "1h").
/// Returns `std::nullopt` for anything else, including a missing unit.
std::optional<caf::timespan> parse_duration(std::string_view str);

/// Renders a duration in the largest unit that keeps it whole ("10ms",
/// "2s", "1500us"), as `parse_duration` reads it back; zero is "0s".
std::string render_duration(caf::timespan x);

/// Parses a byte size: an integer, optionally immediately followed by `KiB`,
/// `MiB` or `GiB` (e.g. "65536", "64KiB", "1MiB"). Returns `std::nullopt`
/// for anything else or on overflow.
std::optional<size_t> parse_size(std::string_view str);

} // namespace keel
