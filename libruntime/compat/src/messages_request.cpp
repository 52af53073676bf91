// Reading an Anthropic Messages request (POST /v1/messages).

#include "request_reading.hpp"

namespace keel::compat {

namespace {

using namespace reading;

/// Refuses what Keel cannot do as the request asks, naming the parameter.
void check_parameters(const json& body) {
  auto tokens = member(body, "max_tokens", &json::is_number_integer,
                       "max_tokens", "an integer");
  if (tokens == nullptr)
    fail("missing_required_parameter", "max_tokens",
         "'max_tokens' is required");
  if (tokens->get<int64_t>() < 1)
    fail("invalid_value", "max_tokens", "'max_tokens' must be at least 1");
  auto tools = member(body, "tools", &json::is_array, "tools", "a list");
  auto tool_choice = body.value("tool_choice", json{});
  auto choice = tool_choice.is_object() ? tool_choice.value("type", "") : "";
  if (tools != nullptr && !tools->empty() && choice != "none")
    unsupported("tools",
                "the agent's tools run inside Keel; client-side tools are "
                "not supported yet");
}

void read_system(const json& body, compat_call& call) {
  auto system = body.value("system", json{});
  if (system.is_null())
    return;
  auto text = content_text(system, "system", call.thread.empty());
  if (!text.empty())
    call.earlier.push_back({"system", std::move(text)});
}

/// The role of a message: user or assistant.
std::string role_of(const json& message, const std::string& param, bool) {
  auto role = message.is_object() ? message.value("role", json{}) : json{};
  if (role != "user" && role != "assistant")
    fail("invalid_value", param + ".role",
         "'" + param + ".role' must be user or assistant");
  return role.get<std::string>();
}

} // namespace

std::variant<compat_call, api_error>
read_messages_request(std::string_view body, const request_headers& headers,
                      const request_limits& limits) {
  return read_request(api::anthropic, body,
                      [&](const json& j, compat_call& call) {
                        read_model(j, call);
                        // Anthropic allows no metadata but `user_id`: the
                        // thread and the key come in header fields only.
                        read_thread(headers, std::nullopt, call);
                        read_message_id(headers, std::nullopt, call);
                        check_parameters(j);
                        read_system(j, call);
                        read_message_list(j, call, limits, role_of);
                        if (auto s = member(j, "stream", &json::is_boolean,
                                            "stream", "a boolean"))
                          call.stream = s->get<bool>();
                      });
}

} // namespace keel::compat
