#pragma once

// The request body `llm_wire::request_body` builds, as JSON, for tests of
// the wire formats.

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "keel/llm_wire.hpp"

namespace keel::test {

/// The body for `req` to `model` with an output limit of `limit`; the
/// other parameters as `params` holds them.
inline nlohmann::json wire_body(llm_wire::api kind,
                                const completion_request& req,
                                const std::string& model, uint32_t limit,
                                bool stream, model_params params = {}) {
  llm_wire::request_settings settings;
  settings.model = model;
  settings.params = std::move(params);
  settings.params.max_output_tokens = limit;
  settings.stream = stream;
  return nlohmann::json::parse(llm_wire::request_body(kind, req, settings));
}

} // namespace keel::test
