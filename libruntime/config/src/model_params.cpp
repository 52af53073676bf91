#include "keel/model_params.hpp"

#include <nlohmann/json.hpp>

namespace keel {

namespace {

// Both are JSON objects (the parser checks them); each top-level key of
// `over` replaces `base`'s, a null included (it still removes the field
// from the request).
std::string merge_objects(const std::string& base, const std::string& over) {
  if (base.empty() || over.empty())
    return over.empty() ? base : over;
  auto merged = nlohmann::ordered_json::parse(base);
  auto patch = nlohmann::ordered_json::parse(over);
  for (auto& [key, value] : patch.items())
    merged[key] = value;
  return merged.dump();
}

} // namespace

model_params overlay(model_params base, const model_params& over) {
  if (over.temperature != unset_param)
    base.temperature = over.temperature;
  if (over.top_p != unset_param)
    base.top_p = over.top_p;
  if (!over.stop.empty())
    base.stop = over.stop;
  if (over.max_output_tokens != 0)
    base.max_output_tokens = over.max_output_tokens;
  if (!over.reasoning_effort.empty())
    base.reasoning_effort = over.reasoning_effort;
  base.extra_body = merge_objects(base.extra_body, over.extra_body);
  return base;
}

uint32_t output_token_limit(const model_params& provider,
                            const model_params& request) {
  if (request.max_output_tokens != 0)
    return request.max_output_tokens;
  return provider.max_output_tokens != 0 ? provider.max_output_tokens
                                         : default_output_tokens;
}

} // namespace keel
