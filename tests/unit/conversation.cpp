#define CAF_SUITE conversation

#include "node_fixture.hpp"

#include "keel/conversation.hpp"
#include "keel/orchestrator.hpp"

using namespace keel;
using namespace keel::test;
using namespace std::chrono_literals;

namespace {

scripted_step reply_step(std::string reply) {
  return scripted_step{"", std::move(reply), {}, "", false};
}

scripted_step match_step(std::string match, std::string fail,
                         bool crash = false) {
  return scripted_step{std::move(match), "", {}, std::move(fail), crash};
}

scripted_step slow_step(caf::timespan delay) {
  return scripted_step{"", "slow: {input}", delay, "", false};
}

struct fixture : node_fixture {
  fixture() = default;
  explicit fixture(node_config cfg) : node_fixture(std::move(cfg)) {
    // nop
  }
  explicit fixture(std::vector<scripted_step> steps)
    : node_fixture(scripted_config(fresh_data_dir(), std::move(steps))) {
    // nop
  }

  /// Routes without processing; the caller consumes messages later.
  auto route_async(const std::string& thread, const std::string& id,
                   const std::string& text) {
    return self->request(orchestrator(), caf::infinite, atom::route_v, thread,
                         id, text);
  }

  /// CAF id of the thread's conversation, as its supervisor reports it.
  uint64_t conversation_of(const std::string& thread) {
    for (auto& child : conversations())
      if (child.id == thread)
        return child.actor_id;
    CAF_FAIL("no conversation for " << thread);
    return 0;
  }
};

// Persistence restarts only after a 1 s backoff.
struct backoff_fixture : fixture {
  backoff_fixture() : fixture(config_with_backoff()) {
    // nop
  }

  static node_config config_with_backoff() {
    auto cfg = scripted_config(fresh_data_dir(), {reply_step("re: {input}")});
    cfg.supervision.root.backoff.initial = std::chrono::seconds{1};
    cfg.supervision.root.backoff.jitter = 0;
    return cfg;
  }
};

struct failing_fixture : fixture {
  failing_fixture()
    : fixture({match_step("fail", "overloaded"), match_step("crash", "", true),
               reply_step("re: {input}")}) {
    // nop
  }
};

struct slow_fixture : fixture {
  slow_fixture() : fixture({slow_step(10s)}) {
    // nop
  }
};

} // namespace

CAF_TEST_FIXTURE_SCOPE(conversation_tests, fixture)

CAF_TEST(a message is acknowledged and answered in its thread) {
  auto res = send("t1", "c1", "hello");
  CAF_REQUIRE(res);
  CAF_CHECK_EQUAL(res->seq, 1u);
  CAF_CHECK_EQUAL(res->duplicate, false);
  CAF_CHECK_EQUAL(texts(history("t1")),
                  (std::vector<std::string>{"user:hello", "reply:re: hello"}));
  auto evs = events("t1");
  CAF_REQUIRE_EQUAL(evs.size(), 2u);
  CAF_CHECK_EQUAL(evs[0]["type"], "status");
  CAF_CHECK_EQUAL(evs[0]["state"], "thinking");
  CAF_CHECK_EQUAL(evs[1]["type"], "reply");
  CAF_CHECK_EQUAL(evs[1]["id"], "c1");
  CAF_CHECK_EQUAL(evs[1]["text"], "re: hello");
}

CAF_TEST(the orchestrator routes each thread to its own conversation) {
  CAF_REQUIRE(send("a", "1", "to a"));
  CAF_REQUIRE(send("b", "1", "to b"));
  CAF_REQUIRE(send("a", "2", "again a"));
  CAF_CHECK_EQUAL(active_conversations(), 2u);
  CAF_CHECK_NOT_EQUAL(conversation_of("a"), conversation_of("b"));
  CAF_CHECK_EQUAL(texts(history("a")), (std::vector<std::string>{
                                         "user:to a", "reply:re: to a",
                                         "user:again a", "reply:re: again a"}));
  CAF_CHECK_EQUAL(texts(history("b")),
                  (std::vector<std::string>{"user:to b", "reply:re: to b"}));
}

CAF_TEST(messages of one thread are answered in order) {
  std::vector<decltype(route_async("", "", ""))> pending;
  for (int i = 1; i <= 5; ++i)
    pending.push_back(
      route_async("t", std::to_string(i), "m" + std::to_string(i)));
  consume_messages();
  for (size_t i = 0; i < pending.size(); ++i)
    pending[i].receive(
      [&](accept_result& res) { CAF_CHECK_EQUAL(res.seq, i + 1); },
      [&](caf::error& err) { CAF_FAIL(render(err)); });
  std::vector<std::string> replies;
  std::vector<seq_t> reply_to;
  for (auto& e : history("t"))
    if (e.kind == log_kind::reply) {
      replies.push_back(e.text);
      reply_to.push_back(e.reply_to);
    }
  CAF_CHECK_EQUAL(replies,
                  (std::vector<std::string>{"re: m1", "re: m2", "re: m3",
                                            "re: m4", "re: m5"}));
  CAF_CHECK_EQUAL(reply_to, (std::vector<seq_t>{1, 2, 3, 4, 5}));
}

CAF_TEST(a resent message is acknowledged again but answered once) {
  auto first = send("t", "same", "hello");
  auto second = send("t", "same", "hello");
  CAF_REQUIRE(first && second);
  CAF_CHECK_EQUAL(first->duplicate, false);
  CAF_CHECK_EQUAL(second->duplicate, true);
  CAF_CHECK_EQUAL(second->seq, first->seq);
  CAF_CHECK_EQUAL(history("t").size(), 2u);
}

CAF_TEST(an idle thread passivates and comes back with its state) {
  CAF_REQUIRE(send("t", "1", "one"));
  CAF_CHECK_EQUAL(active_conversations(), 1u);
  advance(config.threads.idle_timeout + 1s);
  CAF_CHECK_EQUAL(active_conversations(), 0u);
  auto session = self->request(persistence(), caf::infinite, atom::load_v,
                               std::string{"t"});
  consume_messages();
  session.receive(
    [&](thread_snapshot& snap) {
      CAF_CHECK(snap.exists);
      CAF_CHECK_EQUAL(std::string{to_string(snap.session.state)}, "SUSPENDED");
      CAF_CHECK_EQUAL(snap.context.size(), 2u);
      CAF_CHECK_EQUAL(snap.next_seq, 3u);
    },
    [&](caf::error& err) { CAF_FAIL(render(err)); });
  auto res = send("t", "2", "two");
  CAF_REQUIRE(res);
  CAF_CHECK_EQUAL(res->seq, 3u);
  CAF_CHECK_EQUAL(active_conversations(), 1u);
  CAF_CHECK_EQUAL(texts(history("t")),
                  (std::vector<std::string>{"user:one", "reply:re: one",
                                            "user:two", "reply:re: two"}));
}

CAF_TEST(a thread with work does not passivate) {
  CAF_REQUIRE(send("t", "1", "one"));
  // The idle timer fires while a new message is being routed: the
  // orchestrator refuses the passivation, nothing is lost.
  advance(config.threads.idle_timeout - 1s);
  CAF_REQUIRE(send("t", "2", "two"));
  advance(2s);
  CAF_CHECK_EQUAL(active_conversations(), 1u);
  CAF_CHECK_EQUAL(history("t").size(), 4u);
}

CAF_TEST(persistence restarts and reloads the store) {
  CAF_REQUIRE(send("t", "1", "before"));
  auto old = persistence();
  // A crash, not exit_reason::kill: CAF 0.17 propagates `kill` through links
  // untrappably, unlike OTP's `killed`.
  anon_send_exit(old, caf::exit_reason::unhandled_exception);
  consume_messages();
  auto fresh = persistence();
  CAF_CHECK_NOT_EQUAL(old, fresh);
  auto res = send("t", "2", "after");
  if (!res)
    CAF_FAIL("send after restart failed: " << render(res.error()));
  CAF_CHECK_EQUAL(texts(history("t")),
                  (std::vector<std::string>{"user:before", "reply:re: before",
                                            "user:after", "reply:re: after"}));
}

CAF_TEST(group commit shares one flush between concurrent writes) {
  std::vector<decltype(route_async("", "", ""))> pending;
  for (int i = 0; i < 20; ++i)
    pending.push_back(route_async("g" + std::to_string(i), "1", "x"));
  consume_messages();
  for (auto& hdl : pending)
    hdl.receive([](accept_result&) {},
                [&](caf::error& err) { CAF_FAIL(render(err)); });
  auto stats = self->request(persistence(), caf::infinite, atom::stats_v);
  consume_messages();
  stats.receive(
    [&](persistence_stats& ps) {
      CAF_CHECK_EQUAL(ps.sessions, 20u);
      // 20 accepts and 20 commits; far fewer flushes than 40.
      CAF_CHECK_LESS(ps.flushes, 10u);
      CAF_MESSAGE("flushes for 40 writes: " << ps.flushes);
    },
    [&](caf::error& err) { CAF_FAIL(render(err)); });
}

CAF_TEST_FIXTURE_SCOPE_END()

CAF_TEST_FIXTURE_SCOPE(restart_window_tests, backoff_fixture)

CAF_TEST(a message sent while persistence restarts waits for it) {
  CAF_REQUIRE(send("t", "1", "before"));
  kill("persistence");
  auto pending = route_async("t", "2", "during");
  consume_messages();
  // Persistence is down for the backoff; the accept waits at the root.
  CAF_CHECK(!sys.registry().get(names::persistence));
  advance(std::chrono::seconds{1});
  pending.receive([](accept_result& res) { CAF_CHECK_EQUAL(res.seq, 3u); },
                  [](caf::error& err) { CAF_FAIL(render(err)); });
  CAF_CHECK_EQUAL(texts(history("t")), (std::vector<std::string>{
                                         "user:before", "reply:re: before",
                                         "user:during", "reply:re: during"}));
}

CAF_TEST_FIXTURE_SCOPE_END()

CAF_TEST_FIXTURE_SCOPE(error_boundary_tests, failing_fixture)

CAF_TEST(a provider failure becomes a descriptive error and the drain goes on) {
  CAF_REQUIRE(send("t", "1", "please fail"));
  CAF_REQUIRE(send("t", "2", "fine"));
  auto log = history("t");
  CAF_REQUIRE_EQUAL(log.size(), 4u);
  CAF_CHECK_EQUAL(log[1].kind, log_kind::error);
  CAF_CHECK_EQUAL(log[1].text, turn_errors::provider_failed);
  CAF_CHECK_EQUAL(log[1].code, "provider_failed");
  CAF_CHECK_EQUAL(log[1].reply_to, 1u);
  CAF_CHECK_EQUAL(log[3].text, "re: fine");
  auto evs = events("t");
  CAF_CHECK_EQUAL(evs[1]["type"], "error");
  CAF_CHECK_EQUAL(evs[1]["id"], "1");
}

CAF_TEST(a crashing provider worker fails only its request and is restarted) {
  CAF_REQUIRE(send("t", "1", "crash now"));
  CAF_REQUIRE(send("u", "1", "other thread"));
  CAF_REQUIRE(send("t", "2", "back to normal"));
  auto log = history("t");
  CAF_REQUIRE_EQUAL(log.size(), 4u);
  CAF_CHECK_EQUAL(log[1].kind, log_kind::error);
  CAF_CHECK_EQUAL(log[3].text, "re: back to normal");
  CAF_CHECK_EQUAL(
    texts(history("u")),
    (std::vector<std::string>{"user:other thread", "reply:re: other thread"}));
}

CAF_TEST_FIXTURE_SCOPE_END()

CAF_TEST_FIXTURE_SCOPE(recovery_tests, slow_fixture)

CAF_TEST(unanswered messages are answered after a restart of the node) {
  CAF_REQUIRE(send("t", "1", "pending"));
  CAF_CHECK_EQUAL(history("t").size(), 1u); // Accepted, not yet answered.
  stop();
  start();
  advance(11s);
  CAF_CHECK_EQUAL(
    texts(history("t")),
    (std::vector<std::string>{"user:pending", "reply:slow: pending"}));
}

CAF_TEST(a restart resumes more pending threads than one batch starts) {
  auto threads = 3 * orchestrator_config{}.resume_batch + 1;
  auto name = [](size_t i) { return "t" + std::to_string(i); };
  for (size_t i = 0; i < threads; ++i)
    CAF_REQUIRE(send(name(i), "1", "pending"));
  stop();
  start();
  advance(11s);
  size_t answered = 0;
  for (size_t i = 0; i < threads; ++i)
    if (texts(history(name(i)))
        == std::vector<std::string>{"user:pending", "reply:slow: pending"})
      ++answered;
  CAF_CHECK_EQUAL(answered, threads);
}

CAF_TEST(a conversation killed mid - turn re - runs the turn once) {
  CAF_REQUIRE(send("t", "1", "work"));
  auto before = conversation_of("t");
  kill("conversations/t");
  CAF_CHECK_NOT_EQUAL(conversation_of("t"), before);
  advance(11s);
  CAF_CHECK_EQUAL(texts(history("t")),
                  (std::vector<std::string>{"user:work", "reply:slow: work"}));
  advance(11s); // The killed turn's provider answer arrives: no second reply.
  CAF_CHECK_EQUAL(history("t").size(), 2u);
}

CAF_TEST(a turn that outlives the turn timeout ends with an error) {
  config.threads.turn_timeout = 5s;
  stop();
  start();
  CAF_REQUIRE(send("t", "1", "too slow"));
  advance(6s);
  auto log = history("t");
  CAF_REQUIRE_EQUAL(log.size(), 2u);
  CAF_CHECK_EQUAL(log[1].kind, log_kind::error);
  CAF_CHECK_EQUAL(log[1].text, turn_errors::provider_timeout);
}

CAF_TEST_FIXTURE_SCOPE_END()
