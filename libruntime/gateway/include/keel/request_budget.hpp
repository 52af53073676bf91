#pragma once

// What one client connection may have under way at once: its frames
// handed to the node and not yet answered. The gateway bridge takes a slot
// per request and gives it back with the answer; a request beyond the
// budget is refused at once (error `busy`), so a client cannot pile up
// work, and the memory of its answers, faster than the node answers it.

#include <cstddef>
#include <string>
#include <unordered_map>

#include "keel/ws_server.hpp"

namespace keel {

/// `history` requests one connection may have under way: a page is up to
/// `gateway.max_history_bytes` while it is read and rendered, and a client
/// pages through a history one page after the other.
constexpr size_t max_history_in_flight = 2;

class request_budget {
public:
  /// At most `max_requests` requests per connection, of which at most
  /// `max_history` history requests.
  explicit request_budget(size_t max_requests = 128,
                          size_t max_history = max_history_in_flight);

  /// Takes a slot for a request of `conn` (`history`: a history request);
  /// false, taking nothing, when the connection has its most under way.
  bool admit(connection_id conn, bool history);

  /// Gives back a slot `admit` took. Nothing for a dropped connection.
  void release(connection_id conn, bool history);

  /// Forgets a closed connection (answers still under way release
  /// nothing).
  void drop(connection_id conn);

  /// Requests of `conn` under way.
  size_t in_flight(connection_id conn) const;

  /// The `busy` error frame's message for a refused request.
  std::string refusal(bool history) const;

private:
  struct counts {
    size_t all = 0;
    size_t history = 0;
  };

  size_t max_requests_;
  size_t max_history_;
  std::unordered_map<connection_id, counts> open_;
};

} // namespace keel
