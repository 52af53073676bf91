#define CAF_SUITE turn_steps

#include <caf/test/unit_test.hpp>

#include "keel/conversation.hpp"

#include "tool_configs.hpp"

using namespace keel;
using keel::test::tool;

namespace {

tool_call call(std::string id, std::string name, std::string args = "{}") {
  return tool_call{std::move(id), std::move(name), std::move(args)};
}

// A conversation state of thread "t" with the user message 5 in its inbox
// and an earlier exchange (1, 2) in its context.
struct fixture {
  fixture() {
    st.cfg.thread = "t";
    st.cfg.settings = settings;
    settings->root_tools = {tool("ls"), tool("grep")};
    settings->agent_tools = {tool("grep")};
    settings->disable_tool_after = 3;
    st.session_exists = true;
    st.session.thread = "t";
    st.context = {context_entry{1, "user", "hi"},
                  context_entry{2, "assistant", "hello"}};
    st.context_tokens = estimate_tokens(st.context);
    st.inbox.push_back(inbox_entry{5, "c5", "list it", 0});
    st.next_seq = 6;
  }

  completion asking(std::vector<tool_call> calls) {
    completion reply;
    reply.text = "let me look";
    reply.tool_calls = std::move(calls);
    return reply;
  }

  tool_outcome failed(const std::string& why) {
    return tool_outcome{"[" + why + "]", why, false, 0};
  }

  std::shared_ptr<conversation_settings> settings
    = std::make_shared<conversation_settings>();
  conversation_state st;
};

} // namespace

CAF_TEST_FIXTURE_SCOPE(turn_steps_tests, fixture)

CAF_TEST(a call step stores the question and the calls before they run) {
  CAF_CHECK(!st.turn_in_context());
  CAF_CHECK(!st.final_reply(asking({call("a", "ls"), call("b", "grep")})));
  auto step = st.make_call_step(asking({call("a", "ls"), call("b", "grep")}), 0,
                                {});
  CAF_CHECK(step.keeps_inbox);
  CAF_REQUIRE_EQUAL(step.context.size(), 2u);
  CAF_CHECK_EQUAL(step.context[0].seq, 5u);
  CAF_CHECK_EQUAL(step.context[0].role, "user");
  CAF_CHECK_EQUAL(step.context[1].seq, 6u);
  CAF_CHECK_EQUAL(step.context[1].tool_calls().size(), 2u);
  st.apply(step);
  CAF_CHECK_EQUAL(st.inbox.size(), 1u);
  CAF_CHECK(st.turn_in_context());
  CAF_CHECK_EQUAL(st.unanswered_calls().size(), 2u);
  // The next request carries the stored question once.
  auto req = st.make_request();
  CAF_CHECK_EQUAL(req.context.size(), 4u);
  CAF_CHECK_EQUAL(req.tools.size(), 2u);
  st.apply(st.make_result_step(call("a", "ls"),
                               tool_outcome{"x.txt\n", "", false, 0}, true, 0));
  auto left = st.unanswered_calls();
  CAF_REQUIRE_EQUAL(left.size(), 1u);
  CAF_CHECK_EQUAL(left[0].id, "b");
  CAF_CHECK_EQUAL(st.context.back().role, "tool");
  CAF_CHECK_EQUAL(st.context.back().tool_call_id(), "a");
  CAF_CHECK_EQUAL(st.context.back().content, "x.txt\n");
}

CAF_TEST(the answer after tool steps does not repeat the question) {
  st.apply(st.make_call_step(asking({call("a", "ls")}), 0, {}));
  st.apply(st.make_result_step(call("a", "ls"),
                               tool_outcome{"x.txt\n", "", false, 0}, true, 0));
  completion answer;
  answer.text = "there is x.txt";
  CAF_CHECK(st.final_reply(answer));
  auto commit = st.make_reply_commit(answer, 0);
  CAF_CHECK(!commit.keeps_inbox);
  CAF_REQUIRE_EQUAL(commit.context.size(), 1u);
  CAF_CHECK_EQUAL(commit.context[0].role, "assistant");
  // The message's task entry, then the reply.
  CAF_REQUIRE_EQUAL(commit.log.size(), 2u);
  CAF_CHECK_EQUAL(commit.log[0].task, task_state::succeeded);
  CAF_CHECK_EQUAL(commit.log[1].reply_to, 5u);
  st.apply(commit);
  CAF_CHECK(st.inbox.empty());
}

CAF_TEST(an error after tool steps closes them as the answer) {
  st.apply(st.make_call_step(asking({call("a", "ls")}), 0, {}));
  st.apply(st.make_result_step(call("a", "ls"),
                               tool_outcome{"x.txt\n", "", false, 0}, true, 0));
  auto commit = st.make_error_commit("guard_stopped", "Forced stop: ...", 0);
  CAF_REQUIRE_EQUAL(commit.context.size(), 1u);
  CAF_CHECK_EQUAL(commit.context[0].role, "assistant");
  CAF_CHECK_EQUAL(commit.context[0].content, "Forced stop: ...");
  // Without steps the question stays out, as before.
  conversation_state fresh;
  fresh.cfg.thread = "u";
  fresh.inbox.push_back(inbox_entry{1, "c1", "hi", 0});
  CAF_CHECK(fresh.make_error_commit("x", "y", 0).context.empty());
}

CAF_TEST(a tool failing three times is disabled and no longer offered) {
  st.apply(st.make_call_step(
    asking({call("a", "ls"), call("b", "ls"), call("c", "ls")}), 0, {}));
  auto first = st.make_result_step(call("a", "ls"), failed("boom 1"), true, 0);
  CAF_CHECK(first.write_session);
  // The message's task (in progress), then the tool's result.
  CAF_REQUIRE_EQUAL(first.log.size(), 2u);
  CAF_CHECK_EQUAL(first.log[0].task, task_state::in_progress);
  st.apply(first);
  // A call that never reached the tool is not its failure.
  st.apply(
    st.make_result_step(call("b", "ls"), failed("no such tool"), false, 0));
  CAF_CHECK_EQUAL(st.tool_failures("ls"), 1u);
  st.apply(st.make_result_step(call("b", "ls"), failed("boom 2"), true, 0));
  CAF_CHECK(!st.tool_disabled("ls"));
  CAF_CHECK(st.notices.empty());
  auto third = st.make_result_step(call("c", "ls"), failed("boom 3"), true, 0);
  // The commit's status event says so too.
  CAF_REQUIRE_EQUAL(st.notices.size(), 1u);
  CAF_CHECK_EQUAL(st.notices[0].state, "tool_disabled");
  CAF_CHECK_EQUAL(st.notices[0].detail, disabled_tool_text("ls", 3, "boom 3"));
  // The owner hears of it once the turn is stored, about the tool.
  CAF_REQUIRE_EQUAL(st.extras().owner_notices.size(), 1u);
  auto notice = st.extras().owner_notices[0];
  CAF_CHECK(notice.kind == notice_kind::tool_disabled);
  CAF_CHECK_EQUAL(notice.subject, "ls");
  CAF_CHECK_EQUAL(notice.text,
                  disabled_tool_text("ls", 3, "boom 3") + " (thread t)");
  CAF_REQUIRE_EQUAL(third.log.size(), 3u);
  CAF_CHECK_EQUAL(third.log[2].text, disabled_tool_text("ls", 3, "boom 3"));
  CAF_CHECK_EQUAL(third.log[2].kind, log_kind::tool);
  CAF_CHECK_EQUAL(third.context.back().role, "system");
  st.apply(third);
  CAF_CHECK(st.tool_disabled("ls"));
  auto offered = st.make_request().tools;
  CAF_REQUIRE_EQUAL(offered.size(), 1u);
  CAF_CHECK_EQUAL(offered[0].name, "grep");
}

CAF_TEST(a child agent gets the agent tools) {
  st.session.parent = "p";
  auto offered = st.offered_tools();
  CAF_REQUIRE_EQUAL(offered.size(), 1u);
  CAF_CHECK_EQUAL(offered[0].name, "grep");
}

CAF_TEST(a reload never hands out the seq of a stored step again) {
  thread_snapshot snap;
  snap.exists = true;
  snap.session.thread = "t";
  snap.next_seq = 6; // The log ends at the user message 5.
  snap.inbox = {inbox_entry{5, "c5", "list it", 0}};
  snap.context = {context_entry{5, "user", "list it"},
                  context_entry{6, "assistant", ""}};
  snap.context[1].set_tool_calls({call("a", "ls")});
  conversation_state fresh;
  fresh.restore(snap);
  CAF_CHECK_EQUAL(fresh.next_seq, 7u);
  CAF_CHECK(fresh.turn_in_context());
  CAF_CHECK_EQUAL(fresh.unanswered_calls().size(), 1u);
}

CAF_TEST(the context keeps the order of the conversation when stored by seq) {
  // Three messages queued at once: 5 (the fixture's), 6 and 7 take their
  // seqs when accepted, before any answer does.
  st.inbox.push_back(inbox_entry{6, "c6", "and this", 0});
  st.inbox.push_back(inbox_entry{7, "c7", "and that", 0});
  st.next_seq = 8;
  completion answer;
  answer.text = "done";
  // 5 takes a tool step; 6 and 7 are answered at once.
  st.apply(st.make_call_step(asking({call("a", "ls")}), 0, {}));
  st.apply(st.make_result_step(call("a", "ls"), tool_outcome{"x", {}, true, 0},
                               false, 0));
  for (int i = 0; i < 3; ++i)
    st.apply(st.make_reply_commit(answer, 0));
  CAF_CHECK(st.inbox.empty());
  // The store keys context records by seq and loads them in that order.
  auto by_seq = st.context.to_vector();
  std::stable_sort(by_seq.begin(), by_seq.end(),
                   [](auto& x, auto& y) { return x.seq < y.seq; });
  std::vector<std::string> stored, spoken;
  for (auto& entry : by_seq)
    stored.push_back(entry.role + ":" + entry.content);
  for (auto& entry : st.context)
    spoken.push_back(entry.role + ":" + entry.content);
  CAF_CHECK_EQUAL(stored, spoken);
  // Each message's entry still names it.
  st.inbox.push_back(inbox_entry{7, "c7", "and that", 0});
  CAF_CHECK(st.turn_in_context());
}

CAF_TEST(calls a crash cut are answered as interrupted in one step) {
  st.apply(
    st.make_call_step(asking({call("a", "ls"), call("b", "grep")}), 0, {}));
  auto step = st.make_interrupted_step(st.unanswered_calls(), 0);
  CAF_CHECK(step.keeps_inbox);
  CAF_REQUIRE_EQUAL(step.context.size(), 2u);
  for (auto& entry : step.context) {
    CAF_CHECK_EQUAL(entry.role, "tool");
    CAF_CHECK_EQUAL(entry.content, tool_texts::interrupted);
  }
  CAF_CHECK_EQUAL(step.context[0].tool_call_id(), "a");
  CAF_CHECK_EQUAL(step.context[1].tool_call_id(), "b");
  // The message's task entry once, then both results.
  CAF_CHECK_EQUAL(step.log.size(), 3u);
  st.apply(step);
  CAF_CHECK(st.unanswered_calls().empty());
  // Not a failure of either tool.
  CAF_CHECK_EQUAL(st.tool_failures("ls"), 0u);
}

CAF_TEST(a result a cancel stopped and the end of the turn are one commit) {
  st.apply(st.make_call_step(asking({call("a", "ls")}), 0, {}));
  auto commit = st.make_cancelled_result(
    call("a", "ls"), failed("ls was cancelled and stopped"), 0);
  CAF_CHECK(!commit.keeps_inbox);
  CAF_CHECK_EQUAL(commit.inbox_seq, 5u);
  // The result closes the call, the error closes the turn after it.
  CAF_REQUIRE_EQUAL(commit.context.size(), 2u);
  CAF_CHECK_EQUAL(commit.context[0].role, "tool");
  CAF_CHECK_EQUAL(commit.context[0].tool_call_id(), "a");
  CAF_CHECK_EQUAL(commit.context[1].role, "assistant");
  CAF_CHECK_EQUAL(commit.context[1].content, turn_errors::cancelled);
  // The tool entry, the message's task entry (once), then the error.
  CAF_REQUIRE_EQUAL(commit.log.size(), 3u);
  CAF_CHECK_EQUAL(commit.log[0].kind, log_kind::tool);
  CAF_CHECK_EQUAL(commit.log[1].task, task_state::dead_lettered);
  CAF_CHECK_EQUAL(commit.log[2].kind, log_kind::error);
  CAF_CHECK_EQUAL(commit.log[2].code, "cancelled");
  CAF_CHECK_LESS(commit.log[0].seq, commit.log[2].seq);
  st.apply(commit);
  CAF_CHECK(st.inbox.empty());
  CAF_CHECK_EQUAL(st.tool_failures("ls"), 0u);
}

CAF_TEST(a request shares the committed context and copies only its own) {
  auto req = st.make_request();
  CAF_CHECK(req.context.shares_with(st.context));
  CAF_REQUIRE_EQUAL(req.context.size(), 3u);
  CAF_CHECK_EQUAL(req.context.back().content, "list it");
  CAF_CHECK_EQUAL(st.context.size(), 2u);
  // A commit while the request is in flight leaves the request as it was.
  completion answer;
  answer.text = "here";
  st.apply(st.make_reply_commit(answer, 0));
  CAF_CHECK(!req.context.shares_with(st.context));
  CAF_CHECK_EQUAL(req.context.size(), 3u);
  CAF_CHECK_EQUAL(req.context[1].content, "hello");
  CAF_CHECK_EQUAL(st.context.size(), 4u);
  // The next request shares the new entries; once it is gone, the next
  // commit copies nothing.
  st.inbox.push_back(inbox_entry{8, "c8", "more", 0});
  auto next = st.make_request();
  CAF_CHECK(next.context.shares_with(st.context));
  auto* entries = st.context.shared_entries();
  next = completion_request{};
  answer.text = "more here";
  st.apply(st.make_reply_commit(answer, 0));
  CAF_CHECK_EQUAL(st.context.shared_entries(), entries);
  CAF_CHECK_EQUAL(st.context.back().content, "more here");
}

CAF_TEST(a repeating model is told to try another way) {
  st.nudge = true;
  auto req = st.make_request();
  CAF_CHECK_EQUAL(req.context.back().role, "system");
  CAF_CHECK_EQUAL(req.context.back().content, different_approach_note);
}

CAF_TEST(spawns past the most one answer may are refused and said) {
  settings->agents.max_spawns_per_reply = 2;
  auto spawn = [](std::string id, std::string name) {
    return call(std::move(id), "spawn_agent",
                R"({"name": ")" + name + R"(", "task": "work"})");
  };
  auto reply = asking({spawn("a", "one"), spawn("b", "two"), spawn("c", "one"),
                       spawn("d", "three")});
  spawn_outcomes outcomes;
  auto wanted = st.new_children(reply, outcomes);
  using wish = std::pair<std::string, std::string>;
  CAF_CHECK_EQUAL(wanted, (std::vector<wish>{{"t.one", ""}, {"t.two", ""}}));
  CAF_REQUIRE_EQUAL(outcomes.refused.count("t.three"), 1u);
  CAF_CHECK_EQUAL(outcomes.refused["t.three"],
                  "this answer spawns 2 agents already, the most one answer "
                  "may (threads.agents.max_spawns_per_reply)");
  CAF_REQUIRE_EQUAL(st.notices.size(), 1u);
  CAF_CHECK_EQUAL(st.notices[0].state, "agent_limit");
  outcomes.created = {"t.one", "t.two"};
  st.edit_extras().children = {"t.one", "t.two"};
  auto step = st.make_call_step(reply, 0, outcomes);
  CAF_CHECK_EQUAL(step.outbox.size(), 3u); // The tasks of one, two, one.
  CAF_CHECK_EQUAL(step.context.back().content,
                  "[cannot spawn agent t.three: this answer spawns 2 agents "
                  "already, the most one answer may "
                  "(threads.agents.max_spawns_per_reply)]");
}

CAF_TEST(messages between agents carry their hops and stop at the budget) {
  settings->agents.hop_budget = 4;
  st.edit_extras().children = {"t.kid"};
  st.session.parent = "p";
  auto tell = asking(
    {call("a", "message_agent", R"({"name": "kid", "text": "go on"})")});
  st.inbox.front().hops = 3;
  auto reply = st.make_reply_commit(tell, 0);
  // The message to the child and the outcome to the parent: hop 4 each.
  CAF_REQUIRE_EQUAL(reply.outbox.size(), 2u);
  for (auto& entry : reply.outbox)
    CAF_CHECK_EQUAL(entry.hops, 4u);
  CAF_CHECK(st.notices.empty());
  st.inbox.front().hops = 4;
  reply = st.make_reply_commit(tell, 0);
  CAF_CHECK(reply.outbox.empty());
  CAF_CHECK_EQUAL(reply.log.back().text,
                  "let me look\n[cannot message agent t.kid: the agents "
                  "exchanged 4 messages for one client message, the most "
                  "they may (threads.agents.hop_budget)]");
  CAF_CHECK_EQUAL(st.notices.size(), 2u);
  // What arrives from another thread keeps its count.
  outbox_entry from_kid;
  from_kid.from = "t.kid";
  from_kid.seq = 9;
  from_kid.client_id = agent_client_id("t.kid", 9);
  from_kid.text = "[agent t.kid] done";
  from_kid.hops = 2;
  CAF_CHECK_EQUAL(st.make_accept_request(from_kid).entry.hops, 2u);
}

CAF_TEST_FIXTURE_SCOPE_END()
