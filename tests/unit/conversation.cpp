#define CAF_SUITE conversation

#include <set>

#include "node_fixture.hpp"
#include "store_fixture.hpp"

#include "keel/conversation.hpp"
#include "keel/json_codec.hpp"
#include "keel/orchestrator.hpp"
#include "keel/provider_pool.hpp"
#include "keel/supervisor.hpp"
#include "keel/text.hpp"

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

  /// Stores the health of `provider` of pool "default": a billing failure
  /// opened its breaker for an hour. Written as older builds wrote it
  /// ("down"), which reads as unhealthy.
  void store_out_of_credit(const std::string& provider) {
    provider_health_record down;
    down.pool = "default";
    down.provider = provider;
    down.status = "down";
    down.breaker = "open";
    down.consecutive_failures = 5;
    down.last_error = "billing: out of credit";
    down.last_error_class = "billing";
    down.cooldown_until = wall_clock_millis() + 3'600'000;
    auto put = self->request(persistence(), caf::infinite, caf::put_atom_v,
                             down);
    consume_messages();
    put.receive([](caf::ok_atom) {},
                [](caf::error& err) { CAF_FAIL(render(err)); });
  }

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
                         id, text, std::string{});
  }

  /// Runs every job but persistence's: requests to it wait in its mailbox
  /// (a stalled disk, as far as its clients can tell).
  void run_without_persistence() {
    auto db = dynamic_cast<caf::resumable*>(
      caf::actor_cast<caf::abstract_actor*>(persistence()));
    sched.run_jobs_filtered([db](caf::resumable* job) { return job != db; });
  }

  /// The storage timeout of conversations, plus a second.
  caf::timespan past_storage_timeout() const {
    return config.storage.request_timeout + 1s;
  }

  /// The state of `thread`'s live conversation.
  conversation_state& state_of(const std::string& thread) {
    auto& sup = deref<caf::stateful_actor<supervisor_state>>(
                  component<caf::actor>(names::conversations))
                  .state;
    auto child = sup.find(thread);
    CAF_REQUIRE(child != nullptr && child->actor);
    return deref<conversation_actor::stateful_base<conversation_state>>(
             child->actor)
      .state;
  }

  /// The orchestrator's state.
  orchestrator_state& orchestrator_state_of(const orchestrator_actor& orch) {
    return deref<orchestrator_actor::stateful_base<orchestrator_state>>(orch)
      .state;
  }

  /// `atom::expire` timers of `dest` waiting on the test clock.
  template <class Handle>
  size_t expire_timers_of(const Handle& dest) {
    using clock_type = caf::detail::simple_actor_clock;
    auto receiver = caf::actor_cast<caf::strong_actor_ptr>(dest);
    size_t n = 0;
    for (auto& entry : sched.clock().schedule()) {
      auto& ev = *entry.second;
      if (ev.subtype != clock_type::actor_msg_type)
        continue;
      auto& msg = static_cast<clock_type::actor_msg&>(ev);
      if (msg.receiver == receiver
          && msg.content->content().match_elements<atom::expire>())
        ++n;
    }
    return n;
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
    for (auto* sup : {&cfg.supervision.root, &cfg.supervision.providers}) {
      sup->backoff.initial = std::chrono::seconds{1};
      sup->backoff.jitter = 0;
    }
    return cfg;
  }
};

// Two providers that each fail after 3 s, three attempts each, and a turn
// deadline of 2 s.
struct deadline_fixture : fixture {
  deadline_fixture() : fixture(config_with_deadline()) {
    // nop
  }

  static node_config config_with_deadline() {
    scripted_step late_failure{"", "", 3s, "overloaded", false};
    auto cfg = scripted_config(fresh_data_dir(), {late_failure});
    auto second = cfg.providers.front();
    second.name = "second";
    cfg.providers.push_back(second);
    cfg.pools.front().chain = {"script", "second"};
    cfg.pools.front().retry.max_attempts = 3;
    cfg.threads.turn_timeout = 2s;
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

// Limits on what clients and providers control: two live conversations,
// three stored threads, short replies and tool lines.
struct limits_fixture : fixture {
  limits_fixture() : fixture(config_with_limits()) {
    // nop
  }

  static node_config config_with_limits() {
    scripted_step tool_call{"tool", "ok", {}, "", false};
    tool_call.tool_name = "weather";
    tool_call.tool_arguments = R"({"city":"Zürich and a long way around"})";
    scripted_step slow{"slow", "late", 10s, "", false};
    // The model's answer once it learned the tool is not there.
    scripted_step no_tool{"weather is", "none", {}, "", false};
    auto cfg = scripted_config(fresh_data_dir(),
                               {match_step("long", ""), no_tool, tool_call,
                                slow, reply_step("re: {input}")});
    cfg.providers.front().script.front().reply = "long: Grüße {input}";
    cfg.threads.max_live = 2;
    cfg.threads.max_stored_threads = 3;
    // Both cut inside a two-byte character.
    cfg.threads.max_reply_bytes = 9;
    cfg.threads.max_tool_output_bytes = 30;
    return cfg;
  }

  uint64_t evictions() {
    auto hdl = self->request(orchestrator(), caf::infinite, atom::stats_v);
    consume_messages();
    uint64_t result = 0;
    hdl.receive([&](uint64_t, uint64_t, uint64_t n) { result = n; },
                [&](caf::error& err) { CAF_FAIL(render(err)); });
    return result;
  }

  std::set<std::string> live_threads() {
    std::set<std::string> result;
    for (auto& child : conversations())
      result.insert(child.id);
    return result;
  }

  caf::expected<spawn_result> spawn(const std::string& parent,
                                    const std::string& child) {
    auto hdl = self->request(orchestrator(), caf::infinite, atom::spawn_v,
                             parent, child, std::string{});
    consume_messages();
    caf::expected<spawn_result> result{caf::error{}};
    hdl.receive([&](spawn_result& res) { result = res; },
                [&](caf::error& err) { result = std::move(err); });
    return result;
  }

  history_page page(const std::string& thread, seq_t after) {
    auto hdl = self->request(persistence(), caf::infinite, atom::history_v,
                             thread, after, uint64_t{1000});
    consume_messages();
    history_page result;
    hdl.receive([&](history_page& x) { result = std::move(x); },
                [&](caf::error& err) { CAF_FAIL(render(err)); });
    return result;
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

CAF_TEST(opening threads leaves the orchestrator no clock entry per thread) {
  auto orch = orchestrator();
  auto timers_before = expire_timers_of(orch);
  for (int i = 0; i < 20; ++i)
    CAF_REQUIRE(send("new-" + std::to_string(i), "1", "hello"));
  CAF_CHECK_EQUAL(active_conversations(), 20u);
  // Each start of a conversation was a request with a deadline: answered,
  // it left no timeout on the clock and no deadline in the orchestrator's
  // set. The test clock stands still, so their deadlines fall with the
  // boot report's, whose expire timer is armed already: they arm none.
  CAF_CHECK_EQUAL(sched.clock().actor_lookup().count(orch->id()), 0u);
  CAF_CHECK_EQUAL(expire_timers_of(orch), timers_before);
  CAF_CHECK(orchestrator_state_of(orch).deadlines.empty());
}

CAF_TEST(an orchestrator request past its deadline is answered with a timeout) {
  CAF_REQUIRE(send("t", "1", "hello"));
  auto orch = orchestrator();
  auto& st = orchestrator_state_of(orch);
  auto cancel = self->request(orch, caf::infinite, atom::cancel_v,
                              std::string{"t"});
  run_without_persistence(); // The cancel's subtree read waits at persistence.
  CAF_CHECK_EQUAL(st.deadlines.size(), 1u);
  auto timeout = orchestrator_config{}.request_timeout;
  advance_time(timeout - 1ms);
  run_without_persistence();
  CAF_CHECK_EQUAL(st.deadlines.size(), 1u); // Not due yet.
  advance_time(1ms);
  run_without_persistence(); // The expire timer answers the read.
  CAF_CHECK(st.deadlines.empty());
  cancel.receive(
    [](std::vector<std::string>&) { CAF_FAIL("expected a timeout"); },
    [](caf::error& err) { CAF_CHECK_EQUAL(err, caf::sec::request_timeout); });
  consume_messages(); // The read's late answer finds nobody waiting.
  CAF_CHECK(st.deadlines.empty());
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

CAF_TEST(the conversations of a node share its settings) {
  CAF_REQUIRE(send("a", "1", "one"));
  CAF_REQUIRE(send("b", "1", "one"));
  auto& a = state_of("a").cfg;
  auto& b = state_of("b").cfg;
  CAF_CHECK_EQUAL(a.thread, "a");
  CAF_CHECK_EQUAL(b.thread, "b");
  CAF_CHECK_EQUAL(a.settings, b.settings);
  CAF_CHECK_NOT_EQUAL(a.settings, default_conversation_settings());
  CAF_CHECK_EQUAL(a->system_prompt, config.threads.system_prompt);
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

CAF_TEST(a message routed while the suspended session is written is answered) {
  CAF_REQUIRE(send("t", "1", "one"));
  // The idle timer fires (the SUSPENDED write starts) and a message is
  // routed before that write is synced: the conversation must stay for it.
  advance_time(config.threads.idle_timeout + 1s);
  auto pending = route_async("t", "2", "two");
  consume_messages();
  pending.receive([](accept_result& res) { CAF_CHECK_EQUAL(res.seq, 3u); },
                  [](caf::error& err) { CAF_FAIL(render(err)); });
  CAF_CHECK_EQUAL(texts(history("t")),
                  (std::vector<std::string>{"user:one", "reply:re: one",
                                            "user:two", "reply:re: two"}));
  CAF_CHECK_EQUAL(active_conversations(), 1u);
  // The live thread's session says ACTIVE, on disk and in memory: it
  // passivates normally later and comes back.
  advance(config.threads.idle_timeout + 1s);
  CAF_CHECK_EQUAL(active_conversations(), 0u);
  CAF_REQUIRE(send("t", "3", "three"));
  CAF_CHECK_EQUAL(history("t").size(), 6u);
}

CAF_TEST(a thread whose records cannot be read starts fresh and says so) {
  CAF_REQUIRE(send("bad", "1", "one"));
  CAF_REQUIRE(send("good", "1", "one"));
  stop();
  // The reply's context entry (seq 2) is garbage.
  put_raw_record(config.data_dir + "/db", "context", seq_key("bad", 2),
                 "garbage{");
  start();
  CAF_REQUIRE(send("bad", "2", "two"));
  CAF_REQUIRE(send("good", "2", "two"));
  CAF_CHECK_EQUAL(texts(history("bad")),
                  (std::vector<std::string>{"user:one", "reply:re: one",
                                            "user:two", "reply:re: two"}));
  CAF_CHECK_EQUAL(history("good").size(), 4u);
  auto evs = events("bad");
  auto reset = std::find_if(evs.begin(), evs.end(), [](auto& ev) {
    return ev["type"] == "status" && ev["state"] == "history_reset";
  });
  CAF_REQUIRE(reset != evs.end());
  CAF_CHECK_EQUAL((*reset)["detail"], turn_errors::history_reset);
  // The operator sees it in the node's figures.
  auto stats = self->request(persistence(), caf::infinite, atom::stats_v);
  consume_messages();
  stats.receive(
    [](persistence_stats& ps) {
      CAF_CHECK_EQUAL(ps.quarantined_threads, std::vector<std::string>{"bad"});
    },
    [](caf::error& err) { CAF_FAIL(render(err)); });
}

CAF_TEST(an accept that lands after its timeout is answered in order) {
  CAF_REQUIRE(send("t", "1", "one"));
  auto first = route_async("t", "2", "two");
  run_without_persistence();
  advance_time(past_storage_timeout());
  run_without_persistence(); // The sender learns the accept timed out...
  first.receive([](accept_result&) { CAF_FAIL("expected a timeout"); },
                [](caf::error& err) { CAF_CHECK(err); });
  consume_messages(); // ...but it lands.
  auto again = send("t", "2", "two");
  CAF_REQUIRE(again);
  CAF_CHECK(again->duplicate);
  CAF_CHECK_EQUAL(again->seq, 3u);
  CAF_CHECK_EQUAL(texts(history("t")),
                  (std::vector<std::string>{"user:one", "reply:re: one",
                                            "user:two", "reply:re: two"}));
}

CAF_TEST(an accept whose read back times out too is answered without a resend) {
  CAF_REQUIRE(send("t", "1", "one"));
  auto first = route_async("t", "2", "two");
  run_without_persistence();
  advance_time(past_storage_timeout());
  run_without_persistence(); // The accept times out; the inbox is read back...
  first.receive([](accept_result&) { CAF_FAIL("expected a timeout"); },
                [](caf::error& err) { CAF_CHECK(err); });
  advance_time(past_storage_timeout());
  run_without_persistence(); // ...and that read times out as well.
  consume_messages();        // The accept lands; nobody resends it.
  advance(conversation_settings{}.commit_retry_delay);
  CAF_CHECK_EQUAL(texts(history("t")),
                  (std::vector<std::string>{"user:one", "reply:re: one",
                                            "user:two", "reply:re: two"}));
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
  CAF_CHECK(!components_of(sys).get(names::persistence));
  advance(std::chrono::seconds{1});
  pending.receive([](accept_result& res) { CAF_CHECK_EQUAL(res.seq, 3u); },
                  [](caf::error& err) { CAF_FAIL(render(err)); });
  CAF_CHECK_EQUAL(texts(history("t")), (std::vector<std::string>{
                                         "user:before", "reply:re: before",
                                         "user:during", "reply:re: during"}));
}

CAF_TEST(a turn that starts while the providers restart waits for them) {
  kill("providers");
  CAF_CHECK(!components_of(sys).get(names::providers));
  auto res = send("t", "1", "during");
  CAF_REQUIRE(res);
  advance(std::chrono::seconds{1});
  CAF_CHECK_EQUAL(texts(history("t")), (std::vector<std::string>{
                                         "user:during", "reply:re: during"}));
}

CAF_TEST(a restarted pool honours the stored cooldowns from its first call) {
  store_out_of_credit("script");
  // The pool restarts and asks for the record; a turn waiting for the
  // restart reaches the router before persistence answers, and must not
  // reach the provider that cools down.
  kill("providers/default");
  CAF_REQUIRE(send("t", "1", "during"));
  advance_time(std::chrono::seconds{1});
  run_without_persistence();
  consume_messages();
  auto log = history("t");
  CAF_REQUIRE_EQUAL(log.size(), 2u);
  CAF_CHECK_EQUAL(log[1].kind, log_kind::error);
  // The breaker was opened by a billing failure: the user learns why.
  CAF_CHECK_EQUAL(log[1].code, "credits_exhausted");
  CAF_CHECK_EQUAL(log[1].text,
                  with_owner_contact(turn_errors::credits_exhausted, ""));
  CAF_CHECK_NOT_EQUAL(log[1].text.find("contact our team"), std::string::npos);
}

CAF_TEST_FIXTURE_SCOPE_END()

namespace {

// Pool "default" chains "script" (failing "fail" messages as overloaded)
// and "backup", whose stored health says a billing failure opened its
// breaker an hour ago.
node_config config_with_backup_out_of_credit() {
  auto cfg = scripted_config(node_fixture::fresh_data_dir(),
                             {match_step("fail", "overloaded"),
                              reply_step("re: {input}")});
  provider_config backup;
  backup.name = "backup";
  backup.kind = "scripted";
  backup.script = {reply_step("backup: {input}")};
  cfg.providers.push_back(backup);
  cfg.pools[0].chain = {"script", "backup"};
  return cfg;
}

struct backup_fixture : fixture {
  backup_fixture() : fixture(config_with_backup_out_of_credit()) {
    store_out_of_credit("backup");
    kill("providers/default"); // reloads the stored health
    consume_messages();
  }
};

} // namespace

CAF_TEST_FIXTURE_SCOPE(backup_tests, backup_fixture)

CAF_TEST(credits are exhausted only if every provider is out of credit) {
  // "script" fails for another reason: the user must not read that the
  // credit is used up.
  CAF_REQUIRE(send("t", "1", "please fail"));
  auto log = history("t");
  CAF_REQUIRE_EQUAL(log.size(), 2u);
  CAF_CHECK_EQUAL(log[1].code, "provider_failed");
  CAF_CHECK_EQUAL(log[1].text,
                  with_owner_contact(turn_errors::provider_failed, ""));
}

CAF_TEST_FIXTURE_SCOPE_END()

CAF_TEST_FIXTURE_SCOPE(deadline_tests, deadline_fixture)

CAF_TEST(a turn deadline stops the provider call and nothing follows it) {
  CAF_REQUIRE(send("t", "1", "hello"));
  advance(2s);
  auto log = history("t");
  CAF_REQUIRE_EQUAL(log.size(), 2u);
  CAF_CHECK_EQUAL(log[1].kind, log_kind::error);
  CAF_CHECK_EQUAL(log[1].code, "provider_timeout");
  auto outcome_events = events("t").size();
  // The call's scripted failure would come at 3 s, then retries and the
  // failover: none of it happens, and no frame follows the outcome.
  advance(60s);
  auto evs = events("t");
  CAF_CHECK_EQUAL(evs.size(), outcome_events);
  CAF_CHECK_EQUAL(evs.back()["type"], "error");
  auto health = self->request(
    component<caf::actor>(names::providers), caf::infinite, atom::forward_v,
    std::string{"default"},
    caf::make_message(atom::forward_v, std::string{router_child_id},
                      caf::make_message(atom::health_v)));
  consume_messages();
  health.receive(
    [](std::vector<provider_health_record>& records) {
      CAF_REQUIRE_EQUAL(records.size(), 2u);
      // The cancelled attempt is no failure of the provider.
      CAF_CHECK_EQUAL(records[0].calls, 0u);
      CAF_CHECK_EQUAL(records[1].calls, 0u);
      CAF_CHECK_EQUAL(records[0].status, "healthy");
    },
    [](caf::error& err) { CAF_FAIL(render(err)); });
}

CAF_TEST_FIXTURE_SCOPE_END()

CAF_TEST_FIXTURE_SCOPE(error_boundary_tests, failing_fixture)

CAF_TEST(a provider failure becomes a descriptive error and the drain goes on) {
  CAF_REQUIRE(send("t", "1", "please fail"));
  CAF_REQUIRE(send("t", "2", "fine"));
  auto log = history("t");
  CAF_REQUIRE_EQUAL(log.size(), 4u);
  CAF_CHECK_EQUAL(log[1].kind, log_kind::error);
  CAF_CHECK_EQUAL(log[1].text,
                  with_owner_contact(turn_errors::provider_failed, ""));
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

CAF_TEST(a commit that lands after its timeout answers the message once) {
  CAF_REQUIRE(send("t", "1", "work"));
  advance_time(10s);
  run_without_persistence(); // The answer's commit waits at persistence.
  advance_time(past_storage_timeout());
  run_without_persistence(); // The conversation's commit times out...
  consume_messages();        // ...but the commit lands.
  advance(conversation_settings{}.commit_retry_delay);
  advance(11s); // A turn run again would answer by now.
  CAF_CHECK_EQUAL(texts(history("t")),
                  (std::vector<std::string>{"user:work", "reply:slow: work"}));
  auto evs = events("t");
  auto replies = std::count_if(evs.begin(), evs.end(),
                               [](auto& ev) { return ev["type"] == "reply"; });
  CAF_CHECK_EQUAL(replies, 1);
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

CAF_TEST_FIXTURE_SCOPE(limits_tests, limits_fixture)

CAF_TEST(a new thread at max_live passivates the idlest live one first) {
  CAF_REQUIRE(send("a", "1", "one"));
  CAF_REQUIRE(send("b", "1", "one"));
  CAF_CHECK_EQUAL(live_threads(), (std::set<std::string>{"a", "b"}));
  // "a" was routed to least recently: it makes room for "c".
  CAF_REQUIRE(send("c", "1", "one"));
  CAF_CHECK_EQUAL(live_threads(), (std::set<std::string>{"b", "c"}));
  CAF_CHECK_EQUAL(evictions(), 1u);
  auto snap = self->request(persistence(), caf::infinite, atom::load_v,
                            std::string{"a"});
  consume_messages();
  snap.receive(
    [](thread_snapshot& x) {
      CAF_CHECK_EQUAL(std::string{to_string(x.session.state)}, "SUSPENDED");
    },
    [](caf::error& err) { CAF_FAIL(render(err)); });
  // Its next message brings it back (now "b" is the idlest) with its
  // history intact.
  auto res = send("a", "2", "two");
  CAF_REQUIRE(res);
  CAF_CHECK_EQUAL(res->seq, 3u);
  CAF_CHECK_EQUAL(live_threads(), (std::set<std::string>{"a", "c"}));
  CAF_CHECK_EQUAL(evictions(), 2u);
  CAF_CHECK_EQUAL(texts(history("a")),
                  (std::vector<std::string>{"user:one", "reply:re: one",
                                            "user:two", "reply:re: two"}));
  CAF_CHECK_EQUAL(history("b").size(), 2u);
}

CAF_TEST(a busy conversation is not passivated to make room) {
  // "a" is the least recently routed, but its turn is in flight: "b" goes.
  CAF_REQUIRE(send("a", "1", "slow"));
  CAF_REQUIRE(send("b", "1", "one"));
  CAF_REQUIRE(send("c", "1", "one"));
  CAF_CHECK_EQUAL(live_threads(), (std::set<std::string>{"a", "c"}));
  CAF_CHECK_EQUAL(evictions(), 1u);
  advance(11s);
  CAF_CHECK_EQUAL(texts(history("a")),
                  (std::vector<std::string>{"user:slow", "reply:late"}));
}

CAF_TEST(a thread beyond max_stored_threads is refused and others work on) {
  CAF_REQUIRE(send("a", "1", "one"));
  CAF_REQUIRE(send("b", "1", "one"));
  CAF_REQUIRE(spawn("a", "a.child"));
  auto refused = send("c", "1", "one");
  CAF_REQUIRE(!refused);
  CAF_CHECK_EQUAL(error_code_name(refused.error()), "thread_limit");
  auto why = error_message(refused.error());
  CAF_CHECK(why.find("threads.max_stored_threads") != std::string::npos);
  CAF_CHECK(why.find("3") != std::string::npos);
  auto child = spawn("b", "b.child");
  CAF_REQUIRE(!child);
  CAF_CHECK_EQUAL(error_code_name(child.error()), "thread_limit");
  // Existing threads keep working, the refused one holds nothing.
  CAF_CHECK(send("a", "2", "two"));
  CAF_CHECK(send("a.child", "1", "hi"));
  CAF_CHECK(history("c").empty());
  // Counted from the store after a restart.
  stop();
  start();
  CAF_CHECK(!send("c", "1", "one"));
  CAF_CHECK(send("b", "2", "two"));
  CAF_CHECK_EQUAL(history("b").size(), 4u);
}

CAF_TEST(a long reply and a long tool result are cut before the context) {
  CAF_REQUIRE(send("t", "1", "long story"));
  auto log = history("t");
  CAF_REQUIRE_EQUAL(log.size(), 2u);
  // "long: Grüße long story" is cut at 9 bytes, before the 'ü' it splits.
  CAF_CHECK_EQUAL(log[1].text, "long: Gr\n[reply cut at 9 bytes]");
  CAF_CHECK(valid_utf8(log[1].text));
  // The model calls a tool the thread lacks: the result says so, cut.
  CAF_REQUIRE(send("t", "2", "tool"));
  log = history("t");
  CAF_REQUIRE_EQUAL(log.size(), 5u);
  CAF_CHECK_EQUAL(log[3].kind, log_kind::tool);
  CAF_CHECK_EQUAL(log[3].tool, "weather");
  CAF_CHECK_EQUAL(log[3].text, "[no tool named weather is avai\n"
                               "[tool output cut at 30 bytes]");
  CAF_CHECK_EQUAL(log[4].text, "none");
  // The context holds the cut texts, not the provider's or the tool's.
  auto snap = self->request(persistence(), caf::infinite, atom::load_v,
                            std::string{"t"});
  consume_messages();
  snap.receive(
    [&](thread_snapshot& x) {
      CAF_REQUIRE_EQUAL(x.context.size(), 6u);
      CAF_CHECK_EQUAL(x.context[1].content, log[1].text);
      CAF_CHECK_EQUAL(x.context[3].tool_calls().size(), 1u);
      CAF_CHECK_EQUAL(x.context[4].content, log[3].text);
    },
    [](caf::error& err) { CAF_FAIL(render(err)); });
}

CAF_TEST(history pages stop at max_history_bytes) {
  CAF_REQUIRE(send("t", "1", "one"));
  CAF_REQUIRE(send("t", "2", "two"));
  // Entries "one", "re: one", "two", "re: two", measured as the frame
  // encodes them: a budget for the first three, the fourth starts the next
  // page.
  auto all = page("t", 0);
  CAF_REQUIRE_EQUAL(all.entries.size(), 4u);
  size_t budget = 0;
  for (size_t i = 0; i < 3; ++i)
    budget += json_size(all.entries[i]) + 1;
  config.gateway.max_history_bytes = budget;
  stop();
  start();
  auto first = page("t", 0);
  CAF_CHECK_EQUAL(first.entries.size(), 3u);
  CAF_CHECK(first.more);
  auto second = page("t", first.entries.back().seq);
  CAF_CHECK_EQUAL(second.entries.size(), 1u);
  CAF_CHECK(!second.more);
}

CAF_TEST_FIXTURE_SCOPE_END()

namespace {

// A window of 1,024 tokens, which a dozen 400-character messages overflow;
// the provider summarizes a chunk (its text lists "user: ..." lines) in a
// few words and answers every message with "ok".
struct compaction_fixture : fixture {
  compaction_fixture() : fixture(config_with_small_window()) {
    // nop
  }

  static node_config config_with_small_window() {
    auto cfg = scripted_config(
      fresh_data_dir(),
      {scripted_step{"user: ", "earlier: long notes", {}, "", false},
       reply_step("ok")});
    cfg.providers.front().context_window = 1024;
    return cfg;
  }
};

} // namespace

CAF_TEST_FIXTURE_SCOPE(compaction_tests, compaction_fixture)

CAF_TEST(the token count of a context follows appends compactions and reloads) {
  std::string long_text(400, 'x');
  for (int i = 1; i <= 12; ++i)
    CAF_REQUIRE(send("t", std::to_string(i), long_text));
  auto& st = state_of("t");
  CAF_CHECK_LESS(st.context.size(), 24u); // Compacted at least once.
  CAF_CHECK_EQUAL(st.context_tokens, estimate_tokens(st.context));
  // A request made from the context counts the context once and its own
  // entries besides (no system prompt or tools here).
  completion_request req;
  req.context = st.context;
  req.context.push_back(context_entry{99, "user", "one more question"});
  CAF_CHECK_EQUAL(st.request_tokens(req), estimate_tokens(req.context));
  stop();
  start();
  CAF_REQUIRE(send("t", "13", "after the restart"));
  auto& reloaded = state_of("t");
  CAF_CHECK_EQUAL(reloaded.context_tokens, estimate_tokens(reloaded.context));
}

CAF_TEST_FIXTURE_SCOPE_END()
