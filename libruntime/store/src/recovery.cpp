#include "keel/recovery.hpp"

#include <chrono>
#include <map>
#include <set>

#include "keel/text.hpp"

namespace keel {

namespace {

using steady = std::chrono::steady_clock;

// Times one step and appends it to the report.
class step_timer {
public:
  step_timer(recovery_report& report, const char* name)
    : report_(report), name_(name), start_(steady::now()) {
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

} // namespace

caf::expected<recovery_plan> plan_recovery(store& db, bool boot) {
  recovery_plan plan;
  plan.boot = boot;
  auto& report = plan.report;
  report.started_at = wall_clock_millis();
  // 1. Session records.
  step_timer read{report, "read_sessions"};
  auto sessions = db.sessions();
  if (!sessions)
    return sessions.error();
  std::map<std::string, session_record> by_thread;
  for (auto& rec : *sessions)
    by_thread.emplace(rec.thread, rec);
  report.sessions = by_thread.size();
  read.done(report.sessions);
  // 2. The agent tree: links must agree with the sessions' parents.
  step_timer tree{report, "rebuild_tree"};
  auto links = db.tree_links();
  if (!links)
    return links.error();
  report.links = links->size();
  std::set<std::pair<std::string, std::string>> linked;
  for (auto& link : *links) {
    linked.emplace(link.parent, link.child);
    if (by_thread.count(link.parent) == 0 || by_thread.count(link.child) == 0)
      report.problems.push_back("tree link " + link.parent + " -> "
                                + link.child
                                + " names a thread without a session");
  }
  for (auto& [thread, rec] : by_thread) {
    if (rec.parent.empty()) {
      ++report.roots;
    } else if (by_thread.count(rec.parent) == 0
               || linked.count({rec.parent, thread}) == 0) {
      report.problems.push_back("thread " + thread + " names parent "
                                + rec.parent
                                + " without a session or tree link");
    }
  }
  tree.done(report.links);
  // 3. Nothing ran while we were down: ACTIVE sessions are stale.
  step_timer suspend{report, "suspend_active"};
  if (boot) {
    auto now = wall_clock_millis();
    for (auto& [thread, rec] : by_thread) {
      if (rec.state != session_state::active)
        continue;
      rec.state = session_state::suspended;
      rec.recovered_at = now;
      db.stage_session(rec);
      ++report.suspended;
    }
    if (auto err = db.flush())
      return err;
  }
  suspend.done(report.suspended);
  // 4. Undelivered messages: unanswered inbox entries are re-run by their
  // threads, outbox entries re-sent by their senders; both need the thread
  // started. Open threads under a CLOSED ancestor finish their cancel.
  step_timer scan{report, "scan_undelivered"};
  auto inboxes = db.inbox_counts();
  if (!inboxes)
    return inboxes.error();
  auto outbox = db.outbox();
  if (!outbox)
    return outbox.error();
  std::set<std::string> pending;
  for (auto& [thread, count] : *inboxes) {
    report.inbox_messages += count;
    ++report.inbox_threads;
    pending.insert(thread);
  }
  report.outbox_messages = outbox->size();
  for (auto& entry : *outbox)
    pending.insert(entry.from);
  auto closed_ancestor = [&](const session_record& rec) {
    std::set<std::string> seen; // A cycle is reported by the oracle.
    for (auto parent = rec.parent; !parent.empty();) {
      auto i = by_thread.find(parent);
      if (i == by_thread.end() || !seen.insert(parent).second)
        return false;
      if (i->second.state == session_state::closed)
        return true;
      parent = i->second.parent;
    }
    return false;
  };
  for (auto& [thread, rec] : by_thread)
    if (rec.state != session_state::closed && closed_ancestor(rec))
      plan.cancels.push_back(thread);
  report.cancels_finished = plan.cancels.size();
  for (auto& thread : pending) {
    auto i = by_thread.find(thread);
    // An inbox without a session cannot come from us; resume it anyway, as
    // a root, so its messages are answered.
    if (i == by_thread.end() || i->second.parent.empty())
      plan.roots.push_back(thread);
    else
      plan.children.push_back(thread);
  }
  scan.done(report.inbox_messages + report.outbox_messages);
  return plan;
}

std::string describe(const recovery_report& r) {
  std::string result = "recovery: " + std::to_string(r.sessions)
                       + " sessions (" + std::to_string(r.roots)
                       + " roots), " + std::to_string(r.links)
                       + " tree links, " + std::to_string(r.suspended)
                       + " ACTIVE marked SUSPENDED, "
                       + std::to_string(r.inbox_messages)
                       + " unanswered messages in "
                       + std::to_string(r.inbox_threads) + " threads, "
                       + std::to_string(r.outbox_messages)
                       + " undelivered messages between threads, "
                       + std::to_string(r.roots_resumed) + " roots and "
                       + std::to_string(r.children_resumed)
                       + " children resumed, "
                       + std::to_string(r.cancels_finished)
                       + " cancels finished; "
                       + std::to_string(r.finished_at - r.started_at)
                       + " ms";
  for (auto& step : r.steps)
    result += "; " + step.name + " " + std::to_string(step.count) + " in "
              + std::to_string(step.micros) + " us";
  for (auto& problem : r.problems)
    result += "; problem: " + problem;
  return result;
}

} // namespace keel
