#include "keel/persistence.hpp"

#include <set>

#include <caf/all.hpp>
#include <spdlog/spdlog.h>

#include "keel/json_codec.hpp"
#include "keel/kill_point.hpp"
#include "keel/recovery.hpp"
#include "keel/text.hpp"

namespace keel {

namespace {

using self_ptr = persistence_actor::stateful_pointer<persistence_state>;

// Joins a write to the pending group: the reply goes out after the group's
// synced commit; the first write of a group schedules the flush. The flush
// message queues behind every request already in the mailbox, so all of
// them share one fsync.
template <class T>
void await_flush(self_ptr self, caf::typed_response_promise<T> rp, T result) {
  auto& st = self->state;
  st.waiting.emplace_back([rp, result](const caf::error& err) mutable {
    if (err)
      rp.deliver(err);
    else
      rp.deliver(result);
  });
  if (!st.flush_scheduled) {
    st.flush_scheduled = true;
    self->send(self, atom::flush_v);
  }
}

// Returns the result of a write that may have staged nothing: answered at
// once when nothing is pending, else after the group's flush.
template <class T>
caf::result<T> after_flush(self_ptr self, T result) {
  if (self->state.db->staged() == 0 && self->state.waiting.empty())
    return result;
  auto rp = self->make_response_promise<T>();
  await_flush(self, rp, std::move(result));
  return rp;
}

// A clean stop: no conversation runs any more (they stop before us), so no
// session is live; the data must say so.
void suspend_active_sessions(store& db) {
  auto sessions = db.sessions();
  if (!sessions) {
    spdlog::warn("cannot read sessions at shutdown: {}",
                 render(sessions.error()));
    return;
  }
  for (auto& rec : *sessions) {
    if (rec.state == session_state::active) {
      rec.state = session_state::suspended;
      db.stage_session(rec);
    }
  }
  if (auto err = db.flush())
    spdlog::warn("cannot suspend sessions at shutdown: {}", render(err));
}

} // namespace

void persistence_state::flush() {
  flush_scheduled = false;
  auto err = db->flush();
  if (!err)
    reach(kill_point::batch_written);
  auto replies = std::move(waiting);
  waiting.clear();
  for (auto& reply : replies)
    reply(err);
}

persistence_actor::behavior_type
persistence(persistence_actor::stateful_pointer<persistence_state> self,
            persistence_config cfg) {
  auto db = store::open(cfg.dir, cfg.options);
  if (!db) {
    self->quit(db.error());
    return persistence_actor::behavior_type::make_empty_behavior();
  }
  self->state.db = std::move(*db);
  if (cfg.boot_recovery_pending && cfg.boot_recovery_pending->exchange(false)) {
    auto plan = plan_recovery(*self->state.db, true);
    if (!plan) {
      spdlog::error("recovery on boot failed: {}", render(plan.error()));
      self->quit(plan.error());
      return persistence_actor::behavior_type::make_empty_behavior();
    }
    self->state.boot_plan = std::move(*plan);
  }
  // Stopped or killed by its supervisor: answer everyone waiting on the
  // pending group now (it was never written) instead of leaving them to
  // their timeouts.
  self->set_exit_handler([self](caf::exit_msg& msg) {
    if (msg.reason == caf::exit_reason::user_shutdown
        || msg.reason == ec::shutdown) {
      self->state.flush();
      suspend_active_sessions(*self->state.db);
    }
    auto replies = std::move(self->state.waiting);
    self->state.waiting.clear();
    auto err = caf::make_error(ec::unavailable,
                               "persistence stopped before the write was "
                               "synced; resend");
    for (auto& reply : replies)
      reply(err);
    self->quit(msg.reason);
  });
  return {
    [self](atom::accept, accept_request& req)
      -> caf::result<accept_result> {
      auto result = self->state.db->stage_accept(req);
      if (!result)
        return result.error();
      // A duplicate known on disk is durable already (nothing staged).
      return after_flush(self, *result);
    },
    [self](atom::commit, turn_commit& commit) -> caf::result<caf::ok_atom> {
      self->state.db->stage_commit(commit);
      return after_flush(self, caf::ok_atom_v);
    },
    [self](caf::put_atom, session_record& rec) -> caf::result<caf::ok_atom> {
      self->state.db->stage_session(rec);
      return after_flush(self, caf::ok_atom_v);
    },
    [self](caf::put_atom, provider_health_record& rec)
      -> caf::result<caf::ok_atom> {
      self->state.db->stage_health(rec);
      return after_flush(self, caf::ok_atom_v);
    },
    [self](atom::health) -> caf::result<std::vector<provider_health_record>> {
      auto records = self->state.db->health();
      if (!records)
        return records.error();
      return std::move(*records);
    },
    [self](atom::load, const std::string& thread)
      -> caf::result<thread_snapshot> {
      auto snapshot = self->state.db->load_thread(thread);
      if (!snapshot)
        return snapshot.error();
      return std::move(*snapshot);
    },
    [self](atom::history, const std::string& thread, seq_t after,
           uint64_t limit) -> caf::result<history_page> {
      auto page = self->state.db->history(thread, after, limit);
      if (!page)
        return page.error();
      return std::move(*page);
    },
    [self](atom::inboxes) -> caf::result<std::vector<std::string>> {
      auto threads = self->state.db->threads_with_inbox();
      if (!threads)
        return threads.error();
      return std::move(*threads);
    },
    [self](atom::stats) -> caf::result<persistence_stats> {
      auto sessions = self->state.db->count_sessions();
      if (!sessions)
        return sessions.error();
      auto counters = self->state.db->stats();
      return persistence_stats{*sessions, counters.flushes,
                               counters.staged_operations,
                               counters.failed_flushes};
    },
    [self](atom::spawn, const std::string& parent,
           const std::string& child) -> caf::result<spawn_result> {
      auto& db = *self->state.db;
      auto parent_rec = db.session(parent);
      if (!parent_rec) {
        if (parent_rec.error() == ec::not_found)
          return caf::make_error(ec::not_found,
                                 "thread '" + parent
                                   + "' has no session yet: send it a "
                                     "message before spawning children");
        return parent_rec.error();
      }
      if (parent_rec->state == session_state::closed)
        return caf::make_error(ec::thread_closed,
                               "thread '" + parent + "' was cancelled");
      spawn_request req;
      req.child.thread = child;
      req.child.parent = parent;
      req.child.pool = parent_rec->pool;
      req.child.model = parent_rec->model;
      req.child.state = session_state::suspended;
      req.child.created_at = wall_clock_millis();
      req.link = tree_link{parent, child, req.child.created_at};
      auto result = db.stage_spawn(req);
      if (!result)
        return result.error();
      return after_flush(self, std::move(*result));
    },
    [self](caf::put_atom, outbox_entry& entry,
           std::string& reason) -> caf::result<caf::ok_atom> {
      self->state.db->stage_dead_letter(entry, reason);
      return after_flush(self, caf::ok_atom_v);
    },
    [self](atom::subtree, const std::string& thread)
      -> caf::result<std::vector<std::string>> {
      std::vector<std::string> result{thread};
      // Breadth first, so parents come before their children; `seen` stops
      // a (corrupt) cycle.
      std::set<std::string> seen{thread};
      for (size_t i = 0; i < result.size(); ++i) {
        auto children = self->state.db->children(result[i]);
        if (!children)
          return children.error();
        for (auto& child : *children)
          if (seen.insert(child).second)
            result.push_back(child);
      }
      return result;
    },
    [self](atom::agents)
      -> caf::result<std::vector<session_record>, std::vector<tree_link>> {
      auto sessions = self->state.db->sessions();
      if (!sessions)
        return sessions.error();
      auto links = self->state.db->tree_links();
      if (!links)
        return links.error();
      return caf::make_result(std::move(*sessions), std::move(*links));
    },
    [self](atom::recover) -> caf::result<recovery_plan> {
      if (auto& plan = self->state.boot_plan) {
        auto result = std::move(*plan);
        plan.reset();
        return result;
      }
      auto plan = plan_recovery(*self->state.db, false);
      if (!plan)
        return plan.error();
      return std::move(*plan);
    },
    [self](caf::put_atom,
           const recovery_report& report) -> caf::result<caf::ok_atom> {
      self->state.db->stage_meta("last_recovery", encode(report));
      return after_flush(self, caf::ok_atom_v);
    },
    [self](atom::report) -> caf::result<recovery_report> {
      auto text = self->state.db->meta("last_recovery");
      if (!text) {
        if (text.error() == ec::not_found)
          return caf::make_error(ec::not_found, "no recovery has run");
        return text.error();
      }
      auto report = decode<recovery_report>(*text);
      if (!report)
        return report.error();
      return std::move(*report);
    },
    [self](atom::flush) { self->state.flush(); },
  };
}

} // namespace keel
