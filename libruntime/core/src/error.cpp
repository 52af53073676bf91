#include "keel/error.hpp"

#include <caf/deep_to_string.hpp>
#include <caf/message.hpp>
#include <caf/sec.hpp>

namespace keel {

const char* to_string(ec x) {
  switch (x) {
    case ec::none: return "none";
    case ec::config_unreadable: return "config_unreadable";
    case ec::config_invalid: return "config_invalid";
    case ec::bad_frame: return "bad_frame";
    case ec::too_large: return "too_large";
    case ec::unauthorized: return "unauthorized";
    case ec::not_found: return "not_found";
    case ec::storage_open_failed: return "storage_open_failed";
    case ec::storage_io: return "storage_io";
    case ec::storage_corrupt: return "storage_corrupt";
    case ec::provider_failed: return "provider_failed";
    case ec::provider_timeout: return "provider_timeout";
    case ec::provider_bad_answer: return "provider_bad_answer";
    case ec::provider_rejected: return "provider_rejected";
    case ec::provider_unauthorized: return "provider_unauthorized";
    case ec::credits_exhausted: return "credits_exhausted";
    case ec::draining: return "draining";
    case ec::unknown_agent: return "unknown_agent";
    case ec::agent_mismatch: return "agent_mismatch";
    case ec::context_overflow: return "context_overflow";
    case ec::turn_failed: return "turn_failed";
    case ec::unavailable: return "unavailable";
    case ec::overloaded: return "overloaded";
    case ec::conflict: return "conflict";
    case ec::connection_failed: return "connection_failed";
    case ec::protocol_violation: return "protocol_violation";
    case ec::timeout: return "timeout";
    case ec::shutdown: return "shutdown";
    case ec::killed: return "killed";
    case ec::thread_closed: return "thread_closed";
    case ec::cancelled: return "cancelled";
    case ec::thread_limit: return "thread_limit";
    case ec::not_owner: return "not_owner";
    case ec::agent_limit: return "agent_limit";
  }
  return "unknown";
}

std::string error_message(const caf::error& err) {
  const auto& ctx = err.context();
  if (ctx.empty())
    return {};
  if (ctx.match_elements<std::string>())
    return ctx.get_as<std::string>(0);
  std::string result;
  for (size_t i = 0; i < ctx.size(); ++i) {
    if (!result.empty())
      result += ' ';
    if (ctx.match_element<std::string>(i))
      result += ctx.get_as<std::string>(i);
    else
      result += ctx.stringify(i);
  }
  return result;
}

std::string error_code_name(const caf::error& err) {
  if (err.category() == error_category)
    return to_string(static_cast<ec>(err.code()));
  // A request whose receiver died with it in its mailbox (a component
  // killed or restarting), or that no one answered in time (a component
  // stuck behind a database cut, a paused node), failed the way
  // `ec::unavailable` says: nothing was acknowledged and the same request
  // may be sent again.
  if (err == caf::sec::request_receiver_down
      || err == caf::sec::request_timeout)
    return to_string(ec::unavailable);
  return "internal";
}

std::string readable_message(const caf::error& err) {
  auto msg = error_message(err);
  return msg.empty() ? render(err) : msg;
}

std::string render(const caf::error& err) {
  if (!err)
    return "none";
  std::string result;
  if (err.category() == error_category)
    result = to_string(static_cast<ec>(err.code()));
  else
    result = caf::to_string(err.category()) + "_error("
             + std::to_string(err.code()) + ")";
  if (err.category() == caf::atom("system"))
    result = caf::to_string(static_cast<caf::sec>(err.code()));
  auto msg = error_message(err);
  if (!msg.empty())
    result += ": " + msg;
  return result;
}

} // namespace keel
