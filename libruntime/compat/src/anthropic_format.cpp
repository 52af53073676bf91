// Anthropic's shapes: a message, and its stream from message_start to
// message_stop (one text block at index 0).

#include "event_format.hpp"

namespace keel::compat::format {

namespace {

json message_of(const exchange_info& info, json content, const json& usage,
                const char* stop_reason) {
  return {{"id", answer_id(info)},
          {"type", "message"},
          {"role", "assistant"},
          {"model", info.model},
          {"content", std::move(content)},
          {"stop_reason", stop_reason != nullptr ? json(stop_reason) : json()},
          {"stop_sequence", nullptr},
          {"usage", usage}};
}

json usage_of(const json& reply) {
  auto [input, output] = tokens_of(reply);
  return {{"input_tokens", input}, {"output_tokens", output}};
}

} // namespace

std::string anthropic_open(const exchange_info& info) {
  json usage{{"input_tokens", 0}, {"output_tokens", 0}};
  auto start
    = event(api::anthropic,
            {{"type", "message_start"},
             {"message", message_of(info, json::array(), usage, nullptr)}});
  return start
         + event(api::anthropic,
                 {{"type", "content_block_start"},
                  {"index", 0},
                  {"content_block", {{"type", "text"}, {"text", ""}}}});
}

std::string anthropic_text(const exchange_info&, std::string_view text) {
  return event(
    api::anthropic,
    {{"type", "content_block_delta"},
     {"index", 0},
     {"delta", {{"type", "text_delta"}, {"text", std::string{text}}}}});
}

std::string anthropic_finish(const exchange_info&, const json& reply) {
  auto result = event(api::anthropic,
                      {{"type", "content_block_stop"}, {"index", 0}});
  result += event(
    api::anthropic,
    {{"type", "message_delta"},
     {"delta", {{"stop_reason", "end_turn"}, {"stop_sequence", nullptr}}},
     {"usage", usage_of(reply)}});
  return result + event(api::anthropic, {{"type", "message_stop"}});
}

json anthropic_body(const exchange_info& info, const json& reply) {
  auto content
    = json::array({{{"type", "text"}, {"text", reply.value("text", "")}}});
  auto result = message_of(info, std::move(content), usage_of(reply),
                           "end_turn");
  result["keel"] = keel_member(info, reply);
  return result;
}

} // namespace keel::compat::format
