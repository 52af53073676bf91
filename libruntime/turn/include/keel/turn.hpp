#pragma once

// One message's turn loop, decided pure: `turn` holds what the running turn
// knows (its guard, the compaction under way, its once-a-turn marks), and
// each `decide` takes the turn and one event and returns the actions that
// follow, in order. The conversation actor carries the actions out (calls,
// tool runs, commits) and feeds their outcomes back as events; it builds
// the requests and commits from the thread's state. Where a tool's result
// goes: `decide(turn&, const tool_finished&)` (a `commit_result`, then, once
// durable, `decide(turn&, const step_committed&)` for the next move).

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "keel/compactor.hpp"
#include "keel/completion.hpp"
#include "keel/context_window.hpp"
#include "keel/turn_failure.hpp"
#include "keel/turn_guard.hpp"
#include "keel/turn_texts.hpp"
#include "keel/types.hpp"

namespace keel {

/// The guard's default limits, one copy for the process.
std::shared_ptr<const guard_limits> default_guard_limits();

/// What every turn of a node reads alike (part of the node's conversation
/// settings, one copy per node).
struct turn_settings {
  /// Provider pool answering the thread.
  std::string pool;
  /// The limits of one message's turn loop (the default limits unless the
  /// node's are given).
  std::shared_ptr<const guard_limits> guard = default_guard_limits();
  /// When to warn about a full context and compact it; `false`: never.
  compaction_settings compaction;
  bool compaction_enabled = true;
  /// The context window of the pool's first provider, in tokens.
  uint64_t context_window = default_context_window;
  /// Whom users are told to contact (`owner.contact`).
  std::string owner_contact;
  /// How long one message's turn may take in all, model calls, tool runs
  /// and compaction included (`threads.turn_timeout`); 0: no limit.
  std::chrono::nanoseconds turn_timeout{0};
};

/// What a tool call left for the model: its text, and why it failed (empty
/// if it did not).
struct tool_result {
  std::string text;
  std::string error;
};

/// The running turn of one thread, from its first model call to the commit
/// of its answer (or error); the conversation holds none while idle.
struct turn {
  using time_point = std::chrono::steady_clock::time_point;

  turn(std::string thread, std::shared_ptr<const turn_settings> settings,
       time_point started);

  /// The thread the turn answers in.
  std::string thread;
  std::shared_ptr<const turn_settings> settings;
  /// When the turn started (or resumed: a restart gives a turn its whole
  /// time again, as it does its guard).
  time_point started;
  /// Counts the turn's events and stops it at a limit or a loop.
  turn_guard guard;
  /// The compaction under way, between its summaries.
  std::unique_ptr<compactor> compaction;
  /// The model repeated itself: the next request tells it to try a
  /// different approach.
  bool nudge = false;
  /// The turn was warned that its context nears the window.
  bool context_warned = false;
  /// The turn compacted after the provider said its context overflowed: a
  /// second overflow ends the turn.
  bool overflow_compacted = false;
  /// The compaction just stored: the next model call goes out as it is.
  bool just_compacted = false;
  /// The compaction under way answers the provider's context overflow: if
  /// it changes nothing, calling again cannot help.
  bool compacting_overflow = false;

  /// Whether the turn's `turn_timeout` has passed at `now`.
  bool out_of_time(time_point now) const;
  /// What is left of the turn's `turn_timeout` at `now` (at least 1 ms);
  /// 0 without a limit.
  std::chrono::milliseconds time_left(time_point now) const;
};

// -- events -------------------------------------------------------------------

/// The turn starts (or resumes after a restart or a failed commit).
struct turn_started {
  /// The quarantine took the turn's stored steps.
  bool steps_lost = false;
  /// An operator paused the thread.
  bool paused = false;
  /// Calls the stored steps asked for whose results a restart lost.
  std::vector<tool_call> lost_calls;
};

/// The model's next request is built at `now`; `tokens` is its estimated
/// size.
struct request_built {
  uint64_t tokens = 0;
  turn::time_point now = {};
};

/// The model answered. `cancelled`: the thread was cancelled meanwhile.
struct model_answered {
  completion reply;
  turn::time_point now;
  bool cancelled = false;
};

/// The model call failed.
struct model_failed {
  model_failure failure;
  bool cancelled = false;
};

/// The compaction asked for (`plan_compaction`) is planned.
struct compaction_planned {
  compactor plan;
};

/// A summary of the compaction came back.
struct summary_answered {
  std::string text;
  bool cancelled = false;
};

/// A summary of the compaction failed for good.
struct summary_failed {
  std::string why;
  bool cancelled = false;
};

/// A tool call ended (or could not run). `counts_failure`: a configured
/// tool ran and failed (or its arguments did not fit). `cancelled`: the
/// thread is being cancelled (the run was stopped, or ended meanwhile).
struct tool_finished {
  tool_call call;
  tool_result result;
  bool counts_failure = false;
  turn::time_point now;
  bool cancelled = false;
};

/// A step of the turn is durable; `unanswered` are the calls of its last
/// model answer without a result yet, in order.
struct step_committed {
  std::vector<tool_call> unanswered;
  bool cancelled = false;
  turn::time_point now = {};
};

// -- actions ------------------------------------------------------------------

namespace turn_actions {

/// Publish a status event about the running turn.
struct publish_status {
  std::string state;
  std::string detail;
};
/// Log a line about the turn.
struct log_line {
  bool warning = false;
  std::string text;
};
/// Build the model's next request and report it (`request_built`).
struct build_request {};
/// Send the request just built to the pool.
struct call_model {};
/// Plan a compaction of the context before the turn and report it
/// (`compaction_planned`). `overflowed`: the provider refused the context.
struct plan_compaction {
  bool overflowed = false;
};
/// Ask the pool for a summary of `text` (clients do not see it).
struct ask_summary {
  std::string text;
};
/// Run the tool call (report `tool_finished`).
struct run_tool {
  tool_call call;
};
/// Tell the pool to stop the call that timed out.
struct cancel_call {};
/// Commit the step: the model's answer asking for tools.
struct commit_calls {
  completion reply;
};
/// Commit the turn's answer.
struct commit_answer {
  completion reply;
};
/// Commit the step: the result of `call`. `ends_cancelled`: the thread is
/// being cancelled, so the same commit ends the turn with the `cancelled`
/// error; a crash between the two would leave a resumed turn showing the
/// model a stop that was the cancel's doing.
struct commit_result {
  tool_call call;
  tool_result result;
  bool counts_failure = false;
  bool ends_cancelled = false;
};
/// Commit the step: each of `calls` answered as interrupted by a restart.
struct commit_interrupted {
  std::vector<tool_call> calls;
};
/// Commit the step: the compaction's outcome.
struct commit_compaction {
  compaction_result result;
};
/// End the turn with this error (committed as its answer).
struct fail {
  std::string code;
  /// What the user reads.
  std::string text;
  /// What operators read beside it (`log_entry::detail`); empty: nothing.
  std::string detail = {};
};
/// Raise this notice for the owner once the turn's commit is durable.
struct notify_owner {
  owner_notice notice;
};

} // namespace turn_actions

/// One action of a turn.
using turn_action
  = std::variant<turn_actions::publish_status, turn_actions::log_line,
                 turn_actions::build_request, turn_actions::call_model,
                 turn_actions::plan_compaction, turn_actions::ask_summary,
                 turn_actions::run_tool, turn_actions::cancel_call,
                 turn_actions::commit_calls, turn_actions::commit_answer,
                 turn_actions::commit_result, turn_actions::commit_interrupted,
                 turn_actions::commit_compaction, turn_actions::fail,
                 turn_actions::notify_owner>;

/// The actions an event leads to, in order. The last one is the turn's
/// next move (a request, a call, a run, a commit or the failure); the ones
/// before it say something (status, log, owner notice) or stop a call.
/// Empty for an event the turn does not expect (a summary while no
/// compaction runs).
using turn_plan = std::vector<turn_action>;

/// The action's name, as in `turn_actions` ("commit_result", ...).
const char* action_name(const turn_action& action);

/// The names of `plan`'s actions, space-separated ("publish_status
/// call_model"), for logs and tests.
std::string action_names(const turn_plan& plan);

/// True if `reply` ends the turn: it calls no tools besides the agent tools
/// of `thread` (which take effect with the answer).
bool final_reply(const completion& reply, const std::string& thread);

turn_plan decide(turn& t, const turn_started& event);
turn_plan decide(turn& t, const request_built& event);
turn_plan decide(turn& t, const model_answered& event);
turn_plan decide(turn& t, const model_failed& event);
turn_plan decide(turn& t, compaction_planned event);
turn_plan decide(turn& t, const summary_answered& event);
turn_plan decide(turn& t, const summary_failed& event);
turn_plan decide(turn& t, const tool_finished& event);
turn_plan decide(turn& t, const step_committed& event);

/// The plan of a turn cancelled with the thread: it fails as cancelled.
turn_plan cancelled_plan();

} // namespace keel
