#include "keel/conversation_state.hpp"

#include <algorithm>

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
  return entry;
}

task_state conversation_state::live_task_state() const {
  if (attempts > 0)
    return task_state::retried;
  return turn_in_context() ? task_state::in_progress : task_state::dispatched;
}

} // namespace keel
