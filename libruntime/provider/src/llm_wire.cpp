#include "keel/llm_wire.hpp"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "keel/agent_tools.hpp"
#include "keel/error.hpp"
#include "keel/http_response.hpp"
#include "keel/text.hpp"

namespace keel::llm_wire {

namespace {

using json = nlohmann::json;

/// Parses `text`, keeping nlohmann's description of a syntax error.
bool parse_json(std::string_view text, json& out, std::string& error) {
  try {
    out = json::parse(text.begin(), text.end());
    return true;
  } catch (const json::exception& e) {
    error = e.what();
    return false;
  }
}

/// Arguments as JSON text: strings pass unchanged (OpenAI sends text),
/// anything else is serialized (Anthropic sends an object); none (null or
/// an empty string) is "{}".
std::string arguments_text(const json& value) {
  if (value.is_string() && !value.get_ref<const std::string&>().empty())
    return value.get<std::string>();
  if (value.is_null() || value.is_string())
    return "{}";
  return value.dump(-1, ' ', false, json::error_handler_t::replace);
}

const json* member(const json& obj, const char* key) {
  if (!obj.is_object())
    return nullptr;
  auto i = obj.find(key);
  return i == obj.end() ? nullptr : &*i;
}

const std::string* string_member(const json& obj, const char* key) {
  auto x = member(obj, key);
  return x != nullptr && x->is_string() ? x->get_ptr<const std::string*>()
                                        : nullptr;
}

/// Points `out` at the member `key` of `obj` and returns that member's string
/// `type`, or null if either is missing.
const std::string* typed_member(const json& obj, const char* key,
                                const json*& out) {
  out = member(obj, key);
  return out != nullptr ? string_member(*out, "type") : nullptr;
}

int64_t int_member(const json& obj, const char* key, int64_t fallback) {
  auto x = member(obj, key);
  return x != nullptr && x->is_number_integer() ? x->get<int64_t>() : fallback;
}

/// A count of `usage` (a JSON object) named `key`; 0 if absent or not a
/// whole number.
uint64_t usage_count(const json& usage, const char* key) {
  auto count = member(usage, key);
  return count != nullptr && count->is_number_unsigned()
           ? count->get<uint64_t>()
           : 0;
}

/// Reads OpenAI's `usage` object of `j` into `out`, if `j` has one (a
/// streamed chunk has `"usage": null` but for the usage chunk).
void read_openai_usage(const json& j, token_usage& out) {
  auto usage = member(j, "usage");
  if (usage == nullptr || !usage->is_object())
    return;
  out.input_tokens = usage_count(*usage, "prompt_tokens");
  out.output_tokens = usage_count(*usage, "completion_tokens");
  out.reported = true;
}

/// Reads Anthropic's `usage` object into `out`: the input tokens of a
/// message (with the cache's, counted apart) where given, the output
/// tokens where given (`message_delta` carries the running output count
/// only).
void read_anthropic_usage(const json& usage, token_usage& out) {
  if (!usage.is_object())
    return;
  if (member(usage, "input_tokens") != nullptr)
    out.input_tokens = usage_count(usage, "input_tokens")
                       + usage_count(usage, "cache_creation_input_tokens")
                       + usage_count(usage, "cache_read_input_tokens");
  if (member(usage, "output_tokens") != nullptr)
    out.output_tokens = usage_count(usage, "output_tokens");
  out.reported = true;
}

bool parse_openai(const json& j, completion& out, std::string& error) {
  auto choices = member(j, "choices");
  if (choices == nullptr || !choices->is_array() || choices->empty()) {
    error = "the answer has no choices[0]";
    return false;
  }
  auto& choice = (*choices)[0];
  auto msg = member(choice, "message");
  if (msg == nullptr || !msg->is_object()) {
    error = "choices[0] has no message object";
    return false;
  }
  if (auto content = member(*msg, "content");
      content != nullptr && !content->is_null()) {
    if (content->is_string()) {
      out.text = content->get<std::string>();
    } else if (content->is_array()) {
      // Content parts: keep the text ones.
      for (auto& part : *content)
        if (auto text = string_member(part, "text"))
          out.text += *text;
    } else {
      error = "choices[0].message.content is neither text nor null";
      return false;
    }
  }
  if (auto calls = member(*msg, "tool_calls");
      calls != nullptr && !calls->is_null()) {
    if (!calls->is_array()) {
      error = "choices[0].message.tool_calls is not an array";
      return false;
    }
    for (size_t i = 0; i < calls->size(); ++i) {
      auto& call = (*calls)[i];
      auto fn = member(call, "function");
      auto name = fn != nullptr ? string_member(*fn, "name") : nullptr;
      if (name == nullptr) {
        error = "choices[0].message.tool_calls[" + std::to_string(i)
                + "] has no function.name";
        return false;
      }
      tool_call tc;
      if (auto id = string_member(call, "id"))
        tc.id = *id;
      tc.name = *name;
      auto args = member(*fn, "arguments");
      tc.arguments = args != nullptr ? arguments_text(*args) : "{}";
      out.tool_calls.push_back(std::move(tc));
    }
  }
  if (auto reason = string_member(choice, "finish_reason"))
    out.finish_reason = *reason;
  if (auto model = string_member(j, "model"))
    out.model = *model;
  read_openai_usage(j, out.usage);
  return true;
}

bool parse_anthropic(const json& j, completion& out, std::string& error) {
  auto content = member(j, "content");
  if (content == nullptr || !content->is_array()) {
    error = "the answer has no content array";
    return false;
  }
  for (size_t i = 0; i < content->size(); ++i) {
    auto& block = (*content)[i];
    auto type = string_member(block, "type");
    if (type == nullptr) {
      error = "content[" + std::to_string(i) + "] has no type";
      return false;
    }
    if (*type == "text") {
      auto text = string_member(block, "text");
      if (text == nullptr) {
        error = "content[" + std::to_string(i) + "] (text) has no text";
        return false;
      }
      out.text += *text;
    } else if (*type == "tool_use") {
      auto name = string_member(block, "name");
      if (name == nullptr) {
        error = "content[" + std::to_string(i) + "] (tool_use) has no name";
        return false;
      }
      tool_call tc;
      if (auto id = string_member(block, "id"))
        tc.id = *id;
      tc.name = *name;
      auto input = member(block, "input");
      tc.arguments = input != nullptr ? arguments_text(*input) : "{}";
      out.tool_calls.push_back(std::move(tc));
    }
    // Other block types (thinking, ...) carry nothing for the user.
  }
  if (auto reason = string_member(j, "stop_reason"))
    out.finish_reason = normalize_stop_reason(*reason);
  if (auto model = string_member(j, "model"))
    out.model = *model;
  if (auto usage = member(j, "usage"))
    read_anthropic_usage(*usage, out.usage);
  return true;
}

} // namespace

// -- URLs ---------------------------------------------------------------------

namespace {

/// The request target of an endpoint of `kind` whose URL has `target` (its
/// path and query): the API's path below the URL's path as given (an
/// OpenAI-style base URL ends in its version: "/v1", "/v1beta/openai",
/// "/openai/deployments/NAME"), below "/v1" when the URL names no path, then
/// the query if any (Azure's "?api-version=...").
std::string request_target(std::string_view target, api kind) {
  auto q = target.find('?');
  auto path = target.substr(0, q);
  auto query = q == std::string_view::npos ? std::string_view{}
                                           : target.substr(q);
  while (!path.empty() && path.back() == '/')
    path.remove_suffix(1);
  auto result = path.empty() ? std::string{"/v1"} : std::string{path};
  result += kind == api::openai ? "/chat/completions" : "/messages";
  result.append(query.data(), query.size());
  return result;
}

} // namespace

caf::expected<base_url> parse_base_url(std::string_view url, api kind) {
  auto result = parse_http_url(url, "base_url");
  if (!result)
    return std::move(result.error());
  result->target = request_target(result->target, kind);
  return result;
}

// -- requests -----------------------------------------------------------------

namespace {

/// The JSON object `text` holds; `fallback` if it is not valid JSON or not
/// an object (a schema or the arguments of a call: both APIs want objects).
json object_or(const std::string& text, json fallback) {
  auto result = json::parse(text, nullptr, false);
  return result.is_object() ? result : fallback;
}

/// OpenAI: one context entry as a message, or null for roles it never gets.
json openai_message(const context_entry& entry) {
  if (entry.role == "tool")
    return {{"role", "tool"},
            {"tool_call_id", entry.tool_call_id()},
            {"content", entry.content}};
  if (entry.role == "assistant" && !entry.tool_calls().empty()) {
    auto calls = json::array();
    for (auto& call : entry.tool_calls())
      calls.push_back(
        {{"id", call.id},
         {"type", "function"},
         {"function", {{"name", call.name}, {"arguments", call.arguments}}}});
    json content = entry.content.empty() ? json(nullptr) : json(entry.content);
    return {{"role", "assistant"},
            {"content", std::move(content)},
            {"tool_calls", std::move(calls)}};
  }
  if (entry.role == "user" || entry.role == "assistant"
      || entry.role == "system")
    return {{"role", entry.role.str()}, {"content", entry.content}};
  return nullptr;
}

void openai_messages(const completion_request& req, json& messages) {
  if (!req.system_prompt.empty())
    messages.push_back({{"role", "system"}, {"content", req.system_prompt}});
  for (auto& entry : req.context)
    if (auto msg = openai_message(entry); !msg.is_null())
      messages.push_back(std::move(msg));
}

/// Anthropic: a text content block.
json text_block(const std::string& text) {
  return {{"type", "text"}, {"text", text}};
}

/// Anthropic: one context entry as a message (role and content, a string or
/// content blocks), or null for entries it never gets.
json anthropic_message(const context_entry& entry) {
  if (entry.role == "tool") {
    json block{{"type", "tool_result"}, {"tool_use_id", entry.tool_call_id()}};
    // `content` is optional; an empty text may be refused.
    if (!entry.content.empty())
      block["content"] = entry.content;
    return {{"role", "user"}, {"content", json::array({std::move(block)})}};
  }
  if (entry.role == "assistant" && !entry.tool_calls().empty()) {
    auto blocks = json::array();
    if (!entry.content.empty())
      blocks.push_back(text_block(entry.content));
    for (auto& call : entry.tool_calls())
      blocks.push_back({{"type", "tool_use"},
                        {"id", call.id},
                        {"name", call.name},
                        {"input", object_or(call.arguments, json::object())}});
    return {{"role", "assistant"}, {"content", std::move(blocks)}};
  }
  if ((entry.role == "user" || entry.role == "assistant")
      && !entry.content.empty())
    return {{"role", entry.role.str()}, {"content", entry.content}};
  return nullptr;
}

/// Anthropic: `content` (a string or blocks) as blocks.
json as_blocks(json content) {
  if (content.is_string())
    return json::array({text_block(content.get<std::string>())});
  return content;
}

/// Anthropic: appends `msg` to the message of the same role before it, which
/// the API wants alternating. Texts join with a blank line; otherwise the
/// content becomes blocks, tool results first as the API wants them.
void merge_into(json& prev, json msg) {
  auto& content = prev["content"];
  if (content.is_string() && msg["content"].is_string()) {
    content.get_ref<std::string&>().append("\n\n").append(
      msg["content"].get_ref<const std::string&>());
    return;
  }
  auto results = json::array();
  auto others = json::array();
  for (auto* part : {&content, &msg["content"]})
    for (auto& block : as_blocks(std::move(*part)))
      (block.value("type", "") == "tool_result" ? results : others)
        .push_back(std::move(block));
  for (auto& block : others)
    results.push_back(std::move(block));
  content = std::move(results);
}

/// Anthropic: the messages, and the system text (prompt and "system"
/// entries) into `system`.
void anthropic_messages(const completion_request& req, json& messages,
                        std::string& system) {
  system = req.system_prompt;
  for (auto& entry : req.context) {
    if (entry.role == "system") {
      if (!system.empty())
        system += "\n\n";
      system += entry.content;
      continue;
    }
    auto msg = anthropic_message(entry);
    if (msg.is_null())
      continue;
    if (!messages.empty() && messages.back()["role"] == msg["role"])
      merge_into(messages.back(), std::move(msg));
    else
      messages.push_back(std::move(msg));
  }
}

/// One tool in the API's shape.
json tool_json(api kind, const std::string& name,
               const std::string& description, json parameters) {
  if (kind == api::openai)
    return {{"type", "function"},
            {"function",
             {{"name", name},
              {"description", description},
              {"parameters", std::move(parameters)}}}};
  return {{"name", name},
          {"description", description},
          {"input_schema", std::move(parameters)}};
}

/// The built-in agent tools (agent_tools.hpp), then the request's own tools
/// (each name once: an agent tool's name stays the agent tool's).
json tools_json(api kind, const completion_request& req) {
  auto tools = json::array();
  std::vector<std::string> names;
  for (auto& spec : agent_tool_specs()) {
    tools.push_back(tool_json(kind, spec.name, spec.description,
                              json::parse(spec.parameters)));
    names.emplace_back(spec.name);
  }
  json empty_schema{{"type", "object"}, {"properties", json::object()}};
  for (auto& spec : req.tools) {
    if (std::find(names.begin(), names.end(), spec.name) != names.end())
      continue;
    tools.push_back(tool_json(kind, spec.name, spec.description,
                              object_or(spec.parameters, empty_schema)));
    names.push_back(spec.name);
  }
  return tools;
}

} // namespace

namespace {

// The parameters other than the limit, each only when set.
void put_params(api kind, const model_params& params, json& body) {
  if (params.temperature != unset_param)
    body["temperature"] = params.temperature;
  if (params.top_p != unset_param)
    body["top_p"] = params.top_p;
  if (!params.stop.empty())
    body[kind == api::openai ? "stop" : "stop_sequences"] = params.stop;
  if (params.reasoning_effort.empty())
    return;
  if (kind == api::openai)
    body["reasoning_effort"] = params.reasoning_effort;
  else
    body["output_config"] = {{"effort", params.reasoning_effort}};
}

} // namespace

std::string request_body(api kind, const completion_request& req,
                         const request_settings& settings) {
  json body = json::object();
  body["model"] = settings.model;
  auto limit_field = kind == api::openai ? settings.token_limit_field
                                         : std::string{"max_tokens"};
  body[limit_field] = settings.params.max_output_tokens;
  body["stream"] = settings.stream;
  // OpenAI streams the usage only when asked, in a chunk of its own.
  if (settings.stream && kind == api::openai)
    body["stream_options"] = {{"include_usage", true}};
  put_params(kind, settings.params, body);
  auto& messages = body["messages"] = json::array();
  if (kind == api::openai) {
    openai_messages(req, messages);
  } else {
    std::string system;
    anthropic_messages(req, messages, system);
    if (!system.empty())
      body["system"] = std::move(system);
  }
  body["tools"] = tools_json(kind, req);
  // The parser checked it is an object.
  if (!settings.params.extra_body.empty())
    body.merge_patch(json::parse(settings.params.extra_body));
  // Invalid UTF-8 (never from our clients, which are checked) becomes
  // U+FFFD rather than an exception.
  return body.dump(-1, ' ', false, json::error_handler_t::replace);
}

// -- answers ------------------------------------------------------------------

bool parse_answer(api kind, std::string_view body, completion& out,
                  std::string& error) {
  json j;
  std::string why;
  if (!parse_json(body, j, why)) {
    error = "the answer is not valid JSON (" + why + ")";
    return false;
  }
  if (!j.is_object()) {
    error = "the answer is not a JSON object";
    return false;
  }
  return kind == api::openai ? parse_openai(j, out, error)
                             : parse_anthropic(j, out, error);
}

std::string normalize_stop_reason(std::string_view reason) {
  if (reason == "end_turn" || reason == "stop_sequence")
    return "stop";
  if (reason == "max_tokens")
    return "length";
  if (reason == "tool_use")
    return "tool_calls";
  if (reason == "refusal")
    return "content_filter";
  return std::string{reason};
}

// -- server-sent events -------------------------------------------------------

bool sse_parser::take_line(std::string_view line) {
  if (line.empty()) {
    if (has_data_)
      return true;
    event_.clear();
    return false;
  }
  if (line.front() == ':')
    return false; // A comment, typically a keep-alive.
  auto colon = line.find(':');
  auto field = line.substr(0, colon);
  std::string_view value;
  if (colon != std::string_view::npos) {
    value = line.substr(colon + 1);
    if (!value.empty() && value.front() == ' ')
      value.remove_prefix(1);
  }
  if (field == "data") {
    data_.append(value.data(), value.size());
    data_ += '\n';
    has_data_ = true;
  } else if (field == "event") {
    event_.assign(value.data(), value.size());
  }
  return false;
}

// -- stream decoding ----------------------------------------------------------

stream_decoder::step stream_decoder::on_event(std::string_view event,
                                              std::string_view data,
                                              std::string& delta) {
  if (kind_ == api::openai && data == "[DONE]") {
    // A call streamed without argument fragments has no arguments.
    for (auto& tc : result_.tool_calls)
      if (tc.arguments.empty())
        tc.arguments = "{}";
    return step::done;
  }
  if (kind_ == api::anthropic && event == "error")
    return fail_provider(data);
  json j;
  std::string why;
  if (!parse_json(data, j, why))
    return fail_parse("a stream event is not valid JSON (" + why
                      + "): " + body_excerpt(data));
  if (!j.is_object())
    return fail_parse("a stream event is not a JSON object: "
                      + body_excerpt(data));
  try {
    return kind_ == api::openai ? openai_event(j, data, delta)
                                : anthropic_event(event, j, data, delta);
  } catch (const std::exception& e) {
    // Only a JSON type surprise we did not check for can get here.
    return fail_parse(std::string{"unexpected stream event: "} + e.what());
  }
}

stream_decoder::step stream_decoder::fail_parse(std::string what) {
  error_ = std::move(what);
  return step::failed;
}

stream_decoder::step stream_decoder::fail_provider(std::string_view data) {
  provider_error_ = true;
  error_body_ = std::string{data};
  error_ = "error event in the stream: " + error_summary(data);
  return step::failed;
}

stream_decoder::step stream_decoder::openai_event(const json& j,
                                                  std::string_view data,
                                                  std::string& delta) {
  if (member(j, "error") != nullptr)
    return fail_provider(data);
  if (result_.model.empty())
    if (auto model = string_member(j, "model"))
      result_.model = *model;
  read_openai_usage(j, result_.usage);
  auto choices = member(j, "choices");
  if (choices == nullptr || !choices->is_array() || choices->empty())
    return step::more; // e.g. the usage chunk
  auto& choice = (*choices)[0];
  if (auto d = member(choice, "delta"); d != nullptr && d->is_object()) {
    if (auto text = string_member(*d, "content"); text && !text->empty())
      append_text(delta, *text);
    if (auto calls = member(*d, "tool_calls");
        calls != nullptr && calls->is_array()) {
      for (size_t i = 0; i < calls->size(); ++i) {
        auto& frag = (*calls)[i];
        auto index = int_member(frag, "index", static_cast<int64_t>(i));
        auto it = std::find_if(tool_indexes_.begin(), tool_indexes_.end(),
                               [&](auto& x) { return x.first == index; });
        size_t pos;
        if (it == tool_indexes_.end()) {
          pos = result_.tool_calls.size();
          result_.tool_calls.emplace_back();
          tool_indexes_.emplace_back(index, pos);
        } else {
          pos = it->second;
        }
        auto& tc = result_.tool_calls[pos];
        if (auto id = string_member(frag, "id"); id && !id->empty())
          tc.id = *id;
        if (auto fn = member(frag, "function")) {
          // Every string of a delta is a fragment to append.
          if (auto name = string_member(*fn, "name"))
            tc.name += *name;
          if (auto args = string_member(*fn, "arguments"))
            tc.arguments += *args;
        }
        started_ = true;
      }
    }
  }
  if (auto reason = string_member(choice, "finish_reason"))
    result_.finish_reason = *reason;
  return step::more;
}

stream_decoder::step
stream_decoder::anthropic_event(std::string_view event, const json& j,
                                std::string_view data, std::string& delta) {
  auto type_ptr = string_member(j, "type");
  std::string_view type = type_ptr != nullptr ? std::string_view{*type_ptr}
                                              : event;
  if (type == "error")
    return fail_provider(data);
  if (type == "message_start") {
    if (auto msg = member(j, "message")) {
      if (auto model = string_member(*msg, "model"))
        result_.model = *model;
      if (auto usage = member(*msg, "usage"))
        read_anthropic_usage(*usage, result_.usage);
    }
  } else if (type == "content_block_start") {
    return anthropic_block_start(j, delta);
  } else if (type == "content_block_delta") {
    return anthropic_block_delta(j, delta);
  } else if (type == "content_block_stop") {
    finish_tool_calls();
  } else if (type == "message_delta") {
    if (auto d = member(j, "delta"))
      if (auto reason = string_member(*d, "stop_reason"))
        result_.finish_reason = normalize_stop_reason(*reason);
    if (auto usage = member(j, "usage"))
      read_anthropic_usage(*usage, result_.usage);
  } else if (type == "message_stop") {
    finish_tool_calls();
    return step::done;
  }
  // ping and unknown events: Anthropic may add event types at any time.
  return step::more;
}

stream_decoder::step stream_decoder::anthropic_block_start(const json& j,
                                                           std::string& delta) {
  const json* block = nullptr;
  auto block_type = typed_member(j, "content_block", block);
  if (block_type == nullptr)
    return fail_parse("content_block_start without content_block.type");
  if (*block_type == "text") {
    if (auto text = string_member(*block, "text"); text && !text->empty())
      append_text(delta, *text);
  } else if (*block_type == "tool_use") {
    auto name = string_member(*block, "name");
    if (name == nullptr)
      return fail_parse("content_block_start (tool_use) without a name");
    tool_call tc;
    if (auto id = string_member(*block, "id"))
      tc.id = *id;
    tc.name = *name;
    tool_blocks_.emplace_back(int_member(j, "index", -1),
                              result_.tool_calls.size());
    auto input = member(*block, "input");
    tool_inputs_.push_back(input != nullptr && !input->empty()
                             ? arguments_text(*input)
                             : std::string{});
    result_.tool_calls.push_back(std::move(tc));
    started_ = true;
  }
  return step::more;
}

stream_decoder::step stream_decoder::anthropic_block_delta(const json& j,
                                                           std::string& delta) {
  const json* d = nullptr;
  auto delta_type = typed_member(j, "delta", d);
  if (delta_type == nullptr)
    return fail_parse("content_block_delta without delta.type");
  if (*delta_type == "text_delta") {
    auto text = string_member(*d, "text");
    if (text == nullptr)
      return fail_parse("text_delta without text");
    append_text(delta, *text);
  } else if (*delta_type == "input_json_delta") {
    auto part = string_member(*d, "partial_json");
    auto tc = tool_of_block(int_member(j, "index", -1));
    if (part == nullptr || tc == nullptr)
      return fail_parse("input_json_delta without partial_json or "
                        "outside a tool_use block");
    tc->arguments += *part;
  }
  // thinking_delta, signature_delta, ...: nothing for the user.
  return step::more;
}

tool_call* stream_decoder::tool_of_block(int64_t index) {
  for (auto& [block, pos] : tool_blocks_)
    if (block == index)
      return &result_.tool_calls[pos];
  return nullptr;
}

void stream_decoder::append_text(std::string& delta, const std::string& text) {
  delta += text;
  result_.text += text;
  started_ = true;
}

void stream_decoder::finish_tool_calls() {
  for (size_t i = 0; i < tool_blocks_.size(); ++i) {
    auto& tc = result_.tool_calls[tool_blocks_[i].second];
    if (tc.arguments.empty())
      tc.arguments = tool_inputs_[i].empty() ? "{}" : tool_inputs_[i];
  }
}

} // namespace keel::llm_wire
