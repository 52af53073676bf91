// OpenAI's shapes: chat.completion, chat.completion.chunk, `[DONE]`.

#include "event_format.hpp"

namespace keel::compat::format {

namespace {

/// A chunk with one choice of `delta` (and `finish_reason`, when set);
/// `usage: null` on every chunk but the usage chunk when it is asked for.
json chunk(const exchange_info& info, json delta, const char* finish) {
  json choice{{"index", 0},
              {"delta", std::move(delta)},
              {"logprobs", nullptr},
              {"finish_reason", finish != nullptr ? json(finish) : json()}};
  json result{{"id", answer_id(info)},
              {"object", "chat.completion.chunk"},
              {"created", info.created},
              {"model", info.model},
              {"system_fingerprint", nullptr},
              {"choices", json::array({std::move(choice)})}};
  if (info.include_usage)
    result["usage"] = nullptr;
  return result;
}

json usage_of(const json& reply) {
  auto [input, output] = tokens_of(reply);
  return {{"prompt_tokens", input},
          {"completion_tokens", output},
          {"total_tokens", input + output}};
}

} // namespace

std::string openai_open(const exchange_info& info) {
  return event(api::openai,
               chunk(info, {{"role", "assistant"}, {"content", ""}}, nullptr));
}

std::string openai_text(const exchange_info& info, std::string_view text) {
  return event(api::openai,
               chunk(info, {{"content", std::string{text}}}, nullptr));
}

std::string openai_finish(const exchange_info& info, const json& reply) {
  auto result = event(api::openai, chunk(info, json::object(), "stop"));
  if (info.include_usage) {
    auto usage = chunk(info, json::object(), nullptr);
    usage["choices"] = json::array();
    usage["usage"] = usage_of(reply);
    result += event(api::openai, usage);
  }
  return result + "data: [DONE]\n\n";
}

json openai_body(const exchange_info& info, const json& reply) {
  json message{{"role", "assistant"},
               {"content", reply.value("text", "")},
               {"refusal", nullptr}};
  return {{"id", answer_id(info)},
          {"object", "chat.completion"},
          {"created", info.created},
          {"model", info.model},
          {"system_fingerprint", nullptr},
          {"choices", json::array({{{"index", 0},
                                    {"message", std::move(message)},
                                    {"logprobs", nullptr},
                                    {"finish_reason", "stop"}}})},
          {"usage", usage_of(reply)},
          {"keel", keel_member(info, reply)}};
}

} // namespace keel::compat::format
