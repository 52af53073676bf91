#pragma once

// The parameters a model call carries besides the conversation: sampling
// (`temperature`, `top_p`, `stop`), the output limit, the reasoning effort
// and a JSON object merged into the request for what a server adds. A
// provider sets them for every call to it; an agent sets them over its
// provider's, key by key (`overlay`). How each goes on the wire is the
// provider client's business (llm_wire.hpp).

#include <cstdint>
#include <string>
#include <vector>

#include <caf/meta/type_name.hpp>

namespace keel {

/// A number parameter left to the server's default.
inline constexpr double unset_param = -1;

/// The output limit of a call that neither its provider nor its agent
/// sets.
inline constexpr uint32_t default_output_tokens = 1024;

/// The reasoning efforts `reasoning_effort` takes.
inline constexpr const char* reasoning_effort_names[]
  = {"none", "minimal", "low", "medium", "high"};

struct model_params {
  /// Sampling temperature, 0..2; `unset_param`: the server's.
  double temperature = unset_param;
  /// Nucleus sampling share, 0..1; `unset_param`: the server's.
  double top_p = unset_param;
  /// Texts that end the answer; empty: none.
  std::vector<std::string> stop;
  /// Most tokens of one answer; 0: not set here.
  uint32_t max_output_tokens = 0;
  /// One of `reasoning_effort_names`; empty: not sent.
  std::string reasoning_effort;
  /// A JSON object merged into the request body last, as an RFC 7396
  /// merge patch (a key set to null removes the field); empty: none.
  std::string extra_body;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, model_params& x) {
  return f(caf::meta::type_name("keel::model_params"), x.temperature, x.top_p,
           x.stop, x.max_output_tokens, x.reasoning_effort, x.extra_body);
}

/// `base` with each parameter `over` sets replacing it; of `extra_body`,
/// each top-level key of `over`'s replaces `base`'s.
model_params overlay(model_params base, const model_params& over);

/// The output limit of a call: the one of `request` if set, else the one
/// of `provider`, else `default_output_tokens`.
uint32_t output_token_limit(const model_params& provider,
                            const model_params& request);

} // namespace keel
