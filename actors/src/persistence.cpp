#include "keel/persistence.hpp"

#include <algorithm>
#include <set>

#include <caf/all.hpp>
#include <spdlog/spdlog.h>

#include "keel/agent_tree.hpp"
#include "keel/kill_point.hpp"
#include "keel/logging.hpp"
#include "keel/recovery.hpp"
#include "keel/stored_form.hpp"
#include "keel/system_config.hpp"
#include "keel/text.hpp"

namespace keel {

persistence_state::persistence_state(self_ptr self) : self(self) {
  // nop
}

caf::error persistence_state::init(const persistence_config& cfg) {
  auto opened = cfg.open_store();
  if (!opened)
    return std::move(opened.error());
  db = std::move(*opened);
  max_stored_threads = cfg.max_stored_threads;
  max_history_bytes = cfg.max_history_bytes;
  shards = cfg.shards;
  tree_limits = cfg.agents;
  catalog = cfg.catalog;
  if (auto err = count_threads())
    return err;
  if (auto err = restore_agent_statuses())
    return err;
  if (cfg.boot_recovery_pending && cfg.boot_recovery_pending->exchange(false)) {
    auto plan = plan_recovery(*db, true, served());
    if (!plan) {
      log_scope scope{log_component::persistence};
      spdlog::error("recovery on boot failed: {}", render(plan.error()));
      return std::move(plan.error());
    }
    boot_plan = std::move(*plan);
    // A cluster node holds no shard yet at boot: nothing was recovered, and
    // the shared `last_recovery` keeps the last real one.
    if (shards)
      boot_plan->boot = false;
    else
      knows_active = true; // Every session is inactive now but ours.
  }
  return caf::none;
}

caf::error persistence_state::flush() {
  flush_scheduled = false;
  auto start = std::chrono::steady_clock::now();
  auto err = db->flush();
  count_flush(start, err);
  active.flushed(!err);
  if (!err)
    reach(kill_point::batch_written);
  counted_new.clear();
  // A dropped group took its new threads with it.
  if (err)
    count_threads();
  auto replies = std::move(waiting);
  waiting.clear();
  for (auto& reply : replies)
    reply(err);
  return err;
}

void persistence_state::suspend_left_active() {
  // No conversation runs any more (they stop before us), so no session is
  // live; the data must say so (of the threads this node serves: in a
  // cluster, other nodes write the others).
  auto err = knows_active ? suspend_sessions(*db, active.threads())
                          : suspend_sessions(*db, served());
  if (err) {
    log_scope scope{log_component::persistence};
    spdlog::warn("cannot suspend sessions at shutdown: {}", render(err));
  }
}

bool persistence_state::check_writable() {
  if (!writable && !probe_scheduled) {
    probe_scheduled = true;
    auto delay = next_delay(probe_backoff, failed_probes + 1, std::nullopt,
                            rng);
    self->delayed_send(self, delay, atom::probe_v);
  }
  return writable;
}

void persistence_state::probe() {
  probe_scheduled = false;
  if (writable)
    return;
  // Flushed at once, with whatever else is staged: no request sees the
  // probe's write staged or waits for its outcome.
  db->stage_meta("write_probe", std::to_string(wall_clock_millis()));
  flush();
  if (!writable)
    ++failed_probes;
}

// The flush message queues behind every request already in the mailbox, so
// all of them share one fsync.
void persistence_state::schedule_flush() {
  if (flush_scheduled)
    return;
  flush_scheduled = true;
  self->send(self, atom::flush_v);
}

void persistence_state::count_flush(std::chrono::steady_clock::time_point start,
                                    const caf::error& err) {
  auto staged = db->stats().staged_operations;
  auto operations = staged - staged_at_flush;
  staged_at_flush = staged;
  if (operations == 0 && !err)
    return; // Nothing was staged: no write happened, nothing learnt.
  writable = !err;
  if (writable)
    failed_probes = 0;
  std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
  metrics_of(self->system()).store_flush(took.count(), operations, !err);
}

void persistence_state::on_exit(const caf::exit_msg& msg) {
  if (msg.reason == caf::exit_reason::user_shutdown
      || msg.reason == ec::shutdown) {
    flush();
    suspend_left_active();
  }
  auto replies = std::move(waiting);
  waiting.clear();
  auto err = caf::make_error(ec::unavailable,
                             "persistence stopped before the write was "
                             "synced; resend");
  for (auto& reply : replies)
    reply(err);
  self->quit(msg.reason);
}

// The reply goes out after the group's synced commit; the first write of a
// group schedules the flush.
template <class T>
void persistence_state::await_flush(caf::typed_response_promise<T> rp,
                                    T result) {
  waiting.emplace_back([rp, result](const caf::error& err) mutable {
    if (err)
      rp.deliver(err);
    else
      rp.deliver(result);
  });
  schedule_flush();
}

// For writes that may have staged nothing.
template <class T>
caf::result<T> persistence_state::after_flush(T result) {
  if (db->staged() == 0 && waiting.empty())
    return result;
  auto rp = self->make_response_promise<T>();
  await_flush(rp, std::move(result));
  return rp;
}

// The answers of persistence_agents.cpp.
template caf::result<spawn_result> persistence_state::after_flush(spawn_result);
template caf::result<caf::ok_atom> persistence_state::after_flush(caf::ok_atom);

caf::error persistence_state::count_threads() {
  if (!counts_threads())
    return caf::none;
  auto n = db->count_sessions();
  if (!n) {
    log_scope scope{log_component::persistence};
    spdlog::warn("cannot count the stored threads: {}", render(n.error()));
    return std::move(n.error());
  }
  stored_threads = *n;
  return caf::none;
}

caf::error persistence_state::check_tenure(const std::string& thread,
                                           uint64_t tenure) const {
  return shards ? shards->check_tenure(thread, tenure) : caf::none;
}

caf::expected<bool> persistence_state::admit_thread(const std::string& thread) {
  if (counted_new.count(thread) > 0)
    return false;
  auto rec = db->session(thread);
  if (rec)
    return false;
  if (rec.error() != ec::not_found)
    return std::move(rec.error());
  if (max_stored_threads > 0 && stored_threads >= max_stored_threads)
    return caf::make_error(
      ec::thread_limit, "thread '" + thread
                          + "' cannot be created: the node stores "
                          + std::to_string(stored_threads)
                          + " threads, its limit (threads.max_stored_threads "
                          + std::to_string(max_stored_threads)
                          + "); existing threads keep working");
  ++stored_threads;
  counted_new.insert(thread);
  return true;
}

void persistence_state::uncount(const std::string& thread) {
  if (counted_new.erase(thread) > 0)
    --stored_threads;
}

caf::result<accept_result>
persistence_state::accept(const accept_request& req) {
  if (auto err = check_tenure(req.thread, req.tenure))
    return err;
  if (counts_threads() && req.create_session) {
    auto admitted = admit_thread(req.thread);
    if (!admitted)
      return std::move(admitted.error());
  }
  auto result = db->stage_accept(req);
  if (!result || result->duplicate)
    uncount(req.thread);
  if (!result)
    return result.error();
  if (req.create_session && !result->duplicate)
    active.staged(req.thread, req.session.state == session_state::active);
  // A duplicate known on disk is durable already (nothing staged).
  return after_flush(*result);
}

caf::result<caf::ok_atom> persistence_state::commit(const turn_commit& commit) {
  if (auto err = check_tenure(commit.thread, commit.tenure))
    return err;
  db->stage_commit(commit);
  if (commit.write_session)
    active.staged(commit.thread, commit.session.state == session_state::active);
  return after_flush(caf::ok_atom_v);
}

caf::result<caf::ok_atom> persistence_state::put(const session_record& rec,
                                                 uint64_t tenure) {
  if (auto err = check_tenure(rec.thread, tenure))
    return err;
  db->stage_session(rec, tenure);
  active.staged(rec.thread, rec.state == session_state::active);
  return after_flush(caf::ok_atom_v);
}

caf::result<caf::ok_atom>
persistence_state::put(const provider_health_record& rec) {
  db->stage_health(rec);
  return after_flush(caf::ok_atom_v);
}

caf::result<caf::ok_atom> persistence_state::put(const dead_letter& letter,
                                                 uint64_t tenure) {
  if (auto err = check_tenure(letter.entry.from, tenure))
    return err;
  db->stage_dead_letter(letter, tenure);
  return after_flush(caf::ok_atom_v);
}

namespace {

// `xs` without the records whose thread (`thread_of`) `only` leaves out.
template <class T, class ThreadOf>
caf::result<std::vector<T>> keep_served(caf::expected<std::vector<T>> xs,
                                        const thread_filter& only,
                                        ThreadOf thread_of) {
  if (!xs)
    return xs.error();
  if (only)
    xs->erase(std::remove_if(xs->begin(), xs->end(),
                             [&](const T& x) { return !only(thread_of(x)); }),
              xs->end());
  return std::move(*xs);
}

} // namespace

caf::result<std::vector<dead_letter>>
persistence_state::dead_letters(bool served_only) {
  return keep_served(db->dead_letters(),
                     served_only ? served() : thread_filter{},
                     [](const dead_letter& x) { return x.entry.from; });
}

caf::result<caf::ok_atom> persistence_state::put(const reply_delivery& rec,
                                                 uint64_t tenure) {
  if (auto err = check_tenure(rec.thread, tenure))
    return err;
  db->stage_delivery(rec, tenure);
  return after_flush(caf::ok_atom_v);
}

caf::result<std::vector<reply_delivery>> persistence_state::deliveries() {
  return keep_served(db->deliveries(), served(),
                     [](const reply_delivery& x) { return x.thread; });
}

caf::result<std::vector<provider_health_record>> persistence_state::health() {
  return db->health();
}

caf::result<std::vector<owner_notice>> persistence_state::notices() {
  return db->notices();
}

caf::result<std::vector<std::string>> persistence_state::inboxes() {
  return db->threads_with_inbox();
}

caf::result<caf::ok_atom> persistence_state::put(const owner_notice& rec) {
  db->stage_notice(rec);
  return after_flush(caf::ok_atom_v);
}

caf::result<caf::ok_atom>
persistence_state::put(const recovery_report& report) {
  db->stage_meta("last_recovery", encode(report));
  return after_flush(caf::ok_atom_v);
}

caf::result<persistence_stats> persistence_state::stats() {
  auto sessions = shards ? db->count_sessions()
                         : caf::expected<uint64_t>{stored_threads};
  if (!sessions)
    return sessions.error();
  auto quarantined = db->quarantined();
  if (!quarantined)
    return quarantined.error();
  auto counters = db->stats();
  persistence_stats result{*sessions,
                           counters.flushes,
                           counters.staged_operations,
                           counters.failed_flushes,
                           writable,
                           {}};
  for (auto& rec : *quarantined)
    if (result.quarantined_threads.empty()
        || result.quarantined_threads.back() != rec.thread)
      result.quarantined_threads.push_back(rec.thread);
  return result;
}

caf::result<thread_snapshot>
persistence_state::load(const std::string& thread) {
  auto snapshot = db->load_thread(thread);
  if (snapshot || snapshot.error() != ec::storage_corrupt)
    return snapshot;
  log_scope scope{log_component::persistence, thread};
  spdlog::error("thread {}: cannot load ({}); moving its unreadable records "
                "to quarantine and starting it fresh",
                thread, render(snapshot.error()));
  auto report = db->stage_quarantine(thread);
  if (!report)
    return report.error();
  for (auto& bad : report->unreadable)
    spdlog::error("thread {}: quarantined {} {}: {}", thread, bad.column_family,
                  bad.key, bad.what);
  // Reads see committed data only: the move commits now, with the group.
  if (auto err = flush())
    return err;
  count_threads(); // The session may have moved to quarantine.
  snapshot = db->load_thread(thread);
  if (snapshot) {
    snapshot->quarantined = true;
    snapshot->steps_lost = report->steps_lost;
  }
  return snapshot;
}

caf::result<history_page> persistence_state::history(const std::string& thread,
                                                     seq_t after,
                                                     uint64_t limit) {
  return db->history(thread, after, limit, max_history_bytes);
}

caf::result<std::vector<std::string>>
persistence_state::subtree(const std::string& thread) {
  std::vector<std::string> result{thread};
  // Breadth first, so parents come before their children; `seen` stops a
  // (corrupt) cycle.
  std::set<std::string> seen{thread};
  for (size_t i = 0; i < result.size(); ++i) {
    auto children = db->children(result[i]);
    if (!children)
      return children.error();
    for (auto& child : *children)
      if (seen.insert(child).second)
        result.push_back(child);
  }
  return result;
}

caf::result<std::vector<session_record>, std::vector<tree_link>>
persistence_state::agents() {
  auto sessions = db->sessions();
  if (!sessions)
    return sessions.error();
  auto links = db->tree_links();
  if (!links)
    return links.error();
  return caf::make_result(std::move(*sessions), std::move(*links));
}

caf::result<std::vector<session_record>, std::vector<tree_link>>
persistence_state::agents(const std::string& after, uint64_t limit) {
  auto page = read_agent_page(*db, after, limit);
  if (!page)
    return page.error();
  return caf::make_result(std::move(page->sessions), std::move(page->links));
}

caf::result<recovery_plan> persistence_state::recover() {
  if (boot_plan) {
    auto result = std::move(*boot_plan);
    boot_plan.reset();
    return result;
  }
  return plan_recovery(*db, false, served());
}

caf::result<recovery_plan>
persistence_state::recover(const std::vector<uint32_t>& gained) {
  if (!shards)
    return caf::make_error(ec::conflict, "this node is not in a cluster");
  std::unordered_set<uint32_t> wanted(gained.begin(), gained.end());
  // The suspension commits with our flush: the group it joins holds other
  // requests' writes, whose writers learn its outcome, as `writable` does.
  auto plan = plan_recovery(
    *db, true,
    [&](const std::string& thread) {
      return wanted.count(shards->shard_of(thread)) > 0;
    },
    [this] { return flush(); });
  if (!plan)
    return std::move(plan.error());
  // Stored as `last_recovery`, which any node of the cluster reads.
  plan->boot = true;
  return std::move(*plan);
}

thread_filter persistence_state::served() const {
  if (!shards)
    return {};
  return [table = shards](const std::string& thread) {
    return table->serves(thread);
  };
}

caf::result<recovery_report> persistence_state::report() {
  auto text = db->meta("last_recovery");
  if (!text) {
    if (text.error() == ec::not_found)
      return caf::make_error(ec::not_found, "no recovery has run");
    return text.error();
  }
  return decode<recovery_report>(*text);
}

namespace {

// Opens the store; false (the actor quits with the reason) if it cannot.
bool start(persistence_actor::stateful_pointer<persistence_state> self,
           const persistence_config& cfg) {
  if (auto err = self->state.init(cfg)) {
    self->quit(std::move(err));
    return false;
  }
  self->set_exit_handler(
    [self](caf::exit_msg& msg) { self->state.on_exit(msg); });
  return true;
}

} // namespace

persistence_actor::behavior_type
persistence(persistence_actor::stateful_pointer<persistence_state> self,
            persistence_config cfg) {
  if (!start(self, cfg))
    return persistence_actor::behavior_type::make_empty_behavior();
  return {
    [self](atom::accept, accept_request& r) { return self->state.accept(r); },
    [self](atom::commit, turn_commit& c) { return self->state.commit(c); },
    [self](caf::put_atom, session_record& rec, uint64_t tenure) {
      return self->state.put(rec, tenure);
    },
    [self](caf::put_atom, provider_health_record& rec) {
      return self->state.put(rec);
    },
    [self](atom::health) { return self->state.health(); },
    [self](atom::load, const std::string& t) { return self->state.load(t); },
    [self](atom::history, const std::string& t, seq_t after, uint64_t n) {
      return self->state.history(t, after, n);
    },
    [self](atom::inboxes) { return self->state.inboxes(); },
    [self](atom::stats) { return self->state.stats(); },
    [self](atom::writable) { return self->state.check_writable(); },
    [self](atom::probe) { self->state.probe(); },
    [self](atom::spawn, const std::string& parent, const std::string& child,
           const std::string& agent) {
      return self->state.spawn(parent, child, agent);
    },
    [self](atom::agent_status, const std::string& agent,
           const std::string& status) {
      return self->state.store_agent_status(agent, status);
    },
    [self](caf::put_atom, dead_letter& letter, uint64_t tenure) {
      return self->state.put(letter, tenure);
    },
    [self](atom::dead_letters, bool served_only) {
      return self->state.dead_letters(served_only);
    },
    [self](caf::put_atom, const reply_delivery& rec, uint64_t tenure) {
      return self->state.put(rec, tenure);
    },
    [self](atom::deliveries) { return self->state.deliveries(); },
    [self](caf::put_atom, owner_notice& rec) { return self->state.put(rec); },
    [self](atom::notices) { return self->state.notices(); },
    [self](atom::subtree, const std::string& thread) {
      return self->state.subtree(thread);
    },
    [self](atom::agents) { return self->state.agents(); },
    [self](atom::agents, const std::string& after, uint64_t limit) {
      return self->state.agents(after, limit);
    },
    [self](atom::recover) { return self->state.recover(); },
    [self](atom::recover, const std::vector<uint32_t>& gained) {
      return self->state.recover(gained);
    },
    [self](caf::put_atom, const recovery_report& report) {
      return self->state.put(report);
    },
    [self](atom::report) { return self->state.report(); },
    [self](atom::flush) { self->state.flush(); },
  };
}

} // namespace keel
