#include "keel/recovery.hpp"

#include <algorithm>
#include <chrono>
#include <set>
#include <string_view>
#include <unordered_map>

#include "keel/text.hpp"

namespace keel {

namespace {

using steady = std::chrono::steady_clock;

// Times one step and appends it to the report.
class step_timer {
public:
  step_timer(recovery_report& report, const char* name)
    : report_(report), name_(name), start_(steady::now()) {
    // nop
  }

  void done(uint64_t count) {
    auto micros = std::chrono::duration_cast<std::chrono::microseconds>(
                    steady::now() - start_)
                    .count();
    report_.steps.push_back(recovery_step{name_, count, micros});
  }

private:
  recovery_report& report_;
  const char* name_;
  steady::time_point start_;
};

// The session records a recovery reads, in thread order (the store's key
// order), with an index by thread. Moving it keeps the index valid (the
// vector's buffer moves with it); copying it would not.
class sessions_by_thread {
public:
  explicit sessions_by_thread(std::vector<session_record> list)
    : list_(std::move(list)) {
    index_.reserve(list_.size());
    for (auto& rec : list_)
      index_.emplace(rec.thread, &rec);
  }

  sessions_by_thread(sessions_by_thread&&) = default;
  sessions_by_thread(const sessions_by_thread&) = delete;
  sessions_by_thread& operator=(const sessions_by_thread&) = delete;

  /// The session of `thread`, or null.
  const session_record* find(std::string_view thread) const {
    auto i = index_.find(thread);
    return i == index_.end() ? nullptr : i->second;
  }

  bool contains(std::string_view thread) const {
    return index_.count(thread) > 0;
  }

  size_t size() const {
    return list_.size();
  }

  std::vector<session_record>& records() {
    return list_;
  }

  const std::vector<session_record>& records() const {
    return list_;
  }

private:
  std::vector<session_record> list_;
  std::unordered_map<std::string_view, session_record*> index_;
};

// 1. Reads the session records.
caf::expected<sessions_by_thread>
read_sessions(store& db, recovery_report& report, const thread_filter& only) {
  step_timer timer{report, "read_sessions"};
  auto sessions = db.sessions();
  if (!sessions)
    return sessions.error();
  if (only)
    sessions->erase(std::remove_if(sessions->begin(), sessions->end(),
                                   [&only](const session_record& rec) {
                                     return !only(rec.thread);
                                   }),
                    sessions->end());
  sessions_by_thread result{std::move(*sessions)};
  report.sessions = result.size();
  timer.done(report.sessions);
  return result;
}

// 2. Rebuilds the agent tree: the links must agree with the sessions'
// parents. Disagreements are reported, not repaired.
caf::error rebuild_tree(store& db, const sessions_by_thread& sessions,
                        recovery_report& report, const thread_filter& only) {
  step_timer timer{report, "rebuild_tree"};
  auto links = db.tree_links();
  if (!links)
    return links.error();
  std::set<std::pair<std::string, std::string>> linked;
  for (auto& link : *links) {
    // A link belongs to its child's recovery (its parent may be elsewhere).
    if (only && !only(link.child))
      continue;
    ++report.links;
    linked.emplace(link.parent, link.child);
    auto parent_known = sessions.contains(link.parent)
                        || (only && !only(link.parent));
    if (!parent_known || !sessions.contains(link.child))
      report.problems.push_back("tree link " + link.parent + " -> " + link.child
                                + " names a thread without a session");
  }
  for (auto& rec : sessions.records()) {
    if (rec.parent.empty()) {
      ++report.roots;
    } else if ((!sessions.contains(rec.parent) && (!only || only(rec.parent)))
               || linked.count({rec.parent, rec.thread}) == 0) {
      report.problems.push_back("thread " + rec.thread + " names parent "
                                + rec.parent
                                + " without a session or tree link");
    }
  }
  timer.done(report.links);
  return caf::none;
}

// 3. Nothing ran while the node was down: ACTIVE sessions are stale. At boot
// they are marked SUSPENDED, with `recovered_at`, in one synced batch.
caf::error suspend_active(store& db, sessions_by_thread& sessions, bool boot,
                          recovery_report& report, const store_flush& flush) {
  step_timer timer{report, "suspend_active"};
  if (boot) {
    auto now = wall_clock_millis();
    for (auto& rec : sessions.records()) {
      if (rec.state != session_state::active)
        continue;
      rec.state = session_state::suspended;
      rec.recovered_at = now;
      db.stage_stored_session(rec);
      ++report.suspended;
    }
    if (auto err = flush ? flush() : db.flush())
      return err;
  }
  timer.done(report.suspended);
  return caf::none;
}

// Returns the threads with unanswered inbox entries or undelivered outbox
// entries, counting both in `report`.
caf::expected<std::set<std::string>>
pending_threads(store& db, recovery_report& report, const thread_filter& only) {
  auto inboxes = db.inbox_counts();
  if (!inboxes)
    return inboxes.error();
  auto outbox = db.outbox();
  if (!outbox)
    return outbox.error();
  std::set<std::string> result;
  for (auto& [thread, count] : *inboxes) {
    if (only && !only(thread))
      continue;
    report.inbox_messages += count;
    ++report.inbox_threads;
    result.insert(thread);
  }
  for (auto& entry : *outbox) {
    if (only && !only(entry.from))
      continue;
    ++report.outbox_messages;
    result.insert(entry.from);
  }
  return result;
}

// Returns true if an ancestor of `rec` is CLOSED. A cycle or a missing
// session ends the walk (the oracle reports those).
bool has_closed_ancestor(const sessions_by_thread& sessions,
                         const session_record& rec) {
  std::set<std::string> seen;
  for (auto parent = rec.parent; !parent.empty();) {
    auto found = sessions.find(parent);
    if (!found || !seen.insert(parent).second)
      return false;
    if (found->state == session_state::closed)
      return true;
    parent = found->parent;
  }
  return false;
}

// 4. Finds undelivered messages: unanswered inbox entries are re-run by
// their threads, outbox entries re-sent by their senders; both need the
// thread started. Open threads under a CLOSED ancestor finish their cancel.
caf::error scan_undelivered(store& db, const sessions_by_thread& sessions,
                            recovery_plan& plan, const thread_filter& only) {
  auto& report = plan.report;
  step_timer timer{report, "scan_undelivered"};
  auto pending = pending_threads(db, report, only);
  if (!pending)
    return pending.error();
  for (auto& rec : sessions.records())
    if (rec.state != session_state::closed
        && has_closed_ancestor(sessions, rec))
      plan.cancels.push_back(rec.thread);
  report.cancels_finished = plan.cancels.size();
  for (auto& thread : *pending) {
    auto found = sessions.find(thread);
    // An inbox without a session cannot come from us; resume it anyway, as
    // a root, so its messages are answered.
    if (!found || found->parent.empty())
      plan.roots.push_back(thread);
    else
      plan.children.push_back(thread);
  }
  timer.done(report.inbox_messages + report.outbox_messages);
  return caf::none;
}

} // namespace

caf::expected<recovery_plan> plan_recovery(store& db, bool boot,
                                           const thread_filter& only,
                                           const store_flush& flush) {
  recovery_plan plan;
  plan.boot = boot;
  plan.report.started_at = wall_clock_millis();
  auto sessions = read_sessions(db, plan.report, only);
  if (!sessions)
    return sessions.error();
  if (auto err = rebuild_tree(db, *sessions, plan.report, only))
    return err;
  if (auto err = suspend_active(db, *sessions, boot, plan.report, flush))
    return err;
  if (auto err = scan_undelivered(db, *sessions, plan, only))
    return err;
  return plan;
}

void active_sessions::staged(const std::string& thread, bool active) {
  if (active)
    maybe_active_.insert(thread);
  pending_.emplace_back(thread, active);
}

void active_sessions::flushed(bool durable) {
  if (durable) {
    for (auto& [thread, active] : pending_) {
      if (active)
        maybe_active_.insert(thread);
      else
        maybe_active_.erase(thread);
    }
  }
  pending_.clear();
}

namespace {

// Stages `rec` SUSPENDED if it is ACTIVE; returns whether it did.
bool stage_suspended(store& db, session_record& rec) {
  if (rec.state != session_state::active)
    return false;
  rec.state = session_state::suspended;
  db.stage_stored_session(rec);
  return true;
}

} // namespace

caf::error suspend_sessions(store& db,
                            const std::unordered_set<std::string>& threads) {
  for (auto& thread : threads) {
    // A thread without a session (quarantined since) has nothing to mark.
    if (auto rec = db.session(thread))
      stage_suspended(db, *rec);
    else if (rec.error() != ec::not_found)
      return rec.error();
  }
  return db.flush();
}

caf::error suspend_sessions(store& db, const thread_filter& only) {
  auto sessions = db.sessions();
  if (!sessions)
    return sessions.error();
  for (auto& rec : *sessions)
    if (!only || only(rec.thread))
      stage_suspended(db, rec);
  return db.flush();
}

std::string describe(const recovery_report& r) {
  std::string result
    = "recovery: " + std::to_string(r.sessions) + " sessions ("
      + std::to_string(r.roots) + " roots), " + std::to_string(r.links)
      + " tree links, " + std::to_string(r.suspended)
      + " ACTIVE marked SUSPENDED, " + std::to_string(r.inbox_messages)
      + " unanswered messages in " + std::to_string(r.inbox_threads)
      + " threads, " + std::to_string(r.outbox_messages)
      + " undelivered messages between threads, "
      + std::to_string(r.roots_resumed) + " roots and "
      + std::to_string(r.children_resumed) + " children resumed, "
      + std::to_string(r.cancels_finished) + " cancels finished; "
      + human_duration(std::chrono::milliseconds{r.finished_at - r.started_at});
  for (auto& step : r.steps)
    result += "; " + step.name + " " + std::to_string(step.count) + " in "
              + std::to_string(step.micros) + " us";
  for (auto& problem : r.problems)
    result += "; problem: " + problem;
  return result;
}

} // namespace keel
