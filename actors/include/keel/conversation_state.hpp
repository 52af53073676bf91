#pragma once

// The state of a conversation actor: what outlives a turn (the session,
// the inbox, the context, accepts, the outbox, passivation), the running
// turn as one pointer, and the builders of the requests and commits the
// turn's actions ask for.

#include <atomic>
#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <caf/actor_clock.hpp>
#include <caf/typed_response_promise.hpp>

#include "keel/actors.hpp"
#include "keel/compactor.hpp"
#include "keel/conversation_config.hpp"
#include "keel/deadline_set.hpp"
#include "keel/turn.hpp"

namespace keel {

/// A message to accept: from a client (`from` empty: client id and text
/// only) or from another thread (its whole outbox entry).
using incoming_message = outbox_entry;

/// An accept that arrived before the thread's state was loaded.
struct deferred_accept {
  caf::typed_response_promise<accept_result> promise;
  incoming_message msg;
};

/// What became of the spawns a turn's reply asked for, made durable before
/// the turn commits (see `spawn_then_commit` in conversation.cpp).
struct spawn_outcomes {
  /// Children spawned for this turn.
  std::set<std::string> created;
  /// Spawns the store refused for good, with why (the id is taken).
  std::map<std::string, std::string> refused;
};

/// A status event a turn's step or answer gives rise to: its `state` and
/// `detail` (see the status frame).
struct status_notice {
  std::string state;
  std::string detail;
};

/// The parts of a conversation's state that few threads ever use: a tree's
/// children, messages to other threads, cancels, pauses and owner notices.
/// Kept apart (see `conversation_state::extras`) so that a thread that
/// uses none of them pays one pointer for them: its actor then fits
/// jemalloc's 1,792-byte size class instead of the 2,048-byte one.
struct conversation_extras {
  /// Cancels to answer once the session is CLOSED on disk.
  std::vector<caf::typed_response_promise<caf::ok_atom>> cancels;
  /// Pauses and resumes to write once no turn runs (the last one wins),
  /// each answered once it is on disk.
  std::vector<std::pair<bool, caf::typed_response_promise<caf::ok_atom>>>
    pauses;
  /// The thread's children (from the tree and this activation's spawns).
  std::set<std::string> children;
  /// Messages to other threads, durable in the outbox, not delivered yet.
  std::map<seq_t, outbox_entry> outbox;
  /// Outbox entries with a delivery in flight.
  std::set<seq_t> delivering;
  /// Notices for the owner about the commit being built (a tool disabled,
  /// every provider failing, the guard's stop), raised once it is durable.
  std::vector<owner_notice> owner_notices;
};

/// State of a conversation actor.
struct conversation_state {
  static inline const char* name = "keel.conversation";

  conversation_config cfg;
  /// The deadlines of the requests in flight, under one timer.
  deadline_set deadlines;
  /// The epoch of the thread's shard this node held when the load began
  /// (`shard_table::tenure`; 0 on a single node). Every write carries it:
  /// none commits once the shard left the node, even if it came back, so
  /// a view that misses another node's writes never overwrites them.
  uint64_t tenure = 0;
  /// The session record (valid if `session_exists`).
  session_record session;
  /// Durable, unanswered messages in order; the front is the current turn.
  std::list<inbox_entry> inbox;
  /// The model's working memory, shared with the requests made from it.
  context_list context;
  /// `estimate_tokens(context)`, kept with every change of the context, so
  /// that a turn's look at the window costs the entries it adds, not the
  /// thread's length.
  uint64_t context_tokens = 0;
  /// Next sequence number to hand out.
  seq_t next_seq = 1;
  /// Accepts sent to persistence and not answered yet, by sequence number,
  /// with the promise to answer the sender.
  std::map<seq_t, caf::typed_response_promise<accept_result>> accepting;
  /// Accepts waiting for the load.
  std::vector<deferred_accept> deferred;
  /// Route sequence number of the last message the orchestrator routed
  /// here (named when asking to passivate).
  uint64_t last_route = 0;
  /// The route a passivation under way began at (its SUSPENDED write or
  /// its request to stop is in flight): asked again meanwhile, we say yes
  /// without a second write.
  std::optional<uint64_t> passivation;
  /// When the thread last became idle.
  caf::actor_clock::time_point idle_since;
  /// A commit whose outcome is unknown (it failed or timed out, and may
  /// still land): the store says whether it did before the turn runs again.
  std::unique_ptr<turn_commit> unsure_commit;
  /// Status events about the commit being built (a tool disabled, an agent
  /// limit met), published when it goes to the store.
  std::vector<status_notice> notices;
  /// What is left of the running turn's `turn_timeout` now (the whole of
  /// it before a turn runs): the budget of its next call or tool run.
  std::chrono::milliseconds turn_time_left() const;
  /// The running turn, from its first model call to the commit of its
  /// answer; null while idle.
  std::unique_ptr<turn> running;
  /// Null until a rarely used part is first changed (see `extras`).
  std::unique_ptr<conversation_extras> extras_;
  /// Ends the running tool's process group when set (a cancel of the
  /// thread, the actor's exit).
  std::shared_ptr<std::atomic<bool>> tool_cancel;
  // The flags and the counter last, together: scattered between wider
  // members each took a word of padding (the actor fits a smaller size
  // class without it).
  /// True once the thread's state has been loaded from the store.
  bool loaded = false;
  /// Whether the thread has a stored session (`session` is valid).
  bool session_exists = false;
  /// True once this activation has written the session as ACTIVE.
  bool session_active = false;
  /// True while a turn (provider call and commit) runs.
  bool turn_running = false;
  /// Asked to passivate while busy (a drain, a shard release, room under
  /// `max_live`): passivates as soon as it is idle, without waiting for
  /// the idle timeout or being asked again.
  bool passivate_when_idle = false;
  /// The node drains (asked to passivate for it): passivations leave the
  /// session as stored, since the node's stop marks every ACTIVE session
  /// SUSPENDED in one batch (and a boot's recovery does, should it crash).
  bool node_draining = false;
  /// True while an idle timer is pending (at most one is).
  bool idle_timer_armed = false;
  /// True once a cancel arrived: pending messages are answered with a
  /// `cancelled` error, then the session is written CLOSED.
  bool closing = false;
  /// True if the quarantine took the committed steps of the inbox front's
  /// turn (`thread_snapshot::steps_lost`): it is answered with an error.
  bool steps_lost = false;
  /// True while a redelivery timer is pending.
  bool redeliver_armed = false;
  /// True after an accept failed or timed out, until the stored inbox was
  /// read back: an accept that lands late must still join the live inbox.
  bool unsure_accepts = false;
  /// True while the stored inbox is read back for `unsure_accepts`.
  bool reading_back = false;
  /// The next request tells the model to try a different approach: the
  /// running turn's mark (`turn::nudge`), which `make_request` reads.
  bool nudge = false;
  /// True once the thread's agent counts this conversation among its live
  /// ones (`agent_catalog::enter`; it leaves when the actor ends).
  bool counted_live = false;
  /// Runs of the inbox front's turn after its first (a failed commit, a
  /// restart while it was live).
  uint32_t attempts = 0;

  conversation_state() = default;
  ~conversation_state();
  conversation_state(const conversation_state&) = delete;
  conversation_state& operator=(const conversation_state&) = delete;

  /// True if nothing is pending: the actor may passivate.
  bool idle() const;

  /// The rarely used parts as they are: empty ones while none was made.
  /// Never allocates, so reads of every thread cost nothing.
  const conversation_extras& extras() const;

  /// The rarely used parts, for changing: made on first use.
  conversation_extras& edit_extras();
  /// True if the thread takes no new messages.
  bool closed() const;
  /// The completion request answering the inbox front.
  completion_request make_request() const;
  /// The agent's system prompt with its prompt files as they are now (one
  /// that cannot be read is left out and logged once).
  std::string system_prompt() const;
  /// The commit of a successful turn answering the inbox front; agent tool
  /// calls in the reply become outbox entries (to children spawned as
  /// `spawns` says) and notes in the answer.
  turn_commit make_reply_commit(const completion& reply, millis now,
                                const spawn_outcomes& spawns = {});
  /// The children the reply's spawn_agent calls name that the thread does
  /// not have yet, each once, at most `max_spawns_per_reply`, with the
  /// agent each asks for (empty: the thread's own): the ones past it, and
  /// those of an agent the thread's may not spawn (`agents[].spawns`), are
  /// refused in `outcomes` (the former noticed).
  std::vector<std::pair<std::string, std::string>>
  new_children(const completion& reply, spawn_outcomes& outcomes);
  /// The commit of a failed turn: a descriptive error in the thread, with
  /// the operators' `detail` beside it. If tool steps of the turn are in
  /// the context, the error (as the user read it) closes them as the
  /// assistant's answer there.
  turn_commit make_error_commit(const std::string& code,
                                const std::string& text, millis now,
                                const std::string& detail = {});
  /// The tools configured for this thread (by its kind: root or agent).
  const std::vector<tool_config>& tools() const;
  /// How often `tool` failed in this thread.
  uint32_t tool_failures(const std::string& tool) const;
  /// True once `tool` failed `disable_tool_after` times in this thread.
  bool tool_disabled(const std::string& tool) const;
  /// The configured, enabled tools, as the model is told about them.
  std::vector<tool_spec> offered_tools() const;
  /// True if `reply` ends the turn: it calls no tools besides the agent
  /// tools (which take effect with the answer).
  bool final_reply(const completion& reply) const;
  /// True if the inbox front's message is in the context: a tool step of
  /// its turn is stored.
  bool turn_in_context() const;
  /// The calls of the turn's last model answer that have no result in the
  /// context yet, in order.
  std::vector<tool_call> unanswered_calls() const;
  /// A step of the turn: the model's answer asking for tools (with the
  /// user message, on the turn's first step). Agent tool calls among them
  /// take effect here (their results and messages in the same commit).
  turn_commit make_call_step(const completion& reply, millis now,
                             const spawn_outcomes& spawns);
  /// A step of the turn: the result of `call`. A failure of a configured
  /// tool (`counts_failure`) is counted in the session; the one that
  /// reaches `disable_tool_after` disables the tool, said in the history
  /// and to the model.
  turn_commit make_result_step(const tool_call& call,
                               const tool_outcome& outcome, bool counts_failure,
                               millis now);
  /// The end of a turn cancelled while `call` ran: its result (counted as
  /// no failure) and the `cancelled` error, in one commit.
  turn_commit make_cancelled_result(const tool_call& call,
                                    const tool_outcome& outcome, millis now);
  /// A step of the turn: every call of `calls` answered as interrupted by a
  /// restart (they were committed, and may have run, before a crash).
  turn_commit make_interrupted_step(const std::vector<tool_call>& calls,
                                    millis now);
  /// Forgets what the turn that just ended kept (the running turn, its
  /// notices and attempts).
  void end_turn();

  /// The log entry of the inbox front with its task `state` (in progress
  /// reads as retried after a rerun) as of `now`.
  log_entry task_entry(task_state state, millis now) const;

  /// Where the running turn's message stands: dispatched, in progress once
  /// a step is stored, retried once it ran again.
  task_state live_task_state() const;
  /// The estimated tokens of `req`, made by `make_request` from the
  /// context as it is now: its context, system prompt and tools.
  uint64_t request_tokens(const completion_request& req) const;
  /// A compaction of the context before the running turn, to below the
  /// warning share of the window (`overflowed`: the provider refused the
  /// context, so also to at most half of `req`).
  compactor make_compactor(const completion_request& req,
                           bool overflowed) const;
  /// A request for the summary of `text`, which the thread's clients do
  /// not see.
  completion_request make_summary_request(std::string text) const;
  /// A step of the turn: the outcome of a compaction, in one batch.
  turn_commit make_compaction_commit(const compaction_result& result) const;
  /// Applies a committed turn to the in-memory state.
  void apply(const turn_commit& commit);
  /// Fails every accept not answered yet (the actor is going down).
  void fail_pending_accepts(const caf::error& reason);
  /// Answers every cancel waiting: with `err`, or done if it is none.
  void answer_cancels(const caf::error& err);
  /// Why `msg` is refused: the thread is closed, another thread writes to
  /// one that does not exist, or the inbox is full; none if it is taken.
  caf::error refusal(const incoming_message& msg) const;
  /// Why `msg` is refused for the agent it names: the thread is bound to
  /// another (`agent_mismatch`), or the node has no such agent and no
  /// system agent (`unknown_agent`); none if it names none or may go on.
  caf::error agent_refusal(const incoming_message& msg) const;
  /// Takes the settings of `agent` (the default agent's if the node has no
  /// such agent any more).
  void bind_agent(const std::string& agent);
  /// Binds a new thread to the agent its first message `entry` asks for:
  /// the default one if none, the system agent if the node has no such
  /// agent (`entry.asked_agent` then names the one asked for).
  void bind_new_thread(inbox_entry& entry, const std::string& asked);
  /// True if the thread's agent is paused or archived: it answers with the
  /// offline text.
  bool agent_offline() const;
  /// The `not_found` error naming this thread.
  caf::error not_found() const;
  /// The durable accept of `msg` under the next sequence number; the first
  /// accept of an activation writes the session ACTIVE with it.
  accept_request make_accept_request(incoming_message msg);
  /// Restores the state from a snapshot.
  void restore(thread_snapshot snapshot);
  /// Takes the stored context (and tool failures) of `snapshot`: after a
  /// step whose commit may or may not have landed, the turn resumes from
  /// what is stored.
  void resume_steps(const thread_snapshot& snapshot);
  /// Adds the stored inbox entries that the live inbox lacks (accepts that
  /// landed after their sender was told they failed), in seq order behind
  /// the running turn.
  void adopt_late_accepts(const std::vector<inbox_entry>& stored);
};

} // namespace keel
