#include "keel/text.hpp"

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <iterator>
#include <random>

namespace keel {

namespace {

// Length of the well-formed UTF-8 sequence at `str[i]` (1 to 4), or 0 if
// the bytes there are ill-formed (overlong, surrogate, truncated, stray).
size_t utf8_sequence_at(std::string_view str, size_t i) {
  auto bytes = reinterpret_cast<const unsigned char*>(str.data());
  unsigned char c = bytes[i];
  if (c < 0x80)
    return 1;
  size_t len;
  uint32_t cp;
  if ((c & 0xE0) == 0xC0) {
    len = 2;
    cp = c & 0x1F;
  } else if ((c & 0xF0) == 0xE0) {
    len = 3;
    cp = c & 0x0F;
  } else if ((c & 0xF8) == 0xF0) {
    len = 4;
    cp = c & 0x07;
  } else {
    return 0;
  }
  if (i + len > str.size())
    return 0;
  for (size_t k = 1; k < len; ++k) {
    if ((bytes[i + k] & 0xC0) != 0x80)
      return 0;
    cp = (cp << 6) | (bytes[i + k] & 0x3F);
  }
  if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800)
      || (len == 4 && cp < 0x10000) || cp > 0x10FFFF
      || (cp >= 0xD800 && cp <= 0xDFFF))
    return 0;
  return len;
}

} // namespace

bool valid_utf8(std::string_view str) {
  for (size_t i = 0; i < str.size();) {
    auto len = utf8_sequence_at(str, i);
    if (len == 0)
      return false;
    i += len;
  }
  return true;
}

std::string sanitize_utf8(std::string_view str, size_t max_chars) {
  std::string result;
  result.reserve(std::min(str.size(), max_chars * 4));
  size_t chars = 0;
  for (size_t i = 0; i < str.size() && chars < max_chars; ++chars) {
    auto len = utf8_sequence_at(str, i);
    if (len == 0) {
      result += "\xEF\xBF\xBD"; // U+FFFD REPLACEMENT CHARACTER
      ++i;
    } else {
      result.append(str.substr(i, len));
      i += len;
    }
  }
  return result;
}

std::string terminal_text(std::string_view str) {
  static constexpr char hex[] = "0123456789abcdef";
  std::string result;
  result.reserve(str.size());
  auto escape = [&](const char* prefix, unsigned value) {
    result += prefix;
    result += hex[value >> 4];
    result += hex[value & 0xF];
  };
  for (size_t i = 0; i < str.size();) {
    auto c = static_cast<unsigned char>(str[i]);
    auto len = utf8_sequence_at(str, i);
    if (len == 0) {
      escape("\\x", c);
      ++i;
      continue;
    }
    // U+0080..U+009F are the two-byte sequences C2 80..C2 9F.
    auto c1 = len == 2 && c == 0xC2
              && static_cast<unsigned char>(str[i + 1]) <= 0x9F;
    if ((c < 0x20 && c != '\n' && c != '\t') || c == 0x7F)
      escape("\\u00", c);
    else if (c1)
      escape("\\u00", static_cast<unsigned char>(str[i + 1]));
    else
      result.append(str.substr(i, len));
    i += len;
  }
  return result;
}

std::string_view utf8_prefix(std::string_view str, size_t max_bytes) {
  if (str.size() <= max_bytes)
    return str;
  // Back off continuation bytes (10xxxxxx): the cut lands before the first
  // byte of the character it would split.
  auto n = max_bytes;
  while (n > 0 && (static_cast<unsigned char>(str[n]) & 0xC0) == 0x80)
    --n;
  return str.substr(0, n);
}

size_t utf8_length(std::string_view str) {
  return static_cast<size_t>(std::count_if(str.begin(), str.end(), [](char c) {
    return (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  }));
}

std::string bound_text(std::string str, size_t max_bytes,
                       std::string_view what) {
  if (str.size() <= max_bytes)
    return str;
  str.resize(utf8_prefix(str, max_bytes).size());
  str += str.empty() ? "[" : "\n[";
  str += what;
  str += " cut at " + std::to_string(max_bytes) + " bytes]";
  return str;
}

millis wall_clock_millis() {
  using namespace std::chrono;
  return duration_cast<milliseconds>(system_clock::now().time_since_epoch())
    .count();
}

std::string rfc3339_utc(millis t) {
  auto seconds = static_cast<std::time_t>(t >= 0 ? t / 1000 : (t - 999) / 1000);
  auto ms = static_cast<int>(t - static_cast<millis>(seconds) * 1000);
  std::tm utc{};
  gmtime_r(&seconds, &utc);
  char buf[32];
  auto n = std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%S", &utc);
  std::snprintf(buf + n, sizeof(buf) - n, ".%03dZ", ms);
  return buf;
}

std::string replace_all(std::string str, std::string_view from,
                        std::string_view to) {
  if (from.empty())
    return str;
  size_t pos = 0;
  while ((pos = str.find(from, pos)) != std::string::npos) {
    str.replace(pos, from.size(), to);
    pos += to.size();
  }
  return str;
}

std::string fixed(double x, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", digits, x);
  return buf;
}

std::string human_bytes(uint64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  auto value = static_cast<double>(bytes);
  size_t unit = 0;
  while (value >= 1024 && unit + 1 < std::size(units)) {
    value /= 1024;
    ++unit;
  }
  return unit == 0 ? std::to_string(bytes) + " B"
                   : fixed(value, 1) + " " + units[unit];
}

std::string human_duration(std::chrono::milliseconds x) {
  auto ms = x.count() < 0 ? uint64_t{0} : static_cast<uint64_t>(x.count());
  if (ms < 1000)
    return std::to_string(ms) + " ms";
  if (ms < 60'000 && ms % 1000 != 0) {
    // "1.5s", "12.25s": below a minute the fraction still says something.
    auto text = fixed(static_cast<double>(ms) / 1000, 3);
    text.erase(text.find_last_not_of('0') + 1);
    return text + "s";
  }
  auto secs = ms / 1000;
  std::string result;
  auto part = [&](uint64_t n, const char* unit) {
    if (n > 0 || !result.empty())
      result += (result.empty() ? "" : " ") + std::to_string(n) + unit;
  };
  part(secs / 86400, "d");
  part(secs / 3600 % 24, "h");
  part(secs / 60 % 60, "m");
  part(secs % 60, "s");
  return result;
}

std::string random_hex(size_t n) {
  static constexpr char digits[] = "0123456789abcdef";
  std::random_device rd;
  std::mt19937_64 gen{(static_cast<uint64_t>(rd()) << 32) ^ rd()};
  std::uniform_int_distribution<int> dist{0, 15};
  std::string result;
  result.reserve(n);
  for (size_t i = 0; i < n; ++i)
    result += digits[dist(gen)];
  return result;
}

} // namespace keel
