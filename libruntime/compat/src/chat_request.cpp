// Reading a Chat Completions request (POST /v1/chat/completions).

#include "request_reading.hpp"

namespace keel::compat {

namespace {

using namespace reading;

/// Refuses what Keel cannot do as the request asks, naming the parameter.
void check_parameters(const json& body) {
  if (auto n = member(body, "n", &json::is_number_integer, "n", "an integer");
      n != nullptr && n->get<int64_t>() != 1)
    unsupported("n", "one answer per message");
  if (auto x = member(body, "logprobs", &json::is_boolean, "logprobs",
                      "a boolean");
      x != nullptr && x->get<bool>())
    unsupported("logprobs", "providers' log probabilities are not kept");
  if (body.contains("audio") && !body["audio"].is_null())
    unsupported("audio", "Keel answers in text");
  if (auto m = member(body, "modalities", &json::is_array, "modalities",
                      "a list");
      m != nullptr && *m != json::array({"text"}))
    unsupported("modalities", "Keel answers in text");
  if (auto f = member(body, "response_format", &json::is_object,
                      "response_format", "an object");
      f != nullptr && f->value("type", "text") != "text")
    unsupported("response_format", "answers are text");
  auto tools = member(body, "tools", &json::is_array, "tools", "a list");
  auto choice = body.value("tool_choice", json{});
  if (tools != nullptr && !tools->empty() && choice != "none")
    unsupported("tools",
                "the agent's tools run inside Keel; client-side tools are "
                "not supported yet");
  if (body.contains("functions") && !body["functions"].is_null())
    unsupported("functions", "client-side tools are not supported yet");
  if (auto s = member(body, "store", &json::is_boolean, "store", "a boolean");
      s != nullptr && !s->get<bool>())
    unsupported("store", "Keel stores every message it acknowledges");
}

/// The role of a message, "developer" read as "system"; a tool exchange
/// that counts is refused (client-side tools are not supported yet).
std::string role_of(const json& message, const std::string& param,
                    bool counts) {
  if (!message.is_object())
    fail("invalid_type", param, "'" + param + "' must be an object");
  auto role = member(message, "role", &json::is_string, param + ".role",
                     "a string");
  if (role == nullptr)
    fail("missing_required_parameter", param + ".role",
         "'" + param + ".role' is required");
  auto name = role->get<std::string>();
  if (name == "developer")
    name = "system";
  if (name != "system" && name != "user" && name != "assistant"
      && name != "tool")
    fail("invalid_value", param + ".role",
         "'" + param
           + ".role' must be system, developer, user, assistant or tool, got '"
           + role->get<std::string>() + "'");
  if (counts && (name == "tool" || message.contains("tool_calls")))
    fail("unsupported_content", param,
         "'" + param
           + "' is a tool exchange: client-side tools are not supported yet");
  return name;
}

/// The `metadata` string `key`, if given.
std::optional<std::string> metadata_string(const json& body, const char* key) {
  auto metadata = member(body, "metadata", &json::is_object, "metadata",
                         "an object");
  if (metadata == nullptr)
    return std::nullopt;
  auto param = std::string{"metadata."} + key;
  auto value = member(*metadata, key, &json::is_string, param, "a string");
  if (value == nullptr)
    return std::nullopt;
  return value->get<std::string>();
}

void read_stream(const json& body, compat_call& call) {
  if (auto s = member(body, "stream", &json::is_boolean, "stream", "a boolean"))
    call.stream = s->get<bool>();
  auto options = member(body, "stream_options", &json::is_object,
                        "stream_options", "an object");
  if (options == nullptr)
    return;
  if (auto u = member(*options, "include_usage", &json::is_boolean,
                      "stream_options.include_usage", "a boolean"))
    call.include_usage = call.stream && u->get<bool>();
}

} // namespace

std::variant<compat_call, api_error>
read_chat_request(std::string_view body, const request_headers& headers,
                  const request_limits& limits) {
  return read_request(api::openai, body, [&](const json& j, compat_call& call) {
    read_model(j, call);
    read_thread(headers, metadata_string(j, "keel_thread"), call);
    read_message_id(headers, metadata_string(j, "keel_message_id"), call);
    check_parameters(j);
    read_message_list(j, call, limits, role_of);
    read_stream(j, call);
  });
}

} // namespace keel::compat
