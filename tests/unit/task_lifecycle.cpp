#define CAF_SUITE task_lifecycle

// Every accepted message is a task, on the real node tree and the test
// clock: queued with its acceptance, dispatched while its turn waits for
// the model, in progress once a step is stored, and succeeded or
// dead-lettered with its answer (a retry after a kill -9 is in
// process.cli). The stored states come with writes the turn makes anyway;
// the live ones are the conversation's.

#include "node_fixture.hpp"

using namespace keel;
using namespace keel::test;
using namespace std::chrono_literals;

namespace {

struct fixture : node_fixture {
  fixture() : node_fixture(config()) {
    // nop
  }

  static node_config config() {
    scripted_step tool;
    tool.match = "use a tool";
    tool.reply = "calling";
    tool.tool_name = "nowhere";
    tool.tool_arguments = "{}";
    scripted_step failing;
    failing.match = "boom";
    failing.fail = "invalid_request";
    scripted_step slow;
    slow.match = "slowly";
    slow.reply = "at last";
    slow.delay = 10s;
    scripted_step after_tool;
    after_tool.match = "nowhere";
    after_tool.reply = "done";
    after_tool.delay = 10s;
    return scripted_config(fresh_data_dir(),
                           {tool, failing, slow, after_tool,
                            scripted_step{"", "re: {input}", {}, "", false}});
  }

  /// The task of message `seq` of `thread`, as the node answers it.
  log_entry task(const std::string& thread, seq_t seq) {
    return ask<log_entry>(orchestrator(), atom::task_v, thread, seq);
  }

  /// The stored entry of message `seq` of `thread`.
  log_entry stored(const std::string& thread, seq_t seq) {
    for (auto& x : history(thread))
      if (x.seq == seq)
        return x;
    CAF_FAIL("no entry " << seq << " in " << thread);
    return {};
  }
};

} // namespace

CAF_TEST_FIXTURE_SCOPE(task_lifecycle_tests, fixture)

CAF_TEST(a message answered with a reply succeeded) {
  auto accepted = send("t1", "c1", "hello");
  CAF_REQUIRE(accepted);
  auto seq = accepted->seq;
  auto x = stored("t1", seq);
  CAF_CHECK_EQUAL(x.task, task_state::succeeded);
  CAF_CHECK_EQUAL(x.attempts, 0u);
  CAF_CHECK_GREATER_OR_EQUAL(x.task_at, x.at);
  CAF_CHECK_EQUAL(x.text, "hello");
  auto asked = task("t1", seq);
  CAF_CHECK_EQUAL(asked.task, task_state::succeeded);
  // The reply itself is no task.
  CAF_CHECK_EQUAL(stored("t1", seq + 1).task, task_state::none);
}

CAF_TEST(a message answered with an error is dead lettered) {
  auto accepted = send("t1", "c1", "boom");
  CAF_REQUIRE(accepted);
  CAF_CHECK_EQUAL(stored("t1", accepted->seq).task, task_state::dead_lettered);
}

CAF_TEST(a message waits queued then dispatched then in progress) {
  auto first = send("t1", "c1", "use a tool");
  auto second = send("t1", "c2", "next");
  CAF_REQUIRE(first && second);
  // The first turn stored its tool step and waits for the model again.
  CAF_CHECK_EQUAL(task("t1", first->seq).task, task_state::in_progress);
  CAF_CHECK_EQUAL(stored("t1", first->seq).task, task_state::in_progress);
  CAF_CHECK_EQUAL(task("t1", second->seq).task, task_state::queued);
  CAF_CHECK_EQUAL(stored("t1", second->seq).task, task_state::queued);
  advance(11s);
  CAF_CHECK_EQUAL(stored("t1", first->seq).task, task_state::succeeded);
  CAF_CHECK_EQUAL(stored("t1", second->seq).task, task_state::succeeded);
  auto third = send("t2", "c1", "slowly");
  CAF_REQUIRE(third);
  CAF_CHECK_EQUAL(task("t2", third->seq).task, task_state::dispatched);
  CAF_CHECK_EQUAL(stored("t2", third->seq).task, task_state::queued);
  advance(11s);
  CAF_CHECK_EQUAL(task("t2", third->seq).task, task_state::succeeded);
}

CAF_TEST(an unknown message has no task) {
  CAF_REQUIRE(send("t1", "c1", "hello"));
  auto hdl = self->request(orchestrator(), caf::infinite, atom::task_v,
                           std::string{"t1"}, seq_t{99});
  consume_messages();
  hdl.receive([](log_entry&) { CAF_FAIL("expected not_found"); },
              [](caf::error& err) { CAF_CHECK_EQUAL(err, ec::not_found); });
}

CAF_TEST_FIXTURE_SCOPE_END()
