#pragma once

// The provider pool's parts, shared by its files: the worker
// (provider_pool_worker.cpp), the router's state and the decisions it takes
// on it (provider_pool_router_state.cpp), the router actor
// (provider_pool_router.cpp); the pool's configuration and supervisors are
// in provider_pool.cpp. Private to actors/src.

#include <chrono>
#include <exception>
#include <string>

#include <caf/actor_clock.hpp>
#include <caf/error.hpp>

#include "keel/provider_pool.hpp"

namespace keel::provider_pool_impl {

using std::chrono::duration_cast;
using std::chrono::milliseconds;
using time_point = caf::actor_clock::time_point;

/// Describes an exception caught by an exception handler.
inline std::string describe(std::exception_ptr& ptr) {
  try {
    std::rethrow_exception(ptr);
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "unknown exception";
  }
}

/// Renders a duration for status details: "850 ms", "2.5 s", "3 min".
inline std::string say_duration(milliseconds d) {
  auto ms = d.count();
  if (ms < 1000)
    return std::to_string(ms) + " ms";
  if (ms < 60'000) {
    auto tenths = (ms + 50) / 100;
    return std::to_string(tenths / 10)
           + (tenths % 10 != 0 ? "." + std::to_string(tenths % 10) : "") + " s";
  }
  return std::to_string((ms + 30'000) / 60'000) + " min";
}

/// The error a request ends with, by the class of its last failure.
caf::error final_error(const provider_router_state& st, const pool_call& call,
                       const std::string& why);

/// The error of a request whose retry budget is used up.
caf::error budget_used_up(const provider_router_state& st,
                          const pool_call& call);

/// True if a retryable failure of class `cls` is retried on the same
/// provider (a timeout only once).
bool retry_here(const provider_router_state& st, const pool_call& call,
                error_class cls);

/// True if failure `out` of class `cls` goes to the stream layer: it broke
/// a stream that had begun, retrying can help, and stream retries, the
/// budget and the provider's breaker allow another attempt.
bool retry_stream(const provider_router_state& st, const pool_call& call,
                  const attempt_outcome& out, error_class cls);

/// The backoff of stream retries: `stream_delay` doubling, with the
/// jitter and upper bound of the pool's retries.
retry_policy stream_backoff(const pool_config& cfg);

/// The note a stream retry gives the model: its last answer broke off for
/// `why` and was discarded.
std::string stream_retry_note(const std::string& why);

/// Moves `call` past the providers whose breaker lets no call through now,
/// noting them in the call's failures.
void skip_cooling_down(provider_router_state& st, pool_call& call,
                       time_point now);

} // namespace keel::provider_pool_impl
