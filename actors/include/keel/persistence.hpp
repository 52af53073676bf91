#pragma once

#include <atomic>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <unordered_set>
#include <vector>

#include <caf/make_message.hpp>
#include <caf/result.hpp>
#include <caf/system_messages.hpp>
#include <caf/typed_event_based_actor.hpp>
#include <caf/typed_response_promise.hpp>

#include "keel/actors.hpp"
#include "keel/agent_catalog.hpp"
#include "keel/config.hpp"
#include "keel/provider_policy.hpp"
#include "keel/recovery.hpp"
#include "keel/shard_table.hpp"
#include "keel/store.hpp"

namespace keel {

/// Opens the node's store; each persistence incarnation opens its own.
using store_opener = std::function<caf::expected<std::unique_ptr<store>>()>;

/// Configuration of the persistence actor.
struct persistence_config {
  /// Opens the store (RocksDB in a folder, or PostgreSQL).
  store_opener open_store;
  /// Shared by every incarnation of the node's persistence actor: true until
  /// the first one has run the recovery on boot (a restarted persistence
  /// actor must not: conversations are live then).
  std::shared_ptr<std::atomic<bool>> boot_recovery_pending;
  /// Threads the store may hold (`threads.max_stored_threads`); an accept
  /// or spawn that would create one more is refused with `thread_limit`.
  /// 0: no limit.
  size_t max_stored_threads = 0;
  /// Bytes of message texts in one history page
  /// (`gateway.max_history_bytes`).
  size_t max_history_bytes = std::numeric_limits<size_t>::max();
  /// In a cluster, the node's shard table: recoveries cover the threads of
  /// the shards the node holds only. Null on a single node.
  std::shared_ptr<const shard_table> shards;
  /// A spawn past `max_children` or `max_depth` is refused with
  /// `agent_limit`, whether a client or a model asked for it: the limits
  /// of the parent's agent, these where the node has no catalog.
  agent_limits agents;
  /// The node's agents: a spawn binds its child to one of them (and takes
  /// its pool), and the statuses operators stored are applied to them when
  /// the store opens, before any thread loads. Null: no agents but the
  /// one every thread has.
  std::shared_ptr<const agent_catalog> catalog;
};

/// State of the persistence actor. Each message of `persistence_actor` has
/// a member function of the same name; all of them run on the actor's own
/// thread.
struct persistence_state {
  using self_ptr = persistence_actor::stateful_pointer<persistence_state>;

  static inline const char* name = "keel.persistence";

  explicit persistence_state(self_ptr self);

  self_ptr self;

  /// The open database; null if opening failed (the actor then quits).
  std::unique_ptr<store> db;

  /// Replies waiting for the pending group: each is called with the flush
  /// outcome (none on success) once the group is committed or dropped.
  std::vector<std::function<void(const caf::error&)>> waiting;

  /// True while a flush message is on its way to ourselves.
  bool flush_scheduled = false;
  /// False while the last flush failed (see `persistence_stats`).
  bool writable = true;
  /// True while a `probe` message is on its way to ourselves.
  bool probe_scheduled = false;
  /// When probes come (see `check_writable`): the first about 1 s after a
  /// check found the store failing writes, each one after a failed probe
  /// twice as late, at most 30 s; each wait drawn within 10 % (under the
  /// cap), so a cluster's nodes probe a shared database apart.
  static inline const retry_policy probe_backoff = [] {
    retry_policy result;
    result.base_delay = std::chrono::seconds{1};
    result.multiplier = 2.0;
    result.max_delay = std::chrono::seconds{30};
    result.jitter = 0.1;
    return result;
  }();
  /// Probes failed since the last successful write.
  uint32_t failed_probes = 0;
  std::mt19937_64 rng{std::random_device{}()};
  /// The store's `staged_operations` after the last flush: the next flush
  /// wrote the difference.
  uint64_t staged_at_flush = 0;
  /// The boot recovery's plan until the orchestrator has fetched it.
  std::optional<recovery_plan> boot_plan;

  /// See `persistence_config`.
  size_t max_stored_threads = 0;
  size_t max_history_bytes = std::numeric_limits<size_t>::max();
  /// See `persistence_config`; null on a single node.
  std::shared_ptr<const shard_table> shards;
  /// See `persistence_config::agents`.
  agent_limits tree_limits;
  /// See `persistence_config::catalog`.
  std::shared_ptr<const agent_catalog> catalog;
  /// Threads stored, staged ones included, while `counts_threads()`:
  /// counted from the store at start, and again after a failed flush or a
  /// quarantine (either may leave fewer than counted).
  uint64_t stored_threads = 0;

  /// Whether `stored_threads` is kept: for `max_stored_threads`, and on a
  /// single node for the status (which then costs no scan of the store;
  /// in a cluster other nodes add threads, and the status counts them).
  bool counts_threads() const {
    return max_stored_threads > 0 || !shards;
  }
  /// New threads counted in the pending group (a thread's second accept
  /// before the flush must not count it again).
  std::unordered_set<std::string> counted_new;
  /// The sessions our writes may have left ACTIVE; all there are when
  /// `knows_active` (a single node's first incarnation, which ran the boot
  /// recovery), so a clean stop reads those only.
  active_sessions active;
  bool knows_active = false;

  /// Opens the store in `cfg.dir` and, for the node's first incarnation,
  /// runs the recovery on boot; returns why either failed.
  caf::error init(const persistence_config& cfg);

  /// Commits the pending group and answers everyone waiting on it.
  caf::error flush();

  /// Sends ourselves the flush of the pending group unless it is on its way.
  void schedule_flush();

  /// Answers `writable` at once, with no I/O. While it is false, also
  /// schedules a `probe` unless one is on its way: an unready node gets no
  /// traffic, so without writes of its own it would stay unready after the
  /// store takes writes again. The probes back off while they fail, so a
  /// store that blocks (a database that does not answer) holds persistence
  /// up rarely.
  bool check_writable();

  /// Writes one `meta` value and flushes it with the pending group at once,
  /// unless a write succeeded since the probe was scheduled.
  void probe();

  /// Records a flush that began at `start` and ended with `err` in the
  /// node's metrics and in `writable`.
  void count_flush(std::chrono::steady_clock::time_point start,
                   const caf::error& err);

  /// Stopped or killed by the supervisor: a clean stop commits the pending
  /// group and suspends the live sessions; whoever still waits is answered
  /// `unavailable` at once instead of at their timeouts.
  void on_exit(const caf::exit_msg& msg);

  /// A clean stop: marks the sessions left ACTIVE SUSPENDED (see
  /// `active`), or else every ACTIVE session this node serves.
  void suspend_left_active();

  // -- writes, answered once the pending group is synced ----------------------

  caf::result<accept_result> accept(const accept_request& req);

  caf::result<caf::ok_atom> commit(const turn_commit& commit);

  caf::result<caf::ok_atom> put(const session_record& rec, uint64_t tenure);

  caf::result<caf::ok_atom> put(const provider_health_record& rec);

  caf::result<caf::ok_atom> put(const owner_notice& rec);

  /// Writes a dead letter (a new one leaves the outbox).
  caf::result<caf::ok_atom> put(const dead_letter& letter, uint64_t tenure);

  /// Reads the dead letters; `served_only`: of the threads this node serves.
  caf::result<std::vector<dead_letter>> dead_letters(bool served_only);

  /// Rewrites (or removes) a reply's delivery record.
  caf::result<caf::ok_atom> put(const reply_delivery& rec, uint64_t tenure);

  /// Reads the delivery records of the threads this node serves.
  caf::result<std::vector<reply_delivery>> deliveries();

  /// Reads every provider health record, owner notice, and thread with
  /// unanswered messages.
  caf::result<std::vector<provider_health_record>> health();
  caf::result<std::vector<owner_notice>> notices();
  caf::result<std::vector<std::string>> inboxes();

  /// Stores the final recovery report.
  caf::result<caf::ok_atom> put(const recovery_report& report);

  /// A conversation's write of `thread` under `tenure` is refused before it
  /// joins the group (`not_owner`) unless this node still holds the shard
  /// at that epoch: it would fail the whole group at the fence.
  caf::error check_tenure(const std::string& thread, uint64_t tenure) const;

  /// Whether storing `thread` adds a thread the store does not hold yet;
  /// `thread_limit` if it would and the store is full (with
  /// `max_stored_threads` set). Only asked while `counts_threads()`.
  caf::expected<bool> admit_thread(const std::string& thread);
  /// A thread admitted by `admit_thread` was not staged after all.
  void uncount(const std::string& thread);

  /// Counts the threads in the store again.
  caf::error count_threads();

  /// Writes the child's session (bound to `agent`, the parent's if empty;
  /// its pool, the parent's model) and its tree link; not_found if the
  /// parent has no session, thread_closed if it was cancelled,
  /// unknown_agent if the node has no such agent.
  caf::result<spawn_result> spawn(const std::string& parent,
                                  const std::string& child,
                                  const std::string& agent);

  /// Stores the status an operator gave `agent` (a status name); answers
  /// once synced.
  caf::result<caf::ok_atom> store_agent_status(const std::string& agent,
                                               const std::string& status);

  /// Applies the stored agent statuses to the catalog.
  caf::error restore_agent_statuses();

  // -- reads ------------------------------------------------------------------

  /// Loads a thread. One whose records cannot be read has them moved to
  /// quarantine (committed at once, with the pending group) and loads
  /// fresh, its snapshot saying so: a thread never crash-loops on bad data.
  caf::result<thread_snapshot> load(const std::string& thread);

  /// A page of `thread`'s history after `after`: at most `limit` entries
  /// and `max_history_bytes` of texts (at least one entry).
  caf::result<history_page> history(const std::string& thread, seq_t after,
                                    uint64_t limit);

  caf::result<persistence_stats> stats();

  caf::result<std::vector<std::string>> subtree(const std::string& thread);

  caf::result<std::vector<session_record>, std::vector<tree_link>> agents();
  /// A page of the agent tree: at most `limit` sessions after thread
  /// `after` and their links to their children.
  caf::result<std::vector<session_record>, std::vector<tree_link>>
  agents(const std::string& after, uint64_t limit);

  /// The boot plan once, then a plan of the threads with pending work.
  caf::result<recovery_plan> recover();
  /// The recovery of `gained` shards, which the node just came to hold.
  caf::result<recovery_plan> recover(const std::vector<uint32_t>& gained);
  /// The threads recoveries cover: all of them on a single node, those of
  /// the held shards in a cluster.
  thread_filter served() const;

  caf::result<recovery_report> report();

private:
  /// Joins a write to the pending group; `rp` gets `result` after the flush.
  template <class T>
  void await_flush(caf::typed_response_promise<T> rp, T result);

  /// Answers `result` at once when nothing is pending, else after the flush.
  template <class T>
  caf::result<T> after_flush(T result);
};

/// Opens the store in `cfg.dir` and serves the persistence interface. Quits
/// with `ec::storage_open_failed` if the database cannot be opened.
persistence_actor::behavior_type
persistence(persistence_actor::stateful_pointer<persistence_state> self,
            persistence_config cfg);

} // namespace keel
