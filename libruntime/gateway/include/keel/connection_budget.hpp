#pragma once

// The gateway's budget for connections that have not passed the token
// check yet (`gateway.max_unauthenticated` in all and
// `gateway.max_unauthenticated_per_address` from one address). A full
// budget makes room by closing its oldest connection rather than refusing
// the new one: an attacker's idle sockets are older than a probe or a
// client that connects and sends its request at once. Pure bookkeeping,
// not thread-safe: the server guards it.

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>

namespace keel {

class connection_budget {
public:
  connection_budget(size_t max_total, size_t max_per_address);

  /// Admits connection `id` (ids grow: a smaller one is older) from
  /// `address`. Returns the connection that leaves to make room, if any:
  /// the oldest of `address` when that address is at its cap, else the
  /// oldest of all when the budget is.
  std::optional<uint64_t> admit(uint64_t id, const std::string& address);

  /// Takes `id` out (it authenticated or closed). False when it was not in
  /// (it left to make room before).
  bool remove(uint64_t id);

  /// Connections in the budget.
  size_t size() const {
    return address_of_.size();
  }

  /// Connections in the budget from `address`.
  size_t count(const std::string& address) const;

private:
  size_t max_total_;
  size_t max_per_address_;
  std::map<uint64_t, std::string> address_of_;
  std::unordered_map<std::string, std::set<uint64_t>> by_address_;
};

} // namespace keel
