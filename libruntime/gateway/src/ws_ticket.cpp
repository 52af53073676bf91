#include "keel/ws_ticket.hpp"

#include <algorithm>
#include <iterator>
#include <stdexcept>

#include <nlohmann/json.hpp>
#include <openssl/rand.h>
#include <openssl/sha.h>

#include "keel/gateway_policy.hpp"
#include "keel/protocol.hpp"

namespace keel {

namespace {

std::string ticket_digest(std::string_view ticket) {
  unsigned char md[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(ticket.data()), ticket.size(),
         md);
  return std::string{reinterpret_cast<const char*>(md), sizeof(md)};
}

std::string random_ticket() {
  static constexpr char hex[] = "0123456789abcdef";
  unsigned char bytes[32];
  if (RAND_bytes(bytes, sizeof(bytes)) != 1)
    throw std::runtime_error("no random bytes for a WebSocket ticket");
  std::string result;
  for (auto b : bytes) {
    result += hex[b >> 4];
    result += hex[b & 0xF];
  }
  return result;
}

} // namespace

std::string ws_ticket_store::issue(clock::time_point now) {
  auto ticket = random_ticket();
  std::lock_guard<std::mutex> guard{mtx_};
  for (auto i = expiry_.begin(); i != expiry_.end();)
    i = i->second <= now ? expiry_.erase(i) : std::next(i);
  if (expiry_.size() >= max_outstanding)
    expiry_.erase(
      std::min_element(expiry_.begin(), expiry_.end(),
                       [](auto& x, auto& y) { return x.second < y.second; }));
  expiry_.emplace(ticket_digest(ticket), now + lifetime);
  return ticket;
}

bool ws_ticket_store::redeem(std::string_view ticket, clock::time_point now) {
  auto digest = ticket_digest(ticket);
  std::lock_guard<std::mutex> guard{mtx_};
  auto i = expiry_.find(digest);
  if (i == expiry_.end())
    return false;
  auto valid = now < i->second;
  expiry_.erase(i);
  return valid;
}

ticket_check ws_ticket_store::check(std::string_view target,
                                    clock::time_point now) {
  auto ticket = query_param(target, "ticket");
  if (!ticket)
    return ticket_check::none;
  return redeem(*ticket, now) ? ticket_check::redeemed : ticket_check::refused;
}

size_t ws_ticket_store::size() const {
  std::lock_guard<std::mutex> guard{mtx_};
  return expiry_.size();
}

ws_ticket_store::answer ws_ticket_store::answer_request(std::string_view method,
                                                        clock::time_point now) {
  if (method != "POST")
    return {405, protocol::error_frame(
                   "bad_request", "use POST " + std::string{ws_ticket_path})};
  using std::chrono::milliseconds;
  nlohmann::json body{
    {"ticket", issue(now)},
    {"expires_in_ms",
     std::chrono::duration_cast<milliseconds>(lifetime).count()}};
  return {200, body.dump()};
}

} // namespace keel
