#pragma once

// Small text and time utilities shared across the runtime and the tools:
// UTF-8 checks, clocks, and the one way to render numbers, sizes and
// durations for people.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "keel/types.hpp"

namespace keel {

/// Returns true if `str` is well-formed UTF-8 (no overlongs, no surrogates).
bool valid_utf8(std::string_view str);

/// Returns the first `max_chars` characters of `str` as well-formed UTF-8:
/// every ill-formed byte becomes U+FFFD, and no character is cut in half.
/// Text from outside (provider answers, tool output) passes here before it
/// is stored or shown, so no record or frame can carry invalid UTF-8.
std::string sanitize_utf8(std::string_view str,
                          size_t max_chars = std::string_view::npos);

/// Renders `str` for a terminal: each C0 control character but newline and
/// tab, DEL and each C1 control character (U+0080 to U+009F) becomes
/// `\u00XX`, and each byte that is not well-formed UTF-8 `\xNN`, so text
/// from outside (a reply, a provider's error) cannot move the cursor, set
/// the window title or change colours on the reader's terminal. Everything
/// else, backslashes too, is kept: JSON output stays valid JSON.
std::string terminal_text(std::string_view str);

/// Returns the longest prefix of `str` of at most `max_bytes` bytes that
/// ends on a character boundary: a well-formed `str` gives a well-formed
/// prefix.
std::string_view utf8_prefix(std::string_view str, size_t max_bytes);

/// The characters of UTF-8 `str`: its bytes that do not continue a
/// sequence.
size_t utf8_length(std::string_view str);

/// Bounds text from outside (a provider's reply, a tool call's output) to
/// `max_bytes`: a longer `str` is cut with `utf8_prefix` and marked with a
/// line "[WHAT cut at MAX_BYTES bytes]", so neither the user nor the model
/// mistakes it for the whole. A shorter one is returned unchanged.
std::string bound_text(std::string str, size_t max_bytes,
                       std::string_view what);

/// Milliseconds since the Unix epoch, from the system clock.
millis wall_clock_millis();

/// Renders `t` (milliseconds since the Unix epoch) as an RFC 3339 time in
/// UTC with milliseconds: "2026-12-04T19:31:22.042Z".
std::string rfc3339_utc(millis t);

/// Replaces every occurrence of `from` in `str` with `to`.
std::string replace_all(std::string str, std::string_view from,
                        std::string_view to);

/// Renders `x` with exactly `digits` decimals ("3.14").
std::string fixed(double x, int digits);

/// Renders a byte count for people: "512 B", "12.3 MiB".
std::string human_bytes(uint64_t bytes);

/// Renders a duration for people: "850 ms" below a second, seconds with
/// their fraction below a minute ("1.5s", "2s"), otherwise whole days,
/// hours, minutes and seconds from the largest non-zero unit on ("1m 0s",
/// "1h 2m 3s").
std::string human_duration(std::chrono::milliseconds x);

/// Returns `n` random hex digits (for ids that must not collide).
std::string random_hex(size_t n);

} // namespace keel
