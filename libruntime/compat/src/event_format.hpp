#pragma once

// The two APIs' shapes of an answer, for `final_answer` and
// `stream_writer`: what opens a stream, a piece of text, the end of a
// stream, and the whole body of a non-streamed answer.

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "keel/compat_render.hpp"

namespace keel::compat::format {

using json = nlohmann::json;

/// One server-sent event: `data: JSON` (OpenAI) or `event: TYPE` and
/// `data: JSON` (Anthropic, whose events name their type).
std::string event(api wire, const json& data);

/// An SSE comment line, which the SDKs skip.
std::string comment(std::string_view text);

/// `keel` in a body: the thread, the message's seq, the reply's and the
/// provider.
json keel_member(const exchange_info& info, const json& reply);

// OpenAI Chat Completions (openai_format.cpp).
std::string openai_open(const exchange_info& info);
std::string openai_text(const exchange_info& info, std::string_view text);
std::string openai_finish(const exchange_info& info, const json& reply);
json openai_body(const exchange_info& info, const json& reply);

// Anthropic Messages (anthropic_format.cpp).
std::string anthropic_open(const exchange_info& info);
std::string anthropic_text(const exchange_info& info, std::string_view text);
std::string anthropic_finish(const exchange_info& info, const json& reply);
json anthropic_body(const exchange_info& info, const json& reply);

/// The reply frame's `usage` tokens: input and output (0 when absent).
std::pair<uint64_t, uint64_t> tokens_of(const json& reply);

} // namespace keel::compat::format
