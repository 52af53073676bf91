#pragma once

// Pure policy building blocks for provider pools: failure
// classification, Retry-After parsing, backoff, a retry budget spanning a
// failover chain, and a per-provider circuit breaker with a health record.
// Nothing here reads a clock or a random device: callers inject `now` and the
// random source, so every decision is reproducible on a test clock.

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

namespace keel {

// -- classification -----------------------------------------------------------

/// Why a provider call failed; decides retry, cooldown and failover.
enum class error_class : uint8_t {
  /// Bad or missing credentials (401/403).
  auth,
  /// Too many requests (429).
  rate_limit,
  /// Payment required or quota used up (402, OpenAI `insufficient_quota`).
  billing,
  /// The provider did not answer in time (408, 504, transport timeouts).
  timeout,
  /// The provider is overloaded or failing (500/502/503/529, "overloaded").
  overloaded,
  /// The model does not exist at this provider (404).
  model_not_found,
  /// The prompt exceeds the model's context window.
  context_overflow,
  /// Any other 4xx: the request itself is wrong.
  invalid_request,
  /// The provider does not implement what was asked (501): asking again
  /// will not help, another provider may.
  action_not_supported,
  /// The answer could not be parsed.
  format,
  /// Anything else.
  unknown,
};

/// Number of `error_class` values.
constexpr size_t error_class_count = 11;

/// The stable name of each `error_class`, in its order (`to_string`; the
/// configuration's class names).
inline constexpr const char* error_class_names[error_class_count] = {
  "auth",
  "rate_limit",
  "billing",
  "timeout",
  "overloaded",
  "model_not_found",
  "context_overflow",
  "invalid_request",
  "action_not_supported",
  "format",
  "unknown",
};
static_assert(error_class_names[error_class_count - 1] != nullptr,
              "error_class_names lacks a name");

/// Returns the stable name of `x` (e.g. `"rate_limit"`).
const char* to_string(error_class x);

/// Parses a name produced by `to_string`.
std::optional<error_class> parse_error_class(std::string_view str);

/// What went wrong at the transport level, below HTTP.
enum class transport_error : uint8_t {
  connect_refused,
  reset,
  timeout,
  tls,
  dns,
  other,
};

/// Everything known about one failed provider call.
struct provider_failure {
  /// HTTP status, if an HTTP answer arrived.
  std::optional<int> status;
  /// Response body (or error text), possibly empty.
  std::string body;
  /// Transport failure, if the call failed below HTTP.
  std::optional<transport_error> transport;
  /// Set when an answer arrived but could not be parsed.
  bool unparseable = false;
  /// Nested causes, outermost first (e.g. messages of wrapped exceptions).
  std::vector<std::string> causes;
};

/// How many entries of `provider_failure::causes` `classify` looks at (the
/// same depth CodeBuddy uses; deeper chains are almost always noise).
constexpr size_t max_cause_depth = 5;

/// Classifies a failed provider call. Precedence, first match wins:
/// 1. the failure itself: body markers that are more specific than any
///    status (`insufficient_quota` -> billing, context length exceeded ->
///    context_overflow), then the HTTP status, then "overloaded" in the body,
///    then the transport error, then the `unparseable` flag, then (only when
///    there is no status) keywords in the body;
/// 2. otherwise the causes, outermost first, up to `max_cause_depth`: the
///    first cause whose text classifies as something other than `unknown`
///    wins;
/// 3. otherwise `unknown`.
error_class classify(const provider_failure& failure);

/// Classifies free text (a body without status, or a cause) by keywords;
/// `unknown` if nothing matches.
error_class classify_text(std::string_view text);

// -- Retry-After --------------------------------------------------------------

/// Parses a Retry-After header value: delta-seconds (`"120"`) or an
/// IMF-fixdate (`"Sun, 06 Nov 1994 08:49:37 GMT"`, RFC 7231) taken relative
/// to `now`. A date in the past yields zero. Anything else, a date the
/// system clock cannot hold (before 1678 or after 2262) included, yields
/// nullopt.
std::optional<std::chrono::milliseconds>
parse_retry_after(std::string_view value,
                  std::chrono::system_clock::time_point now);

// -- retries and cooldowns ----------------------------------------------------

/// Backoff settings of one pool.
struct retry_policy {
  /// Attempts per provider, the first one included.
  uint32_t max_attempts = 3;
  /// Delay after the first failed attempt, before jitter.
  std::chrono::milliseconds base_delay{1000};
  /// Growth factor per further attempt.
  double multiplier = 2.0;
  /// Upper bound of a computed (not Retry-After) delay, jitter included.
  std::chrono::milliseconds max_delay{30000};
  /// Relative jitter: the delay is drawn uniformly from d * [1 - j, 1 + j].
  double jitter = 0.1;
  /// Upper bound on how long a Retry-After header may make us wait.
  std::chrono::milliseconds retry_after_cap{60000};
};

/// Returns the delay before attempt `attempt + 1`, after attempt `attempt`
/// (1-based) failed: `base_delay * multiplier^(attempt - 1)`, jittered, capped
/// at `max_delay`; then raised to `min(retry_after, retry_after_cap)` if the
/// provider sent Retry-After. The Retry-After floor applies on every attempt,
/// not only the first.
std::chrono::milliseconds
next_delay(const retry_policy& policy, uint32_t attempt,
           std::optional<std::chrono::milliseconds> retry_after,
           std::mt19937_64& rng);

/// Returns whether retrying (the same or another provider) can help.
bool retryable(error_class x);

/// Returns whether `x` says something about the provider (as opposed to the
/// request: invalid_request, context_overflow), i.e. counts for its breaker.
bool counts_against_provider(error_class x);

/// Returns whether a single failure of class `x` already shows that the
/// provider cannot serve us (auth, billing, model_not_found,
/// action_not_supported).
bool fatal_for_provider(error_class x);

/// Returns the default cooldown of a provider after a failure of class `x`
/// (zero: none).
std::chrono::milliseconds default_cooldown(error_class x);

/// Cooldown per error class; starts from the defaults, configurable.
class cooldown_table {
public:
  cooldown_table();

  /// Returns the cooldown for `x`.
  std::chrono::milliseconds get(error_class x) const {
    return values_[static_cast<size_t>(x)];
  }

  /// Sets the cooldown for `x`.
  void set(error_class x, std::chrono::milliseconds value) {
    values_[static_cast<size_t>(x)] = value;
  }

private:
  std::array<std::chrono::milliseconds, error_class_count> values_;
};

// -- retry budget -------------------------------------------------------------

/// Attempts left for one request across its whole failover chain, so that a
/// failing chain neither retries forever nor storms a recovering provider.
class retry_budget {
public:
  /// Creates a budget of `total` attempts.
  explicit retry_budget(uint32_t total) : total_(total) {
    // nop
  }

  /// Takes one attempt; false (and nothing taken) when exhausted.
  bool take() {
    if (used_ >= total_)
      return false;
    ++used_;
    return true;
  }

  /// Attempts left.
  uint32_t remaining() const {
    return total_ - used_;
  }

  /// Attempts taken so far.
  uint32_t used() const {
    return used_;
  }

  /// Returns whether no attempt is left.
  bool exhausted() const {
    return used_ >= total_;
  }

private:
  uint32_t total_;
  uint32_t used_ = 0;
};

// -- circuit breaker and health -----------------------------------------------

/// Health as shown to operators.
enum class health_status : uint8_t {
  /// Closed breaker, last call succeeded.
  healthy,
  /// Closed breaker with recent failures, or a probe is out.
  degraded,
  /// Open breaker: in cooldown (stored as "down" by older builds).
  unhealthy,
};

/// Returns the stable name of `x`.
const char* to_string(health_status x);

/// Parses a name produced by `to_string`, and "down", the name older
/// builds stored for `unhealthy`.
std::optional<health_status> parse_health_status(std::string_view str);

/// State of a circuit breaker.
enum class breaker_state : uint8_t { closed, open, half_open };

/// Returns the stable name of `x`.
const char* to_string(breaker_state x);

/// Health record of one provider.
struct provider_health {
  health_status status = health_status::healthy;
  /// Failures since the last success (only those counting for the provider).
  uint32_t consecutive_failures = 0;
  /// Text of the last failure.
  std::string last_error;
  /// Class of the last failure.
  std::optional<error_class> last_error_class;
  /// Time of the last success and of the last failure.
  std::optional<std::chrono::steady_clock::time_point> last_success;
  std::optional<std::chrono::steady_clock::time_point> last_failure;
  /// End of the current cooldown (meaningful while unhealthy).
  std::chrono::steady_clock::time_point cooldown_until{};
};

/// Settings of a circuit breaker.
struct breaker_config {
  /// Consecutive failures that open the breaker.
  uint32_t failure_threshold = 3;
  /// Open at once on a failure for which `fatal_for_provider` holds.
  bool open_on_fatal = true;
  /// How long before the cooldown ends the probe is let through; zero means
  /// `probe_lead_fraction` of the cooldown.
  std::chrono::milliseconds probe_lead{0};
  /// Fraction of the cooldown used when `probe_lead` is zero.
  double probe_lead_fraction = 0.1;
  /// A probe that has not reported after this long is presumed lost and
  /// another one may go out (a lost probe must not wedge the breaker).
  std::chrono::milliseconds probe_timeout{60000};
  /// Cooldown per class of the failure that opens (or re-opens) the breaker.
  cooldown_table cooldowns;
};

/// A circuit breaker for one provider: closed -> open after
/// `failure_threshold` consecutive failures; while open, calls are refused
/// until `probe_lead` before the cooldown ends, then exactly one probe is let
/// through (half-open); its success closes the breaker, its failure re-opens
/// it with a fresh cooldown. Not thread-safe: owned by one actor.
class circuit_breaker {
public:
  using time_point = std::chrono::steady_clock::time_point;

  explicit circuit_breaker(breaker_config cfg = {});

  /// Returns whether a call may go out now. Admitting the half-open probe
  /// marks it as out: a second caller is refused until it reports.
  bool admit(time_point now);

  /// Reports a successful call.
  void record_success(time_point now);

  /// Reports a failed call of class `cls` with human-readable `text`.
  void record_failure(time_point now, error_class cls, std::string text);

  /// Returns the current state (without admitting anything).
  breaker_state state() const {
    return state_;
  }

  /// Returns the health record.
  const provider_health& health() const {
    return health_;
  }

  /// Returns when the probe is let through while open.
  time_point probe_at() const;

  /// Restores a persisted health record (e.g. after a restart): a `down`
  /// record re-opens the breaker until its `cooldown_until`.
  void restore(const provider_health& rec);

private:
  void open(time_point now, error_class cls);

  breaker_config cfg_;
  breaker_state state_ = breaker_state::closed;
  provider_health health_;
  /// Length of the current cooldown (to compute the probe lead).
  std::chrono::milliseconds cooldown_{0};
  /// When the outstanding probe went out, if any.
  std::optional<time_point> probe_started_;
};

} // namespace keel
