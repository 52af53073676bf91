// The provider router's state, and the decisions it takes on a call
// without the actor: the error a call ends with, whether a failure is
// retried here, which providers are passed over while cooling down.

#include "provider_pool_impl.hpp"

#include <algorithm>

#include "keel/redact.hpp"
#include "keel/text.hpp"

namespace keel {

namespace {

using std::chrono::duration_cast;
using std::chrono::milliseconds;
using time_point = caf::actor_clock::time_point;

} // namespace

void pool_call::next_provider() {
  ++link;
  tries_here = 0;
  timeout_retried = false;
  max_tokens = 0;
  stream_retries = 0;
  stream_note.clear();
}

void pool_call::note_failure(error_class cls, bool skipped) {
  if (!skipped)
    last_class = cls;
  if (shared_class && *shared_class != cls)
    classes_differ = true;
  shared_class = cls;
}

std::optional<error_class> pool_call::common_class() const {
  if (classes_differ)
    return std::nullopt;
  return shared_class;
}

void provider_router_state::init(const provider_pool_config& config,
                                 caf::actor pool_supervisor) {
  pool = config.pool.name;
  cfg = config.pool;
  workers = std::move(pool_supervisor);
  secrets = config.secrets;
  rng.seed(std::random_device{}());
  for (auto& p : config.providers)
    chain.push_back(chain_link{p, circuit_breaker{config.pool.breaker}});
}

void provider_router_state::fail_all(const caf::error& reason) {
  for (auto& [id, call] : calls)
    call.promise.deliver(reason);
  calls.clear();
}

provider_health_record
provider_router_state::health_record(size_t i, time_point now) const {
  auto& link = chain[i];
  auto& h = link.breaker.health();
  auto wall = [now, base = wall_clock_millis()](time_point t) {
    return base + duration_cast<milliseconds>(t - now).count();
  };
  provider_health_record rec;
  rec.pool = pool;
  rec.provider = link.provider.name;
  rec.status = to_string(h.status);
  rec.breaker = to_string(link.breaker.state());
  rec.consecutive_failures = h.consecutive_failures;
  rec.last_error = h.last_error;
  if (h.last_error_class)
    rec.last_error_class = to_string(*h.last_error_class);
  if (h.last_success)
    rec.last_success = wall(*h.last_success);
  if (h.last_failure)
    rec.last_failure = wall(*h.last_failure);
  if (h.status == health_status::unhealthy)
    rec.cooldown_until = wall(h.cooldown_until);
  rec.calls = link.calls;
  rec.failures = link.failures;
  return rec;
}

std::vector<provider_health_record>
provider_router_state::health_records(time_point now) const {
  std::vector<provider_health_record> result;
  for (size_t i = 0; i < chain.size(); ++i)
    result.push_back(health_record(i, now));
  return result;
}

void provider_router_state::restore(const provider_health_record& rec,
                                    time_point now) {
  if (rec.pool != pool)
    return;
  for (auto& link : chain) {
    if (link.provider.name != rec.provider)
      continue;
    auto local = [now, base = wall_clock_millis()](millis t) {
      return now + milliseconds{t - base};
    };
    provider_health h;
    h.status = parse_health_status(rec.status).value_or(health_status::healthy);
    h.consecutive_failures = rec.consecutive_failures;
    // Redacted again: a record stored by an older node may hold a key.
    h.last_error = redact(rec.last_error, secrets);
    h.last_error_class = parse_error_class(rec.last_error_class);
    if (rec.last_success != 0)
      h.last_success = local(rec.last_success);
    if (rec.last_failure != 0)
      h.last_failure = local(rec.last_failure);
    if (h.status == health_status::unhealthy) {
      // A cooldown that ended while the node was down leaves the breaker
      // open with its probe due at once: the next call finds out.
      h.cooldown_until = local(rec.cooldown_until);
    }
    link.breaker.restore(h);
    return;
  }
}

namespace provider_pool_impl {

// The error a request ends with, by the class of its last failure.
caf::error final_error(const provider_router_state& st, const pool_call& call,
                       const std::string& why) {
  auto text = "pool '" + st.pool + "': " + why;
  if (!call.failures.empty())
    text += " (" + call.failures + ")";
  // Set up wrong or out of credit only if every provider was.
  if (call.common_class() == error_class::auth)
    return caf::make_error(ec::provider_unauthorized, std::move(text));
  if (call.common_class() == error_class::billing)
    return caf::make_error(ec::credits_exhausted, std::move(text));
  switch (call.last_class.value_or(error_class::unknown)) {
    case error_class::timeout:
      return caf::make_error(ec::provider_timeout, std::move(text));
    case error_class::context_overflow:
      return caf::make_error(ec::context_overflow, std::move(text));
    case error_class::invalid_request:
      return caf::make_error(ec::provider_rejected, std::move(text));
    default: return caf::make_error(ec::provider_failed, std::move(text));
  }
}

caf::error budget_used_up(const provider_router_state& st,
                          const pool_call& call) {
  return final_error(st, call,
                     "the retry budget of " + std::to_string(call.budget.used())
                       + " attempts is used up");
}

// True if a retryable failure of class `cls` is retried on the same
// provider (a timeout only once).
bool retry_here(const provider_router_state& st, const pool_call& call,
                error_class cls) {
  return call.tries_here < st.cfg.retry.max_attempts
         && !(cls == error_class::timeout && call.timeout_retried)
         && st.chain[call.link].breaker.state() != breaker_state::open
         && !call.budget.exhausted();
}

bool retry_stream(const provider_router_state& st, const pool_call& call,
                  const attempt_outcome& out, error_class cls) {
  return out.in_stream && retryable(cls)
         && call.stream_retries < st.cfg.stream_retries
         && st.chain[call.link].breaker.state() != breaker_state::open
         && !call.budget.exhausted();
}

retry_policy stream_backoff(const pool_config& cfg) {
  auto result = cfg.retry;
  result.base_delay = cfg.stream_delay;
  result.multiplier = 2.0;
  result.max_delay = std::max(cfg.retry.max_delay, cfg.stream_delay);
  return result;
}

std::string stream_retry_note(const std::string& why) {
  return "Your previous answer was cut off before it was complete, and "
         "discarded ("
         + why + "). Answer again in full.";
}

// Moves `call` past the providers whose breaker lets no call through now,
// noting them in the call's failures.
void skip_cooling_down(provider_router_state& st, pool_call& call,
                       time_point now) {
  std::string skipped;
  while (call.link < st.chain.size()
         && !st.chain[call.link].breaker.admit(now)) {
    auto& link = st.chain[call.link];
    // What opened the breaker speaks for the provider (credits used up).
    if (auto cls = link.breaker.health().last_error_class)
      call.note_failure(*cls, true);
    auto wait = duration_cast<milliseconds>(link.breaker.probe_at() - now);
    if (!skipped.empty())
      skipped += ", ";
    skipped += link.provider.name + " cooling down for "
               + say_duration(std::max(wait, milliseconds{0}));
    call.next_provider();
  }
  if (!skipped.empty()) {
    if (!call.failures.empty())
      call.failures += "; ";
    call.failures += "skipped " + skipped;
  }
}

} // namespace provider_pool_impl

} // namespace keel
