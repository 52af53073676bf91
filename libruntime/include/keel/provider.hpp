#pragma once

// Providers turn a conversation context into a completion. This issue's
// kinds are offline: `echo` (the embedded default) and `scripted` (replies,
// delays and failures from config, for tests). The pool actor applies the
// outcome's delay on the actor clock, so tests drive it with the test clock.

#include <memory>
#include <string>
#include <vector>

#include <caf/timespan.hpp>

#include "keel/config.hpp"
#include "keel/error.hpp"
#include "keel/types.hpp"

namespace keel {

/// What a provider is asked.
struct completion_request {
  std::string thread;
  std::string system_prompt;
  /// The working memory, ending with the user message to answer.
  std::vector<context_entry> context;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, completion_request& x) {
  return f(caf::meta::type_name("keel::completion_request"), x.thread,
           x.system_prompt, x.context);
}

/// A provider's answer.
struct completion {
  std::string text;
  /// The provider that answered.
  std::string provider;
  std::string model;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, completion& x) {
  return f(caf::meta::type_name("keel::completion"), x.text, x.provider,
           x.model);
}

/// What happens when a provider is called.
struct provider_outcome {
  enum class kind : uint8_t {
    /// `reply` after `delay`.
    reply,
    /// `error` after `delay`.
    failure,
    /// An exception thrown inside the turn after `delay` (error boundary).
    crash,
  };
  kind what = kind::reply;
  caf::timespan delay{0};
  completion reply;
  caf::error error;
};

class provider {
public:
  virtual ~provider();
  /// The configured name.
  virtual const std::string& name() const = 0;
  /// Decides the outcome of one call.
  virtual provider_outcome complete(const completion_request& req) = 0;
};

/// Creates the provider a config entry describes; fails with
/// `ec::config_invalid` for unknown kinds.
caf::expected<std::unique_ptr<provider>>
make_provider(const provider_config& cfg);

/// The text of the last user message in `ctx`, or empty.
std::string last_user_text(const std::vector<context_entry>& ctx);

} // namespace keel
