#define CAF_SUITE notifier

// Owner notices on the real node tree and the test clock: an abandoned dead
// letter tells the owner once per dedup window (later ones counted as
// suppressed), the window survives a restart, a window set in config
// applies, and many pending letters send one digest. No owner channel is
// set, so notices are logged and listed (the channel's way is the process
// suite's).

#include "node_fixture.hpp"

#include "keel/notifier.hpp"

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
    cfg.delivery.dead_letters.max_retries = 1;
    cfg.delivery.dead_letters.interval = 1min;
    cfg.owner.notice_windows[notice_kind::dead_letter_abandoned] = 2h;
    return cfg;
  }

  std::vector<owner_notice> notices() {
    return ask<std::vector<owner_notice>>(
      component<notifier_actor>(names::notifier), atom::notices_v);
  }

  /// The one notice of `kind`.
  owner_notice only(notice_kind kind) {
    std::vector<owner_notice> found;
    for (auto& x : notices())
      if (x.kind == kind)
        found.push_back(x);
    CAF_REQUIRE_EQUAL(found.size(), 1u);
    return found[0];
  }

  /// The notice about `subject`.
  owner_notice about(const std::string& subject) {
    for (auto& x : notices())
      if (x.subject == subject)
        return x;
    CAF_FAIL("no notice about " << subject);
    return {};
  }

  /// The notices as stored.
  std::vector<owner_notice> stored() {
    return ask<std::vector<owner_notice>>(persistence(), atom::notices_v);
  }
};

} // namespace

CAF_TEST_FIXTURE_SCOPE(notifier_tests, fixture)

CAF_TEST(an abandoned letter tells the owner once per window) {
  add_dead_letter("p", "ghost");
  advance(61s);
  auto first = only(notice_kind::dead_letter_abandoned);
  CAF_CHECK_EQUAL(first.subject, "thread ghost");
  CAF_CHECK_EQUAL(first.status, notice_status::logged);
  CAF_CHECK_EQUAL(first.suppressed, 0u);
  CAF_CHECK_NOT_EQUAL(first.text.find("p/2"), std::string::npos);
  // Another letter to the same target within the window: counted only.
  add_dead_letter("q", "ghost");
  advance(61s);
  auto counted = only(notice_kind::dead_letter_abandoned);
  CAF_CHECK_EQUAL(counted.at, first.at);
  CAF_CHECK_EQUAL(counted.suppressed, 1u);
  CAF_CHECK_GREATER(counted.last_suppressed_at, first.at);
  // Another target is another subject.
  add_dead_letter("r", "void");
  advance(61s);
  CAF_CHECK_EQUAL(notices().size(), 2u);
  // Past the default window (1 h) but within the configured one (2 h).
  advance(1h);
  add_dead_letter("s", "ghost");
  advance(61s);
  auto held = about("thread ghost");
  CAF_CHECK_EQUAL(held.at, first.at);
  CAF_CHECK_EQUAL(held.suppressed, 2u);
  // Past the configured window: sent again, counting afresh.
  advance(1h);
  add_dead_letter("u", "ghost");
  advance(61s);
  auto xs = notices();
  CAF_REQUIRE_EQUAL(xs.size(), 2u);
  CAF_CHECK_EQUAL(xs[0].subject, "thread ghost"); // newest first
  CAF_CHECK_GREATER_OR_EQUAL(xs[0].at, first.at + 2 * 3600 * 1000);
  CAF_CHECK_EQUAL(xs[0].suppressed, 0u);
}

CAF_TEST(the dedup state and suppressed counts survive a restart) {
  add_dead_letter("p", "ghost");
  advance(61s);
  add_dead_letter("q", "ghost");
  advance(61s);
  // The suppressed count is written within a second.
  advance(1s);
  auto on_disk = stored();
  CAF_REQUIRE_EQUAL(on_disk.size(), 1u);
  CAF_CHECK_EQUAL(on_disk[0].suppressed, 1u);
  auto first = on_disk[0].at;
  stop();
  start();
  CAF_CHECK_EQUAL(only(notice_kind::dead_letter_abandoned).suppressed, 1u);
  add_dead_letter("r", "ghost");
  advance(61s);
  auto x = only(notice_kind::dead_letter_abandoned);
  CAF_CHECK_EQUAL(x.at, first);
  CAF_CHECK_EQUAL(x.suppressed, 2u);
}

CAF_TEST(many pending letters send one digest) {
  for (size_t i = 0; i < dead_letter_digest_threshold; ++i)
    add_dead_letter("p" + std::to_string(i), "ghost");
  advance(61s);
  auto digest = only(notice_kind::dead_letters_pending);
  CAF_CHECK_EQUAL(digest.subject, "dead letters");
  CAF_CHECK_NOT_EQUAL(digest.text.find("10 dead letters"), std::string::npos);
  CAF_CHECK_EQUAL(severity_of(digest.kind), severity::low);
  // All ten were abandoned: one notice, nine suppressed.
  CAF_CHECK_EQUAL(only(notice_kind::dead_letter_abandoned).suppressed, 9u);
}

CAF_TEST_FIXTURE_SCOPE_END()

namespace {

scripted_step failing(std::string match, std::string error_class) {
  scripted_step step;
  step.match = std::move(match);
  step.fail = std::move(error_class);
  return step;
}

struct turn_fixture : node_fixture {
  turn_fixture() : node_fixture(config()) {
    // nop
  }

  static node_config config() {
    scripted_step loop;
    loop.match = "loop";
    loop.reply = "again";
    loop.tool_name = "nowhere";
    loop.tool_arguments = "{}";
    auto cfg = scripted_config(
      fresh_data_dir(), {failing("budget", "billing"), failing("keys", "auth"),
                         failing("down", "overloaded"), loop,
                         scripted_step{"", "re: {input}", {}, "", false}});
    cfg.threads.guard.max_events = 1;
    // Every message meets the provider: no breaker skips it.
    cfg.pools[0].breaker.open_on_fatal = false;
    cfg.pools[0].breaker.failure_threshold = 1000;
    return cfg;
  }

  std::vector<owner_notice> notices() {
    return ask<std::vector<owner_notice>>(
      component<notifier_actor>(names::notifier), atom::notices_v);
  }

  /// The notice of `kind`, or one with an empty subject.
  owner_notice of(notice_kind kind) {
    for (auto& x : notices())
      if (x.kind == kind)
        return x;
    return {};
  }
};

} // namespace

CAF_TEST_FIXTURE_SCOPE(notifier_turn_tests, turn_fixture)

CAF_TEST(failed turns tell the owner about the pool or the thread) {
  CAF_REQUIRE(send("t1", "c1", "budget"));
  advance(1s);
  auto credits = of(notice_kind::credits_exhausted);
  CAF_CHECK_EQUAL(credits.subject, "pool default");
  CAF_CHECK_NOT_EQUAL(credits.text.find("Thread t1"), std::string::npos);
  CAF_REQUIRE(send("t1", "c2", "keys"));
  advance(1s);
  CAF_CHECK_EQUAL(of(notice_kind::provider_unauthorized).subject,
                  "pool default");
  CAF_REQUIRE(send("t2", "c1", "down"));
  advance(1s);
  CAF_CHECK_EQUAL(of(notice_kind::all_models_failed).subject, "pool default");
  // Another thread of the pool within the window: counted, not sent.
  CAF_REQUIRE(send("t3", "c1", "down"));
  advance(1s);
  CAF_CHECK_EQUAL(of(notice_kind::all_models_failed).suppressed, 1u);
  // The guard stops a turn: the thread is stuck.
  CAF_REQUIRE(send("t4", "c1", "loop"));
  advance(1s);
  auto stuck = of(notice_kind::agent_stuck);
  CAF_CHECK_EQUAL(stuck.subject, "t4");
  CAF_CHECK_NOT_EQUAL(stuck.text.find("Forced stop"), std::string::npos);
  // An answered message tells nobody anything.
  CAF_CHECK_EQUAL(notices().size(), 4u);
  CAF_REQUIRE(send("t5", "c1", "hello"));
  advance(1s);
  CAF_CHECK_EQUAL(notices().size(), 4u);
}

CAF_TEST_FIXTURE_SCOPE_END()
