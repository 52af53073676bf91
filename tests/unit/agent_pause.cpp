#define CAF_SUITE agent_pause

// Pausing an agent on the real node tree: a paused thread stores each
// message and answers it with the offline text (code agent_paused) instead
// of calling the model; the pause is in the session record, so it holds
// across a restart, until an operator resumes the thread. Unknown and
// cancelled threads cannot be paused.

#include "node_fixture.hpp"

#include "keel/agent_tree.hpp"
#include "keel/conversation.hpp"
#include "keel/supervisor.hpp"

using namespace keel;
using namespace keel::test;

namespace {

struct fixture : node_fixture {
  fixture() : node_fixture(config()) {
    // nop
  }

  static node_config config() {
    auto cfg = scripted_config(
      fresh_data_dir(), {scripted_step{"", "re: {input}", {}, "", false}});
    cfg.owner.contact = "ops@example.com";
    return cfg;
  }

  caf::error pause(const std::string& thread, bool paused) {
    auto hdl = self->request(orchestrator(), caf::infinite, atom::pause_v,
                             thread, paused);
    consume_messages();
    caf::error result;
    hdl.receive([](caf::ok_atom) {}, [&](caf::error& err) { result = err; });
    return result;
  }

  /// The last entry of `thread`'s history.
  log_entry last(const std::string& thread) {
    auto entries = history(thread);
    CAF_REQUIRE(!entries.empty());
    return entries.back();
  }
};

} // namespace

CAF_TEST_FIXTURE_SCOPE(agent_pause_tests, fixture)

CAF_TEST(a paused agent answers with the offline text until resumed) {
  CAF_REQUIRE(send("t1", "c1", "hello"));
  CAF_CHECK_EQUAL(last("t1").text, "re: hello");
  CAF_CHECK_EQUAL(pause("t1", true), caf::error{});
  CAF_REQUIRE(send("t1", "c2", "are you there"));
  auto offline = last("t1");
  CAF_CHECK(offline.kind == log_kind::error);
  CAF_CHECK_EQUAL(offline.code, "agent_paused");
  CAF_CHECK_EQUAL(offline.text,
                  "I'm currently offline. Please try again later or contact "
                  "ops@example.com.");
  // The message itself is stored, before its answer.
  auto entries = history("t1");
  CAF_REQUIRE_GREATER_OR_EQUAL(entries.size(), 2u);
  CAF_CHECK_EQUAL(entries[entries.size() - 2].text, "are you there");
  // The agent listing shows the pause.
  auto hdl = self->request(persistence(), caf::infinite, atom::agents_v);
  consume_messages();
  hdl.receive(
    [](std::vector<session_record>& sessions, std::vector<tree_link>&) {
      CAF_REQUIRE_EQUAL(sessions.size(), 1u);
      CAF_CHECK_GREATER(sessions[0].paused_at, 0);
      auto agents = make_agents(sessions, {});
      CAF_CHECK_EQUAL(agents[0].paused_at, sessions[0].paused_at);
    },
    [](caf::error& err) { CAF_FAIL(render(err)); });
  // Pausing twice is one pause.
  CAF_CHECK_EQUAL(pause("t1", true), caf::error{});
  CAF_CHECK_EQUAL(pause("t1", false), caf::error{});
  CAF_REQUIRE(send("t1", "c3", "back?"));
  CAF_CHECK_EQUAL(last("t1").text, "re: back?");
}

CAF_TEST(the pause holds across a restart) {
  CAF_REQUIRE(send("t1", "c1", "hello"));
  CAF_CHECK_EQUAL(pause("t1", true), caf::error{});
  stop();
  start();
  CAF_REQUIRE(send("t1", "c2", "still there"));
  CAF_CHECK_EQUAL(last("t1").code, "agent_paused");
  // Another thread is not paused.
  CAF_REQUIRE(send("t2", "c1", "hi"));
  CAF_CHECK_EQUAL(last("t2").text, "re: hi");
  CAF_CHECK_EQUAL(pause("t1", false), caf::error{});
  stop();
  start();
  CAF_REQUIRE(send("t1", "c3", "again"));
  CAF_CHECK_EQUAL(last("t1").text, "re: again");
}

CAF_TEST(a message arriving while the pause is written keeps the pause) {
  CAF_REQUIRE(send("t1", "c1", "hello"));
  stop();
  start(); // t1 is suspended: its next message writes its session again
  auto paused = self->request(orchestrator(), caf::infinite, atom::pause_v,
                              std::string{"t1"}, true);
  // Runs the node until t1's conversation has its pause write under way.
  auto& sup = deref<caf::stateful_actor<supervisor_state>>(
                component<caf::actor>(names::conversations))
                .state;
  auto writing = [&] {
    auto child = sup.find("t1");
    if (child == nullptr || !child->actor)
      return false;
    auto& st = deref<conversation_actor::stateful_base<conversation_state>>(
                 child->actor)
                 .state;
    return st.loaded && st.turn_running;
  };
  while (!writing())
    CAF_REQUIRE(sched.try_run_once());
  auto routed = self->request(orchestrator(), caf::infinite, atom::route_v,
                              std::string{"t1"}, std::string{"c2"},
                              std::string{"during"}, std::string{});
  consume_messages();
  paused.receive([](caf::ok_atom) {},
                 [](caf::error& err) { CAF_FAIL(render(err)); });
  routed.receive([](accept_result&) {},
                 [](caf::error& err) { CAF_FAIL(render(err)); });
  CAF_CHECK_EQUAL(last("t1").code, "agent_paused");
  // On disk too: a restarted node still answers offline.
  stop();
  start();
  CAF_REQUIRE(send("t1", "c3", "after"));
  CAF_CHECK_EQUAL(last("t1").code, "agent_paused");
}

CAF_TEST(unknown and cancelled threads cannot be paused) {
  CAF_CHECK_EQUAL(pause("ghost", true), ec::not_found);
  CAF_REQUIRE(send("t1", "c1", "hello"));
  auto hdl = self->request(orchestrator(), caf::infinite, atom::cancel_v,
                           std::string{"t1"});
  consume_messages();
  hdl.receive([](std::vector<std::string>&) {},
              [](caf::error& err) { CAF_FAIL(render(err)); });
  CAF_CHECK_EQUAL(pause("t1", true), ec::thread_closed);
}

CAF_TEST_FIXTURE_SCOPE_END()
