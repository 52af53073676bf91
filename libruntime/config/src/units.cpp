#include "keel/units.hpp"

#include <algorithm>
#include <charconv>
#include <iterator>
#include <limits>
#include <utility>

namespace keel {

namespace {

/// A unit suffix and how many of the base unit (ns, bytes) it stands for.
struct unit {
  std::string_view name;
  uint64_t factor;
};

/// Duration units in nanoseconds, largest first: `render_duration` takes
/// the first one that divides the value, and `ns` divides every value.
constexpr unit duration_units[] = {
  {"h", 3'600'000'000'000}, {"m", 60'000'000'000}, {"s", 1'000'000'000},
  {"ms", 1'000'000},        {"us", 1'000},         {"ns", 1},
};

/// Size units in bytes; a plain integer counts bytes.
constexpr unit size_units[] = {
  {"", 1},
  {"KiB", uint64_t{1} << 10},
  {"MiB", uint64_t{1} << 20},
  {"GiB", uint64_t{1} << 30},
};

/// Splits "123unit" into the number and the unit.
std::pair<std::string_view, std::string_view>
split_number(std::string_view str) {
  size_t n = 0;
  while (n < str.size() && str[n] >= '0' && str[n] <= '9')
    ++n;
  return {str.substr(0, n), str.substr(n)};
}

/// Parses "COUNTUNIT" with a unit from `units` into a count of the base
/// unit; `std::nullopt` for anything else or when it exceeds `limit`.
template <size_t N>
std::optional<uint64_t>
parse_with_unit(std::string_view str, const unit (&units)[N], uint64_t limit) {
  auto [digits, suffix] = split_number(str);
  auto count = parse_digits(digits);
  if (!count)
    return std::nullopt;
  for (auto& [name, factor] : units) {
    if (suffix != name)
      continue;
    if (*count > limit / factor)
      return std::nullopt;
    return *count * factor;
  }
  return std::nullopt;
}

} // namespace

std::optional<uint64_t> parse_digits(std::string_view str) {
  if (str.empty() || str.front() < '0' || str.front() > '9')
    return std::nullopt;
  uint64_t result = 0;
  auto end = str.data() + str.size();
  auto [ptr, err] = std::from_chars(str.data(), end, result);
  if (err != std::errc{} || ptr != end)
    return std::nullopt;
  return result;
}

std::optional<caf::timespan> parse_duration(std::string_view str) {
  using rep = caf::timespan::rep;
  constexpr auto limit = static_cast<uint64_t>(std::numeric_limits<rep>::max());
  if (auto ns = parse_with_unit(str, duration_units, limit))
    return caf::timespan{static_cast<rep>(*ns)};
  return std::nullopt;
}

std::string render_duration(caf::timespan x) {
  using rep = caf::timespan::rep;
  auto ns = x.count();
  if (ns == 0)
    return "0s";
  auto whole = [ns](const unit& u) {
    return ns % static_cast<rep>(u.factor) == 0;
  };
  auto u = std::find_if(std::begin(duration_units), std::end(duration_units),
                        whole);
  return std::to_string(ns / static_cast<rep>(u->factor))
         + std::string{u->name};
}

std::optional<size_t> parse_size(std::string_view str) {
  constexpr auto limit = uint64_t{std::numeric_limits<size_t>::max()};
  if (auto bytes = parse_with_unit(str, size_units, limit))
    return static_cast<size_t>(*bytes);
  return std::nullopt;
}

} // namespace keel
