#pragma once

// What one model call counts toward a thread's usage: the tokens its
// provider reported, or, for a call that reported none (the offline
// providers, a server that leaves `usage` out, a stream cut before its
// usage chunk), the estimate of its request and its answer.

#include <cstdint>

#include "keel/completion.hpp"
#include "keel/types.hpp"

namespace keel {

/// Fills the usage of `reply`, answering a request estimated at
/// `request_tokens` (`estimate_tokens` of its context, prompt and tools),
/// with estimates if its provider reported none (`reported` stays false).
void estimate_usage(completion& reply, uint64_t request_tokens);

/// What the call that answered `reply` counts: one model call, its tokens,
/// and whether they are estimated.
usage_count call_usage(const completion& reply);

} // namespace keel
