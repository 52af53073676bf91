#pragma once

// Single-use tickets for WebSocket upgrades from a browser, which cannot
// set an `Authorization` header on a WebSocket: instead of putting the
// admin token in the URL (`?token=`, which ends up in proxy logs and
// browser history), the page asks `POST /api/v1/ws-ticket` with its token
// and opens `/ws?ticket=TICKET`. A ticket is 256 random bits, opens one
// upgrade as a client, and expires after `ws_ticket_store::lifetime`.

#include <chrono>
#include <cstddef>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

namespace keel {

/// The admin API path that issues tickets.
constexpr std::string_view ws_ticket_path = "/api/v1/ws-ticket";

/// What an upgrade's `?ticket=` came to.
enum class ticket_check {
  /// None presented.
  none,
  /// Valid: redeemed now, never again.
  redeemed,
  /// Unknown, used already or expired.
  refused,
};

/// The tickets issued and not yet used or expired. Thread-safe; tickets
/// are kept by their SHA-256 digest, so neither the map nor the time a
/// lookup takes reveals one.
class ws_ticket_store {
public:
  using clock = std::chrono::steady_clock;

  /// How long a ticket is valid.
  static constexpr std::chrono::seconds lifetime{30};

  /// Tickets outstanding at most; issuing another drops the one closest
  /// to its expiry.
  static constexpr size_t max_outstanding = 1024;

  /// A new ticket, valid until `now + lifetime`.
  std::string issue(clock::time_point now = clock::now());

  /// Redeems `ticket`: true (once) if it was issued and has not expired.
  bool redeem(std::string_view ticket, clock::time_point now = clock::now());

  /// The `?ticket=` of a request target, redeemed (`redeem`) if present.
  ticket_check check(std::string_view target,
                     clock::time_point now = clock::now());

  /// Tickets outstanding (expired ones included until the next issue).
  size_t size() const;

  /// The answer to `METHOD /api/v1/ws-ticket` of an admin: 200 with
  /// `{"ticket": ..., "expires_in_ms": ...}` for POST, else 405.
  struct answer {
    unsigned status;
    std::string body;
  };
  answer answer_request(std::string_view method,
                        clock::time_point now = clock::now());

private:
  mutable std::mutex mtx_;
  std::map<std::string, clock::time_point> expiry_;
};

} // namespace keel
