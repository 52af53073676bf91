#include "keel/turn.hpp"

#include <algorithm>
#include <utility>

#include <nlohmann/json.hpp>

#include "keel/agent_tools.hpp"

namespace keel {

std::shared_ptr<const guard_limits> default_guard_limits() {
  static const auto limits = std::make_shared<const guard_limits>();
  return limits;
}

turn::turn(std::string thread, std::shared_ptr<const turn_settings> settings,
           time_point started)
  : thread(std::move(thread)),
    settings(std::move(settings)),
    started(started),
    guard(this->settings->guard, started) {
  // Nothing else: the marks start clear.
}

bool turn::out_of_time(time_point now) const {
  auto limit = settings->turn_timeout;
  return limit.count() > 0 && now - started >= limit;
}

std::chrono::milliseconds turn::time_left(time_point now) const {
  using std::chrono::milliseconds;
  auto limit = settings->turn_timeout;
  if (limit.count() <= 0)
    return milliseconds{0};
  auto left = std::chrono::duration_cast<milliseconds>(limit - (now - started));
  return std::max(left, milliseconds{1});
}

namespace {

template <class... Fs>
struct overloaded : Fs... {
  using Fs::operator()...;
};
template <class... Fs>
overloaded(Fs...) -> overloaded<Fs...>;

// The value of the loop key of `call`'s tool (`guard_limits::loop_keys`)
// as text: a string as it is, a number or boolean as JSON; empty when the
// tool has no key or the call does not give it a scalar.
std::string loop_target(const guard_limits& limits, const tool_call& call) {
  auto key = limits.loop_keys.find(call.name);
  if (key == limits.loop_keys.end())
    return {};
  auto args = nlohmann::json::parse(call.arguments, nullptr, false);
  if (!args.is_object())
    return {};
  auto value = args.find(key->second);
  if (value == args.end() || value->is_null() || value->is_structured())
    return {};
  return value->is_string() ? value->get<std::string>() : value->dump();
}

// The turn ends with the guard's report; the guard's stop is final.
turn_plan stopped_plan(const turn& t, const guard_stop& stop) {
  owner_notice notice;
  notice.kind = notice_kind::agent_stuck;
  notice.subject = t.thread;
  notice.text = "Thread " + t.thread
                + " was stopped by its turn guard: " + stop.report;
  return {turn_actions::log_line{false, std::string{"turn stopped by the "
                                                    "guard ("}
                                          + to_string(stop.reason) + ")"},
          turn_actions::notify_owner{std::move(notice)},
          turn_actions::fail{turn_errors::guard_stopped_code,
                             turn_errors::stuck, stop.report}};
}

// The turn ran past `turn_timeout`: the user is told, operators read the
// limit.
turn_plan out_of_time_plan(const turn& t) {
  auto limit = std::chrono::duration_cast<std::chrono::milliseconds>(
    t.settings->turn_timeout);
  auto detail = "the turn passed its turn_timeout of "
                + minutes_and_seconds(limit) + " (tool runs included)";
  return {turn_actions::log_line{true, "turn stopped: " + detail},
          turn_actions::fail{turn_errors::turn_timeout_code,
                             turn_errors::turn_timeout, detail}};
}

// The turn fails as the provider's overflow of the context would.
turn_action overflow_failure(const turn& t) {
  auto [code, text] = describe_failure(
    model_failure{ec::context_overflow, false, {}}, t.settings->owner_contact);
  return turn_actions::fail{std::move(code), std::move(text)};
}

// The compaction is complete: its outcome is stored as a step of the turn
// (which then calls the model), or the model is called with the context as
// it is if nothing changed (unless the provider refused that context).
turn_plan store_compaction(turn& t) {
  auto result = t.compaction->result();
  t.compaction.reset();
  t.just_compacted = true;
  turn_plan plan{turn_actions::log_line{
    false, "compaction tier " + std::to_string(result.tier) + ": ~"
             + std::to_string(result.tokens_before) + " -> ~"
             + std::to_string(result.tokens_after) + " tokens"}};
  auto overflowed = std::exchange(t.compacting_overflow, false);
  if (result.retired.empty() && overflowed) {
    plan.push_back(overflow_failure(t));
  } else if (result.retired.empty()) {
    plan.push_back(turn_actions::build_request{});
  } else {
    plan.push_back(
      turn_actions::publish_status{"compacted", compacted_text(result)});
    plan.push_back(turn_actions::commit_compaction{std::move(result)});
  }
  return plan;
}

// The compaction's next summary, or its outcome once none is left.
turn_plan next_summary(turn& t) {
  if (auto& text = t.compaction->next())
    return {turn_actions::ask_summary{*text}};
  return store_compaction(t);
}

// Compacts the context before the turn goes on.
turn_action compact(turn& t, bool overflowed) {
  t.overflow_compacted = t.overflow_compacted || overflowed;
  t.compacting_overflow = overflowed;
  return turn_actions::plan_compaction{overflowed};
}

} // namespace

const char* action_name(const turn_action& action) {
  using namespace turn_actions;
  return std::visit(
    overloaded{[](const publish_status&) { return "publish_status"; },
               [](const log_line&) { return "log_line"; },
               [](const build_request&) { return "build_request"; },
               [](const call_model&) { return "call_model"; },
               [](const plan_compaction&) { return "plan_compaction"; },
               [](const ask_summary&) { return "ask_summary"; },
               [](const run_tool&) { return "run_tool"; },
               [](const cancel_call&) { return "cancel_call"; },
               [](const commit_calls&) { return "commit_calls"; },
               [](const commit_answer&) { return "commit_answer"; },
               [](const commit_result&) { return "commit_result"; },
               [](const commit_interrupted&) { return "commit_interrupted"; },
               [](const commit_compaction&) { return "commit_compaction"; },
               [](const fail&) { return "fail"; },
               [](const notify_owner&) { return "notify_owner"; }},
    action);
}

std::string action_names(const turn_plan& plan) {
  std::string result;
  for (auto& action : plan)
    result += (result.empty() ? "" : " ") + std::string{action_name(action)};
  return result;
}

bool final_reply(const completion& reply, const std::string& thread) {
  return std::all_of(reply.tool_calls.begin(), reply.tool_calls.end(),
                     [&thread](const tool_call& call) {
                       return parse_agent_tool_call(call, thread).has_value();
                     });
}

turn_plan cancelled_plan() {
  return {turn_actions::fail{to_string(ec::cancelled), turn_errors::cancelled}};
}

// Starts (or resumes) the turn. Calls whose results a restart lost are
// answered "interrupted", never run again.
turn_plan decide(turn& t, const turn_started& event) {
  if (event.steps_lost)
    return {turn_actions::fail{"history_reset", turn_errors::steps_lost}};
  if (event.paused)
    return {turn_actions::fail{turn_errors::agent_paused_code,
                               with_owner_contact(turn_errors::agent_offline,
                                                  t.settings->owner_contact)}};
  if (event.lost_calls.empty())
    return {turn_actions::build_request{}};
  return {turn_actions::commit_interrupted{event.lost_calls}};
}

// The request waits for a compaction when the context passes the window's
// compaction share; a turn is warned once near the window. A call right
// after a compaction goes out as it is.
turn_plan decide(turn& t, const request_built& event) {
  if (t.out_of_time(event.now))
    return out_of_time_plan(t);
  auto& cfg = *t.settings;
  turn_plan plan;
  auto level = context_pressure::fine;
  if (cfg.compaction_enabled && !std::exchange(t.just_compacted, false))
    level = pressure(event.tokens, cfg.context_window, cfg.compaction);
  if (level != context_pressure::fine && !t.context_warned) {
    t.context_warned = true;
    plan.push_back(turn_actions::publish_status{
      "context_warning",
      context_warning_text(event.tokens, cfg.context_window)});
  }
  if (level == context_pressure::compact) {
    plan.push_back(compact(t, false));
    return plan;
  }
  // Before the call: its streamed deltas reach the gateway directly.
  plan.push_back(turn_actions::publish_status{"thinking", {}});
  plan.push_back(turn_actions::call_model{});
  return plan;
}

// A final answer commits the turn, tool calls become a step (committed
// before any of them runs); the guard may stop either.
turn_plan decide(turn& t, const model_answered& event) {
  if (event.cancelled)
    return cancelled_plan(); // The reply comes too late.
  auto& reply = event.reply;
  if (auto stop = t.guard.on_reply(reply.text, event.now, t.nudge))
    return stopped_plan(t, *stop);
  if (final_reply(reply, t.thread))
    return {turn_actions::commit_answer{reply}};
  for (auto& call : reply.tool_calls)
    if (auto stop = t.guard.on_tool_call(call.name, call.arguments, event.now,
                                         loop_target(*t.settings->guard, call)))
      return stopped_plan(t, *stop);
  return {turn_actions::commit_calls{reply}};
}

// The turn ends with the failure's text, unless a compaction may make the
// context fit; the owner hears of a pool that could not answer.
turn_plan decide(turn& t, const model_failed& event) {
  if (event.cancelled)
    return cancelled_plan();
  auto& cfg = *t.settings;
  auto& failure = event.failure;
  turn_plan plan{turn_actions::log_line{false, "turn failed: " + failure.text}};
  if (failure.own_timeout)
    plan.push_back(turn_actions::cancel_call{});
  if (failure.code == ec::context_overflow && cfg.compaction_enabled
      && !t.overflow_compacted) {
    plan.push_back(compact(t, true));
    return plan;
  }
  if (auto notice = provider_notice(failure, cfg.pool, t.thread))
    plan.push_back(turn_actions::notify_owner{std::move(*notice)});
  auto [code, text] = describe_failure(failure, cfg.owner_contact);
  plan.push_back(turn_actions::fail{std::move(code), std::move(text)});
  return plan;
}

turn_plan decide(turn& t, compaction_planned event) {
  t.compaction = std::make_unique<compactor>(std::move(event.plan));
  auto plan = next_summary(t);
  plan.insert(plan.begin(), turn_actions::publish_status{"compacting", {}});
  return plan;
}

turn_plan decide(turn& t, const summary_answered& event) {
  if (event.cancelled)
    return cancelled_plan();
  if (!t.compaction)
    return {};
  t.compaction->summarized(event.text);
  return next_summary(t);
}

// A summary that failed for good sends the compaction to its plain tier.
turn_plan decide(turn& t, const summary_failed& event) {
  if (event.cancelled)
    return cancelled_plan();
  if (!t.compaction)
    return {};
  t.compaction->failed();
  auto plan = next_summary(t);
  plan.insert(plan.begin(),
              turn_actions::log_line{true, "a summary failed (" + event.why
                                             + "); compacting without the "
                                               "model"});
  return plan;
}

// A tool's result is committed before the model sees it; the guard counts
// it (a stop shows once the step is durable). A cancel's stop is no
// failure of the tool: its result and the turn's end are one commit.
turn_plan decide(turn& t, const tool_finished& event) {
  if (event.cancelled)
    return {turn_actions::commit_result{event.call, event.result, false, true}};
  t.guard.on_tool_result(event.call.name, event.result.error, event.now);
  return {turn_actions::commit_result{event.call, event.result,
                                      event.counts_failure}};
}

// The turn's next step from its stored state: the guard's stop, the next
// unanswered tool call, or the model's next answer.
turn_plan decide(turn& t, const step_committed& event) {
  if (event.cancelled)
    return cancelled_plan();
  if (auto& stop = t.guard.stopped())
    return stopped_plan(t, *stop);
  if (t.out_of_time(event.now))
    return out_of_time_plan(t);
  if (event.unanswered.empty())
    return {turn_actions::build_request{}};
  return {turn_actions::run_tool{event.unanswered.front()}};
}

} // namespace keel
