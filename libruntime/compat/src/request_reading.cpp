#include "request_reading.hpp"

#include <openssl/sha.h>

#include "keel/types.hpp"

namespace keel::compat {

std::string sha256_hex(std::string_view data) {
  static constexpr char hex[] = "0123456789abcdef";
  unsigned char md[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(data.data()), data.size(), md);
  std::string result;
  for (auto byte : md) {
    result += hex[byte >> 4];
    result += hex[byte & 0x0f];
  }
  return result;
}

std::string message_id_for(const std::string& key) {
  if (valid_client_id(key) && key.rfind("agent:", 0) != 0)
    return key;
  return "ik:" + sha256_hex(key).substr(0, 40);
}

} // namespace keel::compat

namespace keel::compat::reading {

void fail(std::string code, std::string param, std::string message) {
  throw refused{
    bad_request(std::move(code), std::move(param), std::move(message))};
}

void unsupported(const std::string& param, std::string why) {
  fail("unsupported_parameter", param,
       "'" + param + "' is not supported by Keel: " + std::move(why));
}

std::variant<compat_call, api_error>
read_request(api wire, std::string_view body,
             const std::function<void(const json&, compat_call&)>& read) {
  compat_call call;
  call.wire = wire;
  try {
    read(parse_body(body), call);
  } catch (refused& x) {
    return std::move(x.error);
  } catch (const json::exception& x) {
    return bad_request("invalid_type", "",
                       std::string{"the request body has a field of the "
                                   "wrong type: "}
                         + x.what());
  }
  return call;
}

json parse_body(std::string_view body) {
  auto result = json::parse(body, nullptr, false);
  if (result.is_discarded())
    fail("invalid_json", "",
         "the request body is not valid JSON (well-formed UTF-8 included)");
  if (!result.is_object())
    fail("invalid_json", "", "the request body must be a JSON object");
  return result;
}

const json* member(const json& obj, const char* key, bool (json::*is)() const,
                   const std::string& param, const char* type_name) {
  auto i = obj.find(key);
  if (i == obj.end() || i->is_null())
    return nullptr;
  if (!((*i).*is)())
    fail("invalid_type", param,
         "'" + param + "' must be " + type_name + ", got "
           + std::string{i->type_name()});
  return &*i;
}

namespace {

std::string part_text(const json& part, const std::string& param, bool strict) {
  auto type = part.is_object() ? part.value("type", "") : "";
  if (type == "text") {
    auto text = member(part, "text", &json::is_string, param + ".text",
                       "a string");
    return text != nullptr ? text->get<std::string>() : std::string{};
  }
  if (strict)
    fail("unsupported_content", param,
         "'" + param + "' is a part of type '" + type
           + "': Keel takes text only");
  return {};
}

} // namespace

std::string content_text(const json& content, const std::string& param,
                         bool strict) {
  if (content.is_string())
    return content.get<std::string>();
  if (content.is_null())
    return {};
  if (!content.is_array())
    fail("invalid_type", param,
         "'" + param + "' must be a string or a list of content parts");
  std::string result;
  for (size_t j = 0; j < content.size(); ++j) {
    auto text = part_text(content[j], param + "[" + std::to_string(j) + "]",
                          strict);
    if (text.empty())
      continue;
    if (!result.empty())
      result += '\n';
    result += text;
  }
  return result;
}

void check_text(const std::string& text, const std::string& param,
                const request_limits& limits) {
  if (text.empty())
    fail("invalid_value", param, "'" + param + "' holds no text");
  if (text.size() > limits.max_text_bytes)
    fail("string_above_max_length", param,
         "'" + param + "' is longer than "
           + std::to_string(limits.max_text_bytes) + " bytes");
}

void read_message_list(
  const json& body, compat_call& call, const request_limits& limits,
  const std::function<std::string(const json&, const std::string&, bool)>&
    role_of) {
  auto messages = member(body, "messages", &json::is_array, "messages",
                         "a list");
  if (messages == nullptr || messages->empty())
    fail("missing_required_parameter", "messages",
         "'messages' must hold at least the new user message");
  auto last = messages->size() - 1;
  for (size_t i = 0; i <= last; ++i) {
    auto param = "messages[" + std::to_string(i) + "]";
    auto& message = (*messages)[i];
    auto counts = call.thread.empty() || i == last;
    auto role = role_of(message, param, counts);
    auto text = content_text(message.value("content", json{}),
                             param + ".content", counts);
    if (i < last) {
      call.earlier.push_back({role, std::move(text)});
      continue;
    }
    if (role != "user")
      fail("invalid_value", param + ".role",
           "the last message must be the user's: Keel answers one new user "
           "message per request");
    check_text(text, param + ".content", limits);
    call.text = std::move(text);
  }
}

void read_model(const json& body, compat_call& call) {
  auto model = member(body, "model", &json::is_string, "model", "a string");
  if (model == nullptr)
    fail("missing_required_parameter", "model", "'model' is required");
  call.model = model->get<std::string>();
  if (!valid_agent_name(call.model)) {
    auto err = refusal(call.wire, "unknown_agent",
                       "the model '" + call.model
                         + "' does not exist: a model is an agent, named with "
                         + agent_rule);
    err.param = "model";
    throw refused{std::move(err)};
  }
}

void read_thread(const request_headers& headers,
                 const std::optional<std::string>& metadata_thread,
                 compat_call& call) {
  auto from_header = !headers.thread.empty();
  call.thread = from_header ? headers.thread : metadata_thread.value_or("");
  if (call.thread.empty() && !metadata_thread)
    return;
  if (!valid_thread_id(call.thread))
    fail("invalid_value", from_header ? "Keel-Thread" : "metadata.keel_thread",
         "a thread id is 1 to 128 characters of [A-Za-z0-9._:-], got '"
           + call.thread + "'");
}

void read_message_id(const request_headers& headers,
                     const std::optional<std::string>& metadata_id,
                     compat_call& call) {
  auto key = !headers.idempotency_key.empty() ? headers.idempotency_key
                                              : metadata_id.value_or("");
  if (!key.empty())
    call.message_id = message_id_for(key);
  call.retry_count = headers.retry_count;
}

} // namespace keel::compat::reading
