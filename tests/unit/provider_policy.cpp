#define CAF_SUITE provider_policy
#include <caf/test/unit_test.hpp>

#include "keel/provider_policy.hpp"

#include <set>

using namespace keel;
using namespace std::chrono;
using namespace std::chrono_literals;

namespace {

using tp = std::chrono::steady_clock::time_point;

/// One row of the classification table.
struct classify_row {
  const char* name;
  provider_failure failure;
  error_class expected;
};

provider_failure http(int status, std::string body = {}) {
  provider_failure f;
  f.status = status;
  f.body = std::move(body);
  return f;
}

provider_failure transport(transport_error kind) {
  provider_failure f;
  f.transport = kind;
  return f;
}

provider_failure with_causes(provider_failure f,
                             std::vector<std::string> causes) {
  f.causes = std::move(causes);
  return f;
}

provider_failure unparseable(int status, std::string body) {
  auto f = http(status, std::move(body));
  f.unparseable = true;
  return f;
}

provider_failure text(std::string body) {
  provider_failure f;
  f.body = std::move(body);
  return f;
}

// 2015-10-21 07:28:00 UTC, the instant of the IMF-fixdate used below.
const system_clock::time_point date_epoch{seconds{1445412480}};

} // namespace

CAF_TEST(error class names round trip) {
  for (size_t i = 0; i < error_class_count; ++i) {
    auto x = static_cast<error_class>(i);
    CAF_CHECK_EQUAL(parse_error_class(to_string(x)), x);
  }
  CAF_CHECK_EQUAL(std::string{to_string(error_class::context_overflow)},
                  "context_overflow");
  CAF_CHECK(!parse_error_class("Auth"));
  CAF_CHECK(!parse_error_class(""));
  CAF_CHECK_EQUAL(parse_health_status("degraded"), health_status::degraded);
  CAF_CHECK(!parse_health_status("sick"));
}

CAF_TEST(classification by table) {
  const std::vector<classify_row> rows = {
    {"401", http(401), error_class::auth},
    {"403", http(403, "{\"error\":\"forbidden\"}"), error_class::auth},
    {"429", http(429, "{\"error\":{\"type\":\"rate_limit_error\"}}"),
     error_class::rate_limit},
    {"429 insufficient_quota",
     http(429, "{\"error\":{\"code\":\"insufficient_quota\","
               "\"message\":\"You exceeded your current quota\"}}"),
     error_class::billing},
    {"402", http(402), error_class::billing},
    {"408", http(408), error_class::timeout},
    {"504", http(504), error_class::timeout},
    {"transport timeout", transport(transport_error::timeout),
     error_class::timeout},
    {"500", http(500), error_class::overloaded},
    {"502", http(502), error_class::overloaded},
    {"503", http(503), error_class::overloaded},
    {"529", http(529), error_class::overloaded},
    {"200 overloaded body",
     http(200, "{\"type\":\"error\","
               "\"error\":{\"type\":\"overloaded_error\"}}"),
     error_class::overloaded},
    {"400 overloaded body", http(400, "Overloaded, try later"),
     error_class::overloaded},
    {"404", http(404, "{\"error\":{\"code\":\"model_not_found\"}}"),
     error_class::model_not_found},
    {"400 context_length_exceeded",
     http(400, "{\"error\":{\"code\":\"context_length_exceeded\"}}"),
     error_class::context_overflow},
    {"400 prompt is too long",
     http(400, "{\"type\":\"error\",\"error\":{\"type\":"
               "\"invalid_request_error\",\"message\":\"prompt is too long: "
               "210000 tokens > 200000 maximum\"}}"),
     error_class::context_overflow},
    {"400", http(400, "{\"error\":\"bad field\"}"),
     error_class::invalid_request},
    {"422", http(422), error_class::invalid_request},
    {"413", http(413), error_class::invalid_request},
    {"200 unparseable", unparseable(200, "{\"choices\": ["),
     error_class::format},
    {"501", http(501), error_class::action_not_supported},
    {"refused", transport(transport_error::connect_refused),
     error_class::unknown},
    {"reset", transport(transport_error::reset), error_class::unknown},
    {"dns", transport(transport_error::dns), error_class::unknown},
    {"nothing", provider_failure{}, error_class::unknown},
    {"text invalid api key", text("Invalid API key provided"),
     error_class::auth},
    {"text rate limit", text("Rate limit reached for requests"),
     error_class::rate_limit},
    {"text quota exceeded", text("quota exceeded"), error_class::rate_limit},
    {"text model does not exist", text("The model `gpt-9` does not exist"),
     error_class::model_not_found},
    {"text unclassified with status", http(418, "rate limit"),
     error_class::invalid_request},
    {"cause timeout",
     with_causes(transport(transport_error::other),
                 {"request failed", "socket: ETIMEDOUT"}),
     error_class::timeout},
    {"first classifying cause wins",
     with_causes(provider_failure{},
                 {"wrapper", "401 Unauthorized", "Rate limit"}),
     error_class::auth},
    {"own class beats causes", with_causes(http(503), {"invalid api key"}),
     error_class::overloaded},
    {"cause beyond depth 5 ignored",
     with_causes(provider_failure{}, {"a", "b", "c", "d", "e", "overloaded"}),
     error_class::unknown},
    {"cause at depth 5 used",
     with_causes(provider_failure{}, {"a", "b", "c", "d", "overloaded"}),
     error_class::overloaded},
    {"timeout beats unparseable",
     [] {
       auto f = transport(transport_error::timeout);
       f.unparseable = true;
       return f;
     }(),
     error_class::timeout},
  };
  CAF_REQUIRE_GREATER_OR_EQUAL(rows.size(), 25u);
  for (auto& row : rows) {
    CAF_MESSAGE("row: " << row.name);
    CAF_CHECK_EQUAL(classify(row.failure), row.expected);
  }
}

CAF_TEST(retry after seconds) {
  auto now = date_epoch;
  CAF_CHECK_EQUAL(parse_retry_after("0", now)->count(), 0);
  CAF_CHECK_EQUAL(parse_retry_after("120", now)->count(), 120000);
  CAF_CHECK_EQUAL(parse_retry_after(" 7\t", now)->count(), 7000);
  CAF_CHECK(!parse_retry_after("", now));
  CAF_CHECK(!parse_retry_after("-5", now));
  CAF_CHECK(!parse_retry_after("1.5", now));
  CAF_CHECK(!parse_retry_after("12s", now));
  CAF_CHECK(!parse_retry_after("99999999999999999999", now));
}

CAF_TEST(retry after dates the clock cannot hold are refused) {
  auto now = date_epoch;
  // system_clock counts nanoseconds in 64 bits: 1678 to 2262.
  CAF_CHECK(!parse_retry_after("Thu, 29 Feb 4048 12:00:00 GMT", now));
  CAF_CHECK(!parse_retry_after("Fri, 31 Dec 9999 23:59:59 GMT", now));
  CAF_CHECK(!parse_retry_after("Sat, 01 Jan 0000 00:00:00 GMT", now));
  CAF_CHECK_EQUAL(
    parse_retry_after("Fri, 01 Jan 2100 00:00:00 GMT", now)->count(),
    (4102444800 - 1445412480) * int64_t{1000});
}

CAF_TEST(retry after http date) {
  auto now = date_epoch;
  CAF_CHECK_EQUAL(
    parse_retry_after("Wed, 21 Oct 2015 07:28:30 GMT", now)->count(), 30000);
  CAF_CHECK_EQUAL(
    parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", now)->count(), 0);
  // A date in the past means "now".
  CAF_CHECK_EQUAL(
    parse_retry_after("Tue, 20 Oct 2015 07:28:00 GMT", now)->count(), 0);
  CAF_CHECK_EQUAL(
    parse_retry_after("Thu, 22 Oct 2015 07:28:00 GMT", now)->count(), 86400000);
  CAF_CHECK_EQUAL(
    parse_retry_after("Tue, 01 Mar 2016 00:00:00 GMT",
                      system_clock::time_point{seconds{1456790400 - 86400}})
      ->count(),
    86400000); // 2016-02-29 existed
  CAF_CHECK(!parse_retry_after("Wed, 21 Oct 2015 07:28:30 UTC", now));
  CAF_CHECK(!parse_retry_after("Wednesday, 21-Oct-15 07:28:30 GMT", now));
  CAF_CHECK(!parse_retry_after("Wed Oct 21 07:28:30 2015", now));
  CAF_CHECK(!parse_retry_after("Wed, 32 Oct 2015 07:28:30 GMT", now));
  CAF_CHECK(!parse_retry_after("Wed, 29 Feb 2015 07:28:30 GMT", now));
  CAF_CHECK(!parse_retry_after("Wed, 21 Foo 2015 07:28:30 GMT", now));
  CAF_CHECK(!parse_retry_after("Xyz, 21 Oct 2015 07:28:30 GMT", now));
  CAF_CHECK(!parse_retry_after("Wed, 21 Oct 2015 24:28:30 GMT", now));
  CAF_CHECK(!parse_retry_after("Wed, 21 Oct 2015 07:2a:30 GMT", now));
}

CAF_TEST(delays stay within jitter bounds) {
  retry_policy policy;
  policy.base_delay = 1000ms;
  policy.multiplier = 4.0;
  policy.max_delay = 30000ms;
  policy.jitter = 0.1;
  std::mt19937_64 rng{42};
  // attempt -> unjittered delay: 1 s, 4 s, 16 s, then capped at 30 s.
  const std::vector<std::pair<uint32_t, double>> nominal
    = {{1, 1000}, {2, 4000}, {3, 16000}, {4, 30000}, {20, 30000}};
  for (auto [attempt, base] : nominal) {
    std::set<int64_t> seen;
    int64_t lower = static_cast<int64_t>(base * 0.9) - 1;
    int64_t upper = std::min(static_cast<int64_t>(base * 1.1), int64_t{30000});
    for (int i = 0; i < 200; ++i) {
      int64_t d = next_delay(policy, attempt, std::nullopt, rng).count();
      CAF_CHECK_GREATER_OR_EQUAL(d, lower);
      CAF_CHECK_LESS_OR_EQUAL(d, upper);
      seen.insert(d);
    }
    // Jitter really spreads the delays (no thundering herd).
    CAF_CHECK_GREATER(seen.size(), 50u);
  }
}

CAF_TEST(delays are reproducible and exact without jitter) {
  retry_policy policy;
  policy.jitter = 0.0;
  policy.base_delay = 500ms;
  policy.multiplier = 2.0;
  policy.max_delay = 5000ms;
  std::mt19937_64 rng{1};
  const std::vector<std::pair<uint32_t, int64_t>> rows
    = {{1, 500}, {2, 1000}, {3, 2000}, {4, 4000}, {5, 5000}, {60, 5000}};
  for (auto [attempt, expected] : rows)
    CAF_CHECK_EQUAL(next_delay(policy, attempt, std::nullopt, rng).count(),
                    expected);
  policy.jitter = 0.2;
  std::mt19937_64 a{7};
  std::mt19937_64 b{7};
  for (uint32_t i = 1; i < 10; ++i)
    CAF_CHECK_EQUAL(next_delay(policy, i, std::nullopt, a).count(),
                    next_delay(policy, i, std::nullopt, b).count());
}

CAF_TEST(retry after is a capped floor on every attempt) {
  retry_policy policy;
  policy.jitter = 0.0;
  policy.base_delay = 1000ms;
  policy.multiplier = 2.0;
  policy.max_delay = 30000ms;
  policy.retry_after_cap = 20000ms;
  std::mt19937_64 rng{3};
  // Floor above the computed delay, on the first and on later attempts.
  CAF_CHECK_EQUAL(next_delay(policy, 1, 5000ms, rng).count(), 5000);
  CAF_CHECK_EQUAL(next_delay(policy, 3, 5000ms, rng).count(), 5000);
  // Floor below the computed delay: the computed one stands.
  CAF_CHECK_EQUAL(next_delay(policy, 4, 5000ms, rng).count(), 8000);
  // A huge Retry-After is capped.
  CAF_CHECK_EQUAL(next_delay(policy, 1, 3600000ms, rng).count(), 20000);
  // Retry-After may exceed max_delay up to its own cap.
  policy.max_delay = 2000ms;
  CAF_CHECK_EQUAL(next_delay(policy, 1, 10000ms, rng).count(), 10000);
}

CAF_TEST(retryable classes and cooldowns) {
  struct row {
    error_class cls;
    bool retry;
    milliseconds cooldown;
  };
  const std::vector<row> rows = {
    {error_class::auth, false, 10min},
    {error_class::rate_limit, true, 1min},
    {error_class::billing, false, 30min},
    {error_class::timeout, true, 30s},
    {error_class::overloaded, true, 2min},
    {error_class::model_not_found, false, 1h},
    {error_class::context_overflow, false, 0ms},
    {error_class::invalid_request, false, 0ms},
    {error_class::action_not_supported, false, 10min},
    {error_class::format, false, 0ms},
    {error_class::unknown, true, 30s},
  };
  CAF_REQUIRE_EQUAL(rows.size(), error_class_count);
  cooldown_table table;
  for (auto& r : rows) {
    CAF_MESSAGE("class " << to_string(r.cls));
    CAF_CHECK_EQUAL(retryable(r.cls), r.retry);
    CAF_CHECK_EQUAL(default_cooldown(r.cls).count(), r.cooldown.count());
    CAF_CHECK_EQUAL(table.get(r.cls).count(), r.cooldown.count());
  }
  table.set(error_class::rate_limit, 5s);
  CAF_CHECK_EQUAL(table.get(error_class::rate_limit).count(), 5000);
  CAF_CHECK_EQUAL(table.get(error_class::auth).count(), 600000);
}

CAF_TEST(retry budget spans the chain) {
  retry_budget budget{5};
  CAF_CHECK_EQUAL(budget.remaining(), 5u);
  // Provider A takes three attempts, provider B the rest.
  for (int i = 0; i < 3; ++i)
    CAF_CHECK(budget.take());
  CAF_CHECK_EQUAL(budget.used(), 3u);
  CAF_CHECK(budget.take());
  CAF_CHECK(budget.take());
  CAF_CHECK(budget.exhausted());
  CAF_CHECK(!budget.take());
  CAF_CHECK(!budget.take());
  CAF_CHECK_EQUAL(budget.used(), 5u);
  CAF_CHECK_EQUAL(budget.remaining(), 0u);
  retry_budget empty{0};
  CAF_CHECK(!empty.take());
}

CAF_TEST(breaker opens after consecutive failures) {
  breaker_config cfg;
  cfg.failure_threshold = 3;
  circuit_breaker br{cfg};
  tp t0{};
  CAF_CHECK(br.admit(t0));
  CAF_CHECK_EQUAL(br.health().status, health_status::healthy);
  br.record_failure(t0, error_class::overloaded, "503");
  br.record_failure(t0 + 1s, error_class::overloaded, "503");
  CAF_CHECK_EQUAL(br.state(), breaker_state::closed);
  CAF_CHECK_EQUAL(br.health().status, health_status::degraded);
  CAF_CHECK_EQUAL(br.health().consecutive_failures, 2u);
  // A success in between resets the count.
  br.record_success(t0 + 2s);
  CAF_CHECK_EQUAL(br.health().consecutive_failures, 0u);
  CAF_CHECK_EQUAL(br.health().status, health_status::healthy);
  CAF_CHECK(br.health().last_success == t0 + 2s);
  for (int i = 0; i < 3; ++i)
    br.record_failure(t0 + 10s, error_class::overloaded, "overloaded");
  CAF_CHECK_EQUAL(br.state(), breaker_state::open);
  CAF_CHECK_EQUAL(br.health().status, health_status::unhealthy);
  CAF_CHECK(br.health().cooldown_until == t0 + 10s + 2min);
  CAF_CHECK_EQUAL(br.health().last_error, "overloaded");
  CAF_CHECK_EQUAL(br.health().last_error_class, error_class::overloaded);
  CAF_CHECK(!br.admit(t0 + 11s));
}

CAF_TEST(breaker lets exactly one probe through before cooldown ends) {
  breaker_config cfg;
  cfg.failure_threshold = 2;
  cfg.probe_lead_fraction = 0.1;
  circuit_breaker br{cfg};
  tp t0{};
  br.record_failure(t0, error_class::overloaded, "a");
  br.record_failure(t0, error_class::overloaded, "b");
  CAF_REQUIRE_EQUAL(br.state(), breaker_state::open);
  // Cooldown 120 s, lead 12 s: the probe may go at 108 s.
  CAF_CHECK(br.probe_at() == t0 + 108s);
  CAF_CHECK(!br.admit(t0 + 107s));
  CAF_CHECK(!br.admit(t0 + 108s - 1ms));
  CAF_CHECK(br.admit(t0 + 108s));
  CAF_CHECK_EQUAL(br.state(), breaker_state::half_open);
  CAF_CHECK_EQUAL(br.health().status, health_status::degraded);
  // Single flight: everyone else is refused while the probe is out, even
  // after the cooldown ended.
  CAF_CHECK(!br.admit(t0 + 108s));
  CAF_CHECK(!br.admit(t0 + 130s));
  br.record_success(t0 + 131s);
  CAF_CHECK_EQUAL(br.state(), breaker_state::closed);
  CAF_CHECK_EQUAL(br.health().status, health_status::healthy);
  CAF_CHECK(br.admit(t0 + 131s));
  CAF_CHECK(br.admit(t0 + 131s));
}

CAF_TEST(failed probe reopens with a fresh cooldown) {
  breaker_config cfg;
  cfg.failure_threshold = 1;
  cfg.probe_lead = 5s;
  circuit_breaker br{cfg};
  tp t0{};
  br.record_failure(t0, error_class::timeout, "timed out");
  CAF_REQUIRE_EQUAL(br.state(), breaker_state::open);
  CAF_CHECK(br.probe_at() == t0 + 25s);
  CAF_CHECK(br.admit(t0 + 25s));
  br.record_failure(t0 + 26s, error_class::rate_limit, "429");
  CAF_CHECK_EQUAL(br.state(), breaker_state::open);
  CAF_CHECK_EQUAL(br.health().status, health_status::unhealthy);
  CAF_CHECK(br.health().cooldown_until == t0 + 26s + 1min);
  CAF_CHECK_EQUAL(br.health().last_error_class, error_class::rate_limit);
  CAF_CHECK(!br.admit(t0 + 80s));
  CAF_CHECK(br.admit(t0 + 81s));
  CAF_CHECK(!br.admit(t0 + 81s));
}

CAF_TEST(lost probe does not wedge the breaker) {
  breaker_config cfg;
  cfg.failure_threshold = 1;
  cfg.probe_timeout = 10s;
  circuit_breaker br{cfg};
  tp t0{};
  br.record_failure(t0, error_class::unknown, "x");
  auto at = br.probe_at();
  CAF_CHECK(br.admit(at));
  CAF_CHECK(!br.admit(at + 9s));
  CAF_CHECK(br.admit(at + 10s));
  CAF_CHECK(!br.admit(at + 11s));
}

CAF_TEST(request faults do not trip the breaker) {
  breaker_config cfg;
  cfg.failure_threshold = 2;
  circuit_breaker br{cfg};
  tp t0{};
  for (int i = 0; i < 5; ++i) {
    br.record_failure(t0, error_class::invalid_request, "bad field");
    br.record_failure(t0, error_class::context_overflow, "too long");
  }
  CAF_CHECK_EQUAL(br.state(), breaker_state::closed);
  CAF_CHECK_EQUAL(br.health().consecutive_failures, 0u);
  CAF_CHECK_EQUAL(br.health().last_error, "too long");
  CAF_CHECK(br.admit(t0));
  // A probe answered with a request fault is released, not counted.
  br.record_failure(t0, error_class::overloaded, "1");
  br.record_failure(t0, error_class::overloaded, "2");
  CAF_REQUIRE(br.admit(br.probe_at()));
  CAF_CHECK(!br.admit(br.probe_at()));
  br.record_failure(br.probe_at(), error_class::invalid_request, "bad");
  CAF_CHECK_EQUAL(br.state(), breaker_state::half_open);
  CAF_CHECK(br.admit(br.probe_at()));
  CAF_CHECK(!br.admit(br.probe_at()));
}

CAF_TEST(fatal classes open at once) {
  tp t0{};
  {
    circuit_breaker br;
    br.record_failure(t0, error_class::auth, "401 invalid api key");
    CAF_CHECK_EQUAL(br.state(), breaker_state::open);
    CAF_CHECK(br.health().cooldown_until == t0 + 10min);
  }
  {
    breaker_config cfg;
    cfg.open_on_fatal = false;
    circuit_breaker br{cfg};
    br.record_failure(t0, error_class::auth, "401");
    CAF_CHECK_EQUAL(br.state(), breaker_state::closed);
  }
  {
    // A zero cooldown (format) opens the breaker, but the probe may go out
    // at once.
    breaker_config cfg;
    cfg.failure_threshold = 1;
    circuit_breaker br{cfg};
    br.record_failure(t0, error_class::format, "bad json");
    CAF_CHECK_EQUAL(br.state(), breaker_state::open);
    CAF_CHECK(br.admit(t0));
    CAF_CHECK(!br.admit(t0));
  }
}

CAF_TEST(late failures only lengthen the cooldown) {
  breaker_config cfg;
  cfg.failure_threshold = 1;
  circuit_breaker br{cfg};
  tp t0{};
  br.record_failure(t0, error_class::overloaded, "503");
  CAF_CHECK(br.health().cooldown_until == t0 + 2min);
  br.record_failure(t0 + 1s, error_class::timeout, "late timeout");
  CAF_CHECK(br.health().cooldown_until == t0 + 2min);
  br.record_failure(t0 + 2s, error_class::billing, "late billing");
  CAF_CHECK(br.health().cooldown_until == t0 + 2s + 30min);
}

CAF_TEST(health names its states and reads those of older builds) {
  CAF_CHECK_EQUAL(to_string(health_status::healthy), std::string{"healthy"});
  CAF_CHECK_EQUAL(to_string(health_status::degraded), std::string{"degraded"});
  CAF_CHECK_EQUAL(to_string(health_status::unhealthy),
                  std::string{"unhealthy"});
  CAF_CHECK(parse_health_status("unhealthy") == health_status::unhealthy);
  // What older builds stored for an open breaker.
  CAF_CHECK(parse_health_status("down") == health_status::unhealthy);
  CAF_CHECK(!parse_health_status("sick"));
  tp t0{};
  circuit_breaker br;
  CAF_CHECK(!br.health().last_failure);
  br.record_failure(t0 + 3s, error_class::overloaded, "503");
  CAF_CHECK(br.health().last_failure == t0 + 3s);
  // A failure of the request still says when the provider last failed it.
  br.record_failure(t0 + 4s, error_class::invalid_request, "400");
  CAF_CHECK(br.health().last_failure == t0 + 4s);
}

CAF_TEST(restore reopens an unhealthy provider) {
  tp t0{};
  provider_health rec;
  rec.status = health_status::unhealthy;
  rec.consecutive_failures = 4;
  rec.last_error = "503";
  rec.last_error_class = error_class::overloaded;
  rec.cooldown_until = t0 + 100s;
  circuit_breaker br;
  br.restore(rec);
  CAF_CHECK_EQUAL(br.state(), breaker_state::open);
  // Lead of 10 % of the overloaded cooldown (120 s) = 12 s.
  CAF_CHECK(!br.admit(t0 + 87s));
  CAF_CHECK(br.admit(t0 + 88s));
  br.record_success(t0 + 89s);
  CAF_CHECK_EQUAL(br.health().status, health_status::healthy);
  provider_health fine;
  circuit_breaker other;
  other.restore(fine);
  CAF_CHECK_EQUAL(other.state(), breaker_state::closed);
  CAF_CHECK(other.admit(t0));
}
