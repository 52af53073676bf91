#include "keel/provider_policy.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <initializer_list>

namespace keel {

namespace {

std::string lowercase(std::string_view str) {
  std::string result(str);
  for (auto& c : result)
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return result;
}

bool contains_any(const std::string& haystack,
                  std::initializer_list<std::string_view> needles) {
  for (auto needle : needles)
    if (haystack.find(needle) != std::string::npos)
      return true;
  return false;
}

// Markers more specific than any HTTP status. OpenAI sends
// `insufficient_quota` with a 429, but waiting a minute will not bring money
// back, so billing beats rate_limit. Context overflow arrives as a 400
// (OpenAI `context_length_exceeded`, Anthropic "prompt is too long") and must
// not be retried or failed over like a generic invalid request.
bool billing_marker(const std::string& lower) {
  return contains_any(lower, {"insufficient_quota"});
}

bool context_marker(const std::string& lower) {
  return contains_any(lower,
                      {"context_length_exceeded", "prompt is too long",
                       "maximum context length", "context length exceeded",
                       "context window exceeded"});
}

bool overloaded_marker(const std::string& lower) {
  return contains_any(lower, {"overloaded"});
}

std::optional<error_class> classify_status(int status) {
  switch (status) {
    case 401:
    case 403: return error_class::auth;
    case 402: return error_class::billing;
    case 404: return error_class::model_not_found;
    case 408: return error_class::timeout;
    case 429: return error_class::rate_limit;
    case 500:
    case 502:
    case 503:
    case 529: // Anthropic's "overloaded_error"
      return error_class::overloaded;
    case 501: return error_class::action_not_supported;
    case 504:
      // A timeout rather than an overload: both are retryable, and a
      // timeout's cooldown is the shorter.
      return error_class::timeout;
    default: return std::nullopt;
  }
}

} // namespace

const char* to_string(error_class x) {
  auto index = static_cast<size_t>(x);
  return index < error_class_count ? error_class_names[index] : "unknown";
}

std::optional<error_class> parse_error_class(std::string_view str) {
  for (size_t i = 0; i < error_class_count; ++i)
    if (str == error_class_names[i])
      return static_cast<error_class>(i);
  return std::nullopt;
}

error_class classify_text(std::string_view text) {
  auto lower = lowercase(text);
  if (billing_marker(lower)
      || contains_any(lower, {"billing", "payment required", "credit balance"}))
    return error_class::billing;
  if (context_marker(lower))
    return error_class::context_overflow;
  if (contains_any(lower,
                   {"invalid api key", "invalid_api_key", "incorrect api key",
                    "unauthorized", "authentication", "forbidden"}))
    return error_class::auth;
  // A plain "quota exceeded" is almost always a per-minute quota, so it is a
  // rate limit; the unrecoverable kind is OpenAI's `insufficient_quota`,
  // handled above as billing.
  if (contains_any(lower, {"rate limit", "rate_limit", "too many requests",
                           "quota exceeded"}))
    return error_class::rate_limit;
  if (contains_any(lower, {"model_not_found", "model not found"})
      || (lower.find("model") != std::string::npos
          && lower.find("does not exist") != std::string::npos))
    return error_class::model_not_found;
  if (overloaded_marker(lower)
      || contains_any(lower,
                      {"over capacity", "service unavailable", "bad gateway"}))
    return error_class::overloaded;
  if (contains_any(lower,
                   {"timed out", "timeout", "etimedout", "deadline exceeded"}))
    return error_class::timeout;
  if (contains_any(lower, {"invalid json", "json parse", "unexpected end of",
                           "malformed response"}))
    return error_class::format;
  if (contains_any(lower, {"invalid_request_error", "bad request"}))
    return error_class::invalid_request;
  return error_class::unknown;
}

namespace {

error_class classify_self(const provider_failure& failure) {
  auto lower = lowercase(failure.body);
  if (billing_marker(lower))
    return error_class::billing;
  if (context_marker(lower))
    return error_class::context_overflow;
  if (failure.status) {
    if (auto cls = classify_status(*failure.status))
      return *cls;
  }
  if (overloaded_marker(lower))
    return error_class::overloaded;
  if (failure.status && *failure.status >= 400 && *failure.status < 500)
    return error_class::invalid_request;
  if (failure.transport) {
    // Only a timeout tells us something; refused, reset, TLS and DNS
    // failures are `unknown`: retryable, short cooldown, try the next.
    if (*failure.transport == transport_error::timeout)
      return error_class::timeout;
    return error_class::unknown;
  }
  if (failure.unparseable)
    return error_class::format;
  // Without a status the body is just an error text: look for keywords.
  if (!failure.status)
    return classify_text(failure.body);
  return error_class::unknown;
}

} // namespace

error_class classify(const provider_failure& failure) {
  auto cls = classify_self(failure);
  if (cls != error_class::unknown)
    return cls;
  auto depth = std::min(failure.causes.size(), max_cause_depth);
  for (size_t i = 0; i < depth; ++i) {
    auto cause_cls = classify_text(failure.causes[i]);
    if (cause_cls != error_class::unknown)
      return cause_cls;
  }
  return error_class::unknown;
}

// -- Retry-After --------------------------------------------------------------

namespace {

std::string_view trim(std::string_view str) {
  auto is_ows = [](char c) { return c == ' ' || c == '\t'; };
  while (!str.empty() && is_ows(str.front()))
    str.remove_prefix(1);
  while (!str.empty() && is_ows(str.back()))
    str.remove_suffix(1);
  return str;
}

// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's
// days_from_civil).
int64_t days_from_civil(int64_t y, unsigned m, unsigned d) {
  y -= m <= 2;
  auto era = (y >= 0 ? y : y - 399) / 400;
  auto yoe = static_cast<unsigned>(y - era * 400);
  auto doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1;
  auto doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + static_cast<int64_t>(doe) - 719468;
}

bool parse_digits(std::string_view str, size_t pos, size_t len, int& out) {
  out = 0;
  for (size_t i = pos; i < pos + len; ++i) {
    if (!std::isdigit(static_cast<unsigned char>(str[i])))
      return false;
    out = out * 10 + (str[i] - '0');
  }
  return true;
}

// Parses an IMF-fixdate, e.g. "Sun, 06 Nov 1994 08:49:37 GMT".
std::optional<std::chrono::system_clock::time_point>
parse_imf_fixdate(std::string_view str) {
  static constexpr std::string_view days[] = {"Mon", "Tue", "Wed", "Thu",
                                              "Fri", "Sat", "Sun"};
  static constexpr std::string_view months[] = {"Jan", "Feb", "Mar", "Apr",
                                                "May", "Jun", "Jul", "Aug",
                                                "Sep", "Oct", "Nov", "Dec"};
  if (str.size() != 29 || str.substr(3, 2) != ", " || str[7] != ' '
      || str[11] != ' ' || str[16] != ' ' || str[19] != ':' || str[22] != ':'
      || str.substr(25) != " GMT")
    return std::nullopt;
  if (std::find(std::begin(days), std::end(days), str.substr(0, 3))
      == std::end(days))
    return std::nullopt;
  auto month_it = std::find(std::begin(months), std::end(months),
                            str.substr(8, 3));
  if (month_it == std::end(months))
    return std::nullopt;
  auto month = static_cast<unsigned>(month_it - std::begin(months)) + 1;
  int day = 0, year = 0, hour = 0, minute = 0, second = 0;
  if (!parse_digits(str, 5, 2, day) || !parse_digits(str, 12, 4, year)
      || !parse_digits(str, 17, 2, hour) || !parse_digits(str, 20, 2, minute)
      || !parse_digits(str, 23, 2, second))
    return std::nullopt;
  static constexpr int month_days[] = {31, 29, 31, 30, 31, 30,
                                       31, 31, 30, 31, 30, 31};
  bool leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
  int max_day = month == 2 && !leap ? 28 : month_days[month - 1];
  // RFC 7231 allows second 60 (a leap second).
  if (day < 1 || day > max_day || hour > 23 || minute > 59 || second > 60)
    return std::nullopt;
  auto day_count = days_from_civil(year, month, static_cast<unsigned>(day));
  auto secs = day_count * 86400 + hour * 3600 + minute * 60 + second;
  // The clock counts nanoseconds in 64 bits (1678 to 2262): a date it cannot
  // hold is refused rather than overflowing the conversion.
  using std::chrono::system_clock;
  constexpr auto max_secs = std::chrono::duration_cast<std::chrono::seconds>(
                              system_clock::duration::max())
                              .count();
  if (secs >= max_secs || secs <= -max_secs)
    return std::nullopt;
  return system_clock::time_point{std::chrono::seconds{secs}};
}

} // namespace

std::optional<std::chrono::milliseconds>
parse_retry_after(std::string_view value,
                  std::chrono::system_clock::time_point now) {
  using namespace std::chrono;
  value = trim(value);
  if (value.empty())
    return std::nullopt;
  if (std::all_of(value.begin(), value.end(), [](char c) {
        return std::isdigit(static_cast<unsigned char>(c));
      })) {
    // Ten digits are over 300 years; more is garbage, and would overflow.
    if (value.size() > 10)
      return std::nullopt;
    int64_t secs = 0;
    for (auto c : value)
      secs = secs * 10 + (c - '0');
    return duration_cast<milliseconds>(seconds{secs});
  }
  auto date = parse_imf_fixdate(value);
  if (!date)
    return std::nullopt;
  if (*date <= now)
    return milliseconds{0};
  return duration_cast<milliseconds>(*date - now);
}

// -- retries and cooldowns ----------------------------------------------------

std::chrono::milliseconds
next_delay(const retry_policy& policy, uint32_t attempt,
           std::optional<std::chrono::milliseconds> retry_after,
           std::mt19937_64& rng) {
  using std::chrono::milliseconds;
  auto max_ms = static_cast<double>(
    std::max(policy.max_delay.count(), milliseconds::rep{0}));
  auto exponent = attempt > 0 ? attempt - 1 : 0;
  auto multiplier = std::max(policy.multiplier, 1.0);
  // Capping before the jitter keeps pow() far from overflow.
  auto base = static_cast<double>(policy.base_delay.count())
              * std::pow(multiplier, static_cast<double>(exponent));
  base = std::min(std::max(base, 0.0), max_ms);
  auto jitter = std::clamp(policy.jitter, 0.0, 1.0);
  auto delay = base;
  if (jitter > 0.0) {
    std::uniform_real_distribution<double> dist{1.0 - jitter, 1.0 + jitter};
    delay = base * dist(rng);
  }
  delay = std::min(delay, max_ms);
  auto result = milliseconds{static_cast<milliseconds::rep>(delay)};
  if (retry_after) {
    auto floor = std::min(*retry_after, policy.retry_after_cap);
    result = std::max(result, floor);
  }
  return result;
}

bool retryable(error_class x) {
  switch (x) {
    case error_class::rate_limit:
    case error_class::timeout:
    case error_class::overloaded:
    case error_class::unknown: return true;
    default: return false;
  }
}

bool counts_against_provider(error_class x) {
  return x != error_class::invalid_request
         && x != error_class::context_overflow;
}

bool fatal_for_provider(error_class x) {
  return x == error_class::auth || x == error_class::billing
         || x == error_class::model_not_found
         || x == error_class::action_not_supported;
}

std::chrono::milliseconds default_cooldown(error_class x) {
  using namespace std::chrono;
  switch (x) {
    case error_class::auth: return minutes{10};
    case error_class::rate_limit: return minutes{1};
    case error_class::billing: return minutes{30};
    case error_class::timeout: return seconds{30};
    case error_class::overloaded: return minutes{2};
    case error_class::model_not_found: return hours{1};
    case error_class::action_not_supported: return minutes{10};
    case error_class::unknown: return seconds{30};
    default: // format, context_overflow, invalid_request: no cooldown
      return milliseconds{0};
  }
}

cooldown_table::cooldown_table() {
  for (size_t i = 0; i < error_class_count; ++i)
    values_[i] = default_cooldown(static_cast<error_class>(i));
}

// -- circuit breaker and health -----------------------------------------------

const char* to_string(health_status x) {
  switch (x) {
    case health_status::healthy: return "healthy";
    case health_status::degraded: return "degraded";
    default: return "unhealthy";
  }
}

std::optional<health_status> parse_health_status(std::string_view str) {
  for (auto x : {health_status::healthy, health_status::degraded,
                 health_status::unhealthy})
    if (str == to_string(x))
      return x;
  if (str == "down")
    return health_status::unhealthy;
  return std::nullopt;
}

const char* to_string(breaker_state x) {
  switch (x) {
    case breaker_state::closed: return "closed";
    case breaker_state::open: return "open";
    default: return "half_open";
  }
}

circuit_breaker::circuit_breaker(breaker_config cfg) : cfg_(std::move(cfg)) {
  // nop
}

circuit_breaker::time_point circuit_breaker::probe_at() const {
  using std::chrono::milliseconds;
  auto lead = cfg_.probe_lead;
  if (lead.count() <= 0)
    lead = milliseconds{static_cast<milliseconds::rep>(
      static_cast<double>(cooldown_.count())
      * std::clamp(cfg_.probe_lead_fraction, 0.0, 1.0))};
  lead = std::min(lead, cooldown_);
  return health_.cooldown_until - lead;
}

bool circuit_breaker::admit(time_point now) {
  switch (state_) {
    case breaker_state::closed: return true;
    case breaker_state::open:
      if (now < probe_at())
        return false;
      state_ = breaker_state::half_open;
      health_.status = health_status::degraded;
      probe_started_ = now;
      return true;
    default: // half_open
      if (probe_started_ && now - *probe_started_ < cfg_.probe_timeout)
        return false;
      probe_started_ = now;
      return true;
  }
}

void circuit_breaker::record_success(time_point now) {
  state_ = breaker_state::closed;
  probe_started_.reset();
  health_.status = health_status::healthy;
  health_.consecutive_failures = 0;
  health_.last_success = now;
}

void circuit_breaker::record_failure(time_point now, error_class cls,
                                     std::string text) {
  health_.last_error = std::move(text);
  health_.last_error_class = cls;
  health_.last_failure = now;
  if (!counts_against_provider(cls)) {
    // The request was at fault, which says nothing about the provider: a
    // probe that got such an answer is released so another one may go out.
    if (state_ == breaker_state::half_open)
      probe_started_.reset();
    return;
  }
  ++health_.consecutive_failures;
  switch (state_) {
    case breaker_state::closed:
      if (health_.consecutive_failures >= cfg_.failure_threshold
          || (cfg_.open_on_fatal && fatal_for_provider(cls)))
        open(now, cls);
      else
        health_.status = health_status::degraded;
      break;
    case breaker_state::open: {
      // A late failure of a call admitted before the breaker opened: it may
      // lengthen the cooldown, never shorten it.
      auto until = now + cfg_.cooldowns.get(cls);
      if (until > health_.cooldown_until) {
        health_.cooldown_until = until;
        cooldown_ = cfg_.cooldowns.get(cls);
      }
      break;
    }
    default: // half_open: the probe (or a late call) failed
      open(now, cls);
  }
}

void circuit_breaker::open(time_point now, error_class cls) {
  state_ = breaker_state::open;
  probe_started_.reset();
  cooldown_ = cfg_.cooldowns.get(cls);
  health_.cooldown_until = now + cooldown_;
  health_.status = health_status::unhealthy;
}

void circuit_breaker::restore(const provider_health& rec) {
  health_ = rec;
  probe_started_.reset();
  if (rec.status == health_status::unhealthy) {
    state_ = breaker_state::open;
    cooldown_
      = cfg_.cooldowns.get(rec.last_error_class.value_or(error_class::unknown));
  } else {
    state_ = breaker_state::closed;
    cooldown_ = std::chrono::milliseconds{0};
  }
}

} // namespace keel
