#include "keel/conversation_parts.hpp"

#include <stdexcept>

#include <spdlog/spdlog.h>

#include "keel/call_usage.hpp"
#include "keel/kill_point.hpp"
#include "keel/logging.hpp"
#include "keel/protocol.hpp"
#include "keel/provider_pool.hpp"
#include "keel/system_config.hpp"
#include "keel/text.hpp"

// The running turn: the drain starts it, every outcome (the model's answer
// or failure, a summary, a durable step; a tool's outcome comes from
// conversation_tools.cpp) goes to the turn module as an event, and the
// actions it decides are carried out here, in order.

namespace keel::conversation_parts {

namespace {

// The model call's error as the turn reads it.
model_failure failure_of(const caf::error& err) {
  model_failure failure;
  if (err.category() == error_category)
    failure.code = static_cast<ec>(err.code());
  failure.own_timeout = err == caf::sec::request_timeout;
  failure.text = render(err);
  return failure;
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

// Fills the tokens of `reply` (estimated, if its provider reported none)
// and counts them for the node's metrics.
void count_tokens(self_ptr self, completion& reply, uint64_t request_tokens) {
  estimate_usage(reply, request_tokens);
  metrics_of(self->system())
    .tokens(self->state.cfg->agent, reply.provider, reply.usage.input_tokens,
            reply.usage.output_tokens);
}

// Asks the thread's pool for the model's next answer.
void call_model(self_ptr self, completion_request req) {
  if (self->state.context.empty())
    reach(kill_point::session_written); // The session's first call.
  auto request_tokens = self->state.request_tokens(req);
  // Through the providers supervisor, which hands the request to the pool
  // (holding it while the pool restarts), or through the root while the
  // providers supervisor itself restarts: a restart costs latency, never a
  // failed turn. The pool answers us directly.
  // The pool ends the call at the turn's deadline; our own timeout, a
  // little later, only fires if the pool cannot answer at all.
  request_component(self, names::providers,
                    self->state.turn_time_left() + turn_timeout_grace,
                    atom::forward_v, self->state.cfg->pool,
                    complete_message(std::move(req)))
    .then(
      [self, request_tokens](completion& reply) {
        reach(kill_point::call_completed);
        count_tokens(self, reply, request_tokens);
        feed(self,
             model_answered{std::move(reply), std::chrono::steady_clock::now(),
                            self->state.closing});
      },
      [self](caf::error& err) {
        feed(self, model_failed{failure_of(err), self->state.closing});
      });
}

// Asks the pool for a summary of the compaction (the pool retries it like
// any call; a failure for good sends the compaction to its plain tier).
void ask_summary(self_ptr self, std::string text) {
  auto& st = self->state;
  request_component(self, names::providers,
                    st.turn_time_left() + turn_timeout_grace, atom::forward_v,
                    st.cfg->pool,
                    complete_message(st.make_summary_request(std::move(text))))
    .then(
      [self](completion& reply) {
        feed(self,
             summary_answered{std::move(reply.text), self->state.closing});
      },
      [self](caf::error& err) {
        feed(self, summary_failed{render(err), self->state.closing});
      });
}

// Builds the model's next request from the thread's state and lets the
// turn decide whether it goes out or waits for a compaction.
void build_request(self_ptr self) {
  auto& st = self->state;
  auto& t = running_turn(self);
  st.nudge = t.nudge; // What the guard saw goes into the request.
  auto req = st.make_request();
  auto plan = decide(t, request_built{st.request_tokens(req),
                                      std::chrono::steady_clock::now()});
  for (auto& action : plan) {
    if (std::holds_alternative<turn_actions::call_model>(action))
      call_model(self, std::move(req));
    else if (std::holds_alternative<turn_actions::plan_compaction>(action))
      feed(self, compaction_planned{st.make_compactor(req, false)});
    else
      carry_out(self, {std::move(action)});
  }
}

// Carries out one action of the turn.
struct carrier {
  self_ptr self;

  void operator()(turn_actions::publish_status& x) const {
    turn_status(self, x.state, x.detail);
  }
  void operator()(turn_actions::log_line& x) const {
    auto& thread = self->state.cfg.thread;
    log_scope scope{log_component::conversation, thread};
    if (x.warning)
      spdlog::warn("thread {}: {}", thread, x.text);
    else
      spdlog::info("thread {}: {}", thread, x.text);
  }
  void operator()(turn_actions::build_request&) const {
    build_request(self);
  }
  void operator()(turn_actions::call_model&) const {
    call_model(self, self->state.make_request());
  }
  void operator()(turn_actions::plan_compaction& x) const {
    auto& st = self->state;
    feed(self, compaction_planned{
                 st.make_compactor(st.make_request(), x.overflowed)});
  }
  void operator()(turn_actions::ask_summary& x) const {
    ask_summary(self, std::move(x.text));
  }
  void operator()(turn_actions::run_tool& x) const {
    run_tool(self, x.call);
  }
  void operator()(turn_actions::cancel_call&) const {
    cancel_call(self);
  }
  void operator()(turn_actions::commit_calls& x) const {
    spawn_then_commit(self, std::move(x.reply), true);
  }
  void operator()(turn_actions::commit_answer& x) const {
    spawn_then_commit(self, std::move(x.reply), false);
  }
  void operator()(turn_actions::commit_result& x) const {
    auto& st = self->state;
    auto outcome = tool_outcome{std::move(x.result.text),
                                std::move(x.result.error), false, 0};
    auto now = wall_clock_millis();
    commit_turn(self, x.ends_cancelled
                        ? st.make_cancelled_result(x.call, outcome, now)
                        : st.make_result_step(x.call, outcome, x.counts_failure,
                                              now));
  }
  void operator()(turn_actions::commit_interrupted& x) const {
    commit_turn(self, self->state.make_interrupted_step(x.calls,
                                                        wall_clock_millis()));
  }
  void operator()(turn_actions::commit_compaction& x) const {
    reach(kill_point::compaction_summarized);
    commit_turn(self, self->state.make_compaction_commit(x.result));
  }
  void operator()(turn_actions::fail& x) const {
    fail_turn(self, x.code, x.text, x.detail);
  }
  void operator()(turn_actions::notify_owner& x) const {
    self->state.edit_extras().owner_notices.push_back(std::move(x.notice));
  }
};

// Starts (or resumes) the turn answering the inbox front.
void run_turn(self_ptr self) {
  auto& st = self->state;
  auto& t = running_turn(self);
  auto steps_lost = std::exchange(st.steps_lost, false);
  auto paused = st.session.paused_at != 0 || st.agent_offline();
  auto lost = steps_lost || paused ? std::vector<tool_call>{}
                                   : st.unanswered_calls();
  carry_out(self, decide(t, turn_started{steps_lost, paused, std::move(lost)}));
}

} // namespace

turn& running_turn(self_ptr self) {
  auto& st = self->state;
  if (!st.running)
    st.running = std::make_unique<turn>(
      st.cfg.thread, std::shared_ptr<const turn_settings>{st.cfg.settings},
      std::chrono::steady_clock::now());
  return *st.running;
}

void carry_out(self_ptr self, turn_plan plan) {
  // Every event the turn takes leads somewhere: an empty plan would leave
  // the turn running forever.
  if (plan.empty())
    throw std::logic_error("the turn took an event it did not expect");
  for (auto& action : plan)
    std::visit(carrier{self}, action);
}

void continue_turn(self_ptr self) {
  auto& st = self->state;
  feed(self, step_committed{st.closing ? std::vector<tool_call>{}
                                       : st.unanswered_calls(),
                            st.closing, std::chrono::steady_clock::now()});
}

// Publishes a status event about the running turn.
void turn_status(self_ptr self, const std::string& status,
                 const std::string& text) {
  auto& st = self->state;
  auto& msg = st.inbox.front();
  publish(self, protocol::status_frame(st.cfg.thread, msg.client_id, msg.seq,
                                       status, text));
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

} // namespace keel::conversation_parts
