#pragma once

// Every typed actor interface of Keel, in one place. Each interface has a
// `///` banner; each handler a `//` line saying what it does. Atoms are
// declared once in the type ID block below and the message types are
// registered once, in `keel::system_config`.

#include <cstdint>
#include <string>
#include <vector>

#include <caf/fwd.hpp>
#include <caf/replies_to.hpp>
#include <caf/timespan.hpp>
#include <caf/type_id.hpp>
#include <caf/typed_actor.hpp>

#include "keel/completion.hpp"
#include "keel/protocol.hpp"
#include "keel/types.hpp"
#include "keel/ws_server.hpp"

namespace keel::protocol {

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, client_frame& x) {
  return f(caf::meta::type_name("keel::protocol::client_frame"), x.type, x.id,
           x.thread, x.text, x.after, x.limit, x.child, x.agent);
}

} // namespace keel::protocol

namespace keel {

/// Counters of the persistence actor, for status pages.
struct persistence_stats {
  uint64_t sessions = 0;
  uint64_t flushes = 0;
  uint64_t staged_operations = 0;
  uint64_t failed_flushes = 0;
  /// False while the last flush failed (the node is not ready).
  bool writable = true;
  /// Threads with records in quarantine, in key order.
  std::vector<std::string> quarantined_threads;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, persistence_stats& x) {
  return f(caf::meta::type_name("keel::persistence_stats"), x.sessions,
           x.flushes, x.staged_operations, x.failed_flushes, x.writable,
           x.quarantined_threads);
}

/// One child of a supervisor as `which_children` reports it (and, for child
/// supervisors, their children in turn): the operator's view of the tree.
struct child_info {
  /// The child's id, its path segment.
  std::string id;
  /// "running", "restarting" (dead, restart pending: backoff or a group
  /// restart), "stopping" or "stopped".
  std::string state;
  /// Restarts of this child since its supervisor started.
  uint64_t restarts = 0;
  /// The last exit reason, rendered; empty if the child never exited.
  std::string last_exit;
  /// Time since the current incarnation started (actor clock); zero unless
  /// running.
  caf::timespan uptime{0};
  /// Whether the child is a supervisor (then `children` lists its children).
  bool supervisor = false;
  /// CAF id of the current incarnation; 0 unless running.
  uint64_t actor_id = 0;
  /// Children of a child supervisor, in start order.
  std::vector<child_info> children;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, child_info& x) {
  return f(caf::meta::type_name("keel::child_info"), x.id, x.state, x.restarts,
           x.last_exit, x.uptime, x.supervisor, x.actor_id, x.children);
}

/// One member of the cluster as the cluster actor last read it.
struct cluster_member_info {
  std::string node_id;
  uint64_t incarnation = 0;
  std::string address;
  /// "up", "draining", "dead" or "left".
  std::string state;
  /// Shards it owns.
  uint64_t shards = 0;
  /// Time since its lease was last renewed (database clock).
  int64_t since_renewal_ms = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, cluster_member_info& x) {
  return f(caf::meta::type_name("keel::cluster_member_info"), x.node_id,
           x.incarnation, x.address, x.state, x.shards, x.since_renewal_ms);
}

/// The cluster as one node sees it (`/api/v1/status`, `keelctl cluster`).
struct cluster_status {
  std::string node_id;
  uint64_t incarnation = 0;
  /// This node's state ("joining" until it joined).
  std::string state;
  uint32_t shards = 0;
  /// Shards this node holds (writes) now.
  uint64_t held = 0;
  /// The lowest and highest epoch among them.
  uint64_t min_epoch = 0;
  uint64_t max_epoch = 0;
  /// Shards without a live owner, and handoffs pending, in the last view.
  uint64_t orphans = 0;
  uint64_t handoffs = 0;
  /// Shards this node claimed, received and handed over since it started.
  uint64_t claimed = 0;
  uint64_t received = 0;
  uint64_t handed_over = 0;
  /// Members it declared dead since it started.
  uint64_t declared_dead = 0;
  std::vector<cluster_member_info> members;
  /// Per shard (by index): its owner ("" if none) and epoch.
  std::vector<std::string> owners;
  std::vector<uint64_t> epochs;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, cluster_status& x) {
  return f(caf::meta::type_name("keel::cluster_status"), x.node_id,
           x.incarnation, x.state, x.shards, x.held, x.min_epoch, x.max_epoch,
           x.orphans, x.handoffs, x.claimed, x.received, x.handed_over,
           x.declared_dead, x.members, x.owners, x.epochs);
}

/// One run of a tool as the tool runner gets it: everything decided
/// (arguments expanded, environment taken from the allow-list).
struct tool_run {
  std::string tool;
  std::vector<std::string> argv;
  /// Working directory; empty: the node's.
  std::string cwd;
  /// The tool's whole environment, "NAME=value" each.
  std::vector<std::string> env;
  caf::timespan timeout{0};
  /// Between SIGTERM and SIGKILL to the tool's process group.
  caf::timespan grace{0};
  /// Bytes of stdout and of stderr each kept.
  uint64_t output_cap = 0;
  /// Resource limits (`tools[].limits`; 0: none): address space bytes, CPU
  /// seconds, open files, processes, file size bytes.
  uint64_t memory_limit = 0;
  uint64_t cpu_seconds_limit = 0;
  uint64_t open_files_limit = 0;
  uint64_t processes_limit = 0;
  uint64_t file_size_limit = 0;
  /// The account it runs as (`tools[].user`/`group`); -1: the node's.
  int64_t uid = -1;
  int64_t gid = -1;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, tool_run& x) {
  return f(caf::meta::type_name("keel::tool_run"), x.tool, x.argv, x.cwd, x.env,
           x.timeout, x.grace, x.output_cap, x.memory_limit,
           x.cpu_seconds_limit, x.open_files_limit, x.processes_limit,
           x.file_size_limit, x.uid, x.gid);
}

/// How a tool's run ended, as the model and the thread see it.
struct tool_outcome {
  /// The result for the model (never empty): output, cut marks, status.
  std::string text;
  /// Empty on success; else one line saying what failed ("exit status 2:
  /// LAST STDERR LINE", "timed out after 120 s", "cannot start ...").
  std::string error;
  bool timed_out = false;
  /// From the request to the end of the process group, in microseconds.
  uint64_t took_us = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, tool_outcome& x) {
  return f(caf::meta::type_name("keel::tool_outcome"), x.text, x.error,
           x.timed_out, x.took_us);
}

} // namespace keel

CAF_BEGIN_TYPE_ID_BLOCK(keel, caf::first_custom_type_id)

CAF_ADD_ATOM(keel, keel::atom, accept, "accept")
CAF_ADD_ATOM(keel, keel::atom, commit, "commit")
CAF_ADD_ATOM(keel, keel::atom, load, "load")
CAF_ADD_ATOM(keel, keel::atom, history, "history")
CAF_ADD_ATOM(keel, keel::atom, inboxes, "inboxes")
CAF_ADD_ATOM(keel, keel::atom, flush, "flush")
CAF_ADD_ATOM(keel, keel::atom, stats, "stats")
CAF_ADD_ATOM(keel, keel::atom, complete, "complete")
CAF_ADD_ATOM(keel, keel::atom, deliver, "deliver")
CAF_ADD_ATOM(keel, keel::atom, route, "route")
CAF_ADD_ATOM(keel, keel::atom, passivate, "passivate")
CAF_ADD_ATOM(keel, keel::atom, drain, "drain")
CAF_ADD_ATOM(keel, keel::atom, idle, "idle")
CAF_ADD_ATOM(keel, keel::atom, recover, "recover")
CAF_ADD_ATOM(keel, keel::atom, frame, "frame")
CAF_ADD_ATOM(keel, keel::atom, open, "open")
CAF_ADD_ATOM(keel, keel::atom, closed, "closed")
CAF_ADD_ATOM(keel, keel::atom, http, "http")
CAF_ADD_ATOM(keel, keel::atom, publish, "publish")
CAF_ADD_ATOM(keel, keel::atom, turn_done, "turn_done")
CAF_ADD_ATOM(keel, keel::atom, children, "children")
CAF_ADD_ATOM(keel, keel::atom, kill_child, "killchild")
CAF_ADD_ATOM(keel, keel::atom, start_child, "startchild")
CAF_ADD_ATOM(keel, keel::atom, stop_child, "stopchild")
CAF_ADD_ATOM(keel, keel::atom, forward, "forward")
CAF_ADD_ATOM(keel, keel::atom, restart, "restart")
CAF_ADD_ATOM(keel, keel::atom, stop_timer, "stoptimer")
CAF_ADD_ATOM(keel, keel::atom, started, "started")
CAF_ADD_ATOM(keel, keel::atom, health, "health")
CAF_ADD_ATOM(keel, keel::atom, attempt, "attempt")
CAF_ADD_ATOM(keel, keel::atom, retry, "retry")
CAF_ADD_ATOM(keel, keel::atom, spawn, "spawn")
CAF_ADD_ATOM(keel, keel::atom, cancel, "cancel")
CAF_ADD_ATOM(keel, keel::atom, agents, "agents")
CAF_ADD_ATOM(keel, keel::atom, subtree, "subtree")
CAF_ADD_ATOM(keel, keel::atom, report, "report")
CAF_ADD_ATOM(keel, keel::atom, redeliver, "redeliver")
CAF_ADD_ATOM(keel, keel::atom, readback, "readback")
CAF_ADD_ATOM(keel, keel::atom, tick, "tick")
CAF_ADD_ATOM(keel, keel::atom, release, "release")
CAF_ADD_ATOM(keel, keel::atom, interest, "interest")
CAF_ADD_ATOM(keel, keel::atom, cluster, "cluster")
CAF_ADD_ATOM(keel, keel::atom, run, "run")
CAF_ADD_ATOM(keel, keel::atom, dead_letters, "deadlettrs")
CAF_ADD_ATOM(keel, keel::atom, drop, "drop")
CAF_ADD_ATOM(keel, keel::atom, deliveries, "deliveries")
CAF_ADD_ATOM(keel, keel::atom, notify, "notify")
CAF_ADD_ATOM(keel, keel::atom, notices, "notices")
CAF_ADD_ATOM(keel, keel::atom, pause, "pause")
CAF_ADD_ATOM(keel, keel::atom, probe, "probe")
CAF_ADD_ATOM(keel, keel::atom, task, "task")

CAF_ADD_TYPE_ID(keel, (keel::session_record))
CAF_ADD_TYPE_ID(keel, (keel::inbox_entry))
CAF_ADD_TYPE_ID(keel, (keel::log_entry))
CAF_ADD_TYPE_ID(keel, (keel::context_entry))
CAF_ADD_TYPE_ID(keel, (keel::thread_snapshot))
CAF_ADD_TYPE_ID(keel, (keel::accept_request))
CAF_ADD_TYPE_ID(keel, (keel::accept_result))
CAF_ADD_TYPE_ID(keel, (keel::turn_commit))
CAF_ADD_TYPE_ID(keel, (keel::history_page))
CAF_ADD_TYPE_ID(keel, (keel::thread_event))
CAF_ADD_TYPE_ID(keel, (keel::completion_request))
CAF_ADD_TYPE_ID(keel, (keel::completion))
CAF_ADD_TYPE_ID(keel, (keel::protocol::client_frame))
CAF_ADD_TYPE_ID(keel, (keel::persistence_stats))
CAF_ADD_TYPE_ID(keel, (std::vector<std::string>) )
CAF_ADD_TYPE_ID(keel, (keel::child_info))
CAF_ADD_TYPE_ID(keel, (std::vector<keel::child_info>) )
CAF_ADD_TYPE_ID(keel, (keel::provider_health_record))
CAF_ADD_TYPE_ID(keel, (std::vector<keel::provider_health_record>) )
CAF_ADD_TYPE_ID(keel, (keel::attempt_request))
CAF_ADD_TYPE_ID(keel, (keel::attempt_outcome))
CAF_ADD_TYPE_ID(keel, (keel::tree_link))
CAF_ADD_TYPE_ID(keel, (std::vector<keel::tree_link>) )
CAF_ADD_TYPE_ID(keel, (keel::outbox_entry))
CAF_ADD_TYPE_ID(keel, (keel::spawn_request))
CAF_ADD_TYPE_ID(keel, (keel::spawn_result))
CAF_ADD_TYPE_ID(keel, (keel::recovery_step))
CAF_ADD_TYPE_ID(keel, (keel::recovery_report))
CAF_ADD_TYPE_ID(keel, (keel::recovery_plan))
CAF_ADD_TYPE_ID(keel, (std::vector<keel::session_record>) )
CAF_ADD_TYPE_ID(keel, (std::vector<uint32_t>) )
CAF_ADD_TYPE_ID(keel, (std::vector<uint64_t>) )
CAF_ADD_TYPE_ID(keel, (keel::cluster_member_info))
CAF_ADD_TYPE_ID(keel, (keel::cluster_status))
CAF_ADD_TYPE_ID(keel, (keel::tool_run))
CAF_ADD_TYPE_ID(keel, (keel::tool_outcome))
CAF_ADD_TYPE_ID(keel, (keel::dead_letter))
CAF_ADD_TYPE_ID(keel, (std::vector<keel::dead_letter>) )
CAF_ADD_TYPE_ID(keel, (keel::reply_delivery))
CAF_ADD_TYPE_ID(keel, (std::vector<keel::reply_delivery>) )
CAF_ADD_TYPE_ID(keel, (keel::owner_notice))
CAF_ADD_TYPE_ID(keel, (std::vector<keel::owner_notice>) )

CAF_ADD_ATOM(keel, keel::atom, wedge, "wedge")
CAF_ADD_ATOM(keel, keel::atom, writable, "writable")
CAF_ADD_ATOM(keel, keel::atom, expire, "expire")
CAF_ADD_ATOM(keel, keel::atom, agent_status, "agentstat")

CAF_END_TYPE_ID_BLOCK(keel)

namespace keel {

/// Names under which the root supervisor registers its children in the
/// actor system's registry, so callers find a restarted child again.
namespace names {

constexpr caf::atom_value persistence = caf::atom("persist");
constexpr caf::atom_value root = caf::atom("root");
/// The providers supervisor: reach a pool with `atom::forward` and the pool's
/// name, so requests are held while the pool restarts.
constexpr caf::atom_value providers = caf::atom("providers");
constexpr caf::atom_value orchestrator = caf::atom("orch");
/// The dynamic supervisor of conversations (child id = thread id); reach a
/// conversation with `atom::forward` and its thread id.
constexpr caf::atom_value conversations = caf::atom("convs");
constexpr caf::atom_value gateway = caf::atom("gateway");
/// Cluster only: the cluster actor (membership, shard ownership) and the
/// node's door for its peers.
constexpr caf::atom_value cluster = caf::atom("cluster");
constexpr caf::atom_value peers = caf::atom("peers");
/// The dead-letter queue.
constexpr caf::atom_value dead_letters = caf::atom("deadletter");
/// The outbound channels.
constexpr caf::atom_value channels = caf::atom("channels");
/// The owner's notifications.
constexpr caf::atom_value notifier = caf::atom("notifier");

/// Every name above.
constexpr caf::atom_value all[]
  = {persistence, root,  providers,    orchestrator, conversations, gateway,
     cluster,     peers, dead_letters, channels,     notifier};

} // namespace names

/// A supervisor (`keel/supervisor.hpp`; docs/supervision.md): the operator
/// and management part of its interface. The behaviour itself is untyped,
/// because it forwards arbitrary messages to its children; cast a
/// `caf::actor` of a supervisor to this handle with `caf::actor_cast`.
using supervisor_actor = caf::typed_actor<
  // Lists the children in start order, recursing into child supervisors.
  caf::replies_to<atom::children>::with<std::vector<child_info>>,
  // Sends an exit with the given reason to the child at a '/'-separated
  // path relative to this supervisor ("persistence", "providers/default");
  // not_found naming the path if there is none.
  caf::replies_to<atom::kill_child, std::string,
                  caf::error>::with<caf::ok_atom>,
  // Dynamic supervisors: starts a child (id, arguments of the start
  // function); answers its first incarnation.
  caf::replies_to<atom::start_child, std::string,
                  caf::message>::with<caf::actor>,
  // Stops a child (its shutdown spec applies) and answers once it is gone;
  // a dynamic supervisor forgets it, a static one keeps it stopped.
  caf::replies_to<atom::stop_child, std::string>::with<caf::ok_atom>,
  // Delivers a message to a child by id, keeping the original sender and
  // request id (the child's reply goes straight to the sender); held while
  // the child restarts. Send it as a request through a `caf::actor` handle
  // to get the child's reply.
  caf::reacts_to<atom::forward, std::string, caf::message>>;

/// The persistence actor: owns the store (RocksDB or PostgreSQL, see
/// keel/store.hpp and keel/pg_store.hpp); every durable mutation goes
/// through it. Writes are group-committed: each write request joins the
/// pending group, and one synced WriteBatch commits the group before any of
/// its requests is answered.
using persistence_actor = caf::typed_actor<
  // Whether the last write succeeded (see `persistence_stats::writable`);
  // answered at once, without I/O: the node's liveness check. While it is
  // false, a later probe write tells when the store writes again.
  caf::replies_to<atom::writable>::with<bool>,
  // Appends a message to its thread's inbox and log unless its client id is
  // known; answers once the write is synced.
  caf::replies_to<atom::accept, accept_request>::with<accept_result>,
  // Commits a turn (inbox removal, context, log) atomically; answers once
  // synced.
  caf::replies_to<atom::commit, turn_commit>::with<caf::ok_atom>,
  // Writes a session record for a conversation of a tenure (see
  // `accept_request::tenure`); answers once synced.
  caf::replies_to<caf::put_atom, session_record, uint64_t>::with<caf::ok_atom>,
  // Writes a provider health record; answers once synced.
  caf::replies_to<caf::put_atom, provider_health_record>::with<caf::ok_atom>,
  // Reads every provider health record.
  caf::replies_to<atom::health>::with<std::vector<provider_health_record>>,
  // Loads what a conversation needs to resume a thread.
  caf::replies_to<atom::load, std::string>::with<thread_snapshot>,
  // Reads a page of a thread's history: thread, after, limit.
  caf::replies_to<atom::history, std::string, seq_t,
                  uint64_t>::with<history_page>,
  // Lists threads with unanswered inbox entries.
  caf::replies_to<atom::inboxes>::with<std::vector<std::string>>,
  // Spawns a child agent (parent, child, agent: empty for the parent's):
  // writes the child's session (bound to the agent) and its tree link;
  // answers once synced. `unknown_agent` if the node has no such agent.
  caf::replies_to<atom::spawn, std::string, std::string,
                  std::string>::with<spawn_result>,
  // Writes a dead letter (a new one leaves the outbox in the same write),
  // for a writer of a tenure (0 for the dead-letter queue's updates).
  caf::replies_to<caf::put_atom, dead_letter, uint64_t>::with<caf::ok_atom>,
  // Reads the dead letters, in key order; `true`: only those from threads
  // this node serves (all on a single node).
  caf::replies_to<atom::dead_letters, bool>::with<std::vector<dead_letter>>,
  // Rewrites a reply's delivery record (removes it once no channel is
  // left), for a writer of a tenure (0 for the channels); answers once
  // synced.
  caf::replies_to<caf::put_atom, reply_delivery, uint64_t>::with<caf::ok_atom>,
  // Reads the replies on their way to outbound channels, of the threads
  // this node serves (all on a single node).
  caf::replies_to<atom::deliveries>::with<std::vector<reply_delivery>>,
  // Writes what the owner was told about a kind and subject; answers once
  // synced.
  caf::replies_to<caf::put_atom, owner_notice>::with<caf::ok_atom>,
  // Reads every owner notice record.
  caf::replies_to<atom::notices>::with<std::vector<owner_notice>>,
  // Stores the status (active, paused, archived) an operator gave an
  // agent; answers once synced.
  caf::replies_to<atom::agent_status, std::string,
                  std::string>::with<caf::ok_atom>,
  // Lists a thread and its descendants, parents before children.
  caf::replies_to<atom::subtree, std::string>::with<std::vector<std::string>>,
  // Reads every session record and tree link (the agent tree).
  caf::replies_to<atom::agents>::with<std::vector<session_record>,
                                      std::vector<tree_link>>,
  // Reads a page of them: at most `limit` sessions after thread `after`
  // ("": from the first), in key order, and their links to their children.
  caf::replies_to<atom::agents, std::string, uint64_t>::with<
    std::vector<session_record>, std::vector<tree_link>>,
  // The recovery plan: after boot the plan made before serving anything
  // (steps 1-4 of `plan_recovery` already done on disk); after a restart of
  // the orchestrator just the threads with pending work.
  caf::replies_to<atom::recover>::with<recovery_plan>,
  // Cluster: the recovery plan of the threads of `shards`, which this node
  // just came to hold: steps 1-4 for those threads only, written as at
  // boot (ACTIVE sessions SUSPENDED with `recovered_at`).
  caf::replies_to<atom::recover, std::vector<uint32_t>>::with<recovery_plan>,
  // Stores the final recovery report (meta `last_recovery`).
  caf::replies_to<caf::put_atom, recovery_report>::with<caf::ok_atom>,
  // Reads the last recovery report; not_found if none ran.
  caf::replies_to<atom::report>::with<recovery_report>,
  // Returns counters.
  caf::replies_to<atom::stats>::with<persistence_stats>,
  // (internal) Commits the pending group.
  caf::reacts_to<atom::flush>,
  // (internal) Writes a probe while the last write failed.
  caf::reacts_to<atom::probe>>;

/// The dead-letter queue (`keel/dead_letter_queue.hpp`): the one writer of
/// dead letters, their scheduled retries and the operators' door to them.
using dead_letter_queue_actor = caf::typed_actor<
  // Writes a new dead letter: an outbox entry its target refused for good,
  // why, and the writer's tenure; answers once synced.
  caf::replies_to<caf::put_atom, outbox_entry, std::string,
                  uint64_t>::with<caf::ok_atom>,
  // Writes a new dead letter for a reply no channel delivered (`channels`
  // and `reason` set), scheduling its retries; its delivery record goes in
  // the same write. Answers once synced.
  caf::replies_to<caf::put_atom, dead_letter>::with<caf::ok_atom>,
  // Lists every dead letter (every node's in a cluster), in key order.
  caf::replies_to<atom::dead_letters>::with<std::vector<dead_letter>>,
  // Retries letter (from, seq) now; answers it as stored after the retry.
  // not_found if there is none, conflict if it is delivered or dropped or
  // a retry of it is under way.
  caf::replies_to<atom::retry, std::string, seq_t>::with<dead_letter>,
  // Drops letter (from, seq) for a reason: it is never retried again;
  // answers it as stored. Errors as for a retry.
  caf::replies_to<atom::drop, std::string, seq_t,
                  std::string>::with<dead_letter>,
  // (internal) Runs a round of scheduled retries.
  caf::reacts_to<atom::tick>>;

/// The outbound channels (`keel/channel_delivery.hpp`): sends committed
/// replies to the channels their threads are bound to, each channel with
/// its retry policy, and hands what no attempt delivered to the dead-letter
/// queue.
using channel_delivery_actor = caf::typed_actor<
  // A reply was committed with its delivery record: send it (no answer).
  caf::reacts_to<atom::deliver, reply_delivery>,
  // One attempt of a reply's dead letter on each of its channels; answers
  // the letter with `channels` the ones that failed again and `reason`
  // why (no channels left: delivered).
  caf::replies_to<atom::retry, dead_letter>::with<dead_letter>,
  // Sends a notice to the owner's channel (named) with the channel's
  // retries; answers it `sent`, or `failed` with the last error.
  caf::replies_to<atom::notify, owner_notice, std::string>::with<owner_notice>,
  // (internal) The next attempt of send `id` is due.
  caf::reacts_to<atom::attempt, uint64_t>,
  // (internal) Send `id` ended: delivered, else the failure's kind, its
  // Retry-After in ms (-1: none) and what happened.
  caf::reacts_to<atom::attempt, uint64_t, bool, uint8_t, int64_t, std::string>,
  // (internal) Reads the delivery records again (at start, after a failed
  // read, and in a cluster periodically).
  caf::reacts_to<atom::tick>>;

/// The owner's notifications (`keel/notifier.hpp`): takes what the owner
/// should hear about, lets each kind and subject through once per dedup
/// window (the state stored, so a restart does not send again) and sends
/// it to the owner's channel.
using notifier_actor = caf::typed_actor<
  // Raises a notice (`kind`, `subject`, `text`; the rest is the
  // notifier's). No answer.
  caf::reacts_to<atom::notify, owner_notice>,
  // Lists what was sent and suppressed, newest first.
  caf::replies_to<atom::notices>::with<std::vector<owner_notice>>,
  // (internal) Reads the stored state (at start, after a failed read), or
  // writes the suppressed counts not stored yet.
  caf::reacts_to<atom::tick>>;

/// The router of a provider pool: the pool's front door. Owns the failover
/// chain's circuit breakers, health and retry timers; makes each attempt
/// through a provider worker (its sibling under the pool's supervisor).
using provider_router_actor = caf::typed_actor<
  // Completes a conversation: retries, backs off and fails over as the
  // pool's policy says; answers the completion or a descriptive error.
  caf::replies_to<atom::complete, completion_request>::with<completion>,
  // Returns the health of every provider of the chain.
  caf::replies_to<atom::health>::with<std::vector<provider_health_record>>,
  // Cancels the request answering message `seq` of a thread (its turn
  // ended): no further attempt, no further status frame, no answer.
  caf::reacts_to<atom::cancel, std::string, seq_t>,
  // (internal) A retry delay of request `id` has passed.
  caf::reacts_to<atom::retry, uint64_t>,
  // (internal) The deadline timer: attempts and time budgets past their
  // deadlines end.
  caf::reacts_to<atom::expire>>;

/// A provider worker: makes calls to one provider (offline or over HTTP)
/// and classifies their outcomes. A crash fails only its own calls.
using provider_worker_actor = caf::typed_actor<
  // Makes one attempt; answers its classified outcome (never an error).
  caf::replies_to<atom::attempt, attempt_request>::with<attempt_outcome>,
  // Cancels the attempt of the pool's request `call_id`, if one runs (its
  // HTTP connection is closed); the attempt answers a failure at once.
  caf::reacts_to<atom::cancel, uint64_t>,
  // (internal) The outcome of call `id` is in (delay passed, HTTP done).
  caf::reacts_to<atom::deliver, uint64_t, attempt_outcome>>;

/// A conversation: one per thread, a child of the conversations supervisor.
/// Holds the ordered inbox and drains it one turn at a time; every failure
/// inside a turn becomes a descriptive error in the thread.
using conversation_actor = caf::typed_actor<
  // Accepts a client's message (client id, text, the agent it names or
  // empty, the orchestrator's route sequence number); answers once it is
  // durable. Refused before anything is written with `unknown_agent` (no
  // such agent, no system agent) or `agent_mismatch` (the thread is bound
  // to another).
  caf::replies_to<atom::accept, std::string, std::string, std::string,
                  uint64_t>::with<accept_result>,
  // Accepts a message from another thread (its outbox entry, route
  // sequence number); the outbox entry is removed in the same write.
  caf::replies_to<atom::deliver, outbox_entry, uint64_t>::with<accept_result>,
  // Cancels the thread: answers its pending messages with a `cancelled`
  // error, writes the session CLOSED; answers once all of it is durable.
  caf::replies_to<atom::cancel>::with<caf::ok_atom>,
  // Pauses (true) or resumes the thread once no turn runs: a paused thread
  // answers each message with the offline text (code `agent_paused`).
  // Answers once the session record says so on disk; not_found if the
  // thread has no session, thread_closed if it was cancelled.
  caf::replies_to<atom::pause, bool>::with<caf::ok_atom>,
  // Where message `seq` stands as a task: its log entry with `task` live
  // for the running turn and the messages waiting, else as stored;
  // not_found if the thread has no such message.
  caf::replies_to<atom::task, seq_t>::with<log_entry>,
  // A child was spawned under the thread (by the thread's own turn, or a
  // client's spawn frame): the agent tools may address it.
  caf::reacts_to<atom::spawn, std::string>,
  // (internal) Retries delivering the outbox.
  caf::reacts_to<atom::redeliver>,
  // (internal) Retries storing (or learning the fate of) the running turn's
  // commit, then starts the next turn if none runs.
  caf::reacts_to<atom::drain>,
  // (internal) Reads the stored inbox back again: accepts that timed out
  // may have landed since.
  caf::reacts_to<atom::readback>,
  // (internal) The idle timer fired.
  caf::reacts_to<atom::idle>,
  // (internal) The deadline timer: requests past their deadlines end.
  caf::reacts_to<atom::expire>,
  // Passivates now (as the idle timer would) if nothing is pending: the
  // orchestrator makes room under `threads.max_live`. Answers whether it
  // does.
  caf::replies_to<atom::passivate>::with<bool>,
  // The same while the node drains: this and every later passivation stop
  // without writing the session SUSPENDED (the node's stop does, in one
  // batch).
  caf::replies_to<atom::passivate, atom::drain>::with<bool>>;

/// A tool runner: runs one tool call as a subprocess on a job thread
/// (never on a CAF worker), then quits. A cancel flag handed over at spawn
/// ends the run early (see `keel/tool_runner.hpp`).
using tool_runner_actor = caf::typed_actor<
  // Runs the tool to completion and answers how it ended; a tool that
  // cannot start, fails or times out is an outcome, never an error.
  caf::replies_to<atom::run, tool_run>::with<tool_outcome>,
  // From the job thread that ran it: how the run ended.
  caf::reacts_to<atom::report, tool_outcome>>;

/// The orchestrator: routes a thread to its conversation (through the
/// conversations supervisor, starting it on demand); never waits on I/O.
using orchestrator_actor = caf::typed_actor<
  // Routes a client's message (thread, client id, text, the agent it
  // names or empty); answers once durable.
  caf::replies_to<atom::route, std::string, std::string, std::string,
                  std::string>::with<accept_result>,
  // A conversation asks to passivate, naming the route sequence number of
  // the last message it received; answers true if nothing was routed to it
  // since (the orchestrator then stops it through its supervisor).
  caf::replies_to<atom::passivate, std::string, uint64_t>::with<bool>,
  // A conversation (re)started: messages routed before may have been lost
  // with an earlier incarnation.
  caf::reacts_to<atom::started, std::string>,
  // Returns the number of running conversations, of conversations stopped
  // for being idle since the orchestrator started, and of those among them
  // passivated to make room under `threads.max_live` (evictions).
  caf::replies_to<atom::stats>::with<uint64_t, uint64_t, uint64_t>,
  // Whether the recovery after the start has run (the node is ready once
  // it has). Answered at once: the node's liveness check.
  caf::replies_to<atom::health>::with<bool>,
  // Drains before a stop: routes, deliveries and spawns are refused with
  // `draining` from now on; each conversation passivates once idle and
  // those still busy after `wait` are stopped (their messages are answered
  // after the next start). Answers once every conversation is gone.
  caf::replies_to<atom::drain, caf::timespan>::with<caf::ok_atom>,
  // (chaos) Blocks the orchestrator's worker for the given time: a wedged
  // node for the liveness check and the watchdog to notice.
  caf::reacts_to<atom::wedge, caf::timespan>,
  // Delivers a message between threads (an outbox entry) to its target;
  // answers once it is durable in the target's inbox.
  caf::replies_to<atom::deliver, outbox_entry>::with<accept_result>,
  // Spawns a child agent (parent, child, agent: empty for the parent's);
  // answers once durable.
  caf::replies_to<atom::spawn, std::string, std::string,
                  std::string>::with<spawn_result>,
  // Cancels a thread and its descendants; answers every thread closed.
  caf::replies_to<atom::cancel, std::string>::with<std::vector<std::string>>,
  // Pauses (true) or resumes a thread through its conversation (on the
  // thread's owner in a cluster).
  caf::replies_to<atom::pause, std::string, bool>::with<caf::ok_atom>,
  // Where message `seq` of a thread stands as a task, from its conversation
  // (on the thread's owner in a cluster).
  caf::replies_to<atom::task, std::string, seq_t>::with<log_entry>,
  // (internal) Runs the recovery: resumes threads with pending work,
  // finishes interrupted cancels, stores the boot recovery report.
  caf::reacts_to<atom::recover>,
  // Cluster: this node came to hold `shards`: recovers their threads (see
  // the persistence actor) and resumes those with pending work.
  caf::reacts_to<atom::recover, std::vector<uint32_t>>,
  // Cluster: this node hands `shards` over (or lost them): asks their
  // conversations to passivate, which each does once idle, and stops the
  // rest after `wait` (a turn still running then is abandoned: the new
  // owner answers its message again); answers once every one is gone.
  caf::replies_to<atom::release, std::vector<uint32_t>,
                  caf::timespan>::with<caf::ok_atom>,
  // (internal) Checks on the release `id`: done, or asks again.
  caf::reacts_to<atom::release, uint64_t>,
  // (internal) The deadline timer: requests past their deadlines fail with
  // `request_timeout`.
  caf::reacts_to<atom::expire>>;

/// The gateway bridge: between the WebSocket server's I/O threads and the
/// actors. Keeps thread subscriptions and fans events out to connections.
using gateway_bridge_actor = caf::typed_actor<
  // A connection opened.
  caf::reacts_to<atom::open, connection_id>,
  // A valid client frame arrived on a connection.
  caf::reacts_to<atom::frame, connection_id, protocol::client_frame>,
  // A connection closed.
  caf::reacts_to<atom::closed, connection_id>,
  // An HTTP API request: request id, method, target, body.
  caf::reacts_to<atom::http, uint64_t, std::string, std::string, std::string>,
  // An event of a thread for its subscribers.
  caf::reacts_to<atom::publish, thread_event>,
  // (internal) The deadline timer: requests past their deadlines end.
  caf::reacts_to<atom::expire>>;

/// The cluster actor (cluster only): keeps the node's lease, reads the
/// membership and shard tables every heartbeat and acts on them (claims
/// orphan shards, asks for and hands over shards, declares dead nodes
/// dead), keeping the node's shard table current. Exits the process (code
/// 75) once it finds itself declared dead.
using cluster_actor = caf::typed_actor<
  // (internal) One round: renew the lease, read the tables, act.
  caf::reacts_to<atom::tick>,
  // The cluster as this node sees it.
  caf::replies_to<atom::stats>::with<cluster_status>,
  // Drains a member (`keelctl drain NODE`): it hands every shard away and
  // takes none; `force` allows draining the last up member. Answers the
  // member's new state.
  caf::replies_to<atom::drain, std::string, bool>::with<std::string>>;

/// The node's door for its peers (cluster only), published on the
/// middleman port, and the only actor of a node that sends to or takes
/// messages from another node (the node's components are not in CAF's
/// registry, and answers from this node's orchestrator are relayed, so no
/// other actor is known to CAF's network layer). Untyped, because it
/// forwards requests of every kind:
///
/// From peers (every message carries the cluster token, compared in
/// constant time; a wrong one is refused with `unauthorized`, or dropped):
/// - `(route, token, thread, message)`: a request for a thread this node
///   serves (`message` is an orchestrator request: route, deliver, spawn,
///   cancel, pause, task); handed to the orchestrator, whose answer this
///   actor sends back. `not_owner` if this node does not serve the thread.
///   The sending peer gets the thread's events from now.
/// - `(interest, token, thread)`: the sending peer gets the thread's
///   events; answers ok.
/// - `(publish, token, thread_event)`: an event of a thread this node's
///   clients follow, for this node's bridge.
///
/// From this node:
/// - `(forward, thread, message)`: sends an orchestrator request for a
///   thread another node serves to its owner and answers the owner's
///   answer. Requests of one thread go one at a time, in order; one that
///   finds the owner gone or moved is sent again (to the new owner, or
///   here once this node holds the thread) until `cluster.route_timeout`,
///   then answered `unavailable`. Client ids make the resends idempotent.
/// - `(interest, thread)`: registers this node's interest with the
///   thread's owner (again whenever the owner changes); answers ok once the
///   owner took it (or could not be asked), so a subscription is confirmed
///   only when the owner's events come.
/// - `(publish, thread_event)`: an event of a thread served here, for the
///   peers of the nodes that follow it.
using peers_actor = caf::actor;

} // namespace keel
