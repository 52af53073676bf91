#include "keel/conversation.hpp"

#include <algorithm>

#include "keel/agent_tools.hpp"
#include "keel/kill_point.hpp"
#include "keel/recovery.hpp"
#include "keel/text.hpp"

namespace keel {

namespace {

// The tools named by `pool` and by `names`, each once, in declaration
// order (the config checked that every name is declared).
std::vector<tool_config> tools_named(const node_config& node,
                                     const std::vector<std::string>& names) {
  std::vector<std::string> wanted = names;
  for (auto& pool : node.pools)
    if (pool.name == node.threads.pool)
      wanted.insert(wanted.end(), pool.tools.begin(), pool.tools.end());
  std::vector<tool_config> result;
  for (auto& tool : node.tools)
    if (std::find(wanted.begin(), wanted.end(), tool.name) != wanted.end())
      result.push_back(tool);
  return result;
}

// The context window of the first provider of `pool`: its own
// `context_window`, else the model table's.
uint64_t pool_window(const node_config& node, const std::string& pool) {
  for (auto& p : node.pools)
    if (p.name == pool && !p.chain.empty())
      for (auto& provider : node.providers)
        if (provider.name == p.chain.front())
          return provider.context_window != 0 ? provider.context_window
                                              : context_window(provider.model);
  return default_context_window;
}

} // namespace

std::shared_ptr<const guard_limits> default_guard_limits() {
  static const auto limits = std::make_shared<const guard_limits>();
  return limits;
}

std::shared_ptr<const conversation_settings> default_conversation_settings() {
  static const auto settings = std::make_shared<const conversation_settings>();
  return settings;
}

std::shared_ptr<const conversation_settings>
make_conversation_settings(const std::shared_ptr<const node_config>& shared) {
  auto& node = *shared;
  auto& defaults = node.threads;
  auto cfg = std::make_shared<conversation_settings>();
  cfg->storage_timeout = node.storage.request_timeout;
  cfg->pool = defaults.pool;
  cfg->system_prompt = defaults.system_prompt;
  cfg->idle_timeout = defaults.idle_timeout;
  cfg->turn_timeout = defaults.turn_timeout;
  cfg->max_inbox = defaults.max_inbox;
  cfg->max_reply_bytes = defaults.max_reply_bytes;
  cfg->max_tool_output_bytes = defaults.max_tool_output_bytes;
  cfg->root_tools = tools_named(node, defaults.tools);
  cfg->agent_tools = tools_named(node, defaults.agent_tools);
  cfg->guard = std::shared_ptr<const guard_limits>(shared, &defaults.guard);
  cfg->disable_tool_after = defaults.disable_tool_after;
  cfg->compaction = defaults.compaction;
  cfg->compaction_enabled = defaults.compaction_enabled;
  cfg->context_window = pool_window(node, defaults.pool);
  cfg->agents = defaults.agents;
  cfg->owner_contact = node.owner.contact;
  return cfg;
}

conversation_config
make_conversation_config(const node_config& node,
                         std::shared_ptr<const conversation_settings> settings,
                         std::string thread) {
  conversation_config cfg;
  cfg.channels = node.delivery.channels_of(thread);
  cfg.thread = std::move(thread);
  if (settings)
    cfg.settings = std::move(settings);
  return cfg;
}

std::string with_owner_contact(const std::string& text,
                               const std::string& contact) {
  return replace_all(text, "{ownerContact}",
                     contact.empty() ? "our team" : contact);
}

bool conversation_state::idle() const {
  return loaded && inbox.empty() && !turn_running && accepting.empty()
         && deferred.empty() && extras().outbox.empty() && !closing
         && !unsure_accepts;
}

const conversation_extras& conversation_state::extras() const {
  static const conversation_extras none;
  return extras_ ? *extras_ : none;
}

conversation_extras& conversation_state::edit_extras() {
  if (!extras_)
    extras_ = std::make_unique<conversation_extras>();
  return *extras_;
}

bool conversation_state::closed() const {
  return closing || session.state == session_state::closed;
}

namespace {

// A note for the model that is not part of the thread's history.
context_entry system_note(std::string text) {
  context_entry entry;
  entry.role = "system";
  entry.content = std::move(text);
  return entry;
}

} // namespace

completion_request conversation_state::make_request() const {
  completion_request req;
  req.thread = cfg.thread;
  req.system_prompt = cfg->system_prompt;
  req.context = context;
  auto& msg = inbox.front();
  req.client_id = msg.client_id;
  req.seq = msg.seq;
  // The turn's deadline travels with the call and bounds the pool.
  req.time_budget_ms = static_cast<uint64_t>(
    std::chrono::duration_cast<std::chrono::milliseconds>(cfg->turn_timeout)
      .count());
  req.tools = offered_tools();
  // The node died while this thread was live: say so once.
  if (session.recovered_at != 0)
    req.context.push_back(system_note(recovery_prompt));
  if (!turn_in_context())
    req.context.push_back(context_entry{msg.seq, "user", msg.text});
  if (nudge)
    req.context.push_back(system_note(different_approach_note));
  return req;
}

namespace {

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

std::vector<std::string>
conversation_state::new_children(const completion& reply,
                                 spawn_outcomes& outcomes) {
  std::vector<std::string> result;
  auto max = cfg->agents.max_spawns_per_reply;
  for (auto& call : reply.tool_calls) {
    auto action = parse_agent_tool_call(call, cfg.thread);
    if (!action || !*action || !(*action)->spawn)
      continue;
    auto& child = (*action)->child;
    if (extras().children.count(child) > 0 || outcomes.refused.count(child) > 0
        || std::find(result.begin(), result.end(), child) != result.end())
      continue;
    if (result.size() < max) {
      result.push_back(child);
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
  return commit;
}

turn_commit conversation_state::make_error_commit(const std::string& code,
                                                  const std::string& text,
                                                  millis now) {
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
  add_delivery(*this, commit, entry, now);
  commit.log.push_back(task_entry(task_state::dead_lettered, now));
  commit.log.push_back(std::move(entry));
  return commit;
}

namespace {

// Removes the entries of seqs `retired` from `context` and puts `added` in
// where their seqs place them (a compaction's summary takes the seq of the
// last entry it replaces, so a reload finds it in the same place).
void replace_entries(std::vector<context_entry>& context,
                     const std::vector<seq_t>& retired,
                     const std::vector<context_entry>& added) {
  auto gone = [&retired](const context_entry& x) {
    return std::find(retired.begin(), retired.end(), x.seq) != retired.end();
  };
  context.erase(std::remove_if(context.begin(), context.end(), gone),
                context.end());
  for (auto& entry : added) {
    auto pos = std::find_if(context.begin(), context.end(),
                            [&entry](const context_entry& x) {
                              return x.seq > entry.seq;
                            });
    context.insert(pos, entry);
  }
}

} // namespace

void conversation_state::apply(const turn_commit& commit) {
  if (!commit.keeps_inbox && !inbox.empty()
      && inbox.front().seq == commit.inbox_seq)
    inbox.pop_front();
  // Only a commit that changes the context may copy it (while a request
  // made from it is still in flight).
  if (!commit.retire_context.empty()) {
    replace_entries(context.edit(), commit.retire_context, commit.context);
    context_tokens = estimate_tokens(context);
  } else if (!commit.context.empty()) {
    context.append(commit.context);
    context_tokens += estimate_tokens(commit.context);
  }
  if (commit.write_session)
    session = commit.session;
  for (auto& entry : commit.outbox)
    edit_extras().outbox.emplace(entry.seq, entry);
}

void conversation_state::fail_pending_accepts(const caf::error& reason) {
  for (auto& [seq, promise] : accepting)
    promise.deliver(reason);
  accepting.clear();
  for (auto& d : deferred)
    d.promise.deliver(reason);
  deferred.clear();
}

caf::error conversation_state::refusal(const incoming_message& msg) const {
  if (closed())
    return caf::make_error(ec::thread_closed,
                           "thread '" + cfg.thread
                             + "' was cancelled; it takes no messages");
  if (!msg.from.empty() && !session_exists)
    return not_found();
  if (inbox.size() + accepting.size() >= cfg->max_inbox)
    return caf::make_error(ec::overloaded, "thread '" + cfg.thread
                                             + "' already has "
                                             + std::to_string(cfg->max_inbox)
                                             + " unanswered messages");
  return caf::none;
}

caf::error conversation_state::not_found() const {
  return caf::make_error(ec::not_found,
                         "thread '" + cfg.thread + "' does not exist");
}

accept_request conversation_state::make_accept_request(incoming_message msg) {
  accept_request req;
  req.thread = cfg.thread;
  req.entry = inbox_entry{next_seq++, std::move(msg.client_id),
                          std::move(msg.text), wall_clock_millis(), msg.hops};
  req.tenure = tenure;
  if (!msg.from.empty()) {
    req.outbox_from = msg.from;
    req.outbox_seq = msg.seq;
  }
  if (!session_active) {
    // The first accept of an activation (re)writes the session as ACTIVE in
    // the same synced batch as the message.
    if (!session_exists) {
      session.thread = cfg.thread;
      session.pool = cfg->pool;
      session.created_at = req.entry.accepted_at;
      reach(kill_point::session_created); // In memory only, so far.
    }
    session.state = session_state::active;
    req.create_session = true;
    req.session = session;
  }
  return req;
}

void conversation_state::answer_cancels(const caf::error& err) {
  if (!extras_)
    return;
  auto waiting = std::move(extras_->cancels);
  extras_->cancels.clear();
  for (auto& rp : waiting) {
    if (err)
      rp.deliver(err);
    else
      rp.deliver(caf::ok_atom_v);
  }
}

void conversation_state::restore(thread_snapshot snapshot) {
  session_exists = snapshot.exists;
  session = std::move(snapshot.session);
  inbox.assign(std::make_move_iterator(snapshot.inbox.begin()),
               std::make_move_iterator(snapshot.inbox.end()));
  context = std::move(snapshot.context);
  context_tokens = estimate_tokens(context);
  steps_lost = snapshot.steps_lost && !inbox.empty();
  next_seq = std::max(next_seq, snapshot.next_seq);
  // A tool step's assistant entry has no log entry: never reuse its seq.
  if (!context.empty())
    next_seq = std::max(next_seq, context.back().seq + 1);
  if (!snapshot.children.empty())
    edit_extras().children.insert(snapshot.children.begin(),
                                  snapshot.children.end());
  // The node died while the thread was live: the front's turn runs again.
  if (session.recovered_at != 0 && !inbox.empty())
    attempts = 1;
  for (auto& entry : snapshot.outbox) {
    // The outbox reserves seqs the log does not show: never reuse them.
    next_seq = std::max(next_seq, entry.seq + 1);
    edit_extras().outbox.emplace(entry.seq, std::move(entry));
  }
  loaded = true;
}

void conversation_state::resume_steps(const thread_snapshot& snapshot) {
  context = snapshot.context;
  context_tokens = estimate_tokens(context);
  session.tool_failures = snapshot.session.tool_failures;
  next_seq = std::max(next_seq, snapshot.next_seq);
  if (!context.empty())
    next_seq = std::max(next_seq, context.back().seq + 1);
}

void conversation_state::adopt_late_accepts(
  const std::vector<inbox_entry>& stored) {
  for (auto& entry : stored) {
    auto same = [&entry](const inbox_entry& x) { return x.seq == entry.seq; };
    if (accepting.count(entry.seq) > 0
        || std::any_of(inbox.begin(), inbox.end(), same))
      continue;
    // Never ahead of the running turn, which answers the front.
    auto first = std::next(inbox.begin(),
                           turn_running && !inbox.empty() ? 1 : 0);
    auto pos = std::find_if(first, inbox.end(), [&entry](const inbox_entry& x) {
      return x.seq > entry.seq;
    });
    inbox.insert(pos, entry);
  }
}

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
  return std::all_of(
    reply.tool_calls.begin(), reply.tool_calls.end(),
    [this](const tool_call& call) {
      return parse_agent_tool_call(call, cfg.thread).has_value();
    });
}

namespace {

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

} // namespace

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

namespace {

// A step commit of the inbox front's turn: the inbox entry stays.
turn_commit step_commit(const conversation_state& st) {
  turn_commit commit;
  commit.thread = st.cfg.thread;
  commit.inbox_seq = st.inbox.front().seq;
  commit.keeps_inbox = true;
  return commit;
}

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

// -- compaction ---------------------------------------------------------------

void conversation_state::end_turn() {
  guard.reset();
  nudge = false;
  context_warned = false;
  overflow_compacted = false;
  just_compacted = false;
  compaction.reset();
  compacting_overflow = false;
  notices.clear();
  if (extras_)
    extras_->owner_notices.clear();
  attempts = 0;
}

log_entry conversation_state::task_entry(task_state state, millis now) const {
  auto entry = message_log_entry(inbox.front());
  entry.task = state == task_state::in_progress && attempts > 0
                 ? task_state::retried
                 : state;
  entry.attempts = attempts;
  entry.task_at = now;
  return entry;
}

task_state conversation_state::live_task_state() const {
  if (attempts > 0)
    return task_state::retried;
  return turn_in_context() ? task_state::in_progress : task_state::dispatched;
}

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
  req.time_budget_ms = static_cast<uint64_t>(
    std::chrono::duration_cast<std::chrono::milliseconds>(cfg->turn_timeout)
      .count());
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

std::string context_warning_text(uint64_t tokens, uint64_t window) {
  return "The conversation fills about " + std::to_string(tokens * 100 / window)
         + "% of the model's context window (" + std::to_string(tokens) + " of "
         + std::to_string(window)
         + " tokens, estimated); older messages will be summarized soon.";
}

std::string compacted_text(const compaction_result& result) {
  static constexpr const char* tiers[]
    = {"nothing to change", "large tool results stripped",
       "older messages summarized", "the oldest half summarized",
       "older messages replaced by a plain account"};
  return "Compacted the conversation (" + std::string{tiers[result.tier]}
         + "): about " + std::to_string(result.tokens_before) + " → "
         + std::to_string(result.tokens_after) + " tokens.";
}

std::string disabled_tool_text(const std::string& tool, uint32_t failures,
                               const std::string& error) {
  return "The tool " + tool + " failed " + std::to_string(failures)
         + " times in this thread and is disabled here; the last failure: "
         + error;
}

} // namespace keel
