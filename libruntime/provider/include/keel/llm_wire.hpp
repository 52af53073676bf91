#pragma once

// The wire formats of the HTTP LLM providers, without any I/O: base URL
// parsing, request bodies, parsing of plain answers, an incremental
// server-sent-events parser and the decoders that turn streamed events into
// text deltas and a completion. `keel/llm_client.hpp` does the networking;
// everything here is a pure function of its input, so it is tested by table.
//
// Context roles: "user" entries and plain "assistant" entries are sent as
// they are. An "assistant" entry with `tool_calls` becomes the model's call
// (OpenAI: `tool_calls` with the arguments text as it came, `content` null
// when empty; Anthropic: an optional text block, then `tool_use` blocks with
// the arguments as an object, `{}` if they are not one). A "tool" entry is a
// call's result (OpenAI: a `tool` message naming `tool_call_id`; Anthropic: a
// `tool_result` block in a user message). "system" entries go to the system
// prompt's place (OpenAI: a system message where they stand; Anthropic:
// appended to the top-level `system` text). Entries of any other role (e.g.
// errors posted to the thread) are skipped: the model never said them and
// the user did not write them. Anthropic also gets empty text entries
// dropped and consecutive entries of one role merged, which its API would
// otherwise reject: texts join with a blank line; with blocks, the content
// becomes blocks in order, tool results first (several results of one
// answer share one user message; a user text after them follows as a text
// block).
//
// Tools: the built-in agent tools (keel/agent_tools.hpp), then
// `completion_request::tools` whose names differ from those already listed,
// in each API's shape; a schema that is not a JSON object is sent as
// `{"type":"object","properties":{}}`.

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <caf/expected.hpp>
#include <nlohmann/json_fwd.hpp>

#include "keel/completion.hpp"
#include "keel/http_url.hpp"

namespace keel::llm_wire {

/// Which HTTP API a provider speaks.
enum class api : uint8_t {
  /// OpenAI-compatible chat completions.
  openai,
  /// Anthropic Messages.
  anthropic,
};

/// Where an endpoint's requests go, parsed from `base_url`.
using base_url = http_url;

/// Parses "http[s]://HOST[:PORT][/PATH][?QUERY]" (`parse_http_url`) and
/// appends the API's path, "/chat/completions" or "/messages", to PATH as
/// given (as the OpenAI and Anthropic SDKs do with their base URL), or to
/// "/v1" when the URL has no PATH; QUERY (Azure's `api-version`) follows.
/// Fails with `ec::config_invalid` saying what is wrong.
caf::expected<base_url> parse_base_url(std::string_view url, api kind);

/// What a request body carries besides the conversation and the tools.
struct request_settings {
  std::string model;
  /// The provider's parameters with the request's over them (`overlay`);
  /// `max_output_tokens` is the call's limit.
  model_params params;
  /// The openai wire's field of the limit ("max_completion_tokens" or
  /// "max_tokens"); Anthropic's is always max_tokens.
  std::string token_limit_field = "max_completion_tokens";
  bool stream = false;
};

/// Builds the JSON request body (see the top of this file for the roles and
/// the tools). The parameters: `temperature` and `top_p` as they are;
/// `stop` as OpenAI's `stop` or Anthropic's `stop_sequences`;
/// `reasoning_effort` as OpenAI's `reasoning_effort` or Anthropic's
/// `output_config.effort`; `extra_body` merged last as a merge patch. Never
/// throws on what the context or the tools hold.
std::string request_body(api kind, const completion_request& req,
                         const request_settings& settings);

/// Parses a complete (not streamed) answer into `out`. On failure returns
/// false and sets `error` to what was wrong.
bool parse_answer(api kind, std::string_view body, completion& out,
                  std::string& error);

/// Normalizes an Anthropic `stop_reason` to the OpenAI words `completion`
/// uses: end_turn and stop_sequence -> stop, max_tokens -> length, tool_use
/// -> tool_calls, refusal -> content_filter; others pass unchanged.
std::string normalize_stop_reason(std::string_view reason);

/// Incremental parser of a `text/event-stream` body (WHATWG HTML, "Server-
/// sent events"): accepts LF, CRLF and CR line ends, split anywhere across
/// chunks; ignores comment lines (`: keep-alive`), `id` and `retry`; joins
/// multi-line `data` with '\n'.
class sse_parser {
public:
  /// Feeds the next piece of the body; calls `on_event(event, data)` for each
  /// complete event (`event` empty when the stream names none).
  template <class OnEvent>
  void feed(std::string_view chunk, OnEvent&& on_event) {
    while (!chunk.empty()) {
      if (skip_lf_) {
        skip_lf_ = false;
        if (chunk.front() == '\n') {
          chunk.remove_prefix(1);
          continue;
        }
      }
      auto end = chunk.find_first_of("\r\n");
      if (end == std::string_view::npos) {
        partial_.append(chunk.data(), chunk.size());
        return;
      }
      auto piece = chunk.substr(0, end);
      bool dispatch;
      if (partial_.empty()) {
        dispatch = take_line(piece);
      } else {
        partial_.append(piece.data(), piece.size());
        dispatch = take_line(partial_);
        partial_.clear();
      }
      if (chunk[end] == '\r')
        skip_lf_ = true;
      chunk.remove_prefix(end + 1);
      if (dispatch)
        emit(on_event);
    }
  }

  /// Ends the body: an event whose blank line never came is still delivered
  /// (some servers close right after `data: [DONE]\n`).
  template <class OnEvent>
  void finish(OnEvent&& on_event) {
    skip_lf_ = false;
    if (!partial_.empty()) {
      take_line(partial_);
      partial_.clear();
    }
    if (take_line({}))
      emit(on_event);
  }

private:
  /// Processes one line; true when it completes an event with data.
  bool take_line(std::string_view line);

  template <class OnEvent>
  void emit(OnEvent& on_event) {
    if (!data_.empty() && data_.back() == '\n')
      data_.pop_back();
    on_event(std::string_view{event_}, std::string_view{data_});
    event_.clear();
    data_.clear();
    has_data_ = false;
  }

  std::string partial_;
  std::string event_;
  std::string data_;
  bool has_data_ = false;
  bool skip_lf_ = false;
};

/// Turns the events of one streamed answer into text deltas and, at its
/// terminal event, a completion.
class stream_decoder {
public:
  enum class step {
    /// Keep reading.
    more,
    /// The terminal event arrived: `result()` is complete.
    done,
    /// The stream reported an error or could not be understood.
    failed,
  };

  explicit stream_decoder(api kind) : kind_(kind) {
    // nop
  }

  /// Consumes one event. New text is appended to `delta` (cleared by the
  /// caller). After `failed`, `error()` says why.
  step on_event(std::string_view event, std::string_view data,
                std::string& delta);

  /// The answer so far (complete after `done`).
  completion& result() {
    return result_;
  }

  /// Why the stream failed.
  const std::string& error() const {
    return error_;
  }

  /// True if the failure is an error the provider sent in the stream
  /// (Anthropic `event: error`, an OpenAI `error` object) rather than
  /// something we could not parse; `error_body()` is then its JSON.
  bool provider_error() const {
    return provider_error_;
  }

  const std::string& error_body() const {
    return error_body_;
  }

  /// True once any text or tool call fragment arrived.
  bool started() const {
    return started_;
  }

private:
  step openai_event(const nlohmann::json& event, std::string_view data,
                    std::string& delta);
  step anthropic_event(std::string_view name, const nlohmann::json& event,
                       std::string_view data, std::string& delta);
  step anthropic_block_start(const nlohmann::json& event, std::string& delta);
  step anthropic_block_delta(const nlohmann::json& event, std::string& delta);
  /// The tool call that Anthropic content block `index` streams, if any.
  tool_call* tool_of_block(int64_t index);
  /// Appends streamed answer text to both `delta` and the result.
  void append_text(std::string& delta, const std::string& text);
  step fail_parse(std::string what);
  step fail_provider(std::string_view data);
  void finish_tool_calls();

  api kind_;
  completion result_;
  std::string error_;
  std::string error_body_;
  bool provider_error_ = false;
  bool started_ = false;
  /// Anthropic: content block index -> position in `result_.tool_calls`.
  std::vector<std::pair<int64_t, size_t>> tool_blocks_;
  /// Anthropic: the `input` of each tool_use block start, used when no
  /// input_json_delta follows.
  std::vector<std::string> tool_inputs_;
  /// OpenAI: streamed tool call index -> position in `result_.tool_calls`.
  std::vector<std::pair<int64_t, size_t>> tool_indexes_;
};

} // namespace keel::llm_wire
