#pragma once

// Offline providers: `echo` (the embedded default) and `scripted` (replies,
// delays, tool calls and classified failures from config, for tests). Both
// answer the last user message or tool result (`last_input_text`). A
// provider worker applies the outcome's delay on the actor clock, so tests
// drive it with the test clock. The HTTP kinds (openai, anthropic) are in
// `keel/llm_client.hpp`.

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <caf/timespan.hpp>

#include "keel/completion.hpp"
#include "keel/config.hpp"
#include "keel/error.hpp"

namespace keel {

/// What happens when an offline provider is called.
struct provider_outcome {
  enum class kind : uint8_t {
    /// `reply` after `delay`.
    reply,
    /// A failure of class `failure` after `delay`.
    failure,
    /// An exception thrown inside the provider worker after `delay`.
    crash,
  };
  kind what = kind::reply;
  caf::timespan delay{0};
  completion reply;
  error_class failure = error_class::unknown;
  std::string message;
  std::optional<std::chrono::milliseconds> retry_after;
  /// For a failure: it broke a stream that had begun (`attempt_outcome`'s
  /// `in_stream` and `partial`).
  bool cut = false;
};

/// An offline provider: decides the outcome of a call without I/O.
class provider {
public:
  virtual ~provider();
  /// The configured name.
  virtual const std::string& name() const = 0;
  /// Decides the outcome of one call allowed `max_tokens` tokens.
  virtual provider_outcome
  complete(const completion_request& req, uint32_t max_tokens)
    = 0;
};

/// Creates the offline provider a config entry describes; fails with
/// `ec::config_invalid` for other kinds.
caf::expected<std::unique_ptr<provider>>
make_provider(const provider_config& cfg);

/// The text of the last user message in `ctx`, or empty.
std::string last_user_text(const std::vector<context_entry>& ctx);

/// What the model answers next: the content of the last entry of `ctx` that
/// is a user message or a tool result (role "user" or "tool"), or empty.
/// Before tools it is the last user message; after a tool call, the call's
/// result.
std::string last_input_text(const context_list& ctx);

} // namespace keel
