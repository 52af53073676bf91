#include "keel/persistence.hpp"

#include <caf/all.hpp>

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

} // namespace

void persistence_state::flush() {
  flush_scheduled = false;
  auto err = db->flush();
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
  // Stopped or killed by its supervisor: answer everyone waiting on the
  // pending group now (it was never written) instead of leaving them to
  // their timeouts.
  self->set_exit_handler([self](caf::exit_msg& msg) {
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
      if (result->duplicate && self->state.waiting.empty())
        return *result; // Known on disk: durable already.
      auto rp = self->make_response_promise<accept_result>();
      await_flush(self, rp, *result);
      return rp;
    },
    [self](atom::commit, turn_commit& commit) -> caf::result<caf::ok_atom> {
      self->state.db->stage_commit(commit);
      auto rp = self->make_response_promise<caf::ok_atom>();
      await_flush(self, rp, caf::ok_atom_v);
      return rp;
    },
    [self](caf::put_atom, session_record& rec) -> caf::result<caf::ok_atom> {
      self->state.db->stage_session(rec);
      auto rp = self->make_response_promise<caf::ok_atom>();
      await_flush(self, rp, caf::ok_atom_v);
      return rp;
    },
    [self](caf::put_atom, provider_health_record& rec)
      -> caf::result<caf::ok_atom> {
      self->state.db->stage_health(rec);
      auto rp = self->make_response_promise<caf::ok_atom>();
      await_flush(self, rp, caf::ok_atom_v);
      return rp;
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
    [self](atom::flush) { self->state.flush(); },
  };
}

} // namespace keel
