#include <optional>

#include "ws_load_run.hpp"

namespace keel::bench::detail {

namespace {

double ms(steady::duration d) {
  return std::chrono::duration<double, std::milli>(d).count();
}

/// Who answered `msg`: its provider, "error" for an error frame, "none"
/// without an outcome.
std::string outcome_name(const message_state& msg,
                         const std::vector<std::string>& providers) {
  if (msg.outcomes == 0)
    return "none";
  if (msg.error)
    return "error";
  return msg.provider > 0 ? providers[msg.provider - 1] : "unknown";
}

/// The first reply from the fallback after the fault, whichever message it
/// answered.
std::optional<steady::time_point>
first_fallback_reply(const std::vector<const message_state*>& messages,
                     steady::time_point fault,
                     const std::vector<std::string>& providers,
                     const std::string& fallback_provider) {
  std::optional<steady::time_point> result;
  for (auto* msg : messages)
    if (msg->outcomes > 0 && !msg->error && msg->done_at >= fault
        && outcome_name(*msg, providers) == fallback_provider
        && (!result || msg->done_at < *result))
      result = msg->done_at;
  return result;
}

} // namespace

void compute_failover(failover_result& fo,
                      const std::vector<const message_state*>& messages,
                      steady::time_point fault,
                      const std::vector<std::string>& providers,
                      const std::string& fallback_provider) {
  auto recovered = first_fallback_reply(messages, fault, providers,
                                        fallback_provider);
  if (recovered)
    fo.to_first_fallback = ms(*recovered - fault);
  latency_recorder affected;
  latency_recorder before;
  latency_recorder after;
  for (auto* msg : messages) {
    bool done = msg->outcomes > 0;
    if (done && msg->done_at < fault) {
      if (msg->measured && !msg->error)
        before.record(msg->done_at - msg->sent_at);
      continue;
    }
    auto name = outcome_name(*msg, providers);
    if (msg->sent_at >= fault && done && !msg->error)
      ++fo.replies_after_fault[name];
    if (recovered && msg->sent_at >= *recovered) {
      if (done && !msg->error)
        after.record(msg->done_at - msg->sent_at);
      continue;
    }
    ++fo.affected;
    if (!done || msg->error)
      ++fo.affected_failed;
    if (done)
      affected.record(msg->done_at - msg->sent_at);
    if (fo.affected_latencies.size() < 50)
      fo.affected_latencies.emplace_back(
        done ? ms(msg->done_at - msg->sent_at) : -1.0, name);
  }
  fo.affected_latency = affected.summary();
  fo.before = before.summary();
  fo.after = after.summary();
}

} // namespace keel::bench::detail
