#define CAF_SUITE node_drain

// The orchestrator's part of a graceful stop, on the real node tree and the
// test clock: once it drains, new work is refused with `draining`, idle
// conversations stop at once, a busy one once its turn is committed (or at
// the drain timeout), and the drain answers when all are gone. Its health
// answer says whether the recovery ran.

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
    return scripted_config(
      fresh_data_dir(),
      {scripted_step{"think", "thought about {input}", 1s, "", false},
       scripted_step{"", "re: {input}", {}, "", false}});
  }

  /// Starts a drain with `wait`; `drained` once it answered.
  void drain(caf::timespan wait) {
    sys.spawn([this, orch = orchestrator(), wait](caf::event_based_actor* a) {
      a->request(orch, caf::infinite, atom::drain_v, wait)
        .then([this](caf::ok_atom) { drained = true; },
              [](caf::error& err) { CAF_FAIL(render(err)); });
    });
    consume_messages();
  }

  /// Lets `dt` pass on the test clock and runs what it set off.
  void advance(caf::timespan dt) {
    sched.advance_time(dt);
    consume_messages();
  }

  /// Lets time pass, 100 ms at a time (the drain checks its conversations
  /// that often), until the drain answered; up to 1 s.
  void await_drained() {
    for (int i = 0; i < 10 && !drained; ++i)
      advance(100ms);
  }

  bool drained = false;
};

} // namespace

CAF_TEST_FIXTURE_SCOPE(node_drain_tests, fixture)

CAF_TEST(the orchestrator is healthy once the recovery ran) {
  CAF_CHECK(ask<bool>(orchestrator(), atom::health_v));
}

CAF_TEST(a drain stops idle conversations and refuses new work) {
  CAF_REQUIRE(send("t1", "c1", "hello"));
  CAF_REQUIRE(send("t2", "c2", "hello"));
  CAF_CHECK_EQUAL(active_conversations(), 2u);
  drain(30s);
  await_drained();
  CAF_CHECK(drained);
  CAF_CHECK_EQUAL(active_conversations(), 0u);
  auto refused = send("t3", "c3", "hello");
  CAF_REQUIRE(!refused);
  CAF_CHECK(refused.error() == ec::draining);
}

CAF_TEST(a drain stops more idle conversations than it stops at a time) {
  // The orchestrator has at most 256 stops in flight; the rest queue.
  constexpr size_t threads = 300;
  for (size_t i = 0; i < threads; ++i)
    CAF_REQUIRE(send("t" + std::to_string(i), "c" + std::to_string(i), "hi"));
  CAF_CHECK_EQUAL(active_conversations(), threads);
  drain(30s);
  await_drained();
  CAF_CHECK(drained);
  CAF_CHECK_EQUAL(active_conversations(), 0u);
  CAF_CHECK_EQUAL(history("t0").size(), 2u);
  CAF_CHECK_EQUAL(history("t299").size(), 2u);
}

CAF_TEST(a drain waits for the turn under way) {
  CAF_REQUIRE(send("t1", "c1", "think about it"));
  drain(30s);
  advance(500ms);
  CAF_CHECK(!drained);
  CAF_CHECK_EQUAL(active_conversations(), 1u);
  advance(600ms); // The provider answers: the turn commits, then stops.
  await_drained();
  CAF_CHECK(drained);
  CAF_CHECK_EQUAL(active_conversations(), 0u);
  auto entries = history("t1");
  CAF_REQUIRE_EQUAL(entries.size(), 2u);
  CAF_CHECK_EQUAL(entries.back().text, "thought about think about it");
}

CAF_TEST(messages between threads still flow and the drain waits for them) {
  CAF_REQUIRE(send("t2", "c2", "hello"));
  CAF_REQUIRE(send("t1", "c1", "think about it"));
  drain(30s);
  advance(200ms);
  CAF_CHECK_EQUAL(active_conversations(), 1u); // t2 stopped, t1 busy.
  outbox_entry note;
  note.from = "t1";
  note.seq = 2;
  note.to = "t2";
  note.client_id = agent_client_id("t1", 2);
  note.text = "a note for t2";
  auto delivered = ask<accept_result>(orchestrator(), atom::deliver_v, note);
  CAF_CHECK_EQUAL(delivered.seq, 3u);
  CAF_CHECK(!drained);
  for (int i = 0; i < 30 && !drained; ++i)
    advance(100ms);
  CAF_CHECK(drained);
  CAF_CHECK_EQUAL(active_conversations(), 0u);
  auto entries = history("t2");
  CAF_REQUIRE_EQUAL(entries.size(), 4u);
  CAF_CHECK_EQUAL(entries.back().text, "re: a note for t2");
}

CAF_TEST(a drain stops a turn that outlives its timeout) {
  CAF_REQUIRE(send("t1", "c1", "think about it"));
  drain(300ms);
  advance(200ms);
  CAF_CHECK(!drained);
  await_drained();
  CAF_CHECK(drained);
  CAF_CHECK_EQUAL(active_conversations(), 0u);
  // Not answered: the next start runs the turn again.
  auto entries = history("t1");
  CAF_REQUIRE_EQUAL(entries.size(), 1u);
  CAF_CHECK(entries.front().kind == log_kind::user);
}

CAF_TEST_FIXTURE_SCOPE_END()
