#pragma once

// What a conversation asks a provider pool and what it gets back: the
// request, the answer (text and tool calls), and one attempt at one
// provider with its classified outcome. These travel in actor messages
// between conversations, pool routers and provider workers.

#include <cstdint>
#include <string>
#include <vector>

#include <caf/meta/type_name.hpp>

#include "keel/context_list.hpp"
#include "keel/model_params.hpp"
#include "keel/provider_policy.hpp"
#include "keel/types.hpp"

namespace keel {

/// A tool the model may call: what it is told about it.
struct tool_spec {
  std::string name;
  std::string description;
  /// A JSON schema of the arguments object, as JSON text.
  std::string parameters;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, tool_spec& x) {
  return f(caf::meta::type_name("keel::tool_spec"), x.name, x.description,
           x.parameters);
}

/// What a provider is asked.
struct completion_request {
  std::string thread;
  /// Client id and seq of the message answered (for status and deltas).
  std::string client_id;
  seq_t seq = 0;
  std::string system_prompt;
  /// The working memory, ending with the user message to answer: the
  /// conversation's committed entries shared, not copied, and the notes
  /// and message of this call.
  context_list context;
  /// How long the request may take in all, in milliseconds; 0: no limit
  /// beyond the providers' own timeouts. A pool ends the request with a
  /// timeout once it is spent; an HTTP call never outlives what is left.
  uint64_t time_budget_ms = 0;
  /// The tools the model may call, advertised in the provider's format.
  std::vector<tool_spec> tools;
  /// A request the thread's clients do not see (a compaction's summary):
  /// the pool publishes no delta or status frame about it.
  bool quiet = false;
  /// The thread's agent's parameters, over those of the provider called.
  model_params params;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, completion_request& x) {
  return f(caf::meta::type_name("keel::completion_request"), x.thread,
           x.client_id, x.seq, x.system_prompt, x.context, x.time_budget_ms,
           x.tools, x.quiet, x.params);
}

/// The tokens one model call took, as its provider reported them: OpenAI's
/// `usage.prompt_tokens` / `completion_tokens` (in a streamed answer, the
/// usage chunk `stream_options.include_usage` asks for), Anthropic's
/// `usage.input_tokens` (plus the cache's `cache_creation_input_tokens` and
/// `cache_read_input_tokens`, which it counts apart) / `output_tokens`.
struct token_usage {
  uint64_t input_tokens = 0;
  uint64_t output_tokens = 0;
  /// True if the answer reported its usage; false for a provider that
  /// reports none (the offline ones, a server that leaves it out, a stream
  /// cut before its usage chunk), whose counts are then zero.
  bool reported = false;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, token_usage& x) {
  return f(caf::meta::type_name("keel::token_usage"), x.input_tokens,
           x.output_tokens, x.reported);
}

/// A provider's answer.
struct completion {
  std::string text;
  /// The provider that answered.
  std::string provider;
  std::string model;
  /// Tool calls in the answer, in order.
  std::vector<tool_call> tool_calls;
  /// Why the model stopped, normalized: "stop", "length", "tool_calls",
  /// "content_filter", or the provider's own word; empty if not given.
  std::string finish_reason;
  /// The tokens the call took, if the provider said.
  token_usage usage;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, completion& x) {
  return f(caf::meta::type_name("keel::completion"), x.text, x.provider,
           x.model, x.tool_calls, x.finish_reason, x.usage);
}

/// One attempt of a pool at one provider.
struct attempt_request {
  completion_request request;
  /// `max_tokens` of this attempt (reduced after a timeout).
  uint32_t max_tokens = 0;
  /// Attempt number within the request, from 1 (tags streamed deltas).
  uint32_t attempt = 1;
  /// The pool's id of the request (names it in `atom::cancel`).
  uint64_t call_id = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, attempt_request& x) {
  return f(caf::meta::type_name("keel::attempt_request"), x.request,
           x.max_tokens, x.attempt, x.call_id);
}

/// The outcome of one attempt, classified by the worker that made it.
struct attempt_outcome {
  bool ok = false;
  /// The answer, if `ok`.
  completion reply;
  /// `to_string(error_class)` of the failure, if not `ok`.
  std::string error_class;
  /// One line saying what went wrong, naming the provider.
  std::string message;
  /// The provider's Retry-After in milliseconds; -1 if none.
  int64_t retry_after_ms = -1;
  /// True if streamed text had reached subscribers before the failure.
  bool partial = false;
  /// True if the failure broke a stream that had begun: a 2xx event stream
  /// cut, ended before its terminal event, or carrying an error event
  /// (the pool's stream layer retries these).
  bool in_stream = false;
  /// True if the call ended because our worker stopped (a shutdown, a kill,
  /// a full restart buffer), not because of the provider: its health is
  /// left as it is.
  bool worker_stopped = false;

  /// A failed outcome.
  static attempt_outcome failed(keel::error_class cls, std::string message) {
    attempt_outcome result;
    result.error_class = to_string(cls);
    result.message = std::move(message);
    return result;
  }
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, attempt_outcome& x) {
  return f(caf::meta::type_name("keel::attempt_outcome"), x.ok, x.reply,
           x.error_class, x.message, x.retry_after_ms, x.partial, x.in_stream,
           x.worker_stopped);
}

} // namespace keel
