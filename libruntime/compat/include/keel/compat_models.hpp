#pragma once

// `GET /v1/models` and `GET /v1/models/{id}` of the compatible API: one
// model per agent of the node, its id the agent's name, in OpenAI's shape
// or, for a request that carries `anthropic-version`, Anthropic's.

#include <cstdint>
#include <string>
#include <vector>

#include "keel/compat_errors.hpp"

namespace keel::compat {

/// One model: an agent.
struct model_entry {
  std::string id;
  std::string description;
  /// Unix seconds: when the node took its configuration.
  int64_t created = 0;
};

/// The list: OpenAI's `{"object":"list","data":[...]}`, Anthropic's
/// `{"data":[...],"has_more":false,"first_id","last_id"}`.
std::string models_body(api wire, const std::vector<model_entry>& models);

/// One model: OpenAI's `{"id","object":"model","created","owned_by"}`,
/// Anthropic's `{"type":"model","id","display_name","created_at"}`.
std::string model_body(api wire, const model_entry& model);

} // namespace keel::compat
