#include "keel/conversation_builders.hpp"

#include <algorithm>

#include <spdlog/spdlog.h>

#include "keel/agent_catalog.hpp"
#include "keel/agent_tools.hpp"
#include "keel/logging.hpp"
#include "keel/recovery.hpp"
#include "keel/text.hpp"

// The model's request and the commits that end a turn (its answer or its
// error), with what they carry to other threads: messages to child agents,
// the outcome for the parent agent, delivery records.

namespace keel {

using namespace conversation_builders;

namespace {

// A note for the model that is not part of the thread's history.
context_entry system_note(std::string text) {
  context_entry entry;
  entry.role = "system";
  entry.content = std::move(text);
  return entry;
}

} // namespace

std::string conversation_state::system_prompt() const {
  if (!cfg->prompt)
    return cfg->system_prompt;
  return cfg->prompt->assemble(
    cfg->system_prompt,
    [this](const std::string& path, const std::string& why) {
      log_scope scope{log_component::conversation, cfg.thread};
      spdlog::warn("agent {}: prompt file {} is left out: {}", cfg->agent, path,
                   why);
    });
}

std::chrono::milliseconds conversation_state::turn_time_left() const {
  if (running)
    return running->time_left(std::chrono::steady_clock::now());
  return std::chrono::duration_cast<std::chrono::milliseconds>(
    cfg->turn_timeout);
}

completion_request conversation_state::make_request() const {
  completion_request req;
  req.thread = cfg.thread;
  req.system_prompt = system_prompt();
  req.params = cfg->params;
  req.context = context;
  auto& msg = inbox.front();
  req.client_id = msg.client_id;
  req.seq = msg.seq;
  // What is left of the turn's time travels with the call and bounds the
  // pool.
  req.time_budget_ms = static_cast<uint64_t>(turn_time_left().count());
  req.tools = offered_tools();
  // The node died while this thread was live: say so once.
  if (session.recovered_at != 0)
    req.context.push_back(system_note(recovery_prompt));
  if (!msg.asked_agent.empty())
    req.context.push_back(system_note(unknown_agent_note(msg.asked_agent)));
  if (!turn_in_context())
    req.context.push_back(context_entry{msg.seq, "user", msg.text});
  if (nudge)
    req.context.push_back(system_note(different_approach_note));
  return req;
}

namespace conversation_builders {

// The log entry `seq` of `kind` about the message `msg` (its answer, or a
// step of its turn).
log_entry entry_about(const inbox_entry& msg, seq_t seq, log_kind kind,
                      std::string text, millis now) {
  log_entry entry;
  entry.seq = seq;
  entry.kind = kind;
  entry.client_id = msg.client_id;
  entry.reply_to = msg.seq;
  entry.text = std::move(text);
  entry.at = now;
  return entry;
}

} // namespace conversation_builders

namespace {

// Why no message may go from this thread to another while it answers the
// inbox front: the tree's threads exchanged `hop_budget` messages on behalf
// of the client message it follows from. None if one may.
std::optional<std::string> hop_refusal(const conversation_state& st) {
  auto hops = st.inbox.front().hops;
  if (hops < st.cfg->agents.hop_budget)
    return std::nullopt;
  return "the agents exchanged " + std::to_string(hops)
         + " messages for one client message, the most they may "
           "(threads.agents.hop_budget)";
}

} // namespace

namespace conversation_builders {

// The context entry of the message a turn answers, placed after every entry
// so far: under the message's seq, or, for a message that queued while
// earlier ones were answered (its seq is older than their answers), under a
// seq of its own.
context_entry user_context_entry(conversation_state& st) {
  auto& msg = st.inbox.front();
  if (st.context.empty() || st.context.back().seq < msg.seq)
    return context_entry{msg.seq, "user", msg.text};
  context_entry entry{st.next_seq++, "user", msg.text};
  entry.message_seq = msg.seq;
  return entry;
}

} // namespace conversation_builders

namespace {

// A message from this thread to thread `to`, under the next sequence number,
// one hop past the message being answered.
outbox_entry make_outbox_entry(conversation_state& st, const std::string& to,
                               std::string text, millis now) {
  outbox_entry entry;
  entry.hops = st.inbox.front().hops + 1;
  entry.from = st.cfg.thread;
  entry.seq = st.next_seq++;
  entry.to = to;
  entry.client_id = agent_client_id(entry.from, entry.seq);
  entry.text = std::move(text);
  entry.created_at = now;
  return entry;
}

// The parts of a commit every outcome shares: the session update (provider
// and model that answered, recovery mark) and the outcome forwarded to the
// parent agent.
// Runs before the outcome's log entry takes its seq: every outbox seq of a
// commit stays below a seq the log keeps, so a reload (next_seq = last log
// seq + 1) never hands one out again, even after the entry was delivered.
void finish_commit(conversation_state& st, turn_commit& commit, log_kind kind,
                   const std::string& text, const completion* reply,
                   millis now) {
  auto& session = st.session;
  auto changed = [](const std::string& now, const std::string& before) {
    return !now.empty() && now != before;
  };
  if (st.session_exists
      && (session.recovered_at != 0
          || (reply != nullptr
              && (changed(reply->provider, session.provider)
                  || changed(reply->model, session.model))))) {
    commit.write_session = true;
    commit.session = session;
    commit.session.recovered_at = 0;
    if (reply != nullptr && !reply->provider.empty())
      commit.session.provider = reply->provider;
    if (reply != nullptr && !reply->model.empty())
      commit.session.model = reply->model;
  }
  if (session.parent.empty())
    return;
  if (auto why = hop_refusal(st)) {
    st.notices.push_back(
      {"agent_limit", "the outcome was not sent to the parent agent "
                        + session.parent + ": " + *why});
    return;
  }
  commit.outbox.push_back(
    make_outbox_entry(st, session.parent,
                      "[agent " + st.cfg.thread
                        + (kind == log_kind::error ? " failed] " : "] ") + text,
                      now));
}

} // namespace

namespace conversation_builders {

// What agent tool call `call` did, in one line: a message to a child (one
// spawned before the commit, as `spawns` says) joins `commit`'s outbox,
// bounded by `max_tool_output_bytes`. None if `call` is no agent tool.
std::optional<std::string> agent_call_note(conversation_state& st,
                                           turn_commit& commit,
                                           const tool_call& call, millis now,
                                           const spawn_outcomes& spawns) {
  auto action = parse_agent_tool_call(call, st.cfg.thread);
  if (!action)
    return std::nullopt;
  if (!*action)
    return "[" + error_message(action->error()) + "]";
  auto& act = **action;
  if (auto refused = spawns.refused.find(act.child);
      act.spawn && refused != spawns.refused.end())
    return "[cannot spawn agent " + act.child + ": " + refused->second + "]";
  if (st.extras().children.count(act.child) == 0)
    return "[tool call " + call.name + ": no child agent " + act.child + "]";
  auto spawned = act.spawn && spawns.created.count(act.child) > 0;
  if (auto why = hop_refusal(st)) {
    auto note = (spawned ? "spawned agent " + act.child + ", but cannot "
                         : std::string{"cannot "})
                + "message agent " + act.child + ": " + *why;
    st.notices.push_back({"agent_limit", note});
    return "[" + note + "]";
  }
  commit.outbox.push_back(make_outbox_entry(
    st, act.child,
    "[parent " + st.cfg.thread + "] "
      + bound_text(act.text, st.cfg->max_tool_output_bytes, "message to agent"),
    now));
  if (spawned)
    return "[spawned agent " + act.child + "]";
  return "[message to agent " + act.child + "]";
}

} // namespace conversation_builders

namespace {

// The answer's text: the reply's, bounded (`max_reply_bytes`), then a line
// for each agent tool call (a final answer calls no other tools).
std::string apply_tool_calls(conversation_state& st, turn_commit& commit,
                             const completion& reply, millis now,
                             const spawn_outcomes& spawns) {
  auto text = bound_text(reply.text, st.cfg->max_reply_bytes, "reply");
  for (auto& call : reply.tool_calls) {
    auto note = agent_call_note(st, commit, call, now, spawns)
                  .value_or("[tool call " + call.name + "]");
    text += (text.empty() ? "" : "\n")
            + bound_text(note, st.cfg->max_tool_output_bytes, "tool call");
  }
  return text;
}

} // namespace

std::vector<std::pair<std::string, std::string>>
conversation_state::new_children(const completion& reply,
                                 spawn_outcomes& outcomes) {
  std::vector<std::pair<std::string, std::string>> result;
  auto max = cfg->agents.max_spawns_per_reply;
  for (auto& call : reply.tool_calls) {
    auto action = parse_agent_tool_call(call, cfg.thread);
    if (!action || !*action || !(*action)->spawn)
      continue;
    auto& child = (*action)->child;
    auto& agent = (*action)->agent;
    auto listed = [&child](auto& x) { return x.first == child; };
    if (extras().children.count(child) > 0 || outcomes.refused.count(child) > 0
        || std::any_of(result.begin(), result.end(), listed))
      continue;
    if (!agent.empty() && agent != cfg->agent
        && std::find(cfg->spawns.begin(), cfg->spawns.end(), agent)
             == cfg->spawns.end()) {
      outcomes.refused.emplace(child, "agent " + cfg->agent
                                        + " may not spawn agents of kind "
                                        + agent + " (agents[].spawns)");
      continue;
    }
    if (result.size() < max) {
      result.emplace_back(child, agent);
      continue;
    }
    auto why = "this answer spawns " + std::to_string(max)
               + " agents already, the most one answer may "
                 "(threads.agents.max_spawns_per_reply)";
    notices.push_back(
      {"agent_limit", "cannot spawn agent " + child + ": " + why});
    outcomes.refused.emplace(child, std::move(why));
  }
  return result;
}

namespace {

// The answer `entry` goes to the thread's outbound channels, if any: its
// delivery record is written with the commit.
void add_delivery(const conversation_state& st, turn_commit& commit,
                  const log_entry& entry, millis now) {
  if (st.cfg.channels.empty())
    return;
  commit.deliveries.push_back({st.cfg.thread, entry.seq, commit.inbox_seq,
                               entry.text, now, st.cfg.channels});
}

} // namespace

turn_commit
conversation_state::make_reply_commit(const completion& reply, millis now,
                                      const spawn_outcomes& spawns) {
  auto& msg = inbox.front();
  turn_commit commit;
  commit.thread = cfg.thread;
  commit.inbox_seq = msg.seq;
  // The question first: a seq of its own precedes every seq of the answer.
  if (!turn_in_context())
    commit.context.push_back(user_context_entry(*this));
  auto text = apply_tool_calls(*this, commit, reply, now, spawns);
  finish_commit(*this, commit, log_kind::reply, text, &reply, now);
  auto seq = next_seq++;
  commit.context.push_back(context_entry{seq, "assistant", text});
  auto entry = entry_about(msg, seq, log_kind::reply, std::move(text), now);
  entry.provider = reply.provider;
  add_delivery(*this, commit, entry, now);
  commit.log.push_back(task_entry(task_state::succeeded, now));
  commit.log.push_back(std::move(entry));
  count_usage(*this, commit, &reply, true);
  return commit;
}

turn_commit conversation_state::make_error_commit(const std::string& code,
                                                  const std::string& text,
                                                  millis now,
                                                  const std::string& detail) {
  auto& msg = inbox.front();
  turn_commit commit;
  commit.thread = cfg.thread;
  commit.inbox_seq = msg.seq;
  finish_commit(*this, commit, log_kind::error, text, nullptr, now);
  // The unanswered message stays out of the context: the model never sees a
  // question without its answer. Once tool steps of it are there, the error
  // is their answer.
  auto seq = next_seq++;
  if (turn_in_context())
    commit.context.push_back(context_entry{seq, "assistant", text});
  auto entry = entry_about(msg, seq, log_kind::error, text, now);
  entry.code = code;
  entry.detail = detail;
  add_delivery(*this, commit, entry, now);
  commit.log.push_back(task_entry(task_state::dead_lettered, now));
  commit.log.push_back(std::move(entry));
  count_usage(*this, commit, nullptr, true);
  return commit;
}

} // namespace keel
