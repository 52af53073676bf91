#pragma once

// Pure policy for outcomes that leave the node: how a send to an outbound
// channel is retried (presets per channel kind), when a dead letter is
// tried again or abandoned, and which owner notifications a dedup window
// suppresses. Nothing here reads a clock or a random device: callers pass
// `now` and the random source, so every schedule runs on a test clock.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <utility>

#include "keel/provider_policy.hpp"

namespace keel {

/// Milliseconds since the Unix epoch: times that are stored.
using epoch_ms = int64_t;

// -- channel sends ------------------------------------------------------------

/// The kinds of outbound channel, each with its retry preset.
enum class channel_kind : uint8_t { webhook, telegram, whatsapp, sms, email };

/// Returns the stable name of `x` (e.g. `"telegram"`).
const char* to_string(channel_kind x);

/// Parses a stable name; nullopt for anything else.
std::optional<channel_kind> parse_channel_kind(std::string_view str);

/// How sends to one channel are retried.
struct channel_retry {
  /// Attempts (the first one included), backoff and jitter.
  retry_policy backoff;
  /// Least wait a Retry-After from the channel is raised to.
  std::chrono::milliseconds min_retry_after{0};
  /// A send that has not answered after this is abandoned as a timeout
  /// (and retried like any transient failure).
  std::chrono::milliseconds send_timeout{10000};
  /// Whether a text the channel cannot parse (Telegram's "can't parse
  /// entities") is sent once more as plain text, its markup stripped.
  bool plain_text_fallback = false;
};

/// The preset of `kind`: telegram 3 attempts, 400 ms base, 30 s max, Retry-
/// After at least 400 ms, plain-text fallback; whatsapp 3 / 500 ms / 30 s;
/// sms 2 / 1 s / 10 s; email 3 / 2 s / 60 s; webhook 3 / 1 s / 30 s. Each
/// doubles per attempt, with 10 % jitter, and times a send out after 10 s.
channel_retry channel_retry_preset(channel_kind kind);

/// How one failed send ended, as the channel's client classifies it.
enum class send_failure_kind : uint8_t {
  /// Worth trying again: 429, 5xx, a timeout, a reset connection.
  transient,
  /// The channel could not parse the text's markup.
  parse_error,
  /// The channel refused the send for good (any other 4xx).
  rejected,
};

/// A failed send.
struct send_failure {
  send_failure_kind kind = send_failure_kind::transient;
  /// The channel's Retry-After (Telegram: `parameters.retry_after`).
  std::optional<std::chrono::milliseconds> retry_after;
};

/// What follows a failed send.
struct send_decision {
  enum class action : uint8_t {
    /// Send the same text again after `delay`.
    retry,
    /// Send it once more at once, as plain text.
    retry_plain_text,
    /// Give up: the text goes to the dead-letter queue.
    dead_letter,
  };
  action what = action::dead_letter;
  std::chrono::milliseconds delay{0};
};

/// Decides after attempt `attempt` (1-based) failed with `failure`;
/// `plain_text_sent`: the failed attempt already was the plain-text one. A
/// parse error gets its one plain-text attempt even after the last regular
/// one (the markup was ours, not the channel's fault); a rejection goes to
/// the dead-letter queue at once.
send_decision after_failed_send(const channel_retry& policy, uint32_t attempt,
                                bool plain_text_sent,
                                const send_failure& failure,
                                std::mt19937_64& rng);

/// `text` without Markdown markup: emphasis, code and strike marks (not
/// inside words, nor standing alone between blanks), link brackets
/// (`[label](url)` becomes `label (url)`, the url kept verbatim), heading
/// (`# `) and quote marks at line starts, and backslash escapes. A mark at
/// a word's edge that is not markup (`~/bin`) is dropped too.
std::string strip_markdown(std::string_view text);

// -- the dead-letter queue ----------------------------------------------------

/// When dead letters are tried again.
struct dead_letter_schedule {
  /// Scheduled retries before a dead letter is abandoned.
  uint32_t max_retries = 5;
  /// Between two scheduled retries.
  std::chrono::milliseconds interval{std::chrono::minutes{5}};
  /// Dead letters tried per round at most.
  size_t batch = 50;
};

/// Where a dead letter stands.
enum class dead_letter_status : uint8_t {
  /// Waiting for its next retry.
  pending,
  /// A retry (or a manual one) delivered it.
  delivered,
  /// Its retries are used up: the owner is told.
  abandoned,
  /// An operator dropped it.
  dropped,
};

/// Returns the stable name of `x` (e.g. `"abandoned"`).
const char* to_string(dead_letter_status x);

/// Parses a stable name; nullopt for anything else.
std::optional<dead_letter_status> parse_dead_letter_status(std::string_view);

/// The timing of one dead letter.
struct dead_letter_timing {
  /// Scheduled retries made so far.
  uint32_t retries = 0;
  epoch_ms first_attempt = 0;
  epoch_ms last_attempt = 0;
  /// When it is due next; none once it is no longer pending.
  std::optional<epoch_ms> next_retry;
  dead_letter_status status = dead_letter_status::pending;
};

/// A dead letter written at `now`, after its last regular attempt.
dead_letter_timing new_dead_letter(const dead_letter_schedule& schedule,
                                   epoch_ms first_attempt, epoch_ms now);

/// Whether `x` is pending and due at `now`.
bool due(const dead_letter_timing& x, epoch_ms now);

/// `x` after a scheduled retry at `now` failed: due again one interval
/// later, or abandoned once `max_retries` retries failed.
dead_letter_timing after_failed_retry(const dead_letter_schedule& schedule,
                                      dead_letter_timing x, epoch_ms now);

/// `x` after a retry at `now` delivered it.
dead_letter_timing after_delivered(dead_letter_timing x, epoch_ms now);

// -- owner notifications ------------------------------------------------------

/// What the owner is told about.
enum class notice_kind : uint8_t {
  all_models_failed,
  credits_exhausted,
  channel_unhealthy,
  tool_disabled,
  dead_letter_abandoned,
  agent_stuck,
  /// Many dead letters pending (`dead_letter_digest_threshold`), as a
  /// digest.
  dead_letters_pending,
  /// Every provider of a pool refused the credentials.
  provider_unauthorized,
};

/// Returns the stable name of `x` (e.g. `"tool_disabled"`).
const char* to_string(notice_kind x);

/// Parses a stable name; nullopt for anything else.
std::optional<notice_kind> parse_notice_kind(std::string_view str);

/// Where a notice to the owner stands.
enum class notice_status : uint8_t {
  /// Being sent to the owner's channel.
  pending,
  /// The owner's channel took it.
  sent,
  /// The owner's channel did not take it (its retries used up).
  failed,
  /// No owner channel is configured: only logged and listed.
  logged,
};

/// Returns the stable name of `x` (e.g. `"sent"`).
const char* to_string(notice_status x);

/// Parses a stable name; nullopt for anything else.
std::optional<notice_status> parse_notice_status(std::string_view str);

/// How urgent a notice is.
enum class severity : uint8_t { low, medium, high };

/// Returns the stable name of `x` (e.g. `"high"`).
const char* to_string(severity x);

/// Returns the severity of `x`: high for all models failed, credits
/// exhausted, refused credentials and an unhealthy channel; low for the pending
/// digest; medium for the rest.
severity severity_of(notice_kind x);

/// Pending dead letters from which the owner gets a digest.
constexpr size_t dead_letter_digest_threshold = 10;

/// Returns how long a notice of `x` about one subject suppresses the next:
/// all models failed 30 min, credits exhausted 1 h, channel unhealthy 1 h,
/// tool disabled 24 h, dead letter abandoned 1 h, agent stuck 1 h, the
/// pending digest 24 h, refused credentials 1 h.
std::chrono::milliseconds default_dedup_window(notice_kind x);

/// Which notices go out: the first about a kind and subject does, the next
/// ones within the kind's window are suppressed. Its state (when each was
/// last sent) is what a caller stores to survive a restart.
class notice_gate {
public:
  using key = std::pair<notice_kind, std::string>;

  notice_gate();

  /// Sets the window of `kind`.
  void set_window(notice_kind kind, std::chrono::milliseconds window);

  /// Returns the window of `kind`.
  std::chrono::milliseconds window(notice_kind kind) const;

  /// Whether a notice of `kind` about `subject` goes out at `now`; if so,
  /// remembers `now` as its last sending.
  bool admit(notice_kind kind, const std::string& subject, epoch_ms now);

  /// Remembers a sending (as read back from the store).
  void restore(notice_kind kind, const std::string& subject, epoch_ms sent);

  /// When each kind and subject was last sent.
  const std::map<key, epoch_ms>& sent() const {
    return sent_;
  }

  /// Forgets the sending at `sent` (it failed), so the next notice about
  /// `kind` and `subject` goes out; a later sending stays.
  void forget(notice_kind kind, const std::string& subject, epoch_ms sent);

  /// Forgets sendings whose windows ended before `now`.
  void expire(epoch_ms now);

private:
  std::map<notice_kind, std::chrono::milliseconds> windows_;
  std::map<key, epoch_ms> sent_;
};

} // namespace keel
