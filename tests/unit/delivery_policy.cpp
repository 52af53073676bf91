#define CAF_SUITE delivery_policy

// Delivery policy on a test clock: the channel presets and what follows a
// failed send (backoff, Retry-After and its floor, the plain-text retry, the
// dead letter), Markdown stripped for that retry, the dead-letter schedule
// (due, retried every interval, abandoned after the last retry), and the
// owner notices' dedup windows, also across a restore from the store.

#include <caf/test/unit_test.hpp>

#include "keel/delivery_policy.hpp"

using namespace keel;
using namespace std::chrono_literals;

namespace {

using action = send_decision::action;

send_failure
transient(std::optional<std::chrono::milliseconds> retry_after = std::nullopt) {
  return {send_failure_kind::transient, retry_after};
}

} // namespace

CAF_TEST(the channel presets carry the documented figures) {
  auto telegram = channel_retry_preset(channel_kind::telegram);
  CAF_CHECK_EQUAL(telegram.backoff.max_attempts, 3u);
  CAF_CHECK_EQUAL(telegram.backoff.base_delay, 400ms);
  CAF_CHECK_EQUAL(telegram.backoff.max_delay, 30s);
  CAF_CHECK_EQUAL(telegram.backoff.jitter, 0.1);
  CAF_CHECK_EQUAL(telegram.min_retry_after, 400ms);
  CAF_CHECK(telegram.plain_text_fallback);
  CAF_CHECK_EQUAL(telegram.send_timeout, 10s);
  auto whatsapp = channel_retry_preset(channel_kind::whatsapp);
  CAF_CHECK_EQUAL(whatsapp.backoff.max_attempts, 3u);
  CAF_CHECK_EQUAL(whatsapp.backoff.base_delay, 500ms);
  CAF_CHECK_EQUAL(whatsapp.backoff.max_delay, 30s);
  auto sms = channel_retry_preset(channel_kind::sms);
  CAF_CHECK_EQUAL(sms.backoff.max_attempts, 2u);
  CAF_CHECK_EQUAL(sms.backoff.base_delay, 1000ms);
  CAF_CHECK_EQUAL(sms.backoff.max_delay, 10s);
  auto email = channel_retry_preset(channel_kind::email);
  CAF_CHECK_EQUAL(email.backoff.max_attempts, 3u);
  CAF_CHECK_EQUAL(email.backoff.base_delay, 2000ms);
  CAF_CHECK_EQUAL(email.backoff.max_delay, 60s);
  CAF_CHECK(!email.plain_text_fallback);
  for (auto name : {"webhook", "telegram", "whatsapp", "sms", "email"})
    CAF_CHECK_EQUAL(to_string(*parse_channel_kind(name)), std::string{name});
  CAF_CHECK(!parse_channel_kind("pigeon"));
}

CAF_TEST(a transient failure is retried with backoff until the last attempt) {
  auto policy = channel_retry_preset(channel_kind::telegram);
  std::mt19937_64 rng{7};
  auto first = after_failed_send(policy, 1, false, transient(), rng);
  CAF_CHECK(first.what == action::retry);
  CAF_CHECK_GREATER_OR_EQUAL(first.delay, 360ms); // 400 ms, 10 % jitter
  CAF_CHECK_LESS_OR_EQUAL(first.delay, 440ms);
  auto second = after_failed_send(policy, 2, false, transient(), rng);
  CAF_CHECK(second.what == action::retry);
  CAF_CHECK_GREATER_OR_EQUAL(second.delay, 720ms); // doubled
  CAF_CHECK_LESS_OR_EQUAL(second.delay, 880ms);
  auto last = after_failed_send(policy, 3, false, transient(), rng);
  CAF_CHECK(last.what == action::dead_letter);
}

CAF_TEST(retry after is honoured with a floor per channel) {
  auto policy = channel_retry_preset(channel_kind::telegram);
  std::mt19937_64 rng{7};
  auto long_wait = after_failed_send(policy, 1, false, transient(5s), rng);
  CAF_CHECK(long_wait.what == action::retry);
  CAF_CHECK_EQUAL(long_wait.delay, 5s);
  // A Retry-After below Telegram's floor waits the floor at least.
  auto none = policy;
  none.backoff.base_delay = 0ms;
  auto short_wait = after_failed_send(none, 1, false, transient(0ms), rng);
  CAF_CHECK_EQUAL(short_wait.delay, 400ms);
  // Webhooks have no floor.
  auto hook = channel_retry_preset(channel_kind::webhook);
  hook.backoff.base_delay = 0ms;
  CAF_CHECK_EQUAL(after_failed_send(hook, 1, false, transient(0ms), rng).delay,
                  0ms);
}

CAF_TEST(a parse error is retried once as plain text even at the end) {
  auto policy = channel_retry_preset(channel_kind::telegram);
  std::mt19937_64 rng{7};
  send_failure parse{send_failure_kind::parse_error, std::nullopt};
  auto first = after_failed_send(policy, 3, false, parse, rng);
  CAF_CHECK(first.what == action::retry_plain_text);
  CAF_CHECK_EQUAL(first.delay, 0ms);
  CAF_CHECK(after_failed_send(policy, 1, true, parse, rng).what
            == action::dead_letter);
  auto email = channel_retry_preset(channel_kind::email);
  CAF_CHECK(after_failed_send(email, 1, false, parse, rng).what
            == action::dead_letter);
  send_failure rejected{send_failure_kind::rejected, std::nullopt};
  CAF_CHECK(after_failed_send(policy, 1, false, rejected, rng).what
            == action::dead_letter);
}

CAF_TEST(markdown is stripped to plain text) {
  CAF_CHECK_EQUAL(strip_markdown("*bold* and _italic_ and `code`"),
                  "bold and italic and code");
  CAF_CHECK_EQUAL(strip_markdown("see [the docs](https://x.test/a)"),
                  "see the docs (https://x.test/a)");
  CAF_CHECK_EQUAL(strip_markdown("# Title\n> quoted\nsnake_case stays"),
                  "Title\nquoted\nsnake_case stays");
  CAF_CHECK_EQUAL(strip_markdown("~~gone~~ \\*kept\\*"), "gone *kept*");
  CAF_CHECK_EQUAL(strip_markdown("5 * 3 and #42 and [x](http://h/~u/a_b)"),
                  "5 * 3 and #42 and x (http://h/~u/a_b)");
  CAF_CHECK_EQUAL(strip_markdown("ends with \\"), "ends with \\");
  CAF_CHECK_EQUAL(strip_markdown("[open](no close"), "open (no close");
  CAF_CHECK_EQUAL(strip_markdown(""), "");
  CAF_CHECK_EQUAL(strip_markdown("##"), "");
}

CAF_TEST(dead letters are retried every interval and abandoned at the max) {
  dead_letter_schedule schedule; // 5 retries, every 5 min
  epoch_ms t0 = 1'000'000;
  auto five_min = std::chrono::milliseconds{5min}.count();
  auto x = new_dead_letter(schedule, t0 - 2000, t0);
  CAF_CHECK_EQUAL(x.first_attempt, t0 - 2000);
  CAF_CHECK(!due(x, t0 + five_min - 1));
  CAF_CHECK(due(x, t0 + five_min));
  auto now = t0;
  for (uint32_t retry = 1; retry < 5; ++retry) {
    now += five_min;
    x = after_failed_retry(schedule, x, now);
    CAF_CHECK_EQUAL(x.retries, retry);
    CAF_CHECK(x.status == dead_letter_status::pending);
    CAF_CHECK_EQUAL(*x.next_retry, now + five_min);
  }
  x = after_failed_retry(schedule, x, now + five_min);
  CAF_CHECK_EQUAL(x.retries, 5u);
  CAF_CHECK(x.status == dead_letter_status::abandoned);
  CAF_CHECK(!x.next_retry);
  CAF_CHECK(!due(x, now + 10 * five_min));
  auto y = after_delivered(new_dead_letter(schedule, t0, t0), t0 + five_min);
  CAF_CHECK(y.status == dead_letter_status::delivered);
  CAF_CHECK(!due(y, t0 + 10 * five_min));
  for (auto name : {"pending", "delivered", "abandoned", "dropped"})
    CAF_CHECK_EQUAL(to_string(*parse_dead_letter_status(name)),
                    std::string{name});
}

CAF_TEST(notices are deduplicated per kind and subject within the window) {
  notice_gate gate;
  CAF_CHECK_EQUAL(gate.window(notice_kind::all_models_failed), 30min);
  CAF_CHECK_EQUAL(gate.window(notice_kind::credits_exhausted), 1h);
  CAF_CHECK_EQUAL(gate.window(notice_kind::channel_unhealthy), 1h);
  CAF_CHECK_EQUAL(gate.window(notice_kind::tool_disabled), 24h);
  CAF_CHECK_EQUAL(gate.window(notice_kind::dead_letter_abandoned), 1h);
  auto min = std::chrono::milliseconds{1min}.count();
  epoch_ms t0 = 5'000'000;
  CAF_CHECK(gate.admit(notice_kind::all_models_failed, "pool a", t0));
  CAF_CHECK(
    !gate.admit(notice_kind::all_models_failed, "pool a", t0 + 29 * min));
  // Another subject, or another kind, is not suppressed.
  CAF_CHECK(gate.admit(notice_kind::all_models_failed, "pool b", t0 + min));
  CAF_CHECK(gate.admit(notice_kind::credits_exhausted, "pool a", t0 + min));
  CAF_CHECK(
    gate.admit(notice_kind::all_models_failed, "pool a", t0 + 30 * min));
  CAF_CHECK(
    !gate.admit(notice_kind::all_models_failed, "pool a", t0 + 31 * min));
  // A restarted node restores what was sent and suppresses as before.
  notice_gate restarted;
  for (auto& [key, sent] : gate.sent())
    restarted.restore(key.first, key.second, sent);
  CAF_CHECK(
    !restarted.admit(notice_kind::credits_exhausted, "pool a", t0 + 60 * min));
  CAF_CHECK(
    restarted.admit(notice_kind::credits_exhausted, "pool a", t0 + 61 * min));
  // Only the credits notice of t0 + 61 min is still within its window.
  restarted.expire(t0 + 100 * min);
  CAF_CHECK_EQUAL(restarted.sent().size(), 1u);
  CAF_CHECK(
    !restarted.admit(notice_kind::credits_exhausted, "pool a", t0 + 100 * min));
  CAF_CHECK(severity_of(notice_kind::credits_exhausted) == severity::high);
  CAF_CHECK(severity_of(notice_kind::tool_disabled) == severity::medium);
  CAF_CHECK(severity_of(notice_kind::dead_letters_pending) == severity::low);
  CAF_CHECK(severity_of(notice_kind::provider_unauthorized) == severity::high);
}

CAF_TEST(a failed sending no longer holds the window shut) {
  notice_gate gate;
  epoch_ms t0 = 5'000'000;
  CAF_CHECK(gate.admit(notice_kind::agent_stuck, "t1", t0));
  gate.forget(notice_kind::agent_stuck, "t1", t0);
  CAF_CHECK(gate.admit(notice_kind::agent_stuck, "t1", t0 + 1));
  // Forgetting an older sending keeps the newer one.
  gate.forget(notice_kind::agent_stuck, "t1", t0);
  CAF_CHECK(!gate.admit(notice_kind::agent_stuck, "t1", t0 + 2));
  gate.set_window(notice_kind::agent_stuck, std::chrono::milliseconds{0});
  CAF_CHECK(gate.admit(notice_kind::agent_stuck, "t1", t0 + 2));
  for (auto name : {"pending", "sent", "failed", "logged"})
    CAF_CHECK_EQUAL(to_string(*parse_notice_status(name)), std::string{name});
  CAF_CHECK(!parse_notice_status("gone"));
  CAF_CHECK_EQUAL(to_string(*parse_notice_kind("provider_unauthorized")),
                  std::string{"provider_unauthorized"});
}
