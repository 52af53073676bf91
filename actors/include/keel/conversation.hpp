#pragma once

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
#include <caf/typed_event_based_actor.hpp>

#include "keel/actors.hpp"
#include "keel/compactor.hpp"
#include "keel/config.hpp"
#include "keel/deadline_set.hpp"
#include "keel/shard_table.hpp"
#include "keel/turn_guard.hpp"

namespace keel {

/// The guard's default limits, one copy for the process.
std::shared_ptr<const guard_limits> default_guard_limits();

/// What every conversation of a node reads alike: one copy per node, which
/// each conversation's configuration shares (a live thread's memory counts
/// every byte it holds by itself).
struct conversation_settings {
  /// Provider pool answering the thread.
  std::string pool;
  /// Placed before the context in every completion request.
  std::string system_prompt;
  /// Passivate after this long without work.
  caf::timespan idle_timeout;
  /// A provider call longer than this ends the turn with an error: the
  /// pool stops the call at this deadline (see `turn_timeout_grace`).
  caf::timespan turn_timeout;
  /// Timeout for each persistence request.
  caf::timespan storage_timeout = std::chrono::seconds{30};
  /// Delay before retrying a turn whose commit failed.
  caf::timespan commit_retry_delay = std::chrono::seconds{1};
  /// Unanswered messages held before new ones are refused.
  size_t max_inbox = 1000;
  /// A provider's reply text is cut to this before it enters the context.
  size_t max_reply_bytes = 256 * 1024;
  /// Each line a tool call adds to the answer, and each message to a child
  /// agent, is cut to this.
  size_t max_tool_output_bytes = 64 * 1024;
  /// The tools the model may call in a root thread (its pool's and
  /// `threads.tools`) and in a child agent (its pool's and
  /// `threads.agent_tools`).
  std::vector<tool_config> root_tools;
  std::vector<tool_config> agent_tools;
  /// The limits of one message's turn loop (the default limits unless the
  /// node's are given).
  std::shared_ptr<const guard_limits> guard = default_guard_limits();
  /// A tool failing this often in the thread is disabled there.
  uint32_t disable_tool_after = 3;
  /// When to warn about a full context and compact it; `false`: never.
  compaction_settings compaction;
  bool compaction_enabled = true;
  /// The context window of the pool's first provider, in tokens.
  uint64_t context_window = default_context_window;
  /// Spawns per answer and messages between the tree's threads per client
  /// message (the store enforces children and depth).
  agent_limits agents;
  /// Whom users are told to contact (`owner.contact`).
  std::string owner_contact;
};

/// The settings of a conversation without a node's (one copy per process).
std::shared_ptr<const conversation_settings> default_conversation_settings();

/// Configuration of one conversation actor: its thread's own part, and the
/// node's settings through `->`.
struct conversation_config {
  /// The thread this actor owns.
  std::string thread;
  /// The outbound channels the thread is bound to
  /// (`delivery.channels[].threads`): each answer is committed with a
  /// delivery record for them.
  std::vector<std::string> channels;
  /// In a cluster, the node's shard table: the conversation takes its
  /// tenure from it before it loads the thread. Null on a single node.
  std::shared_ptr<const shard_table> shards;
  /// Shared with every conversation of the node; never null.
  std::shared_ptr<const conversation_settings> settings
    = default_conversation_settings();

  const conversation_settings* operator->() const {
    return settings.get();
  }
};

/// How much longer than `turn_timeout` a conversation waits for its pool,
/// which ends a call at the turn's deadline and answers then.
constexpr caf::timespan turn_timeout_grace = std::chrono::seconds{5};

/// The settings of every conversation of `node`: its thread defaults,
/// storage settings and tools (the guard's limits shared with `node`).
std::shared_ptr<const conversation_settings>
make_conversation_settings(const std::shared_ptr<const node_config>& node);

/// The configuration of the conversation of `thread` on `node`, whose
/// settings are `settings` (see `make_conversation_settings`; null: the
/// defaults).
conversation_config
make_conversation_config(const node_config& node,
                         std::shared_ptr<const conversation_settings> settings,
                         std::string thread);

/// Descriptive messages posted to a thread when a turn fails.
namespace turn_errors {

// The texts with `{ownerContact}` name whom to contact (see
// `with_owner_contact`).

/// Every provider of the pool failed (code `provider_failed`).
constexpr const char* provider_failed
  = "I'm having some technical difficulties right now. Please try again in a "
    "few minutes, or contact {ownerContact} directly.";
/// Every provider refused the credentials (code `provider_unauthorized`).
constexpr const char* provider_unauthorized
  = "I'm not fully set up yet. My team has been notified and will get me "
    "running soon.";
/// Every provider's credit is used up (code `credits_exhausted`).
constexpr const char* credits_exhausted
  = "I've used up my thinking budget for today. I'll be back with more "
    "capacity soon! If this is urgent, please contact {ownerContact}.";
constexpr const char* provider_timeout
  = "My AI provider took too long to answer. Try again in a moment.";
constexpr const char* context_overflow
  = "Our conversation has grown too long for my AI provider. Start a new "
    "thread to continue.";
constexpr const char* provider_rejected
  = "My AI provider could not process this message. Try rephrasing it.";
constexpr const char* cancelled
  = "This thread was cancelled before the message was answered.";
/// Published (status `history_reset`) when the thread's unreadable records
/// were moved to quarantine and it starts fresh.
constexpr const char* history_reset
  = "I had trouble loading our conversation history. Starting fresh for this "
    "thread.";
/// Answers (code `history_reset`) the message whose turn's steps were
/// unreadable and went to quarantine: running it again could repeat a tool
/// call that had effects.
constexpr const char* steps_lost
  = "I lost track of the steps I had already taken on this message while "
    "restarting, so I stopped rather than repeat them. Send it again if you "
    "want me to start over.";
/// Answers (code `agent_paused`) each message of a thread an operator
/// paused.
constexpr const char* agent_offline
  = "I'm currently offline. Please try again later or contact "
    "{ownerContact}.";
constexpr const char* agent_paused_code = "agent_paused";
/// Posted (code `guard_stopped`) before the guard's report when the turn
/// loop was stopped; the report says which limit.
constexpr const char* guard_stopped_code = "guard_stopped";
/// Followed by the error, then `unknown_suffix`.
constexpr const char* unknown_prefix = "Something went wrong: ";
constexpr const char* unknown_suffix = ". Try sending your message again.";

} // namespace turn_errors

/// What the model gets as a tool's result when the call did not run to its
/// end.
namespace tool_texts {

/// A call that was durable but has no result after a restart. It is not run
/// again: a tool may have side effects (a file written, a message sent),
/// and only the model, told what happened, can judge whether to repeat it.
constexpr const char* interrupted
  = "[the tool call was interrupted by a restart before its result was "
    "stored; it was not run again, because it may have had effects. Check "
    "before calling it again.]";

} // namespace tool_texts

/// `text` with `{ownerContact}` replaced by `contact`, or by "our team"
/// when `contact` is empty.
std::string with_owner_contact(const std::string& text,
                               const std::string& contact);

/// Published (status `context_warning`) once a turn when the context
/// passes `warn_at` of the window.
std::string context_warning_text(uint64_t tokens, uint64_t window);

/// Published (status `compacted`) when a compaction is stored.
std::string compacted_text(const compaction_result& result);

/// What the thread's history and the model read when `tool` is disabled
/// after its `failures`-th failure, `error`.
std::string disabled_tool_text(const std::string& tool, uint32_t failures,
                               const std::string& error);

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
  /// The running turn's guard, from its first model call to its commit.
  std::unique_ptr<turn_guard> guard;
  /// The compaction under way, between its summaries.
  std::unique_ptr<compactor> compaction;
  /// Status events about the commit being built (a tool disabled, an agent
  /// limit met), published when it goes to the store.
  std::vector<status_notice> notices;
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
  /// Set when the model repeated itself: the next request tells it to try
  /// a different approach.
  bool nudge = false;
  /// The running turn was warned that its context nears the window.
  bool context_warned = false;
  /// The running turn compacted after the provider said its context
  /// overflowed: a second overflow ends the turn.
  bool overflow_compacted = false;
  /// The compaction just stored: the next model call goes out as it is.
  bool just_compacted = false;
  /// It answers the provider's context overflow: if it changes nothing,
  /// calling again cannot help.
  bool compacting_overflow = false;
  /// Runs of the inbox front's turn after its first (a failed commit, a
  /// restart while it was live).
  uint32_t attempts = 0;

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
  /// The commit of a successful turn answering the inbox front; agent tool
  /// calls in the reply become outbox entries (to children spawned as
  /// `spawns` says) and notes in the answer.
  turn_commit make_reply_commit(const completion& reply, millis now,
                                const spawn_outcomes& spawns = {});
  /// The children the reply's spawn_agent calls name that the thread does
  /// not have yet, each once, at most `max_spawns_per_reply`: the ones past
  /// it are refused in `outcomes` (and noticed).
  std::vector<std::string> new_children(const completion& reply,
                                        spawn_outcomes& outcomes);
  /// The commit of a failed turn: a descriptive error in the thread. If
  /// tool steps of the turn are in the context, the error closes them as
  /// the assistant's answer there.
  turn_commit make_error_commit(const std::string& code,
                                const std::string& text, millis now);
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
  /// A step of the turn: every call of `calls` answered as interrupted by a
  /// restart (they were committed, and may have run, before a crash).
  turn_commit make_interrupted_step(const std::vector<tool_call>& calls,
                                    millis now);
  /// Forgets what the turn that just ended kept (guard, compaction marks).
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

/// One thread's conversation: loads its state, accepts messages durably,
/// drains the inbox one turn at a time, and when idle asks the orchestrator
/// to passivate it (its supervisor then stops it).
conversation_actor::behavior_type
conversation(conversation_actor::stateful_pointer<conversation_state> self,
             conversation_config cfg);

} // namespace keel
