#include "keel/conversation_builders.hpp"

#include <algorithm>

#include "keel/agent_tools.hpp"
#include "keel/text.hpp"
#include "keel/turn_texts.hpp"

// The steps of a turn's tool loop: the model's calls, each call's result
// (where a failing tool is counted and disabled), the result a cancel
// stopped, and the calls a restart interrupted.

namespace keel {

using namespace conversation_builders;

// -- the turn's tool loop -----------------------------------------------------

const std::vector<tool_config>& conversation_state::tools() const {
  return session.parent.empty() ? cfg->root_tools : cfg->agent_tools;
}

uint32_t conversation_state::tool_failures(const std::string& tool) const {
  for (auto& x : session.tool_failures)
    if (x.tool == tool)
      return x.failures;
  return 0;
}

bool conversation_state::tool_disabled(const std::string& tool) const {
  return tool_failures(tool) >= cfg->disable_tool_after;
}

std::vector<tool_spec> conversation_state::offered_tools() const {
  std::vector<tool_spec> result;
  for (auto& tool : tools())
    if (!tool_disabled(tool.name))
      result.push_back(tool_spec{tool.name, tool.description, tool.parameters});
  return result;
}

bool conversation_state::final_reply(const completion& reply) const {
  return keel::final_reply(reply, cfg.thread);
}

namespace conversation_builders {

// The index of the user entry of the message `seq` in `context`, or its
// size if the message is not there.
size_t user_entry(const context_list& context, seq_t seq) {
  // From the end: a running turn's entries are the last ones. The context
  // is in seq order and a message's user entry has a seq of at least the
  // message's (see `user_context_entry`), so the search ends at the first
  // entry below it: looking for a turn not begun yet reads the entries of
  // the turns answered since the message came, not the whole context.
  for (size_t i = context.size(); i > 0 && context[i - 1].seq >= seq; --i) {
    auto& entry = context[i - 1];
    if (entry.role == "user"
        && (entry.message_seq != 0 ? entry.message_seq : entry.seq) == seq)
      return i - 1;
  }
  return context.size();
}

} // namespace conversation_builders

bool conversation_state::turn_in_context() const {
  return !inbox.empty()
         && user_entry(context, inbox.front().seq) < context.size();
}

std::vector<tool_call> conversation_state::unanswered_calls() const {
  if (inbox.empty())
    return {};
  std::vector<tool_call> calls;
  std::set<std::string> answered;
  for (auto i = user_entry(context, inbox.front().seq); i < context.size();
       ++i) {
    auto& entry = context[i];
    if (entry.role == "assistant") {
      calls = entry.tool_calls();
      answered.clear();
    } else if (entry.role == "tool") {
      answered.insert(entry.tool_call_id());
    }
  }
  calls.erase(std::remove_if(calls.begin(), calls.end(),
                             [&answered](const tool_call& call) {
                               return answered.count(call.id) > 0;
                             }),
              calls.end());
  return calls;
}

namespace conversation_builders {

// A step commit of the inbox front's turn: the inbox entry stays.
turn_commit step_commit(const conversation_state& st) {
  turn_commit commit;
  commit.thread = st.cfg.thread;
  commit.inbox_seq = st.inbox.front().seq;
  commit.keeps_inbox = true;
  return commit;
}

} // namespace conversation_builders

namespace {

// A step commit that also records the message's task as in progress (or
// retried) as of `now`.
turn_commit progress_step(const conversation_state& st, millis now) {
  auto commit = step_commit(st);
  commit.log.push_back(st.task_entry(task_state::in_progress, now));
  return commit;
}

// The result entry of `call` in the context.
context_entry tool_result_entry(seq_t seq, const tool_call& call,
                                std::string text) {
  context_entry entry{seq, "tool", std::move(text)};
  entry.set_tool_result(call.id, call.name);
  return entry;
}

} // namespace

turn_commit conversation_state::make_call_step(const completion& reply,
                                               millis now,
                                               const spawn_outcomes& spawns) {
  auto commit = progress_step(*this, now);
  if (!turn_in_context())
    commit.context.push_back(user_context_entry(*this));
  context_entry asked{next_seq++, "assistant",
                      bound_text(reply.text, cfg->max_reply_bytes, "reply")};
  asked.set_tool_calls(reply.tool_calls);
  commit.context.push_back(std::move(asked));
  // Agent calls take effect now; their results are what they did.
  for (auto& call : reply.tool_calls)
    if (auto note = agent_call_note(*this, commit, call, now, spawns))
      commit.context.push_back(
        tool_result_entry(next_seq++, call, std::move(*note)));
  count_usage(*this, commit, &reply, false);
  return commit;
}

namespace {

// Counts a failure of `tool` in `session`; returns the new count.
uint32_t count_failure(session_record& session, const std::string& tool) {
  for (auto& x : session.tool_failures)
    if (x.tool == tool)
      return ++x.failures;
  session.tool_failures.push_back(tool_failure_count{tool, 1});
  return 1;
}

} // namespace

turn_commit conversation_state::make_result_step(const tool_call& call,
                                                 const tool_outcome& outcome,
                                                 bool counts_failure,
                                                 millis now) {
  auto commit = progress_step(*this, now);
  auto& msg = inbox.front();
  auto seq = next_seq++;
  auto text = bound_text(outcome.text, cfg->max_tool_output_bytes,
                         "tool output");
  commit.context.push_back(tool_result_entry(seq, call, text));
  auto log = [&](seq_t seq, std::string text) {
    auto entry = entry_about(msg, seq, log_kind::tool, std::move(text), now);
    entry.tool = call.name;
    commit.log.push_back(std::move(entry));
  };
  log(seq, std::move(text));
  if (!counts_failure || outcome.error.empty())
    return commit;
  commit.write_session = true;
  commit.session = session;
  auto failures = count_failure(commit.session, call.name);
  if (failures == cfg->disable_tool_after) {
    auto note = disabled_tool_text(call.name, failures, outcome.error);
    auto note_seq = next_seq++;
    commit.context.push_back(context_entry{note_seq, "system", note});
    notices.push_back({"tool_disabled", note});
    edit_extras().owner_notices.push_back(
      {notice_kind::tool_disabled, call.name,
       note + " (thread " + cfg.thread + ")"});
    log(note_seq, std::move(note));
  }
  return commit;
}

turn_commit conversation_state::make_cancelled_result(
  const tool_call& call, const tool_outcome& outcome, millis now) {
  auto step = make_result_step(call, outcome, false, now);
  auto commit = make_error_commit(to_string(ec::cancelled),
                                  turn_errors::cancelled, now);
  commit.context.insert(commit.context.begin(), step.context.begin(),
                        step.context.end());
  // The step's task entry (in progress) gives way to the error's.
  commit.log.insert(commit.log.begin(), step.log.begin() + 1, step.log.end());
  return commit;
}

turn_commit
conversation_state::make_interrupted_step(const std::vector<tool_call>& calls,
                                          millis now) {
  // Each result step carries the message's task entry: the merged step
  // keeps the first.
  auto commit = step_commit(*this);
  for (auto& call : calls) {
    auto step = make_result_step(
      call, tool_outcome{tool_texts::interrupted, {}, false, 0}, false, now);
    commit.context.insert(commit.context.end(), step.context.begin(),
                          step.context.end());
    auto from = commit.log.empty() ? step.log.begin() : step.log.begin() + 1;
    commit.log.insert(commit.log.end(), from, step.log.end());
  }
  return commit;
}

} // namespace keel
