#define CAF_SUITE turn

// The turn module's decisions as tables, without an actor system: each
// event given to a turn and the actions it leads to, by name and payload.

#include <caf/test/unit_test.hpp>

#include "keel/agent_tools.hpp"
#include "keel/turn.hpp"

#include "text_checks.hpp"

using namespace keel;
using namespace std::chrono_literals;

namespace {

using time_point = turn::time_point;

const time_point t0 = time_point{} + 1h;

tool_call call(std::string id, std::string name, std::string args = "{}") {
  return tool_call{std::move(id), std::move(name), std::move(args)};
}

completion reply_of(std::string text, std::vector<tool_call> calls = {}) {
  completion reply;
  reply.text = std::move(text);
  reply.tool_calls = std::move(calls);
  return reply;
}

template <class Action>
const Action& last_as(const turn_plan& plan) {
  CAF_REQUIRE(!plan.empty());
  CAF_REQUIRE(std::holds_alternative<Action>(plan.back()));
  return std::get<Action>(plan.back());
}

template <class Action>
const Action* find(const turn_plan& plan) {
  for (auto& action : plan)
    if (auto x = std::get_if<Action>(&action))
      return x;
  return nullptr;
}

std::vector<context_entry> context_of(size_t n, size_t bytes = 40) {
  std::vector<context_entry> result;
  for (size_t i = 0; i < n; ++i)
    result.push_back({static_cast<seq_t>(10 + 2 * i),
                      i % 2 == 0 ? "user" : "assistant",
                      std::string(bytes, 'a' + static_cast<char>(i % 26))});
  return result;
}

// A compaction that summarizes (tier 2) and one with nothing to change.
compactor summarizing() {
  auto ctx = context_of(20);
  return compactor{ctx, 0, 100, 1000, compaction_settings{}};
}
compactor unchanging() {
  return compactor{context_of(2), 0, 1, 1000, compaction_settings{}};
}

struct fixture {
  fixture() {
    settings->pool = "default";
    settings->owner_contact = "ops@example.com";
    settings->context_window = 10'000;
  }

  turn& fresh() {
    t = std::make_unique<turn>("t", settings, t0);
    return *t;
  }

  std::shared_ptr<turn_settings> settings = std::make_shared<turn_settings>();
  std::unique_ptr<turn> t;
};

} // namespace

CAF_TEST_FIXTURE_SCOPE(turn_tests, fixture)

CAF_TEST(a turn starts with a request unless its start fails it) {
  struct row {
    const char* name;
    turn_started event;
    std::string expected;
    std::string code;
  };
  std::vector<row> rows{
    {"fresh", {false, false, {}}, "build_request", ""},
    {"steps lost", {true, false, {call("a", "ls")}}, "fail", "history_reset"},
    {"paused", {false, true, {}}, "fail", turn_errors::agent_paused_code},
    {"lost calls", {false, false, {call("a", "ls")}}, "commit_interrupted", ""},
  };
  for (auto& x : rows) {
    CAF_MESSAGE(x.name);
    auto plan = decide(fresh(), x.event);
    CAF_CHECK_EQUAL(action_names(plan), x.expected);
    if (!x.code.empty())
      CAF_CHECK_EQUAL(last_as<turn_actions::fail>(plan).code, x.code);
  }
  auto paused = decide(fresh(), turn_started{false, true, {}});
  KEEL_CHECK_CONTAINS(last_as<turn_actions::fail>(paused).text,
                      "ops@example.com");
  auto steps = decide(fresh(), turn_started{true, false, {}});
  CAF_CHECK_EQUAL(last_as<turn_actions::fail>(steps).text,
                  turn_errors::steps_lost);
}

CAF_TEST(the interrupted - by - restart calls are committed not run) {
  auto lost = std::vector<tool_call>{call("a", "ls"), call("b", "grep")};
  auto plan = decide(fresh(), turn_started{false, false, lost});
  auto& step = last_as<turn_actions::commit_interrupted>(plan);
  CAF_REQUIRE_EQUAL(step.calls.size(), 2u);
  CAF_CHECK_EQUAL(step.calls[0].id, "a");
  CAF_CHECK_EQUAL(step.calls[1].id, "b");
}

CAF_TEST(the request goes out or waits for a compaction by its size) {
  struct row {
    const char* name;
    bool enabled;
    uint64_t tokens;
    std::string expected;
  };
  // Window 10,000: warn at 8,000, compact at 9,000.
  std::vector<row> rows{
    {"fine", true, 1000, "publish_status call_model"},
    {"warned", true, 8500, "publish_status publish_status call_model"},
    {"compacts", true, 9500, "publish_status plan_compaction"},
    {"disabled", false, 9500, "publish_status call_model"},
  };
  for (auto& x : rows) {
    CAF_MESSAGE(x.name);
    settings->compaction_enabled = x.enabled;
    auto plan = decide(fresh(), request_built{x.tokens});
    CAF_CHECK_EQUAL(action_names(plan), x.expected);
  }
  settings->compaction_enabled = true;
  auto& turn = fresh();
  auto warned = decide(turn, request_built{8500});
  CAF_CHECK_EQUAL(std::get<turn_actions::publish_status>(warned[0]).state,
                  "context_warning");
  CAF_CHECK_EQUAL(std::get<turn_actions::publish_status>(warned[1]).state,
                  "thinking");
  // Once a turn.
  CAF_CHECK_EQUAL(action_names(decide(turn, request_built{8500})),
                  "publish_status call_model");
  auto compacts = decide(turn, request_built{9500});
  CAF_CHECK_EQUAL(action_names(compacts), "plan_compaction");
  CAF_CHECK(!last_as<turn_actions::plan_compaction>(compacts).overflowed);
}

CAF_TEST(the model answer ends the turn or becomes a call step) {
  struct row {
    const char* name;
    completion reply;
    std::string expected;
  };
  auto spawn = call("s", spawn_agent_tool, R"({"name":"kid","task":"go"})");
  std::vector<row> rows{
    {"text", reply_of("done"), "commit_answer"},
    {"agent tools only", reply_of("asking", {spawn}), "commit_answer"},
    {"tools", reply_of("looking", {call("a", "ls")}), "commit_calls"},
    {"agent and tools", reply_of("both", {spawn, call("a", "ls")}),
     "commit_calls"},
  };
  for (auto& x : rows) {
    CAF_MESSAGE(x.name);
    CAF_CHECK_EQUAL(
      action_names(decide(fresh(), model_answered{x.reply, t0, false})),
      x.expected);
  }
  auto late = decide(fresh(), model_answered{reply_of("done"), t0, true});
  CAF_CHECK_EQUAL(last_as<turn_actions::fail>(late).code, "cancelled");
  CAF_CHECK_EQUAL(last_as<turn_actions::fail>(late).text,
                  turn_errors::cancelled);
}

CAF_TEST(the guard stops a looping turn and tells the owner) {
  auto& turn = fresh();
  auto loop = reply_of("again", {call("a", "ls", R"({"x":1})")});
  turn_plan plan;
  for (int i = 0;
       i < 10 && (plan.empty() || action_names(plan) == "commit_calls"); ++i)
    plan = decide(turn,
                  model_answered{loop, t0 + std::chrono::seconds{i}, false});
  CAF_CHECK_EQUAL(action_names(plan), "log_line notify_owner fail");
  CAF_CHECK_EQUAL(last_as<turn_actions::fail>(plan).code,
                  turn_errors::guard_stopped_code);
  auto owner = find<turn_actions::notify_owner>(plan);
  CAF_REQUIRE(owner != nullptr);
  CAF_CHECK_EQUAL(owner->notice.kind, notice_kind::agent_stuck);
  CAF_CHECK_EQUAL(owner->notice.subject, "t");
  // The stop is final: the next durable step ends the turn as well.
  CAF_CHECK_EQUAL(
    action_names(decide(turn, step_committed{{call("b", "ls")}, false})),
    "log_line notify_owner fail");
}

CAF_TEST(the guard stops on repeated errors and on its duration) {
  auto& turn = fresh();
  for (int i = 0; i < 3; ++i)
    CAF_CHECK_EQUAL(
      action_names(decide(
        turn, tool_finished{call("a", "ls"), {"[boom]", "boom"}, true, t0})),
      "commit_result");
  CAF_CHECK_EQUAL(action_names(decide(turn, step_committed{{}, false})),
                  "log_line notify_owner fail");
  auto& late = fresh();
  auto plan = decide(late, model_answered{reply_of("x"), t0 + 11min, false});
  CAF_CHECK_EQUAL(action_names(plan), "log_line notify_owner fail");
  KEEL_CHECK_CONTAINS(last_as<turn_actions::fail>(plan).detail, "Elapsed");
  CAF_CHECK_EQUAL(last_as<turn_actions::fail>(plan).text, turn_errors::stuck);
}

CAF_TEST(the loop key of a tool makes its calls on one file a loop) {
  auto limits = std::make_shared<guard_limits>();
  limits->loop_keys = {{"write", "path"}};
  settings->guard = limits;
  auto& turn = fresh();
  turn_plan plan;
  for (int i = 0; i < 5; ++i) {
    auto args = R"({"path":"notes.md","line":)" + std::to_string(i) + "}";
    plan = decide(turn,
                  model_answered{reply_of("edit", {call("a", "write", args)}),
                                 t0, false});
  }
  CAF_CHECK_EQUAL(action_names(plan), "log_line notify_owner fail");
  KEEL_CHECK_CONTAINS(last_as<turn_actions::fail>(plan).detail,
                      "write was called 5 times on notes.md (a file loop)");
  // Without the key (or with another path each time) nothing stops.
  auto& other = fresh();
  for (int i = 0; i < 5; ++i) {
    auto args = R"({"path":"n)" + std::to_string(i) + R"(.md"})";
    plan = decide(other,
                  model_answered{reply_of("edit", {call("a", "write", args)}),
                                 t0, false});
  }
  CAF_CHECK_EQUAL(action_names(plan), "commit_calls");
}

CAF_TEST(a turn past its turn_timeout ends whatever it was doing) {
  settings->turn_timeout = 1min;
  auto& turn = fresh();
  CAF_CHECK_EQUAL(action_names(decide(turn, request_built{10, t0 + 59s})),
                  "publish_status call_model");
  CAF_CHECK_EQUAL(turn.time_left(t0 + 20s).count(), 40000);
  // A tool ran past it: the next step ends the turn.
  auto plan = decide(turn, step_committed{{call("a", "ls")}, false, t0 + 1min});
  CAF_CHECK_EQUAL(action_names(plan), "log_line fail");
  auto& failed = last_as<turn_actions::fail>(plan);
  CAF_CHECK_EQUAL(failed.code, "turn_timeout");
  CAF_CHECK_EQUAL(failed.text, turn_errors::turn_timeout);
  KEEL_CHECK_CONTAINS(failed.detail, "turn_timeout of 1m 0s");
  CAF_CHECK_EQUAL(action_names(decide(turn, request_built{10, t0 + 2min})),
                  "log_line fail");
  CAF_CHECK_EQUAL(turn.time_left(t0 + 2min).count(), 1);
  // Without a limit a turn has all the time there is.
  settings->turn_timeout = {};
  auto& open = fresh();
  CAF_CHECK(!open.out_of_time(t0 + 24h));
  CAF_CHECK_EQUAL(open.time_left(t0).count(), 0);
}

CAF_TEST(a repeating model is nudged toward another approach) {
  auto& turn = fresh();
  for (int i = 0; i < 3; ++i)
    decide(turn, model_answered{reply_of("same words"), t0, false});
  CAF_CHECK(turn.nudge);
  decide(turn, model_answered{reply_of("something else entirely"), t0, false});
  CAF_CHECK(!turn.nudge);
}

CAF_TEST(a tool result is committed with its failure counted) {
  auto plan = decide(
    fresh(),
    tool_finished{call("a", "ls"), {"[exit 2]", "exit status 2"}, true, t0});
  auto& step = last_as<turn_actions::commit_result>(plan);
  CAF_CHECK_EQUAL(step.call.id, "a");
  CAF_CHECK_EQUAL(step.result.text, "[exit 2]");
  CAF_CHECK_EQUAL(step.result.error, "exit status 2");
  CAF_CHECK(step.counts_failure);
}

CAF_TEST(a tool result that lands during a cancel ends the turn with it) {
  auto& turn = fresh();
  auto stopped = tool_finished{call("a", "ls"),
                               {"[ls was cancelled and stopped]", "cancelled"},
                               true,
                               t0,
                               true};
  auto plan = decide(turn, stopped);
  CAF_CHECK_EQUAL(action_names(plan), "commit_result");
  auto& step = last_as<turn_actions::commit_result>(plan);
  CAF_CHECK(step.ends_cancelled);
  CAF_CHECK(!step.counts_failure); // The cancel stopped it, not a fault.
  CAF_CHECK_EQUAL(step.result.text, "[ls was cancelled and stopped]");
  auto plain = tool_finished{call("a", "ls"), {"out", ""}, true, t0};
  CAF_CHECK(!last_as<turn_actions::commit_result>(decide(fresh(), plain))
               .ends_cancelled);
}

CAF_TEST(a durable step runs the next call or asks the model again) {
  struct row {
    const char* name;
    step_committed event;
    std::string expected;
  };
  std::vector<row> rows{
    {"calls left", {{call("a", "ls"), call("b", "grep")}, false}, "run_tool"},
    {"none left", {{}, false}, "build_request"},
    {"cancelled", {{call("a", "ls")}, true}, "fail"},
  };
  for (auto& x : rows) {
    CAF_MESSAGE(x.name);
    CAF_CHECK_EQUAL(action_names(decide(fresh(), x.event)), x.expected);
  }
  auto plan = decide(
    fresh(), step_committed{{call("a", "ls"), call("b", "grep")}, false});
  CAF_CHECK_EQUAL(last_as<turn_actions::run_tool>(plan).call.id, "a");
}

CAF_TEST(failover errors become the texts and notices of today) {
  // One row: the failure, the code and a part of the text the thread gets,
  // and the owner's notice if there is one.
  auto row = [this](const char* name, model_failure failure,
                    const std::string& code, const std::string& text_part,
                    std::optional<notice_kind> notice) {
    CAF_MESSAGE(name);
    auto plan = decide(fresh(), model_failed{failure, false});
    auto& failed = last_as<turn_actions::fail>(plan);
    CAF_CHECK_EQUAL(failed.code, code);
    KEEL_CHECK_CONTAINS(failed.text, text_part);
    auto owner = find<turn_actions::notify_owner>(plan);
    CAF_CHECK_EQUAL(owner != nullptr, notice.has_value());
    if (owner != nullptr && notice) {
      CAF_CHECK_EQUAL(owner->notice.kind, *notice);
      CAF_CHECK_EQUAL(owner->notice.subject, "pool default");
      KEEL_CHECK_CONTAINS(owner->notice.text, failure.text);
    }
    CAF_CHECK_EQUAL(find<turn_actions::cancel_call>(plan) != nullptr,
                    failure.own_timeout);
  };
  row("own timeout", {std::nullopt, true, "request_timeout"},
      "provider_timeout", "took too long", std::nullopt);
  row("pool timeout", {ec::provider_timeout, false, "slow"}, "provider_timeout",
      "took too long", notice_kind::all_models_failed);
  row("timeout", {ec::timeout, false, "slow"}, "provider_timeout",
      "took too long", std::nullopt);
  row("all failed", {ec::provider_failed, false, "down"}, "provider_failed",
      "ops@example.com", notice_kind::all_models_failed);
  row("not keel's", {std::nullopt, false, "broken"}, "provider_failed",
      "technical difficulties", notice_kind::all_models_failed);
  row("credits", {ec::credits_exhausted, false, "paid"}, "credits_exhausted",
      "thinking budget", notice_kind::credits_exhausted);
  row("unauthorized", {ec::provider_unauthorized, false, "401"},
      "provider_unauthorized", "not fully set up",
      notice_kind::provider_unauthorized);
  row("rejected", {ec::provider_rejected, false, "400"}, "provider_rejected",
      "rephrasing", std::nullopt);
  auto cancelled = decide(fresh(), model_failed{{ec::provider_failed}, true});
  CAF_CHECK_EQUAL(action_names(cancelled), "fail");
}

CAF_TEST(an overflowing context is compacted once a turn) {
  auto& turn = fresh();
  auto overflow = model_failed{{ec::context_overflow, false, "too long"},
                               false};
  auto plan = decide(turn, overflow);
  CAF_CHECK_EQUAL(action_names(plan), "log_line plan_compaction");
  CAF_CHECK(last_as<turn_actions::plan_compaction>(plan).overflowed);
  CAF_CHECK(turn.overflow_compacted);
  // The compaction helped; the provider refuses again: the turn fails.
  plan = decide(turn, overflow);
  CAF_CHECK_EQUAL(last_as<turn_actions::fail>(plan).code, "context_overflow");
  settings->compaction_enabled = false;
  plan = decide(fresh(), overflow);
  CAF_CHECK_EQUAL(action_names(plan), "log_line fail");
}

CAF_TEST(a compaction asks its summaries then commits its outcome) {
  auto& turn = fresh();
  auto plan = decide(turn, compaction_planned{summarizing()});
  CAF_CHECK_EQUAL(action_names(plan), "publish_status ask_summary");
  CAF_CHECK_EQUAL(std::get<turn_actions::publish_status>(plan[0]).state,
                  "compacting");
  while (std::holds_alternative<turn_actions::ask_summary>(plan.back()))
    plan = decide(turn, summary_answered{"a summary", false});
  CAF_CHECK_EQUAL(action_names(plan),
                  "log_line publish_status commit_compaction");
  auto& stored = last_as<turn_actions::commit_compaction>(plan);
  CAF_CHECK(!stored.result.retired.empty());
  CAF_CHECK_GREATER_OR_EQUAL(stored.result.tier, 2);
  CAF_CHECK(turn.compaction == nullptr);
  // The call after a compaction goes out as it is.
  CAF_CHECK_EQUAL(action_names(decide(turn, request_built{9999})),
                  "publish_status call_model");
}

CAF_TEST(a failed summary compacts without the model) {
  auto& turn = fresh();
  decide(turn, compaction_planned{summarizing()});
  auto plan = decide(turn, summary_failed{"overloaded", false});
  CAF_REQUIRE(!plan.empty());
  auto warning = std::get_if<turn_actions::log_line>(&plan.front());
  CAF_REQUIRE(warning != nullptr);
  CAF_CHECK(warning->warning);
  while (std::holds_alternative<turn_actions::ask_summary>(plan.back()))
    plan = decide(turn, summary_failed{"overloaded", false});
  auto& stored = last_as<turn_actions::commit_compaction>(plan);
  CAF_CHECK_EQUAL(stored.result.tier, 4);
  CAF_CHECK_EQUAL(action_names(decide(fresh(), summary_failed{"x", true})),
                  "fail");
}

CAF_TEST(a compaction that changes nothing calls or fails by its cause) {
  auto plan = decide(fresh(), compaction_planned{unchanging()});
  CAF_CHECK_EQUAL(action_names(plan), "publish_status log_line build_request");
  auto& turn = fresh();
  decide(turn, model_failed{{ec::context_overflow, false, "long"}, false});
  plan = decide(turn, compaction_planned{unchanging()});
  CAF_CHECK_EQUAL(last_as<turn_actions::fail>(plan).code, "context_overflow");
  CAF_CHECK_EQUAL(last_as<turn_actions::fail>(plan).text,
                  turn_errors::context_overflow);
}

CAF_TEST(a summary while no compaction runs is not expected) {
  CAF_CHECK(decide(fresh(), summary_answered{"x", false}).empty());
  CAF_CHECK(decide(fresh(), summary_failed{"x", false}).empty());
}

CAF_TEST_FIXTURE_SCOPE_END()
