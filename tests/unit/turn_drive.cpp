#define CAF_SUITE turn_drive

// The turn module driven as the conversation actor drives it, minus the
// actor: its actions carried out with the conversation state's builders
// and the commits applied, so the paths that need both (a tool disabled
// after repeated failures, calls a restart interrupted, the guard's stop
// as the thread's answer) are checked end to end without an actor system.

#include <caf/test/unit_test.hpp>

#include "keel/conversation.hpp"

#include "tool_configs.hpp"

using namespace keel;
using keel::test::tool;

namespace {

using time_point = turn::time_point;

const time_point t0 = time_point{} + std::chrono::hours{1};

struct fixture {
  fixture() {
    st.cfg.thread = "t";
    st.cfg.settings = settings;
    settings->root_tools = {tool("ls"), tool("grep")};
    settings->disable_tool_after = 3;
    st.session_exists = true;
    st.session.thread = "t";
    st.inbox.push_back(inbox_entry{5, "c5", "list it", 0});
    st.next_seq = 6;
    t = std::make_unique<turn>("t", settings, t0);
  }

  // Carries out the commit `plan` ends with, as the actor does, and
  // applies it; returns the commit.
  turn_commit commit(const turn_plan& plan) {
    CAF_REQUIRE(!plan.empty());
    auto& last = plan.back();
    turn_commit result;
    if (auto x = std::get_if<turn_actions::commit_calls>(&last))
      result = st.make_call_step(x->reply, 0, {});
    else if (auto x = std::get_if<turn_actions::commit_result>(&last))
      result = x->ends_cancelled
                 ? st.make_cancelled_result(
                   x->call, tool_outcome{x->result.text, x->result.error}, 0)
                 : st.make_result_step(x->call,
                                       tool_outcome{x->result.text,
                                                    x->result.error, false, 0},
                                       x->counts_failure, 0);
    else if (auto x = std::get_if<turn_actions::commit_interrupted>(&last))
      result = st.make_interrupted_step(x->calls, 0);
    else if (auto x = std::get_if<turn_actions::fail>(&last))
      result = st.make_error_commit(x->code, x->text, 0, x->detail);
    else
      CAF_FAIL("the plan ends in " << action_name(last) << ", not a commit");
    st.apply(result);
    return result;
  }

  completion asking(std::vector<tool_call> calls) {
    completion reply;
    reply.text = "let me look";
    reply.tool_calls = std::move(calls);
    return reply;
  }

  std::shared_ptr<conversation_settings> settings
    = std::make_shared<conversation_settings>();
  conversation_state st;
  std::unique_ptr<turn> t;
};

} // namespace

CAF_TEST_FIXTURE_SCOPE(turn_drive_tests, fixture)

CAF_TEST(a tool failing three times is disabled and no longer offered) {
  for (int i = 1; i <= 3; ++i) {
    auto id = "c" + std::to_string(i);
    commit(decide(*t, model_answered{asking({{id, "ls", "{}"}}), t0, false}));
    auto next = decide(*t, step_committed{st.unanswered_calls(), false});
    auto& run = std::get<turn_actions::run_tool>(next.back());
    CAF_CHECK_EQUAL(run.call.id, id);
    auto why = "boom " + std::to_string(i); // Not the same error: no stop.
    commit(
      decide(*t, tool_finished{run.call, {"[" + why + "]", why}, true, t0}));
    CAF_CHECK_EQUAL(st.tool_failures("ls"), static_cast<uint32_t>(i));
    CAF_CHECK_EQUAL(st.tool_disabled("ls"), i == 3);
  }
  CAF_REQUIRE_EQUAL(st.notices.size(), 1u);
  CAF_CHECK_EQUAL(st.notices[0].state, "tool_disabled");
  CAF_CHECK_EQUAL(st.notices[0].detail, disabled_tool_text("ls", 3, "boom 3"));
  // The turn goes on; the model is no longer told about the tool.
  CAF_CHECK_EQUAL(action_names(decide(*t, step_committed{{}, false})),
                  "build_request");
  auto offered = st.make_request().tools;
  CAF_REQUIRE_EQUAL(offered.size(), 1u);
  CAF_CHECK_EQUAL(offered[0].name, "grep");
}

CAF_TEST(calls a restart interrupted are answered so and not run) {
  commit(
    decide(*t, model_answered{asking({{"a", "ls", "{}"}, {"b", "grep", "{}"}}),
                              t0, false}));
  // A restart: a new turn finds the committed calls without results.
  turn resumed{"t", settings, t0};
  auto plan = decide(resumed,
                     turn_started{false, false, st.unanswered_calls()});
  auto step = commit(plan);
  CAF_REQUIRE_EQUAL(step.context.size(), 2u);
  for (auto& entry : step.context)
    CAF_CHECK_EQUAL(entry.content, tool_texts::interrupted);
  CAF_CHECK(st.unanswered_calls().empty());
  CAF_CHECK_EQUAL(action_names(decide(resumed, step_committed{{}, false})),
                  "build_request");
}

CAF_TEST(the stop of the guard is the answer of the thread) {
  auto loop = asking({{"a", "ls", R"({"x":1})"}});
  turn_plan plan;
  for (int i = 0; i < 10; ++i) {
    plan = decide(*t, model_answered{loop, t0, false});
    if (!std::holds_alternative<turn_actions::commit_calls>(plan.back()))
      break;
    commit(plan);
  }
  auto answer = commit(plan);
  CAF_CHECK(!answer.keeps_inbox);
  CAF_REQUIRE_EQUAL(answer.log.size(), 2u);
  CAF_CHECK_EQUAL(answer.log[1].code, turn_errors::guard_stopped_code);
  // The user reads that the agent is stuck; the report is the detail.
  CAF_CHECK_EQUAL(answer.log[1].text, turn_errors::stuck);
  CAF_CHECK_EQUAL(answer.log[1].detail.rfind("Forced stop: ", 0), 0u);
  CAF_CHECK_EQUAL(answer.context.back().content, turn_errors::stuck);
  CAF_CHECK(st.inbox.empty());
}

CAF_TEST_FIXTURE_SCOPE_END()
