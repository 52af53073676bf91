#include "keel/call_usage.hpp"

#include "keel/context_window.hpp"

namespace keel {

void estimate_usage(completion& reply, uint64_t request_tokens) {
  if (reply.usage.reported)
    return;
  context_entry answer{0, "assistant", reply.text};
  answer.set_tool_calls(reply.tool_calls);
  reply.usage.input_tokens = request_tokens;
  reply.usage.output_tokens = estimate_tokens(answer);
}

usage_count call_usage(const completion& reply) {
  usage_count result;
  result.input_tokens = reply.usage.input_tokens;
  result.output_tokens = reply.usage.output_tokens;
  result.model_calls = 1;
  result.estimated_calls = reply.usage.reported ? 0 : 1;
  return result;
}

} // namespace keel
