// The provider wire formats (keel/llm_wire.hpp) on arbitrary bytes: plain
// answers, error bodies, and streamed answers through the SSE parser and the
// stream decoders of both APIs.
//
// Input: byte 0 picks the API (bit 0) and plain or streamed (bit 1); bytes
// 1-4 seed the chunk sizes (1 to 64 bytes) the stream is cut into; the rest
// is the body. Properties: no exception escapes; a failed parse says why;
// error summaries are well-formed UTF-8; the SSE parser yields the same
// events however the body is cut; the text a stream decoder hands out as
// deltas is exactly the text of its result; a failed stream says why; a
// finished Anthropic stream leaves no tool call without arguments.

#include <string>
#include <utility>
#include <vector>

#include "fuzz_check.hpp"
#include "keel/http_response.hpp"
#include "keel/llm_wire.hpp"
#include "keel/text.hpp"

using namespace keel;
using namespace keel::llm_wire;
using keel::fuzz::require;

namespace {

using event_list = std::vector<std::pair<std::string, std::string>>;

void check_plain(api kind, std::string_view body) {
  completion out;
  std::string error;
  if (!parse_answer(kind, body, out, error))
    require(!error.empty(), "a refused answer has no reason");
  require(valid_utf8(error_summary(body)), "an error summary is not UTF-8");
  auto reason = normalize_stop_reason(body);
  require(normalize_stop_reason(reason) == reason,
          "normalizing a stop reason twice changes it");
}

/// The events of `body`, fed in chunks whose sizes a small xorshift generator
/// seeded by `seed` draws; `seed` 0 feeds the body whole.
event_list events_of(std::string_view body, uint32_t seed) {
  event_list events;
  auto collect = [&](std::string_view event, std::string_view data) {
    events.emplace_back(std::string{event}, std::string{data});
  };
  sse_parser parser;
  while (!body.empty()) {
    size_t n = body.size();
    if (seed != 0) {
      seed ^= seed << 13;
      seed ^= seed >> 17;
      seed ^= seed << 5;
      n = std::min<size_t>(n, 1 + seed % 64);
    }
    parser.feed(body.substr(0, n), collect);
    body.remove_prefix(n);
  }
  parser.finish(collect);
  return events;
}

void check_stream(api kind, std::string_view body, uint32_t seed) {
  auto events = events_of(body, seed | 1);
  require(events == events_of(body, 0),
          "the SSE parser's events depend on how the body is cut");
  stream_decoder decoder{kind};
  std::string deltas;
  auto last = stream_decoder::step::more;
  for (const auto& [event, data] : events) {
    std::string delta;
    last = decoder.on_event(event, data, delta);
    deltas += delta;
    if (last != stream_decoder::step::more)
      break;
  }
  require(deltas == decoder.result().text,
          "the streamed deltas differ from the result's text");
  if (last == stream_decoder::step::failed)
    require(!decoder.error().empty(), "a failed stream has no reason");
  if (last == stream_decoder::step::done && kind == api::anthropic)
    for (const auto& call : decoder.result().tool_calls)
      require(!call.arguments.empty(), "a finished tool call has no input");
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 5)
    return 0;
  return keel::fuzz::guarded([&] {
    auto kind = (data[0] & 1) != 0 ? api::anthropic : api::openai;
    auto seed = static_cast<uint32_t>(data[1]) << 24
                | static_cast<uint32_t>(data[2]) << 16
                | static_cast<uint32_t>(data[3]) << 8 | data[4];
    auto body = keel::fuzz::as_text(data + 5, size - 5);
    if ((data[0] & 2) != 0)
      check_stream(kind, body, seed);
    else
      check_plain(kind, body);
  });
}
