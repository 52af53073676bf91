#include "keel/types.hpp"

#include <algorithm>
#include <array>
#include <charconv>
#include <ostream>
#include <stdexcept>

#include <caf/make_counted.hpp>

#include "keel/error.hpp"

namespace keel {

const char* to_string(session_state x) {
  switch (x) {
    case session_state::active: return "ACTIVE";
    case session_state::suspended: return "SUSPENDED";
    case session_state::closed: return "CLOSED";
  }
  return "INVALID";
}

std::optional<session_state> parse_session_state(const std::string& str) {
  for (auto x :
       {session_state::active, session_state::suspended, session_state::closed})
    if (str == to_string(x))
      return x;
  return std::nullopt;
}

const char* to_string(log_kind x) {
  switch (x) {
    case log_kind::user: return "user";
    case log_kind::reply: return "reply";
    case log_kind::error: return "error";
    case log_kind::tool: return "tool";
  }
  return "invalid";
}

std::optional<log_kind> parse_log_kind(const std::string& str) {
  for (auto x :
       {log_kind::user, log_kind::reply, log_kind::error, log_kind::tool})
    if (str == to_string(x))
      return x;
  return std::nullopt;
}

const char* to_string(task_state x) {
  switch (x) {
    case task_state::none: return "none";
    case task_state::queued: return "queued";
    case task_state::dispatched: return "dispatched";
    case task_state::in_progress: return "in_progress";
    case task_state::retried: return "retried";
    case task_state::succeeded: return "succeeded";
    case task_state::dead_lettered: return "dead_lettered";
  }
  return "invalid";
}

std::optional<task_state> parse_task_state(const std::string& str) {
  for (auto i = 0; i <= static_cast<int>(task_state::dead_lettered); ++i) {
    auto x = static_cast<task_state>(i);
    if (str == to_string(x))
      return x;
  }
  return std::nullopt;
}

log_entry message_log_entry(const inbox_entry& entry) {
  log_entry result;
  result.seq = entry.seq;
  result.kind = log_kind::user;
  result.client_id = entry.client_id;
  result.text = entry.text;
  result.at = entry.accepted_at;
  result.task = task_state::queued;
  result.task_at = entry.accepted_at;
  return result;
}

bool operator==(const tool_call& x, const tool_call& y) {
  return x.id == y.id && x.name == y.name && x.arguments == y.arguments;
}

bool operator==(const tool_exchange& x, const tool_exchange& y) {
  return x.calls == y.calls && x.call_id == y.call_id && x.tool == y.tool;
}

namespace {

// Made on first use (a role may be made while other files' statics are
// made) and never destroyed (a role may be read while they are destroyed).
const std::array<std::string, 5>& role_names() {
  static const auto* names
    = new std::array<std::string, 5>{"", "user", "assistant", "tool", "system"};
  return *names;
}

} // namespace

context_role::context_role(const char* name) {
  auto known = parse(name);
  if (!known)
    throw std::invalid_argument("unknown context role '" + std::string{name}
                                + "'");
  *this = *known;
}

std::optional<context_role> context_role::parse(std::string_view name) {
  auto& names = role_names();
  for (size_t i = 0; i < names.size(); ++i)
    if (names[i] == name)
      return context_role{static_cast<uint8_t>(i)};
  return std::nullopt;
}

const std::string& context_role::str() const {
  return role_names()[index_];
}

caf::error unknown_role(const std::string& name) {
  return caf::make_error(ec::storage_corrupt,
                         "field 'role' has unknown value '" + name + "'");
}

std::string to_string(const context_role& x) {
  return x.str();
}

std::ostream& operator<<(std::ostream& out, const context_role& x) {
  return out << x.str();
}

const tool_exchange& context_entry::tools() const {
  static const tool_exchange none;
  return tools_ ? tools_->value : none;
}

void context_entry::set_tools(tool_exchange exchange) {
  if (exchange.empty())
    tools_.reset();
  else
    tools_ = caf::make_counted<shared_tools>(std::move(exchange));
}

void context_entry::set_tool_calls(std::vector<tool_call> calls) {
  set_tools({std::move(calls), tool_call_id(), tool_name()});
}

void context_entry::set_tool_result(std::string call_id, std::string tool) {
  set_tools({tool_calls(), std::move(call_id), std::move(tool)});
}

bool operator==(const context_entry& x, const context_entry& y) {
  return x.seq == y.seq && x.role == y.role && x.content == y.content
         && x.tools() == y.tools() && x.message_seq == y.message_seq;
}

const std::string& agent_of(const session_record& session) {
  static const std::string fallback = "default";
  return session.agent.empty() ? fallback : session.agent;
}

std::string agent_client_id(const std::string& from, seq_t seq) {
  return std::string{agent_client_id_prefix} + from + ":" + std::to_string(seq);
}

bool reserved_client_id(std::string_view id) {
  return id.substr(0, agent_client_id_prefix.size()) == agent_client_id_prefix;
}

std::string notice_key(const owner_notice& x) {
  return std::string{to_string(x.kind)} + '/' + x.subject;
}

std::string dead_letter_id(const dead_letter& x) {
  return x.entry.from + "/" + std::to_string(x.entry.seq);
}

std::optional<std::pair<std::string, seq_t>>
parse_dead_letter_id(std::string_view id) {
  auto slash = id.find('/');
  if (slash == std::string_view::npos)
    return std::nullopt;
  std::string thread{id.substr(0, slash)};
  auto digits = id.substr(slash + 1);
  seq_t seq = 0;
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(),
                                   seq);
  if (!valid_thread_id(thread) || digits.empty() || ec != std::errc{}
      || end != digits.data() + digits.size() || seq == 0)
    return std::nullopt;
  return std::make_pair(std::move(thread), seq);
}

bool valid_thread_id(const std::string& id) {
  if (id.empty() || id.size() > 128)
    return false;
  return std::all_of(id.begin(), id.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
           || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == ':'
           || c == '-';
  });
}

bool valid_agent_name(const std::string& name) {
  if (name.empty() || name.size() > 64)
    return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
           || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
  });
}

bool valid_client_id(const std::string& id) {
  if (id.empty() || id.size() > 128)
    return false;
  return std::all_of(id.begin(), id.end(),
                     [](char c) { return c >= 0x21 && c <= 0x7e; });
}

} // namespace keel
