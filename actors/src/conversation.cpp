#include "keel/conversation.hpp"

#include <algorithm>
#include <exception>

#include <caf/all.hpp>
#include <spdlog/spdlog.h>

#include "keel/agent_tools.hpp"
#include "keel/kill_point.hpp"
#include "keel/logging.hpp"
#include "keel/lookup.hpp"
#include "keel/protocol.hpp"
#include "keel/provider_pool.hpp"
#include "keel/recovery.hpp"
#include "keel/text.hpp"
#include "keel/tool_runner.hpp"

namespace keel {

namespace {

using self_ptr = conversation_actor::stateful_pointer<conversation_state>;

// Reads the thread's stored state behind every write we sent: persistence
// reads see committed data only, so the pending group commits first; both
// requests take the same way (straight to persistence, or held in order by
// the root while it restarts).
template <class OnSnapshot, class OnError>
void read_back(self_ptr self, OnSnapshot on_snapshot, OnError on_error) {
  auto& cfg = self->state.cfg;
  request_component(self, names::persistence, cfg->storage_timeout,
                    atom::flush_v)
    .then([] {}, [](caf::error&) {});
  request_component(self, names::persistence, cfg->storage_timeout,
                    atom::load_v, cfg.thread)
    .then(std::move(on_snapshot), std::move(on_error));
}

void drain(self_ptr self);
void step_committed(self_ptr self, const turn_commit& commit);

// Pushes a ready-made frame to the thread's subscribers, if a gateway runs.
void publish(self_ptr self, std::string frame) {
  publish_event(self->system(), self->state.cfg.thread, std::move(frame));
}

// Records that the thread just became idle. At most one idle timer is
// pending per actor; when it fires early (work came and went since) it is
// re-armed for the remainder, so a busy thread costs no timer per turn.
void passivate(self_ptr self);

void note_idle(self_ptr self) {
  auto& st = self->state;
  if (st.passivate_when_idle) {
    st.passivate_when_idle = false;
    passivate(self);
    return;
  }
  st.idle_since = self->clock().now();
  if (st.idle_timer_armed)
    return;
  st.idle_timer_armed = true;
  self->delayed_send(self, st.cfg->idle_timeout, atom::idle_v);
}

// The thread just became idle. One without a session (a cancel, pause or
// refused first message of a thread that does not exist) holds nothing:
// it asks to stop now rather than after `idle_timeout`, so requests for
// unknown threads leave no live conversations. Only when idle: an accept
// in flight (a new thread's first message) keeps it. A refused ask falls
// back to the idle timer.
void became_idle(self_ptr self) {
  auto& st = self->state;
  if (!st.session_exists && !st.passivation) {
    passivate(self);
    return;
  }
  note_idle(self);
}

// Describes a provider error to the user: its code, and the `turn_errors`
// text naming `contact` where it asks the user to get in touch.
std::pair<std::string, std::string>
describe_failure(const caf::error& err, const std::string& contact) {
  auto text = turn_errors::provider_failed;
  if (err == caf::sec::request_timeout || err == ec::provider_timeout
      || err == ec::timeout)
    return {to_string(ec::provider_timeout), turn_errors::provider_timeout};
  if (err == ec::context_overflow)
    return {to_string(ec::context_overflow), turn_errors::context_overflow};
  if (err == ec::provider_rejected)
    return {to_string(ec::provider_rejected), turn_errors::provider_rejected};
  if (err == ec::provider_unauthorized)
    text = turn_errors::provider_unauthorized;
  if (err == ec::credits_exhausted)
    text = turn_errors::credits_exhausted;
  // Not a Keel error: the pool is down or restarting, still a provider
  // problem to the user.
  auto code = err.category() == error_category ? error_code_name(err)
                                               : to_string(ec::provider_failed);
  return {code, with_owner_contact(text, contact)};
}

// What the owner hears of a turn that failed with provider error `err`:
// every provider of the pool failing, out of credit or refusing the
// credentials; none for the thread's own limits (context, a rejected
// message, its own timeout).
std::optional<owner_notice> provider_notice(const caf::error& err,
                                            const conversation_config& cfg) {
  owner_notice x;
  x.subject = "pool " + cfg->pool;
  x.text = "Thread " + cfg.thread + " could not be answered: " + render(err);
  if (err == ec::credits_exhausted)
    x.kind = notice_kind::credits_exhausted;
  else if (err == ec::provider_unauthorized)
    x.kind = notice_kind::provider_unauthorized;
  else if (err == ec::provider_failed || err == ec::provider_timeout
           || err.category() != error_category)
    x.kind = notice_kind::all_models_failed;
  else
    return std::nullopt;
  return x;
}

void deliver_outbox(self_ptr self);

// Tells the thread that its turn could not be stored and runs it again
// after `commit_retry_delay`; the message stays in the inbox, unanswered.
void retry_turn_later(self_ptr self, const std::string& what,
                      const caf::error& err) {
  auto& st = self->state;
  log_scope scope{log_component::conversation, st.cfg.thread};
  spdlog::warn("thread {}: {}: {}", st.cfg.thread, what, render(err));
  auto& msg = st.inbox.front();
  publish(self, protocol::status_frame(
                  st.cfg.thread, msg.client_id, msg.seq, "retrying",
                  what + " (" + render(err) + "); the turn runs again"));
  self->delayed_send(self, st.cfg->commit_retry_delay, atom::drain_v);
  ++st.attempts;
  // The turn stays "running" until the retry so nothing overtakes it.
}

// Counts the answer of a finished turn in the node's metrics: a reply or
// an error, and the time since the message was accepted.
void count_answer(caf::actor_system& sys, const turn_commit& commit) {
  auto& metrics = metrics_of(sys);
  for (auto& entry : commit.log) {
    if (entry.kind == log_kind::user)
      metrics.reply_latency(
        static_cast<double>(std::max<millis>(wall_clock_millis() - entry.at, 0))
        / 1000.0);
    else if (entry.kind == log_kind::reply)
      metrics.answered();
    else if (entry.kind == log_kind::error)
      metrics.failed(entry.code);
  }
}

// The current turn's commit is durable: applies it, publishes its outcome,
// sends its messages and moves on to the next turn.
void committed(self_ptr self, const turn_commit& commit) {
  count_answer(self->system(), commit);
  self->state.apply(commit);
  for (auto& entry : commit.log)
    if (entry.kind != log_kind::user) // The message's task: not an outcome.
      publish(self, protocol::outcome_frame(commit.thread, entry));
  self->state.turn_running = false;
  for (auto& x : self->state.extras().owner_notices)
    notify_owner(self->system(), x.kind, x.subject, x.text);
  self->state.end_turn();
  if (!commit.outbox.empty()) {
    // Durable in our outbox, not yet in any target's inbox.
    reach(kill_point::message_enqueued);
    deliver_outbox(self);
  }
  // Durable with its delivery record: the channels send it (held for them
  // while they restart; after a node restart they find the record).
  for (auto& reply : commit.deliveries)
    request_component(self, names::channels, self->state.cfg->storage_timeout,
                      atom::deliver_v, reply)
      .then([] {}, [](caf::error&) {});
  drain(self);
}

// Commits the outcome of the current turn, then moves on to the next one.
// A failed commit keeps the message in the inbox: nothing is acknowledged as
// answered that is not durable. It may still land (a timeout), so before
// the turn runs again the store says whether it did (see `retry_turn`): a
// turn is committed once, whatever the timing.
void commit_turn(self_ptr self, turn_commit commit) {
  auto& st = self->state;
  for (auto& notice : std::exchange(st.notices, {}))
    publish(self, protocol::status_frame(
                    st.cfg.thread, st.inbox.front().client_id,
                    st.inbox.front().seq, notice.state, notice.detail));
  commit.tenure = self->state.tenure;
  // The request carries a copy; both outcomes share this one.
  auto kept = std::make_shared<const turn_commit>(std::move(commit));
  request_component(self, names::persistence, self->state.cfg->storage_timeout,
                    atom::commit_v, *kept)
    .then(
      [self, kept](caf::ok_atom) {
        if (kept->keeps_inbox)
          step_committed(self, *kept);
        else
          committed(self, *kept);
      },
      [self, kept](caf::error& err) {
        self->state.unsure_commit = std::make_unique<turn_commit>(*kept);
        retry_turn_later(self, "storing the answer failed", err);
      });
}

// The store says what became of the unsure commit: without the message in
// the stored inbox, the commit landed and the turn is done; with it, the
// turn runs again. A step's commit leaves the message either way: the
// stored steps say where the turn is, and it resumes from them.
void learned_fate(self_ptr self, thread_snapshot& snapshot) {
  auto& st = self->state;
  auto commit = std::move(*st.unsure_commit);
  st.unsure_commit.reset();
  auto pending = std::any_of(snapshot.inbox.begin(), snapshot.inbox.end(),
                             [&commit](const inbox_entry& x) {
                               return x.seq == commit.inbox_seq;
                             });
  if (!pending && !commit.keeps_inbox) {
    committed(self, commit);
    return;
  }
  if (commit.keeps_inbox)
    st.resume_steps(snapshot);
  st.turn_running = false;
  drain(self);
}

// The retry of a turn that could not be stored is due. After an unsure
// commit the stored inbox decides: without the message, the commit landed
// and the turn is done; with it, the turn runs again.
void retry_turn(self_ptr self) {
  auto& st = self->state;
  if (!st.unsure_commit) {
    st.turn_running = false;
    drain(self);
    return;
  }
  read_back(
    self, [self](thread_snapshot& snapshot) { learned_fate(self, snapshot); },
    [self](caf::error& err) {
      retry_turn_later(self, "reading the thread back failed", err);
    });
}

void fail_turn(self_ptr self, const std::string& code,
               const std::string& text) {
  commit_turn(self,
              self->state.make_error_commit(code, text, wall_clock_millis()));
}

void cancel_turn(self_ptr self) {
  fail_turn(self, to_string(ec::cancelled), turn_errors::cancelled);
}

// The error boundary: whatever a turn step throws becomes a descriptive
// error in the thread, and the drain goes on.
template <class F>
void guarded(self_ptr self, F step) {
  try {
    step();
  } catch (const std::exception& e) {
    fail_turn(self, to_string(ec::turn_failed),
              turn_errors::unknown_prefix + std::string{e.what()}
                + turn_errors::unknown_suffix);
  } catch (...) {
    fail_turn(self, to_string(ec::turn_failed),
              turn_errors::unknown_prefix + std::string{"unknown error"}
                + turn_errors::unknown_suffix);
  }
}

// Spawns the children the reply asks for that the thread does not have yet,
// each durably (session record and tree link, through the orchestrator like
// a client's spawn) before the step or answer that asked commits; then
// commits it (`step`: a tool step, else the turn's answer). A spawn refused
// for good (the id is another thread's) becomes a note; any other failure
// runs the turn again later.
void spawn_then_commit(self_ptr self, completion reply, bool step) {
  struct progress {
    completion reply;
    spawn_outcomes outcomes;
    size_t pending;
    caf::error retry;
  };
  auto commit = [self, step](const completion& reply,
                             const spawn_outcomes& outcomes) {
    guarded(self, [&] {
      auto& st = self->state;
      auto now = wall_clock_millis();
      commit_turn(self, step ? st.make_call_step(reply, now, outcomes)
                             : st.make_reply_commit(reply, now, outcomes));
    });
  };
  self->state.notices.clear(); // A turn run again notices anew.
  spawn_outcomes outcomes;
  auto wanted = self->state.new_children(reply, outcomes);
  if (wanted.empty()) {
    commit(reply, outcomes);
    return;
  }
  auto state = std::make_shared<progress>(
    progress{std::move(reply), std::move(outcomes), wanted.size(), {}});
  auto finish = [self, state, commit] {
    if (--state->pending > 0)
      return;
    if (self->state.closing)
      cancel_turn(self);
    else if (state->retry)
      retry_turn_later(self, "spawning a child agent failed", state->retry);
    else
      commit(state->reply, state->outcomes);
  };
  auto& st = self->state;
  for (auto& child : wanted)
    request_component(self, names::orchestrator, st.cfg->storage_timeout,
                      atom::spawn_v, st.cfg.thread, child)
      .then(
        [self, state, child, finish](spawn_result&) {
          self->state.edit_extras().children.insert(child);
          state->outcomes.created.insert(child);
          finish();
        },
        [self, state, child, finish](caf::error& err) {
          if (err == ec::agent_limit)
            self->state.notices.push_back({"agent_limit", error_message(err)});
          if (err == ec::conflict || err == ec::thread_closed
              || err == ec::not_found || err == ec::thread_limit
              || err == ec::agent_limit)
            state->outcomes.refused.emplace(child, error_message(err));
          else if (!state->retry)
            state->retry = std::move(err);
          finish();
        });
}

// Tells the pool that the current turn ended without its answer: the call
// stops (no further attempt or frame). Best effort: a pool that does not
// answer at all may be gone anyway.
void cancel_call(self_ptr self) {
  auto& st = self->state;
  auto& msg = st.inbox.front();
  if (auto providers = lookup<caf::actor>(self->system(), names::providers))
    caf::anon_send(providers, atom::forward_v, st.cfg->pool,
                   cancel_message(st.cfg.thread, msg.seq));
}

// Publishes a status event about the running turn.
void turn_status(self_ptr self, const std::string& status,
                 const std::string& text = {}) {
  auto& st = self->state;
  auto& msg = st.inbox.front();
  publish(self, protocol::status_frame(st.cfg.thread, msg.client_id, msg.seq,
                                       status, text));
}

// Ends the turn with the guard's report; the guard's stop is final.
void stop_turn(self_ptr self, const guard_stop& stop) {
  auto& thread = self->state.cfg.thread;
  log_scope scope{log_component::conversation, thread};
  spdlog::info("thread {}: turn stopped by the guard ({})", thread,
               to_string(stop.reason));
  self->state.edit_extras().owner_notices.push_back(
    {notice_kind::agent_stuck, thread,
     "Thread " + thread + " was stopped by its turn guard: " + stop.report});
  fail_turn(self, turn_errors::guard_stopped_code, stop.report);
}

// The model answered: a final answer commits the turn, tool calls become a
// step (committed before any of them runs); the guard may stop either.
void model_answered(self_ptr self, completion reply) {
  auto& st = self->state;
  auto now = std::chrono::steady_clock::now();
  if (auto stop = st.guard->on_reply(reply.text, now, st.nudge)) {
    stop_turn(self, *stop);
    return;
  }
  if (st.final_reply(reply)) {
    spawn_then_commit(self, std::move(reply), false);
    return;
  }
  for (auto& call : reply.tool_calls)
    if (auto stop = st.guard->on_tool_call(call.name, call.arguments, now)) {
      stop_turn(self, *stop);
      return;
    }
  spawn_then_commit(self, std::move(reply), true);
}

void call_model(self_ptr self);

// The compaction is complete: its outcome is stored as a step of the turn
// (which then calls the model), or the model is called with the context as
// it is if nothing changed (unless the provider refused that context).
void store_compaction(self_ptr self) {
  auto& st = self->state;
  auto result = st.compaction->result();
  st.compaction.reset();
  st.just_compacted = true;
  log_scope scope{log_component::conversation, st.cfg.thread};
  spdlog::info("thread {}: compaction tier {}: ~{} -> ~{} tokens",
               st.cfg.thread, result.tier, result.tokens_before,
               result.tokens_after);
  auto overflowed = std::exchange(st.compacting_overflow, false);
  if (result.retired.empty() && overflowed) {
    auto [code, text] = describe_failure(ec::context_overflow,
                                         st.cfg->owner_contact);
    fail_turn(self, code, text);
    return;
  }
  if (result.retired.empty()) {
    call_model(self);
    return;
  }
  turn_status(self, "compacted", compacted_text(result));
  reach(kill_point::compaction_summarized);
  commit_turn(self, st.make_compaction_commit(result));
}

// Asks the pool for the compaction's next summary (the pool retries it like
// any call; a failure for good sends the compaction to its plain tier).
void summarize_next(self_ptr self) {
  auto& st = self->state;
  if (!st.compaction->next()) {
    store_compaction(self);
    return;
  }
  request_component(
    self, names::providers, st.cfg->turn_timeout + turn_timeout_grace,
    atom::forward_v, st.cfg->pool,
    complete_message(st.make_summary_request(*st.compaction->next())))
    .then(
      [self](completion& reply) {
        if (self->state.closing)
          return cancel_turn(self);
        self->state.compaction->summarized(reply.text);
        guarded(self, [&] { summarize_next(self); });
      },
      [self](caf::error& err) {
        if (self->state.closing)
          return cancel_turn(self);
        log_scope scope{log_component::conversation, self->state.cfg.thread};
        spdlog::warn("thread {}: a summary failed ({}); compacting without "
                     "the model",
                     self->state.cfg.thread, render(err));
        self->state.compaction->failed();
        guarded(self, [&] { summarize_next(self); });
      });
}

// Compacts the context before the running turn, then calls the model.
void compact(self_ptr self, const completion_request& req, bool overflowed) {
  auto& st = self->state;
  st.overflow_compacted = st.overflow_compacted || overflowed;
  st.compacting_overflow = overflowed;
  st.compaction
    = std::make_unique<compactor>(st.make_compactor(req, overflowed));
  turn_status(self, "compacting");
  summarize_next(self);
}

// True if `req` must wait for a compaction; warns once a turn near the
// window. A call right after a compaction goes out as it is.
bool compaction_due(self_ptr self, const completion_request& req) {
  auto& st = self->state;
  if (!st.cfg->compaction_enabled || std::exchange(st.just_compacted, false))
    return false;
  auto tokens = st.request_tokens(req);
  auto level = pressure(tokens, st.cfg->context_window, st.cfg->compaction);
  if (level != context_pressure::fine && !st.context_warned) {
    st.context_warned = true;
    turn_status(self, "context_warning",
                context_warning_text(tokens, st.cfg->context_window));
  }
  return level == context_pressure::compact;
}

// The provider refused the context as too long: compacts and calls again,
// once a turn. False if the turn must fail instead.
bool compact_after_overflow(self_ptr self, const caf::error& err) {
  auto& st = self->state;
  if (err != ec::context_overflow || !st.cfg->compaction_enabled
      || st.overflow_compacted)
    return false;
  compact(self, st.make_request(), true);
  return true;
}

// The model call failed: the turn ends with the failure's text (unless a
// cancel came meanwhile, or a compaction may make the context fit), and the
// owner hears of a pool that could not answer.
void model_call_failed(self_ptr self, const caf::error& err) {
  auto& st = self->state;
  if (st.closing) {
    cancel_turn(self);
    return;
  }
  log_scope scope{log_component::conversation, st.cfg.thread};
  spdlog::info("thread {}: turn failed: {}", st.cfg.thread, render(err));
  if (err == caf::sec::request_timeout)
    cancel_call(self);
  if (compact_after_overflow(self, err))
    return;
  auto [code, text] = describe_failure(err, st.cfg->owner_contact);
  if (err != caf::sec::request_timeout)
    if (auto x = provider_notice(err, st.cfg))
      st.edit_extras().owner_notices.push_back(std::move(*x));
  fail_turn(self, code, text);
}

// Asks the thread's pool for the model's next answer.
void call_model(self_ptr self) {
  auto& st = self->state;
  auto req = st.make_request();
  if (compaction_due(self, req)) {
    compact(self, req, false);
    return;
  }
  // Before the call: its streamed deltas reach the gateway directly.
  turn_status(self, "thinking");
  if (st.context.empty())
    reach(kill_point::session_written); // The session's first call.
  // Through the providers supervisor, which hands the request to the pool
  // (holding it while the pool restarts), or through the root while the
  // providers supervisor itself restarts: a restart costs latency, never a
  // failed turn. The pool answers us directly.
  // The pool ends the call at the turn's deadline; our own timeout, a
  // little later, only fires if the pool cannot answer at all.
  request_component(self, names::providers,
                    st.cfg->turn_timeout + turn_timeout_grace, atom::forward_v,
                    st.cfg->pool, complete_message(std::move(req)))
    .then(
      [self](completion& reply) {
        reach(kill_point::call_completed);
        if (self->state.closing) {
          cancel_turn(self); // Cancelled meanwhile: the reply comes too late.
          return;
        }
        guarded(self, [&] { model_answered(self, std::move(reply)); });
      },
      [self](caf::error& err) { model_call_failed(self, err); });
}

// A tool call ended (or could not run): its result is committed before the
// model sees it. `counts_failure`: a configured tool ran and failed.
void tool_done(self_ptr self, const tool_call& call, tool_outcome outcome,
               bool counts_failure) {
  reach(kill_point::tool_finished);
  auto& st = self->state;
  st.tool_cancel.reset();
  st.guard->on_tool_result(call.name, outcome.error,
                           std::chrono::steady_clock::now());
  commit_turn(self, st.make_result_step(call, outcome, counts_failure,
                                        wall_clock_millis()));
}

// Runs `call` as a subprocess on a job thread; a call of a tool the
// thread lacks, or with arguments that do not fit, fails without running.
void run_tool(self_ptr self, const tool_call& call) {
  auto& st = self->state;
  auto& tools = st.tools();
  auto tool = std::find_if(tools.begin(), tools.end(),
                           [&call](auto& x) { return x.name == call.name; });
  if (tool == tools.end() || st.tool_disabled(call.name)) {
    auto why = "no tool named " + call.name + " is available here";
    tool_done(self, call, tool_outcome{"[" + why + "]", why, false, 0}, false);
    return;
  }
  auto run = make_tool_run(*tool, call);
  if (!run) {
    auto why = error_message(run.error());
    tool_done(self, call, tool_outcome{"[" + why + "]", why, false, 0}, true);
    return;
  }
  reach(kill_point::tool_call_committed);
  st.tool_cancel = std::make_shared<std::atomic<bool>>(false);
  auto runner = self->spawn(tool_runner, st.tool_cancel);
  // The runner ends the run at the tool's timeout; ours only fires if the
  // runner cannot answer at all.
  self
    ->request(runner, run->timeout + run->grace + turn_timeout_grace,
              atom::run_v, *run)
    .then(
      [self, call](tool_outcome& outcome) {
        tool_done(self, call, std::move(outcome), true);
      },
      [self, call](caf::error& err) {
        auto why = call.name + " could not be run: " + render(err);
        tool_done(self, call, tool_outcome{"[" + why + "]", why, false, 0},
                  true);
      });
  // Once the tool is on its way (its outcome comes back through our own
  // mailbox, after this frame): the status frame's cost is not the run's.
  turn_status(self, "tool", "running " + call.name);
}

// Takes the turn's next step from its stored state: the guard's stop, the
// next unanswered tool call, or the model's next answer.
void continue_turn(self_ptr self) {
  auto& st = self->state;
  if (st.closing) {
    cancel_turn(self);
    return;
  }
  if (auto& stop = st.guard->stopped()) {
    stop_turn(self, *stop);
    return;
  }
  auto calls = st.unanswered_calls();
  if (calls.empty())
    call_model(self);
  else
    run_tool(self, calls.front());
}

// A step of the turn is durable: applies and publishes it, sends its
// messages, and goes on with the turn.
void step_committed(self_ptr self, const turn_commit& commit) {
  self->state.apply(commit);
  for (auto& entry : commit.log)
    if (entry.kind != log_kind::user) // The message's task: not an outcome.
      publish(self, protocol::outcome_frame(commit.thread, entry));
  if (!commit.outbox.empty()) {
    reach(kill_point::message_enqueued);
    deliver_outbox(self);
  }
  guarded(self, [&] { continue_turn(self); });
}

// Starts (or resumes) the turn answering the inbox front. Calls whose
// results a restart lost are answered "interrupted", never run again.
void run_turn(self_ptr self) {
  auto& st = self->state;
  if (st.steps_lost) {
    st.steps_lost = false;
    fail_turn(self, "history_reset", turn_errors::steps_lost);
    return;
  }
  if (st.session.paused_at != 0) {
    fail_turn(self, turn_errors::agent_paused_code,
              with_owner_contact(turn_errors::agent_offline,
                                 st.cfg->owner_contact));
    return;
  }
  if (!st.guard)
    st.guard = std::make_unique<turn_guard>(st.cfg->guard,
                                            std::chrono::steady_clock::now());
  auto lost = st.unanswered_calls();
  if (lost.empty()) {
    call_model(self);
    return;
  }
  commit_turn(self, st.make_interrupted_step(lost, wall_clock_millis()));
}

// Finishes a cancel once no turn runs: every pending message is answered
// with a `cancelled` error (one commit each, through the usual path), then
// the session is written CLOSED and the cancels are answered.
void finish_cancel(self_ptr self) {
  auto& st = self->state;
  if (!st.inbox.empty()) {
    st.turn_running = true;
    cancel_turn(self);
    return;
  }
  // Accepts still on their way to the store join the inbox when they land
  // (and drain again): CLOSED must come after their answers, or the commit
  // answering one would write the session back as it was before.
  if (!st.accepting.empty())
    return;
  if (st.extras().cancels.empty())
    return; // Writing CLOSED already.
  auto record = st.session;
  record.state = session_state::closed;
  record.recovered_at = 0;
  request_component(self, names::persistence, st.cfg->storage_timeout,
                    caf::put_atom_v, record, st.tenure)
    .then(
      [self, record](caf::ok_atom) {
        auto& st = self->state;
        st.session = record;
        st.closing = false; // Done: closed() now holds by the session.
        st.answer_cancels({});
        drain(self);
      },
      [self](caf::error& err) {
        // Not durable: the canceller learns and may cancel again; we stay
        // closing (refusing messages) so the retry finds nothing to answer.
        self->state.answer_cancels(err);
      });
}

using pause_requests = decltype(conversation_extras::pauses);

void answer_pauses(pause_requests& requests, const caf::error& err) {
  for (auto& request : requests)
    if (err)
      request.second.deliver(err);
    else
      request.second.deliver(caf::ok_atom_v);
}

// Writes the pause or resume the latest request asks for, then answers the
// requests it covers and drains on. The session changes in memory first:
// any session write meanwhile (an accept's) carries the same `paused_at`,
// and no turn starts (or commits an older session) until the write ends.
void write_pause(self_ptr self) {
  auto& st = self->state;
  auto& pauses = st.edit_extras().pauses;
  auto batch = std::make_shared<pause_requests>(std::move(pauses));
  pauses.clear();
  if (!st.session_exists || st.session.state == session_state::closed) {
    answer_pauses(*batch, st.session_exists ? caf::make_error(
                            ec::thread_closed,
                            "thread " + st.cfg.thread + " was cancelled")
                                            : st.not_found());
    drain(self);
    return;
  }
  auto before = st.session.paused_at;
  auto paused = batch->back().first;
  auto after = !paused ? 0 : before != 0 ? before : wall_clock_millis();
  st.session.paused_at = after;
  st.turn_running = true;
  request_component(self, names::persistence, st.cfg->storage_timeout,
                    caf::put_atom_v, st.session, st.tenure)
    .then(
      [self, batch](caf::ok_atom) {
        self->state.turn_running = false;
        answer_pauses(*batch, {});
        drain(self);
      },
      [self, batch, before, after](caf::error& err) {
        auto& st = self->state;
        st.turn_running = false;
        if (st.session.paused_at == after)
          st.session.paused_at = before;
        answer_pauses(*batch, err);
        drain(self);
      });
}

// Starts the next turn unless one runs; arms the idle timer when done.
void drain(self_ptr self) {
  auto& st = self->state;
  // An accept that timed out may still land with a lower seq than the
  // inbox holds: neither a turn nor a cancel's answers start until the
  // read back says what landed, so messages are answered in seq order.
  if (!st.loaded || st.turn_running || st.unsure_accepts)
    return;
  if (st.closing) {
    finish_cancel(self);
    return;
  }
  if (!st.extras().pauses.empty()) {
    write_pause(self);
    return;
  }
  if (st.inbox.empty()) {
    if (st.idle())
      became_idle(self);
    return;
  }
  st.turn_running = true;
  guarded(self, [&] { run_turn(self); });
}

// Schedules one redelivery of the outbox after a failed delivery.
void schedule_redelivery(self_ptr self) {
  auto& st = self->state;
  if (st.redeliver_armed)
    return;
  st.redeliver_armed = true;
  self->delayed_send(self, st.cfg->commit_retry_delay, atom::redeliver_v);
}

// An outbox entry reached its target (or the dead letters): forget it.
void delivered(self_ptr self, seq_t seq) {
  auto& st = self->state;
  auto& extras = st.edit_extras();
  extras.outbox.erase(seq);
  extras.delivering.erase(seq);
  if (st.idle())
    note_idle(self);
}

// A delivery of outbox entry `seq` failed for now: it goes out again with
// the next redelivery.
void deliver_later(self_ptr self, seq_t seq) {
  self->state.edit_extras().delivering.erase(seq);
  schedule_redelivery(self);
}

// The target of `entry` refused it: for good (cancelled, gone) the entry
// moves to the dead-letter queue, which retries it on its schedule; else it
// is retried here.
void delivery_failed(self_ptr self, const outbox_entry& entry,
                     const caf::error& err) {
  auto seq = entry.seq;
  if (err != ec::thread_closed && err != ec::not_found) {
    deliver_later(self, seq);
    return;
  }
  request_component(self, names::dead_letters, self->state.cfg->storage_timeout,
                    caf::put_atom_v, entry, render(err), self->state.tenure)
    .then([self, seq](caf::ok_atom) { delivered(self, seq); },
          [self, seq](caf::error&) { deliver_later(self, seq); });
}

// Sends every undelivered outbox entry to its target through the
// orchestrator; the target's accept removes it from our outbox on disk in
// the same write.
void deliver_outbox(self_ptr self) {
  auto& st = self->state;
  if (!st.extras_)
    return;
  for (auto& [seq, entry] : st.extras_->outbox) {
    if (!st.extras_->delivering.insert(seq).second)
      continue;
    request_component(self, names::orchestrator, st.cfg->storage_timeout,
                      atom::deliver_v, entry)
      .then([self, seq = seq](accept_result&) { delivered(self, seq); },
            [self, entry = entry](caf::error& err) {
              delivery_failed(self, entry, err);
            });
  }
}

// Answers the sender of accept `seq` unless its promise was already failed
// (the actor is going down).
template <class Result>
void answer_accept(self_ptr self, seq_t seq, Result&& result) {
  auto& accepting = self->state.accepting;
  auto i = accepting.find(seq);
  if (i == accepting.end())
    return;
  auto promise = std::move(i->second);
  accepting.erase(i);
  promise.deliver(std::forward<Result>(result));
}

// After an accept failed (or timed out: it may land later), reads the
// stored inbox back and adopts what the live inbox lacks, so a message that
// landed late is answered in order and its resend (acknowledged as a
// duplicate) is not left waiting. A failed read back is tried again after
// `commit_retry_delay` (and with the next duplicate accept) until one
// succeeds; meanwhile no turn starts and the thread does not passivate.
void adopt_late_accepts(self_ptr self) {
  auto& st = self->state;
  if (!st.unsure_accepts || st.reading_back)
    return;
  st.reading_back = true;
  read_back(
    self,
    [self](thread_snapshot& snapshot) {
      auto& st = self->state;
      st.reading_back = false;
      st.unsure_accepts = false;
      st.adopt_late_accepts(snapshot.inbox);
      drain(self);
    },
    [self](caf::error& err) {
      auto& st = self->state;
      log_scope scope{log_component::conversation, st.cfg.thread};
      spdlog::warn("thread {}: reading the inbox back failed: {}",
                   st.cfg.thread, render(err));
      st.reading_back = false;
      self->delayed_send(self, st.cfg->commit_retry_delay, atom::readback_v);
    });
}

// Accept `seq` is durable (or was a duplicate, durable before): a new
// message joins the inbox; its sender learns.
void accepted(self_ptr self, seq_t seq, inbox_entry& entry, bool wrote_session,
              accept_result& res) {
  auto& st = self->state;
  if (wrote_session) {
    st.session_exists = true;
    st.session_active = true;
  }
  if (!res.duplicate)
    st.inbox.push_back(std::move(entry));
  else
    adopt_late_accepts(self);
  answer_accept(self, seq, res);
  drain(self);
}

// Appends a message durably; the promise is answered once it is synced.
void accept(self_ptr self, caf::typed_response_promise<accept_result> rp,
            incoming_message msg) {
  auto& st = self->state;
  if (auto err = st.refusal(msg)) {
    rp.deliver(std::move(err));
    return;
  }
  auto req = st.make_accept_request(std::move(msg));
  auto seq = req.entry.seq;
  st.accepting.emplace(seq, rp);
  request_component(self, names::persistence, st.cfg->storage_timeout,
                    atom::accept_v, req)
    .then(
      [self, seq, entry = req.entry,
       wrote_session = req.create_session](accept_result& res) mutable {
        accepted(self, seq, entry, wrote_session, res);
      },
      [self, seq](caf::error& err) {
        // Refused before anything was staged: it cannot land later.
        auto refused = err == ec::thread_limit;
        answer_accept(self, seq, std::move(err));
        if (!refused) {
          self->state.unsure_accepts = true;
          adopt_late_accepts(self);
        }
        drain(self);
      });
}

// The thread's state is in: cancels of a thread that never existed are
// answered, deferred accepts run, the outbox goes out, the drain starts.
void loaded(self_ptr self, thread_snapshot& snapshot) {
  auto& st = self->state;
  if (snapshot.quarantined)
    publish(self, protocol::status_frame(st.cfg.thread, "", 0, "history_reset",
                                         turn_errors::history_reset));
  st.restore(std::move(snapshot));
  if (st.closing && !st.session_exists) {
    // A cancel of a thread that never existed.
    st.closing = false;
    st.answer_cancels(st.not_found());
  }
  auto deferred = std::move(st.deferred);
  st.deferred.clear();
  for (auto& d : deferred)
    accept(self, d.promise, std::move(d.msg));
  deliver_outbox(self);
  drain(self);
}

// The thread cannot be loaded: whoever waits learns why; the actor quits.
void load_failed(self_ptr self, const caf::error& err) {
  for (auto& d : self->state.deferred)
    d.promise.deliver(err);
  self->state.deferred.clear();
  self->state.answer_cancels(err);
  if (auto& extras = self->state.extras_)
    answer_pauses(extras->pauses, err);
  self->quit(err);
}

// Loads the thread's state from the store.
void load(self_ptr self) {
  auto& st = self->state;
  // Before the read: the view must hold everything stored before the
  // tenure began.
  st.tenure = st.cfg.shards ? st.cfg.shards->tenure(st.cfg.thread) : 0;
  // A write of an earlier incarnation (killed before persistence answered
  // it) may still be staged: a load before its commit would hand out its
  // seq again. `read_back` reads behind every write an earlier incarnation
  // sent.
  read_back(
    self, [self](thread_snapshot& snapshot) { loaded(self, snapshot); },
    [self](caf::error& err) { load_failed(self, err); });
}

// Asks the orchestrator to stop us, naming `route`, the last route we had
// seen when we became idle. If it agrees, our supervisor stops us; if a
// message was routed to us since, we stay.
void ask_to_stop(self_ptr self, uint64_t route) {
  request_component(self, names::orchestrator, self->state.cfg->storage_timeout,
                    atom::passivate_v, self->state.cfg.thread, route)
    .then(
      [self, route](bool stopping) {
        if (stopping)
          return;
        auto& st = self->state;
        st.passivation.reset();
        // Refused for a message routed after `route`: one handled since
        // (a refused send of a thread without session) may ask again.
        if (st.idle() && st.last_route != route)
          became_idle(self);
        else if (st.idle())
          note_idle(self);
      },
      [self](caf::error&) {
        self->state.passivation.reset();
        if (self->state.idle())
          note_idle(self);
      });
}

// The SUSPENDED write of a passivation that began at `route` is durable.
// A message that came meanwhile (routed, accepting or accepted) rewrote the
// session as ACTIVE after it and keeps us: the in-memory session stays
// ACTIVE and we do not ask to stop. Otherwise we ask, naming `route`.
void suspended(self_ptr self, const session_record& record, uint64_t route) {
  auto& st = self->state;
  if (st.last_route != route || !st.idle() || st.session_active) {
    st.passivation.reset();
    if (st.idle())
      note_idle(self);
    return;
  }
  st.session.state = record.state;
  ask_to_stop(self, route);
}

// Writes the session as SUSPENDED (a CLOSED one stays CLOSED; while the node
// drains, nothing), then asks the orchestrator to stop us.
void passivate(self_ptr self) {
  auto& st = self->state;
  auto route = st.last_route;
  st.passivation = route;
  if (!st.session_exists || st.node_draining) {
    // Nothing on disk (a cancel of an unknown thread, a first message that
    // was not stored), or the node's stop suspends it: nothing to write,
    // and nothing to wait for either.
    ask_to_stop(self, route);
    return;
  }
  auto record = st.session;
  if (record.state != session_state::closed)
    record.state = session_state::suspended;
  st.session_active = false;
  request_component(self, names::persistence, st.cfg->storage_timeout,
                    caf::put_atom_v, record, st.tenure)
    .then(
      [self, record, route](caf::ok_atom) { suspended(self, record, route); },
      [self, route](caf::error& err) {
        // The shard left this node since we loaded: no write of ours
        // can commit any more, and its next owner's recovery suspended
        // the session. Nothing keeps us.
        if (err == ec::not_owner) {
          ask_to_stop(self, route);
          return;
        }
        log_scope scope{log_component::conversation, self->state.cfg.thread};
        self->state.passivation.reset();
        spdlog::warn("thread {}: cannot suspend: {}", self->state.cfg.thread,
                     render(err));
        if (self->state.idle())
          note_idle(self);
      });
}

// The orchestrator needs room under `threads.max_live`, or releases the
// thread: passivates now, through the same path as the idle timer, if
// nothing is pending, else as soon as nothing is; answers whether it does
// now.
bool passivate_now(self_ptr self) {
  auto& st = self->state;
  if (!st.idle()) {
    st.passivate_when_idle = true;
    return false;
  }
  if (st.passivation != st.last_route)
    passivate(self);
  return true;
}

// Takes a message (from a client or another thread), deferred until loaded.
caf::result<accept_result> receive(self_ptr self, incoming_message msg,
                                   uint64_t route) {
  auto& st = self->state;
  st.last_route = route;
  st.passivate_when_idle = false; // Wanted again: asked anew if need be.
  auto rp = self->make_response_promise<accept_result>();
  if (!st.loaded) {
    st.deferred.push_back({rp, std::move(msg)});
    return rp;
  }
  accept(self, rp, std::move(msg));
  if (st.idle()) // Refused at once: nothing is in flight.
    became_idle(self);
  return rp;
}

// Cancels the thread once no turn runs (see `finish_cancel`); answers at
// once if there is nothing to cancel.
caf::result<caf::ok_atom> cancel(self_ptr self) {
  auto& st = self->state;
  if (st.loaded && !st.session_exists)
    return st.not_found();
  if (st.loaded && !st.closing && st.session.state == session_state::closed)
    return caf::ok_atom_v; // Cancelled before.
  auto rp = self->make_response_promise<caf::ok_atom>();
  st.edit_extras().cancels.push_back(rp);
  st.closing = true;
  if (st.tool_cancel)
    *st.tool_cancel = true; // Its result comes back, then the cancel runs.
  drain(self);
  return rp;
}

// Where message `seq` stands as a task: live while the thread has it in
// its inbox (the running turn's, or queued behind it), else as stored.
caf::result<log_entry> task_of(self_ptr self, seq_t seq) {
  auto& st = self->state;
  auto i = std::find_if(st.inbox.begin(), st.inbox.end(),
                        [seq](auto& x) { return x.seq == seq; });
  if (st.loaded && i != st.inbox.end()) {
    auto entry = message_log_entry(*i);
    if (i == st.inbox.begin() && st.turn_running) {
      entry.task = st.live_task_state();
      entry.attempts = st.attempts;
    }
    return entry;
  }
  auto rp = self->make_response_promise<log_entry>();
  auto missing = caf::make_error(ec::not_found, "thread " + st.cfg.thread
                                                  + " has no message "
                                                  + std::to_string(seq));
  request_component(self, names::persistence, st.cfg->storage_timeout,
                    atom::history_v, st.cfg.thread, seq - 1, uint64_t{1})
    .then(
      [rp, seq, missing](history_page& page) mutable {
        auto& xs = page.entries;
        if (xs.empty() || xs[0].seq != seq || xs[0].kind != log_kind::user)
          rp.deliver(missing);
        else
          rp.deliver(std::move(xs[0]));
      },
      [rp](caf::error& err) mutable { rp.deliver(std::move(err)); });
  return rp;
}

caf::result<caf::ok_atom> pause(self_ptr self, bool paused) {
  auto& st = self->state;
  if (st.loaded && !st.session_exists)
    return st.not_found();
  auto rp = self->make_response_promise<caf::ok_atom>();
  st.edit_extras().pauses.emplace_back(paused, rp);
  drain(self);
  return rp;
}

// The idle timer fired: passivates if the thread has been idle for the
// whole `idle_timeout`, else waits for the rest of it.
void idle_timer_fired(self_ptr self) {
  auto& st = self->state;
  st.idle_timer_armed = false;
  if (!st.idle())
    return; // Busy again: the next idle moment arms a new timer.
  auto idle_for = self->clock().now() - st.idle_since;
  if (idle_for < st.cfg->idle_timeout) {
    st.idle_timer_armed = true;
    self->delayed_send(self, st.cfg->idle_timeout - idle_for, atom::idle_v);
    return;
  }
  passivate(self);
}

// Stopped or killed: senders of accepts and cancels not yet answered learn
// at once that they must resend (a durable accept is then acknowledged as
// a duplicate).
void on_exit(self_ptr self, const caf::exit_msg& msg) {
  auto err = caf::make_error(
    ec::unavailable, "the conversation of thread '" + self->state.cfg.thread
                       + "' stopped; resend with the same id");
  self->state.fail_pending_accepts(err);
  self->state.answer_cancels(err);
  if (auto& extras = self->state.extras_)
    answer_pauses(extras->pauses, err);
  if (self->state.tool_cancel)
    *self->state.tool_cancel = true; // No tool outlives its conversation.
  self->quit(msg.reason);
}

} // namespace

conversation_actor::behavior_type
conversation(conversation_actor::stateful_pointer<conversation_state> self,
             conversation_config cfg) {
  self->state.cfg = std::move(cfg);
  // Tell the orchestrator an incarnation started: messages routed to an
  // earlier one may have died with it.
  if (auto orch = lookup<orchestrator_actor>(self->system(),
                                             names::orchestrator))
    self->send(orch, atom::started_v, self->state.cfg.thread);
  self->set_exit_handler([self](caf::exit_msg& msg) { on_exit(self, msg); });
  load(self);
  return {
    [self](atom::accept, std::string& client_id, std::string& text,
           uint64_t route) -> caf::result<accept_result> {
      incoming_message msg;
      msg.client_id = std::move(client_id);
      msg.text = std::move(text);
      return receive(self, std::move(msg), route);
    },
    [self](atom::deliver, outbox_entry& msg,
           uint64_t route) -> caf::result<accept_result> {
      return receive(self, std::move(msg), route);
    },
    [self](atom::cancel) { return cancel(self); },
    [self](atom::pause, bool paused) { return pause(self, paused); },
    [self](atom::task, seq_t seq) { return task_of(self, seq); },
    [self](atom::redeliver) {
      self->state.redeliver_armed = false;
      deliver_outbox(self);
    },
    [self](atom::spawn, std::string& child) {
      self->state.edit_extras().children.insert(std::move(child));
    },
    [self](atom::drain) { retry_turn(self); },
    [self](atom::readback) { adopt_late_accepts(self); },
    [self](atom::idle) { idle_timer_fired(self); },
    [self](atom::expire) { expire_deadlines(self); },
    [self](atom::passivate) { return passivate_now(self); },
    [self](atom::passivate, atom::drain) {
      self->state.node_draining = true;
      return passivate_now(self);
    },
  };
}

} // namespace keel
