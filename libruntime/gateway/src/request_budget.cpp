#include "keel/request_budget.hpp"

namespace keel {

request_budget::request_budget(size_t max_requests, size_t max_history)
  : max_requests_(max_requests), max_history_(max_history) {
  // nop
}

bool request_budget::admit(connection_id conn, bool history) {
  auto& x = open_[conn];
  if (x.all >= max_requests_ || (history && x.history >= max_history_))
    return false;
  ++x.all;
  if (history)
    ++x.history;
  return true;
}

void request_budget::release(connection_id conn, bool history) {
  auto i = open_.find(conn);
  if (i == open_.end())
    return;
  auto& x = i->second;
  if (x.all > 0)
    --x.all;
  if (history && x.history > 0)
    --x.history;
  if (x.all == 0)
    open_.erase(i);
}

void request_budget::drop(connection_id conn) {
  open_.erase(conn);
}

size_t request_budget::in_flight(connection_id conn) const {
  auto i = open_.find(conn);
  return i != open_.end() ? i->second.all : 0;
}

std::string request_budget::refusal(bool history) const {
  if (history)
    return "this connection already has " + std::to_string(max_history_)
           + " history requests under way, the most it may; ask for the "
             "next page once one is answered; frame dropped";
  return "this connection already has " + std::to_string(max_requests_)
         + " requests under way, the most gateway.max_requests_in_flight "
           "allows; send more once they are answered; frame dropped";
}

} // namespace keel
