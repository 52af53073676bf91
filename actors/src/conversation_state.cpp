#include "keel/conversation_state.hpp"

#include <algorithm>

#include "keel/agent_catalog.hpp"
#include "keel/kill_point.hpp"
#include "keel/text.hpp"

// The conversation's own state: what outlives a turn (session, inbox,
// context, accepts, outbox), applied commits and restores.

namespace keel {

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
  if (auto err = agent_refusal(msg))
    return err;
  if (inbox.size() + accepting.size() >= cfg->max_inbox)
    return caf::make_error(ec::overloaded, "thread '" + cfg.thread
                                             + "' already has "
                                             + std::to_string(cfg->max_inbox)
                                             + " unanswered messages");
  return caf::none;
}

caf::error
conversation_state::agent_refusal(const incoming_message& msg) const {
  if (msg.agent.empty())
    return caf::none;
  // Bound once stored, or once the first accept is under way.
  if (session_exists || !session.agent.empty()) {
    auto& bound = agent_of(session);
    if (msg.agent == bound)
      return caf::none;
    return caf::make_error(ec::agent_mismatch,
                           "thread '" + cfg.thread + "' is bound to agent '"
                             + bound + "'; it takes no messages for agent '"
                             + msg.agent + "' (use another thread)");
  }
  if (cfg.agents ? cfg.agents->find(msg.agent) != nullptr
                     || !cfg.agents->system_agent().empty()
                 : msg.agent == cfg->agent)
    return caf::none;
  return caf::make_error(ec::unknown_agent,
                         "no agent '" + msg.agent + "' on this node");
}

void conversation_state::bind_agent(const std::string& agent) {
  if (!cfg.agents)
    return;
  auto settings = cfg.agents->find(agent);
  if (!settings)
    settings = cfg.agents->find(cfg.agents->default_agent());
  if (!settings)
    return;
  if (counted_live)
    cfg.agents->leave(cfg->agent);
  cfg.settings = std::move(settings);
  cfg.agents->enter(cfg->agent);
  counted_live = true;
}

conversation_state::~conversation_state() {
  if (counted_live)
    cfg.agents->leave(cfg->agent);
}

bool conversation_state::agent_offline() const {
  return cfg.agents && cfg.agents->status(cfg->agent) != agent_status::active;
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
  if (!session_active && !turn_running) {
    // The first accept of an activation (re)writes the session as ACTIVE in
    // the same synced batch as the message. Not while a turn runs (one
    // resumed after a restart): a commit of it may be in flight, and this
    // older copy of the session would undo what it counts (usage, tool
    // failures); a later accept writes it.
    if (!session_exists) {
      bind_new_thread(req.entry, msg.agent);
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

void conversation_state::bind_new_thread(inbox_entry& entry,
                                         const std::string& asked) {
  if (!session.agent.empty())
    return; // The first accept, still under way, bound it.
  auto agent = asked.empty() ? cfg->agent : asked;
  if (cfg.agents) {
    if (asked.empty())
      agent = cfg.agents->default_agent();
    else if (!cfg.agents->find(asked)) {
      entry.asked_agent = asked;
      agent = cfg.agents->system_agent();
    }
  }
  session.agent = agent;
  bind_agent(agent);
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
  if (session_exists)
    bind_agent(agent_of(session));
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
  // A step whose commit may have landed counted its call there.
  session.usage = snapshot.session.usage;
  session.turn_usage = snapshot.session.turn_usage;
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

void conversation_state::end_turn() {
  running.reset();
  nudge = false;
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
  entry.usage = session.turn_usage;
  return entry;
}

task_state conversation_state::live_task_state() const {
  if (attempts > 0)
    return task_state::retried;
  return turn_in_context() ? task_state::in_progress : task_state::dispatched;
}

} // namespace keel
