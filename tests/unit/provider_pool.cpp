#define CAF_SUITE provider_pool

// Provider pools on the test clock: retries, backoff, Retry-After, the
// retry budget, failover, cooldowns, circuit breakers with their half-open
// probe, health persisted across a restart, and worker crash isolation. The
// whole node tree runs (real RocksDB); providers are scripted, so every
// delay is exact.

#include "node_fixture.hpp"

#include "keel/conversation.hpp"
#include "keel/provider_pool.hpp"
#include "keel/text.hpp"

using namespace keel;
using namespace keel::test;
using namespace std::chrono_literals;

namespace {

scripted_step reply(std::string text, caf::timespan delay = {}) {
  scripted_step step;
  step.reply = std::move(text);
  step.delay = delay;
  return step;
}

scripted_step
failure(std::string cls,
        std::optional<std::chrono::milliseconds> retry_after = std::nullopt) {
  scripted_step step;
  step.fail = std::move(cls);
  step.retry_after = retry_after;
  return step;
}

/// A failure of class `cls` that breaks a stream which had begun.
scripted_step cut(std::string cls) {
  auto step = failure(std::move(cls));
  step.cut = true;
  return step;
}

scripted_step on(std::string match, scripted_step step) {
  step.match = std::move(match);
  return step;
}

scripted_step crash_on(std::string match) {
  scripted_step step;
  step.match = std::move(match);
  step.crash = true;
  return step;
}

provider_config scripted(std::string name, std::vector<scripted_step> steps) {
  provider_config p;
  p.name = std::move(name);
  p.kind = "scripted";
  p.script = std::move(steps);
  return p;
}

/// Pool "default" chaining `providers` in order, with exact delays: 3
/// attempts per provider, 1 s base delay doubling, no jitter.
node_config pool_config_of(std::vector<provider_config> providers) {
  auto cfg = scripted_config(node_fixture::fresh_data_dir(), {reply("x")});
  cfg.providers = std::move(providers);
  auto& pool = cfg.pools.front();
  pool.chain.clear();
  for (auto& p : cfg.providers)
    pool.chain.push_back(p.name);
  pool.retry.max_attempts = 3;
  pool.retry.base_delay = 1s;
  pool.retry.multiplier = 2;
  pool.retry.max_delay = 30s;
  pool.retry.jitter = 0;
  pool.retry.retry_after_cap = 60s;
  cfg.threads.turn_timeout = std::chrono::hours{1};
  return cfg;
}

struct fixture : node_fixture {
  explicit fixture(node_config cfg) : node_fixture(std::move(cfg)) {
    // nop
  }

  /// Routes a message without waiting for its turn.
  void post(const std::string& thread, const std::string& id,
            const std::string& text) {
    CAF_REQUIRE(send(thread, id, text));
  }

  /// The router's health records of pool "default", by provider.
  std::map<std::string, provider_health_record> health() {
    auto providers = component<caf::actor>(names::providers);
    auto hdl = self->request(
      providers, caf::infinite, atom::forward_v, std::string{"default"},
      caf::make_message(atom::forward_v, std::string{router_child_id},
                        caf::make_message(atom::health_v)));
    consume_messages();
    std::map<std::string, provider_health_record> result;
    hdl.receive(
      [&](std::vector<provider_health_record>& xs) {
        for (auto& x : xs)
          result.emplace(x.provider, x);
      },
      [&](caf::error& err) { CAF_FAIL(render(err)); });
    return result;
  }

  /// The `state` of every status event of `thread`, in order.
  std::vector<std::string> states(const std::string& thread) {
    std::vector<std::string> result;
    for (auto& ev : events(thread))
      if (ev["type"] == "status")
        result.push_back(ev["state"]);
    return result;
  }

  /// The `detail` of the last status event of `thread` in state `state`.
  std::string detail(const std::string& thread, const std::string& state) {
    std::string result;
    for (auto& ev : events(thread))
      if (ev["type"] == "status" && ev["state"] == state)
        result = ev.value("detail", "");
    return result;
  }
};

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

} // namespace

CAF_TEST(transient failures are retried with exponential backoff) {
  fixture f{
    pool_config_of({scripted("a", {failure("overloaded"), failure("overloaded"),
                                   reply("ok {input}")})})};
  f.post("t", "1", "hi");
  CAF_CHECK_EQUAL(f.history("t").size(), 1u);
  CAF_CHECK(contains(f.detail("t", "retrying_provider"), "in 1 s"));
  f.advance(999ms);
  CAF_CHECK_EQUAL(f.health()["a"].calls, 1u);
  f.advance(1ms);
  CAF_CHECK_EQUAL(f.health()["a"].calls, 2u);
  CAF_CHECK(contains(f.detail("t", "retrying_provider"), "in 2 s"));
  f.advance(1999ms);
  CAF_CHECK_EQUAL(f.history("t").size(), 1u);
  f.advance(1ms);
  CAF_CHECK_EQUAL(texts(f.history("t")),
                  (std::vector<std::string>{"user:hi", "reply:ok hi"}));
  CAF_CHECK_EQUAL(f.states("t"),
                  (std::vector<std::string>{"thinking", "retrying_provider",
                                            "retrying_provider"}));
}

CAF_TEST(retry after is a floor on every attempt and capped) {
  auto cfg = pool_config_of({scripted(
    "a", {failure("rate_limit", 5000ms), failure("rate_limit", 5000ms),
          failure("rate_limit", 600000ms), reply("ok")})});
  cfg.pools.front().retry.max_attempts = 4;
  cfg.pools.front().retry.retry_after_cap = 20s;
  cfg.pools.front().breaker.failure_threshold = 10;
  fixture f{cfg};
  f.post("t", "1", "hi");
  // Attempt 1 -> 2: backoff 1 s, but Retry-After says 5 s.
  f.advance(4999ms);
  CAF_CHECK_EQUAL(f.health()["a"].calls, 1u);
  f.advance(1ms);
  CAF_CHECK_EQUAL(f.health()["a"].calls, 2u);
  // Attempt 2 -> 3: backoff 2 s, Retry-After 5 s again (not only the first).
  f.advance(4999ms);
  CAF_CHECK_EQUAL(f.health()["a"].calls, 2u);
  f.advance(1ms);
  CAF_CHECK_EQUAL(f.health()["a"].calls, 3u);
  // Attempt 3 -> 4: Retry-After of 10 min, capped at 20 s.
  f.advance(19999ms);
  CAF_CHECK_EQUAL(f.health()["a"].calls, 3u);
  f.advance(1ms);
  CAF_CHECK_EQUAL(texts(f.history("t")),
                  (std::vector<std::string>{"user:hi", "reply:ok"}));
}

CAF_TEST(a request the provider refuses fails at once without retries) {
  fixture f{pool_config_of(
    {scripted("a", {on("long", failure("context_overflow")),
                    on("bad", failure("invalid_request")), reply("ok")}),
     scripted("b", {reply("from b")})})};
  f.post("t", "1", "a long story");
  f.post("t", "2", "a bad request");
  auto log = f.history("t");
  CAF_REQUIRE_EQUAL(log.size(), 4u);
  CAF_CHECK_EQUAL(log[1].code, "context_overflow");
  CAF_CHECK_EQUAL(log[1].text, turn_errors::context_overflow);
  CAF_CHECK_EQUAL(log[3].code, "provider_rejected");
  CAF_CHECK_EQUAL(log[3].text, turn_errors::provider_rejected);
  auto h = f.health();
  CAF_CHECK_EQUAL(h["a"].calls, 2u);
  CAF_CHECK_EQUAL(h["b"].calls, 0u);
  // The request was at fault, not the provider.
  CAF_CHECK_EQUAL(h["a"].status, "healthy");
}

CAF_TEST(auth fails over at once and the provider cools down until its probe) {
  auto cfg = pool_config_of({scripted("a", {failure("auth"), reply("a back")}),
                             scripted("b", {reply("from b")})});
  fixture f{cfg};
  f.post("t", "1", "one");
  CAF_CHECK_EQUAL(texts(f.history("t")),
                  (std::vector<std::string>{"user:one", "reply:from b"}));
  CAF_CHECK(contains(f.detail("t", "failing_over"), "trying b"));
  auto h = f.health();
  CAF_CHECK_EQUAL(h["a"].status, "unhealthy");
  CAF_CHECK_EQUAL(h["a"].breaker, "open");
  CAF_CHECK_EQUAL(h["a"].last_error_class, "auth");
  // Cooling down (auth: 10 min): a is skipped, even on failover.
  f.post("t", "2", "two");
  CAF_CHECK_EQUAL(f.health()["a"].calls, 1u);
  CAF_CHECK_EQUAL(f.history("t").back().text, "from b");
  // The probe goes out 10% of the cooldown before its end: at 9 min.
  f.advance(std::chrono::minutes{9} - 1ms);
  f.post("t", "3", "three");
  CAF_CHECK_EQUAL(f.health()["a"].calls, 1u);
  f.advance(1ms);
  f.post("t", "4", "four");
  CAF_CHECK_EQUAL(f.history("t").back().text, "a back");
  h = f.health();
  CAF_CHECK_EQUAL(h["a"].status, "healthy");
  CAF_CHECK_EQUAL(h["a"].breaker, "closed");
}

CAF_TEST(consecutive failures open the breaker and only one probe goes out) {
  auto cfg = pool_config_of(
    {scripted("a", {on("slow", reply("a slow", 10s)), failure("overloaded")}),
     scripted("b", {reply("from b")})});
  cfg.pools.front().retry.max_attempts = 1;
  cfg.pools.front().breaker.failure_threshold = 2;
  cfg.pools.front().breaker.cooldowns.set(error_class::overloaded, 100s);
  fixture f{cfg};
  f.post("t", "1", "x");
  CAF_CHECK_EQUAL(f.health()["a"].status, "degraded");
  f.post("t", "2", "y");
  CAF_CHECK_EQUAL(f.health()["a"].status, "unhealthy");
  f.post("t", "3", "z");
  CAF_CHECK_EQUAL(f.health()["a"].calls, 2u); // Skipped while open.
  // Probe time (90 s): the first request takes the probe, the second one
  // (another thread, concurrently) is not let through to a.
  f.advance(90s);
  f.post("u", "1", "slow probe");
  f.post("v", "1", "slow too");
  CAF_CHECK_EQUAL(f.history("v").back().text, "from b");
  CAF_CHECK_EQUAL(f.health()["a"].breaker, "half_open");
  f.advance(10s);
  CAF_CHECK_EQUAL(f.history("u").back().text, "a slow");
  CAF_CHECK_EQUAL(f.health()["a"].breaker, "closed");
}

CAF_TEST(one retry budget spans the whole chain) {
  auto cfg = pool_config_of({scripted("a", {failure("overloaded")}),
                             scripted("b", {failure("overloaded")})});
  cfg.pools.front().budget = 4;
  cfg.pools.front().breaker.failure_threshold = 100;
  fixture f{cfg};
  f.post("t", "1", "x");
  f.advance(1s);
  f.advance(2s);
  auto h = f.health();
  CAF_CHECK_EQUAL(h["a"].calls + h["b"].calls, 4u);
  CAF_CHECK_EQUAL(h["a"].calls, 3u);
  auto log = f.history("t");
  CAF_REQUIRE_EQUAL(log.size(), 2u);
  CAF_CHECK_EQUAL(log[1].code, "provider_failed");
  CAF_CHECK_EQUAL(log[1].text,
                  with_owner_contact(turn_errors::provider_failed, ""));
}

CAF_TEST(a broken stream is retried twice on its provider then fails over) {
  auto cfg = pool_config_of({scripted("a", {cut("overloaded"), cut("unknown"),
                                            cut("timeout"), reply("a ok")}),
                             scripted("b", {reply("from b")})});
  cfg.pools.front().retry.max_attempts = 1;
  cfg.pools.front().breaker.failure_threshold = 100;
  fixture f{cfg};
  f.post("t", "1", "x");
  // 1.5 s, then 3 s: the stream layer's delays, whatever max_attempts says.
  CAF_CHECK(contains(f.detail("t", "retrying_provider"),
                     "retrying the stream from a in 1.5 s (stream retry 1 "
                     "of 2)"));
  f.advance(1499ms);
  CAF_CHECK_EQUAL(f.health()["a"].calls, 1u);
  f.advance(1ms);
  CAF_CHECK_EQUAL(f.health()["a"].calls, 2u);
  CAF_CHECK(contains(f.detail("t", "retrying_provider"),
                     "in 3 s (stream retry 2 of 2)"));
  f.advance(2999ms);
  CAF_CHECK_EQUAL(f.health()["a"].calls, 2u);
  f.advance(1ms);
  // The third break is the pool's: max_attempts is used up, so b answers.
  CAF_CHECK_EQUAL(f.health()["a"].calls, 3u);
  CAF_CHECK_EQUAL(f.history("t").back().text, "from b");
  CAF_CHECK_EQUAL(f.states("t"),
                  (std::vector<std::string>{
                    "thinking", "stream_interrupted", "retrying_provider",
                    "stream_interrupted", "retrying_provider",
                    "stream_interrupted", "failing_over"}));
}

CAF_TEST(a stream broken once is answered by its own provider) {
  auto cfg = pool_config_of({scripted("a", {cut("overloaded"), reply("a ok")}),
                             scripted("b", {reply("from b")})});
  cfg.pools.front().retry.max_attempts = 1;
  fixture f{cfg};
  f.post("t", "1", "x");
  f.advance(1500ms);
  CAF_CHECK_EQUAL(texts(f.history("t")),
                  (std::vector<std::string>{"user:x", "reply:a ok"}));
  CAF_CHECK_EQUAL(f.health()["b"].calls, 0u);
}

CAF_TEST(stream retries draw on the budget and skip what retrying cannot fix) {
  auto cfg = pool_config_of(
    {scripted("a", {on("key", cut("auth")), cut("overloaded")}),
     scripted("b", {reply("from b")})});
  cfg.pools.front().budget = 2;
  cfg.pools.front().breaker.failure_threshold = 100;
  fixture f{cfg};
  // A budget of two attempts: one stream retry, then the request ends.
  f.post("u", "1", "y");
  f.advance(1500ms);
  auto log = f.history("u");
  CAF_REQUIRE_EQUAL(log.size(), 2u);
  CAF_CHECK_EQUAL(log[1].code, "provider_failed");
  CAF_CHECK_EQUAL(f.health()["b"].calls, 0u);
  // Credentials refused in the stream: b at once, no stream retry.
  f.post("t", "1", "key");
  CAF_CHECK_EQUAL(f.history("t").back().text, "from b");
  CAF_CHECK_EQUAL(f.detail("t", "retrying_provider"), "");
}

CAF_TEST(a timeout is retried once with fewer tokens then fails over) {
  auto a = scripted("a", {failure("timeout"), reply("a: {max_tokens} tokens"),
                          failure("timeout"), failure("timeout")});
  a.params.max_output_tokens = 1000;
  auto cfg = pool_config_of({a, scripted("b", {reply("b: {max_tokens}")})});
  cfg.pools.front().breaker.failure_threshold = 100;
  fixture f{cfg};
  f.post("t", "1", "x");
  f.advance(1s);
  CAF_CHECK_EQUAL(f.history("t").back().text, "a: 500 tokens");
  // Two timeouts in a row: the second is not retried on a.
  f.post("t", "2", "y");
  f.advance(1s);
  CAF_CHECK_EQUAL(f.health()["a"].calls, 4u);
  CAF_CHECK_EQUAL(f.history("t").back().text, "b: 1024");
}

CAF_TEST(cooldowns survive a restart of the node) {
  auto cfg = pool_config_of({scripted("a", {failure("billing"), reply("a")}),
                             scripted("b", {reply("from b")})});
  fixture f{cfg};
  f.post("t", "1", "x");
  CAF_CHECK_EQUAL(f.health()["a"].status, "unhealthy");
  f.stop();
  f.start();
  auto h = f.health();
  CAF_CHECK_EQUAL(h["a"].status, "unhealthy");
  CAF_CHECK_EQUAL(h["a"].last_error_class, "billing");
  CAF_CHECK_GREATER(h["a"].cooldown_until, wall_clock_millis());
  f.post("t", "2", "y");
  CAF_CHECK_EQUAL(f.history("t").back().text, "from b");
  CAF_CHECK_EQUAL(f.health()["a"].calls, 0u);
}

CAF_TEST(stopping the node with calls in flight leaves provider health alone) {
  auto cfg = pool_config_of({scripted("a", {reply("a ok", 10s)})});
  auto threshold = cfg.pools.front().breaker.failure_threshold;
  fixture f{cfg};
  for (uint32_t i = 0; i <= threshold; ++i)
    f.post("t" + std::to_string(i), "1", "x");
  f.stop(); // Every call in flight ends with the worker.
  f.start();
  auto h = f.health();
  CAF_CHECK_EQUAL(h["a"].status, "healthy");
  CAF_CHECK_EQUAL(h["a"].consecutive_failures, 0u);
  f.advance(11s); // The recovery's turns run on the healthy provider.
  for (uint32_t i = 0; i <= threshold; ++i)
    CAF_CHECK_EQUAL(f.history("t" + std::to_string(i)).back().text, "a ok");
}

CAF_TEST(a crashed worker fails its own call over and is restarted) {
  auto cfg = pool_config_of({scripted("a", {crash_on("boom"), reply("a ok")}),
                             scripted("b", {reply("from b")})});
  cfg.pools.front().retry.max_attempts = 1;
  cfg.pools.front().breaker.failure_threshold = 100;
  fixture f{cfg};
  f.post("t", "1", "boom");
  f.post("u", "1", "hello");
  CAF_CHECK_EQUAL(f.history("t").back().text, "from b");
  CAF_CHECK_EQUAL(f.history("u").back().text, "a ok");
  auto pools = f.component<supervisor_actor>(names::providers);
  auto hdl = f.self->request(pools, caf::infinite, atom::children_v);
  f.consume_messages();
  hdl.receive(
    [&](std::vector<child_info>& xs) {
      CAF_REQUIRE_EQUAL(xs.size(), 1u);
      CAF_REQUIRE_EQUAL(xs[0].children.size(), 3u);
      CAF_CHECK_EQUAL(xs[0].children[0].id, "router");
      CAF_CHECK_EQUAL(xs[0].children[0].restarts, 0u);
      CAF_CHECK_EQUAL(xs[0].children[1].id, "a");
      CAF_CHECK_EQUAL(xs[0].children[1].restarts, 1u);
    },
    [&](caf::error& err) { CAF_FAIL(render(err)); });
}
