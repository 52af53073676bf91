#define CAF_SUITE dead_letter_queue

// The dead-letter queue on the real node tree and the test clock: letters
// are written with their schedule, retried when due (also after a
// restart), abandoned after the last retry, delivered once their target
// takes them, and retried or dropped by operators, each recorded.

#include "node_fixture.hpp"

#include "keel/dead_letter_queue.hpp"

using namespace keel;
using namespace keel::test;
using namespace std::chrono_literals;

namespace {

struct fixture : node_fixture {
  fixture() : node_fixture(config_with_schedule()) {
    // nop
  }

  static node_config config_with_schedule() {
    auto cfg = scripted_config(
      fresh_data_dir(), {scripted_step{"", "re: {input}", {}, "", false}});
    cfg.delivery.dead_letters.max_retries = 2;
    cfg.delivery.dead_letters.interval = 1min;
    return cfg;
  }

  dead_letter_queue_actor dlq() {
    return component<dead_letter_queue_actor>(names::dead_letters);
  }

  std::vector<dead_letter> letters() {
    auto hdl = self->request(dlq(), caf::infinite, atom::dead_letters_v);
    consume_messages();
    std::vector<dead_letter> result;
    hdl.receive([&](std::vector<dead_letter>& xs) { result = std::move(xs); },
                [](caf::error& err) { CAF_FAIL(render(err)); });
    return result;
  }

  dead_letter only_letter() {
    auto xs = letters();
    CAF_REQUIRE_EQUAL(xs.size(), 1u);
    return xs[0];
  }

  /// An operator's retry or drop; the letter as stored, or the error.
  template <class... Ts>
  caf::expected<dead_letter> act(Ts&&... xs) {
    auto hdl = self->request(dlq(), caf::infinite, std::forward<Ts>(xs)...);
    consume_messages();
    caf::expected<dead_letter> result{caf::error{}};
    hdl.receive([&](dead_letter& x) { result = std::move(x); },
                [&](caf::error& err) { result = std::move(err); });
    return result;
  }
};

} // namespace

CAF_TEST_FIXTURE_SCOPE(dead_letter_queue_tests, fixture)

CAF_TEST(
  a dead letter is retried on its schedule and abandoned after the last retry) {
  add_dead_letter("p", "ghost");
  auto x = only_letter();
  CAF_CHECK_EQUAL(x.status, dead_letter_status::pending);
  CAF_CHECK_EQUAL(x.retries, 0u);
  CAF_CHECK_EQUAL(x.next_retry_at, x.at + 60000);
  advance(59s);
  CAF_CHECK_EQUAL(only_letter().retries, 0u);
  advance(2s);
  x = only_letter();
  CAF_CHECK_EQUAL(x.status, dead_letter_status::pending);
  CAF_CHECK_EQUAL(x.retries, 1u);
  CAF_REQUIRE_EQUAL(x.events.size(), 1u);
  CAF_CHECK_EQUAL(x.events[0].action, "scheduled retry");
  CAF_CHECK_NOT_EQUAL(x.events[0].outcome.find("ghost"), std::string::npos);
  CAF_CHECK_EQUAL(x.next_retry_at, x.last_attempt_at + 60000);
  advance(60s);
  x = only_letter();
  CAF_CHECK_EQUAL(x.status, dead_letter_status::abandoned);
  CAF_CHECK_EQUAL(x.retries, 2u);
  CAF_CHECK_EQUAL(x.next_retry_at, 0);
  // Abandoned: no retry follows.
  advance(10min);
  CAF_CHECK_EQUAL(only_letter().events.size(), 2u);
}

CAF_TEST(a reply letter is retried through its channels on the schedule) {
  dead_letter reply{
    {"p", 4, "", "", "the reply", 10, 0}, "channel gone: 500", 0};
  reply.channels = {"gone"};
  auto hdl = self->request(dlq(), caf::infinite, caf::put_atom_v, reply);
  consume_messages();
  hdl.receive([](caf::ok_atom) {},
              [](caf::error& err) { CAF_FAIL(render(err)); });
  auto x = only_letter();
  CAF_CHECK_EQUAL(x.status, dead_letter_status::pending);
  CAF_CHECK_EQUAL(x.channels, std::vector<std::string>{"gone"});
  CAF_CHECK_EQUAL(x.reason, "channel gone: 500");
  CAF_CHECK_EQUAL(x.next_retry_at, x.at + 60000);
  // The node has no channel "gone": the channels answer so, and the letter
  // keeps its schedule until it is abandoned.
  advance(61s);
  x = only_letter();
  CAF_CHECK_EQUAL(x.retries, 1u);
  CAF_REQUIRE_EQUAL(x.events.size(), 1u);
  CAF_CHECK_EQUAL(x.events[0].outcome,
                  "channel gone: not configured on this node");
  CAF_CHECK_EQUAL(x.channels, std::vector<std::string>{"gone"});
  advance(60s);
  CAF_CHECK_EQUAL(only_letter().status, dead_letter_status::abandoned);
}

CAF_TEST(a dead letter is delivered once its target takes it) {
  add_dead_letter("p", "t2");
  CAF_REQUIRE(send("t2", "c1", "hello"));
  advance(61s);
  auto x = only_letter();
  CAF_CHECK_EQUAL(x.status, dead_letter_status::delivered);
  CAF_CHECK_EQUAL(x.next_retry_at, 0);
  CAF_REQUIRE_EQUAL(x.events.size(), 1u);
  CAF_CHECK_EQUAL(x.events[0].outcome, "delivered");
  auto log = texts(history("t2"));
  CAF_CHECK(std::count(log.begin(), log.end(), "user:a note for t2") == 1);
  // Delivered: never sent again.
  advance(10min);
  log = texts(history("t2"));
  CAF_CHECK(std::count(log.begin(), log.end(), "user:a note for t2") == 1);
}

CAF_TEST(the schedule survives a restart) {
  add_dead_letter("p", "ghost");
  stop();
  start();
  CAF_CHECK_EQUAL(only_letter().retries, 0u);
  advance(61s);
  CAF_CHECK_EQUAL(only_letter().retries, 1u);
}

CAF_TEST(operators retry and drop dead letters and each is recorded) {
  add_dead_letter("p", "t2");
  auto retried = act(atom::retry_v, std::string{"p"}, seq_t{2});
  CAF_REQUIRE(retried);
  CAF_CHECK_EQUAL(retried->status, dead_letter_status::pending);
  CAF_CHECK_EQUAL(retried->retries, 0u); // an operator's retry uses none up
  CAF_REQUIRE_EQUAL(retried->events.size(), 1u);
  CAF_CHECK_EQUAL(retried->events[0].action, "operator retry");
  auto dropped = act(atom::drop_v, std::string{"p"}, seq_t{2},
                     std::string{"sent by mistake"});
  CAF_REQUIRE(dropped);
  CAF_CHECK_EQUAL(dropped->status, dead_letter_status::dropped);
  CAF_CHECK_EQUAL(dropped->events.back().outcome, "sent by mistake");
  CAF_CHECK_EQUAL(only_letter().status, dead_letter_status::dropped);
  // Dropped: no retry, by schedule or by hand.
  CAF_REQUIRE(send("t2", "c1", "hello"));
  advance(10min);
  CAF_CHECK_EQUAL(only_letter().events.size(), 2u);
  auto again = act(atom::retry_v, std::string{"p"}, seq_t{2});
  CAF_CHECK_EQUAL(again.error(), ec::conflict);
  auto unknown = act(atom::drop_v, std::string{"p"}, seq_t{9},
                     std::string{"x"});
  CAF_CHECK_EQUAL(unknown.error(), ec::not_found);
}

CAF_TEST(an operator retry delivers a letter whose target exists now) {
  add_dead_letter("p", "t2");
  CAF_REQUIRE(send("t2", "c1", "hello"));
  auto retried = act(atom::retry_v, std::string{"p"}, seq_t{2});
  CAF_REQUIRE(retried);
  CAF_CHECK_EQUAL(retried->status, dead_letter_status::delivered);
  auto log = texts(history("t2"));
  CAF_CHECK(std::count(log.begin(), log.end(), "user:a note for t2") == 1);
}

CAF_TEST(a round retries at most a batch and goes on with the rest) {
  config.delivery.dead_letters.batch = 2;
  stop();
  start();
  for (auto from : {"a", "b", "c", "d", "e"})
    add_dead_letter(from, "ghost");
  advance(61s);
  auto xs = letters();
  CAF_REQUIRE_EQUAL(xs.size(), 5u);
  for (auto& x : xs)
    CAF_CHECK_EQUAL(x.retries, 1u);
}

CAF_TEST_FIXTURE_SCOPE_END()
