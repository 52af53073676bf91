#include "keel/conversation_builders.hpp"

#include <algorithm>

#include "keel/recovery.hpp"

// The compaction's part of the state: the request's size, the compactor
// over the context before the turn, the summaries' requests and the step
// storing the outcome.

namespace keel {

using namespace conversation_builders;

uint64_t
conversation_state::request_tokens(const completion_request& req) const {
  auto bytes = req.system_prompt.size();
  for (auto& tool : req.tools)
    bytes += tool.name.size() + tool.description.size()
             + tool.parameters.size();
  // `req` comes from `make_request`: the context, then the turn's own
  // entries.
  auto tokens = context_tokens;
  for (auto i = context.size(); i < req.context.size(); ++i)
    tokens += estimate_tokens(req.context[i]);
  return tokens + (bytes + 3) / 4;
}

compactor conversation_state::make_compactor(const completion_request& req,
                                             bool overflowed) const {
  auto start = turn_in_context() ? user_entry(context, inbox.front().seq)
                                 : context.size();
  std::vector<context_entry> older(
    context.begin(), context.begin() + static_cast<std::ptrdiff_t>(start));
  auto total = request_tokens(req);
  auto fixed = total - std::min(total, estimate_tokens(older));
  auto window = static_cast<double>(cfg->context_window);
  auto target = static_cast<uint64_t>(cfg->compaction.warn_at * window) - 1;
  if (overflowed)
    target = std::min(target, total / 2);
  return compactor{std::move(older), fixed, target, cfg->context_window / 4,
                   cfg->compaction};
}

completion_request
conversation_state::make_summary_request(std::string text) const {
  completion_request req;
  req.thread = cfg.thread;
  auto& msg = inbox.front();
  req.client_id = msg.client_id;
  req.seq = msg.seq;
  req.system_prompt = summary_instruction;
  req.context.push_back(context_entry{msg.seq, "user", std::move(text)});
  req.time_budget_ms = static_cast<uint64_t>(turn_time_left().count());
  req.quiet = true;
  return req;
}

turn_commit conversation_state::make_compaction_commit(
  const compaction_result& result) const {
  auto commit = step_commit(*this);
  commit.context = result.put;
  commit.retire_context = result.retired;
  return commit;
}

} // namespace keel
