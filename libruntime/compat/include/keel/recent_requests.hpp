#pragma once

// Requests without an idempotency key, remembered for the SDKs' own
// retries: the official SDKs resend a request that failed with 408, 409,
// 429, a 5xx or a broken connection, counting in `X-Stainless-Retry-Count`,
// but send no key. A retry (count >= 1) with the same fingerprint within
// the window is the same message; a first try is always a new one. Memory
// only: bounded by the window and a capacity, oldest first out.

#include <chrono>
#include <cstddef>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <string_view>

namespace keel::compat {

/// Which Keel message a request became.
struct request_identity {
  std::string thread;
  std::string message_id;
};

/// The fingerprint of a request: the SHA-256 of the client's token, the
/// thread it named (empty: none) and its body.
std::string fingerprint(std::string_view token, std::string_view thread,
                        std::string_view body);

class recent_requests {
public:
  using clock = std::chrono::steady_clock;

  recent_requests(std::chrono::milliseconds window, size_t capacity);

  /// The message a request with `fingerprint` became, if one did within
  /// the window.
  std::optional<request_identity> find(const std::string& fingerprint,
                                       clock::time_point now);

  /// Remembers that a request with `fingerprint` became `id`.
  void remember(const std::string& fingerprint, request_identity id,
                clock::time_point now);

  size_t size() const {
    return by_fingerprint_.size();
  }

private:
  struct seen {
    request_identity id;
    clock::time_point at;
  };

  void forget_old(clock::time_point now);

  std::chrono::milliseconds window_;
  size_t capacity_;
  std::map<std::string, seen> by_fingerprint_;
  /// Fingerprints in the order they were remembered.
  std::deque<std::pair<clock::time_point, std::string>> order_;
};

struct compat_call;

/// The Keel message request `call` becomes. The thread: the one it named,
/// else (one-shot) `oai-` and 32 hex digits of the SHA-256 of the token and
/// the key, or of `fresh` without a key. The message id: the key's; without
/// one, a retry (`retry_count` >= 1) of a request `recent` saw within its
/// window is that request's message, anything else a new one (`fp:` and
/// `fresh`), remembered by fingerprint. `fresh` is random text, new for
/// each request.
request_identity identity_for(const compat_call& call, std::string_view token,
                              std::string_view body, recent_requests& recent,
                              recent_requests::clock::time_point now,
                              const std::string& fresh);

} // namespace keel::compat
