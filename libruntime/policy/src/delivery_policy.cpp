#include "keel/delivery_policy.hpp"

#include <algorithm>
#include <array>
#include <cctype>

namespace keel {

namespace {

using std::chrono::milliseconds;

// Stable names of an enum whose values are 0 .. N-1.
template <class Enum, size_t N>
const char* name_of(const std::array<const char*, N>& names, Enum x) {
  auto index = static_cast<size_t>(x);
  return index < N ? names[index] : "unknown";
}

template <class Enum, size_t N>
std::optional<Enum>
parse_name(const std::array<const char*, N>& names, std::string_view str) {
  for (size_t i = 0; i < N; ++i)
    if (str == names[i])
      return static_cast<Enum>(i);
  return std::nullopt;
}

constexpr std::array<const char*, 5> channel_names{"webhook", "telegram",
                                                   "whatsapp", "sms", "email"};

constexpr std::array<const char*, 4> dead_letter_status_names{
  "pending", "delivered", "abandoned", "dropped"};

constexpr std::array<const char*, 8> notice_names{
  "all_models_failed",    "credits_exhausted",     "channel_unhealthy",
  "tool_disabled",        "dead_letter_abandoned", "agent_stuck",
  "dead_letters_pending", "provider_unauthorized"};

constexpr std::array<const char*, 4> notice_status_names{"pending", "sent",
                                                         "failed", "logged"};

constexpr std::array<const char*, 3> severity_names{"low", "medium", "high"};

channel_retry preset(uint32_t attempts, milliseconds base, milliseconds max) {
  channel_retry result;
  result.backoff.max_attempts = attempts;
  result.backoff.base_delay = base;
  result.backoff.multiplier = 2.0;
  result.backoff.max_delay = max;
  result.backoff.jitter = 0.1;
  return result;
}

} // namespace

// -- channel sends ------------------------------------------------------------

const char* to_string(channel_kind x) {
  return name_of(channel_names, x);
}

std::optional<channel_kind> parse_channel_kind(std::string_view str) {
  return parse_name<channel_kind>(channel_names, str);
}

channel_retry channel_retry_preset(channel_kind kind) {
  switch (kind) {
    case channel_kind::telegram: {
      auto result = preset(3, milliseconds{400}, milliseconds{30000});
      result.min_retry_after = milliseconds{400};
      result.plain_text_fallback = true;
      return result;
    }
    case channel_kind::whatsapp:
      return preset(3, milliseconds{500}, milliseconds{30000});
    case channel_kind::sms:
      return preset(2, milliseconds{1000}, milliseconds{10000});
    case channel_kind::email:
      return preset(3, milliseconds{2000}, milliseconds{60000});
    case channel_kind::webhook: break;
  }
  return preset(3, milliseconds{1000}, milliseconds{30000});
}

send_decision after_failed_send(const channel_retry& policy, uint32_t attempt,
                                bool plain_text_sent,
                                const send_failure& failure,
                                std::mt19937_64& rng) {
  using action = send_decision::action;
  switch (failure.kind) {
    case send_failure_kind::parse_error:
      if (policy.plain_text_fallback && !plain_text_sent)
        return {action::retry_plain_text, milliseconds{0}};
      return {action::dead_letter, milliseconds{0}};
    case send_failure_kind::rejected:
      return {action::dead_letter, milliseconds{0}};
    case send_failure_kind::transient: break;
  }
  if (attempt >= policy.backoff.max_attempts)
    return {action::dead_letter, milliseconds{0}};
  auto retry_after = failure.retry_after;
  if (retry_after)
    retry_after = std::max(*retry_after, policy.min_retry_after);
  return {action::retry, next_delay(policy.backoff, attempt, retry_after, rng)};
}

namespace {

bool word_char(std::string_view text, size_t i) {
  return i < text.size() && std::isalnum(static_cast<unsigned char>(text[i]));
}

bool blank_at(std::string_view text, size_t i) {
  return i >= text.size() || text[i] == ' ' || text[i] == '\n';
}

// Whether text[i] is markup: backticks and brackets always; emphasis and
// strike marks unless inside a word (`snake_case` keeps its underscore) or
// standing alone between blanks (`5 * 3`).
bool markup_at(std::string_view text, size_t i) {
  switch (text[i]) {
    case '`':
    case '[':
    case ']': return true;
    case '*':
    case '_':
    case '~':
      if (i > 0 && word_char(text, i - 1) && word_char(text, i + 1))
        return false;
      return !((i == 0 || blank_at(text, i - 1)) && blank_at(text, i + 1));
    default: return false;
  }
}

// The index after a heading's marks and space (`## `), or after quote
// marks, at `i`; `i` itself if there are none (`#42` is no heading).
size_t skip_line_marks(std::string_view text, size_t i) {
  auto j = i;
  while (j < text.size() && text[j] == '#')
    ++j;
  if (j > i && j < text.size() && text[j] != ' ')
    return i;
  while (j < text.size() && text[j] == '>')
    ++j;
  while (j < text.size() && text[j] == ' ')
    ++j;
  return j;
}

// Copies the link target from `i` (just after "](") up to its ')'
// verbatim; returns the index of that ')' (or the end).
size_t copy_link_target(std::string_view text, size_t i, std::string& out) {
  auto end = std::min(text.find(')', i), text.size());
  out.append(text.substr(i, end - i));
  return end;
}

} // namespace

std::string strip_markdown(std::string_view text) {
  std::string result;
  result.reserve(text.size());
  size_t i = 0;
  while (i < text.size()) {
    if (i == 0 || text[i - 1] == '\n') {
      i = skip_line_marks(text, i);
      if (i == text.size())
        break;
    }
    auto c = text[i];
    if (c == '\\' && i + 1 < text.size()) {
      result += text[i + 1];
      i += 2;
      continue;
    }
    if (c == ']' && i + 1 < text.size() && text[i + 1] == '(') {
      result += " ("; // [label](url) reads "label (url)".
      i = copy_link_target(text, i + 2, result);
      continue;
    }
    if (!markup_at(text, i))
      result += c;
    ++i;
  }
  return result;
}

// -- the dead-letter queue ----------------------------------------------------

const char* to_string(dead_letter_status x) {
  return name_of(dead_letter_status_names, x);
}

std::optional<dead_letter_status>
parse_dead_letter_status(std::string_view str) {
  return parse_name<dead_letter_status>(dead_letter_status_names, str);
}

dead_letter_timing new_dead_letter(const dead_letter_schedule& schedule,
                                   epoch_ms first_attempt, epoch_ms now) {
  dead_letter_timing result;
  result.first_attempt = first_attempt;
  result.last_attempt = now;
  if (schedule.max_retries == 0)
    result.status = dead_letter_status::abandoned;
  else
    result.next_retry = now + schedule.interval.count();
  return result;
}

bool due(const dead_letter_timing& x, epoch_ms now) {
  return x.status == dead_letter_status::pending && x.next_retry
         && *x.next_retry <= now;
}

dead_letter_timing after_failed_retry(const dead_letter_schedule& schedule,
                                      dead_letter_timing x, epoch_ms now) {
  ++x.retries;
  x.last_attempt = now;
  if (x.retries >= schedule.max_retries) {
    x.status = dead_letter_status::abandoned;
    x.next_retry.reset();
  } else {
    x.next_retry = now + schedule.interval.count();
  }
  return x;
}

dead_letter_timing after_delivered(dead_letter_timing x, epoch_ms now) {
  x.last_attempt = now;
  x.status = dead_letter_status::delivered;
  x.next_retry.reset();
  return x;
}

// -- owner notifications ------------------------------------------------------

const char* to_string(notice_kind x) {
  return name_of(notice_names, x);
}

std::optional<notice_kind> parse_notice_kind(std::string_view str) {
  return parse_name<notice_kind>(notice_names, str);
}

const char* to_string(notice_status x) {
  return name_of(notice_status_names, x);
}

std::optional<notice_status> parse_notice_status(std::string_view str) {
  return parse_name<notice_status>(notice_status_names, str);
}

const char* to_string(severity x) {
  return name_of(severity_names, x);
}

severity severity_of(notice_kind x) {
  switch (x) {
    case notice_kind::all_models_failed:
    case notice_kind::credits_exhausted:
    case notice_kind::channel_unhealthy:
    case notice_kind::provider_unauthorized: return severity::high;
    case notice_kind::dead_letters_pending: return severity::low;
    default: return severity::medium;
  }
}

std::chrono::milliseconds default_dedup_window(notice_kind x) {
  using std::chrono::hours;
  using std::chrono::minutes;
  switch (x) {
    case notice_kind::all_models_failed: return minutes{30};
    case notice_kind::tool_disabled:
    case notice_kind::dead_letters_pending: return hours{24};
    default: return hours{1};
  }
}

notice_gate::notice_gate() {
  for (size_t i = 0; i < notice_names.size(); ++i) {
    auto kind = static_cast<notice_kind>(i);
    windows_[kind] = default_dedup_window(kind);
  }
}

void notice_gate::set_window(notice_kind kind,
                             std::chrono::milliseconds window) {
  windows_[kind] = window;
}

std::chrono::milliseconds notice_gate::window(notice_kind kind) const {
  auto i = windows_.find(kind);
  return i != windows_.end() ? i->second : default_dedup_window(kind);
}

bool notice_gate::admit(notice_kind kind, const std::string& subject,
                        epoch_ms now) {
  auto [i, added] = sent_.try_emplace(key{kind, subject}, now);
  if (added)
    return true;
  if (now - i->second < window(kind).count())
    return false;
  i->second = now;
  return true;
}

void notice_gate::restore(notice_kind kind, const std::string& subject,
                          epoch_ms sent) {
  auto& last = sent_[key{kind, subject}];
  last = std::max(last, sent);
}

void notice_gate::forget(notice_kind kind, const std::string& subject,
                         epoch_ms sent) {
  auto i = sent_.find(key{kind, subject});
  if (i != sent_.end() && i->second == sent)
    sent_.erase(i);
}

void notice_gate::expire(epoch_ms now) {
  for (auto i = sent_.begin(); i != sent_.end();) {
    if (now - i->second >= window(i->first.first).count())
      i = sent_.erase(i);
    else
      ++i;
  }
}

} // namespace keel
