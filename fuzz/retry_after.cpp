// Retry-After parsing (keel::parse_retry_after) on arbitrary header values.
// Input: bytes 0-3 are "now" in seconds since 1970 (big-endian, so until
// 2106); the rest is the header value. Properties: no exception escapes; a
// delay is never negative; delta-seconds of up to ten digits are exactly
// that many seconds; surrounding spaces change nothing; a date's delay
// shrinks by exactly the time that passes until it is reached.

#include <algorithm>
#include <cctype>
#include <chrono>
#include <string>

#include "fuzz_check.hpp"
#include "keel/provider_policy.hpp"

using namespace std::chrono;
using keel::fuzz::require;

namespace {

void check(std::string_view value, system_clock::time_point now) {
  auto delay = keel::parse_retry_after(value, now);
  require(delay == keel::parse_retry_after(" " + std::string{value} + " ", now),
          "surrounding spaces change the result");
  if (!delay)
    return;
  require(delay->count() >= 0, "a negative delay");
  while (!value.empty() && (value.front() == ' ' || value.front() == '\t'))
    value.remove_prefix(1);
  while (!value.empty() && (value.back() == ' ' || value.back() == '\t'))
    value.remove_suffix(1);
  bool digits = std::all_of(value.begin(), value.end(), [](char c) {
    return std::isdigit(static_cast<unsigned char>(c));
  });
  if (digits) {
    require(value.size() <= 10, "over ten digits accepted");
    require(*delay == seconds{std::stoll(std::string{value})},
            "delta-seconds misread");
    return;
  }
  if (delay->count() == 0)
    return; // A date that is due.
  // A date: one hour earlier it is one hour further away, and once the
  // delay has passed it is due.
  auto earlier = keel::parse_retry_after(value, now - hours{1});
  require(earlier && *earlier == *delay + hours{1},
          "a date's delay does not follow the clock");
  auto later = keel::parse_retry_after(value, now + *delay);
  require(later && later->count() == 0, "a date is not due at its time");
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 4)
    return 0;
  return keel::fuzz::guarded([&] {
    auto secs = static_cast<uint32_t>(data[0]) << 24
                | static_cast<uint32_t>(data[1]) << 16
                | static_cast<uint32_t>(data[2]) << 8 | data[3];
    system_clock::time_point now{seconds{secs}};
    check(keel::fuzz::as_text(data + 4, size - 4), now);
  });
}
