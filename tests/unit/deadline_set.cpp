#define CAF_SUITE deadline_set

// The deadline set behind an actor's single request timer: the timer is
// moved only when a deadline comes before it, answered work leaves at once,
// expiry hands out exactly what is due (earliest first), and (a property
// over random operations) nothing due is ever missed or handed out twice.

#include <caf/test/unit_test.hpp>

#include <map>
#include <random>

#include "keel/deadline_set.hpp"

using namespace keel;
using namespace std::chrono_literals;

namespace {

using kind = deadline_set::kind;
const deadline_set::time_point t0{};

std::vector<uint64_t> ids_of(const std::vector<deadline_set::entry>& xs) {
  std::vector<uint64_t> ids;
  for (auto& x : xs)
    ids.push_back(x.id);
  return ids;
}

} // namespace

CAF_TEST(the timer moves only for an earlier deadline) {
  deadline_set set;
  CAF_CHECK(set.add(kind::response, 1, t0 + 5s));
  CAF_CHECK(!set.add(kind::response, 2, t0 + 6s));
  CAF_CHECK(!set.add(kind::response, 3, t0 + 5s));
  CAF_CHECK(set.add(kind::work, 1, t0 + 2s));
  CAF_CHECK_EQUAL(set.size(), 4u);
}

CAF_TEST(answered work leaves the set and is never handed out) {
  deadline_set set;
  set.add(kind::response, 1, t0 + 1s);
  set.add(kind::response, 2, t0 + 2s);
  set.remove(kind::response, 1);
  set.remove(kind::response, 7);
  set.remove(kind::work, 2);
  auto due = set.expire(t0 + 3s);
  CAF_REQUIRE_EQUAL(due.size(), 1u);
  CAF_CHECK_EQUAL(due[0].id, 2u);
  CAF_CHECK(due[0].what == kind::response);
  CAF_CHECK(set.empty());
  CAF_CHECK(!set.rearm());
}

CAF_TEST(expiry hands out what is due and rearms at the next deadline) {
  deadline_set set;
  set.add(kind::response, 1, t0 + 1s);
  set.add(kind::work, 9, t0 + 3s);
  set.add(kind::response, 2, t0 + 2s);
  CAF_CHECK(set.expire(t0 + 500ms).empty());
  // The timer armed at 1 s has not fired yet: no second timer.
  CAF_CHECK(!set.rearm());
  auto due = set.expire(t0 + 2s);
  CAF_CHECK_EQUAL(ids_of(due), std::vector<uint64_t>({1, 2}));
  auto next = set.rearm();
  CAF_REQUIRE(next);
  CAF_CHECK(*next == t0 + 3s);
  CAF_CHECK(!set.rearm());
  due = set.expire(t0 + 3s);
  CAF_CHECK_EQUAL(ids_of(due), std::vector<uint64_t>({9}));
  CAF_CHECK(due[0].what == kind::work);
}

CAF_TEST(adding an id again replaces its deadline) {
  deadline_set set;
  set.add(kind::work, 4, t0 + 1s);
  set.add(kind::work, 4, t0 + 10s);
  CAF_CHECK_EQUAL(set.size(), 1u);
  CAF_CHECK(set.expire(t0 + 5s).empty());
  CAF_CHECK_EQUAL(set.expire(t0 + 10s).size(), 1u);
}

CAF_TEST(a timer that fires late still hands out everything due) {
  deadline_set set;
  for (uint64_t i = 0; i < 100; ++i)
    set.add(kind::response, i, t0 + std::chrono::milliseconds{i});
  auto due = set.expire(t0 + 1h);
  CAF_CHECK_EQUAL(due.size(), 100u);
  CAF_CHECK(set.empty());
}

// Random adds, removes and timer firings against a plain map: whatever is
// due when a timer fires is handed out exactly once, nothing early; the
// owner always has a timer armed at or before the earliest deadline.
CAF_TEST(nothing due is missed or handed out twice) {
  std::mt19937_64 rng{20261127};
  deadline_set set;
  std::map<uint64_t, deadline_set::time_point> model;
  auto timer = t0;
  bool timer_armed = false;
  auto now = t0;
  for (int step = 0; step < 20000; ++step) {
    auto op = rng() % 4;
    if (op < 2) {
      auto id = rng() % 64;
      auto at = now + std::chrono::milliseconds{rng() % 1000};
      if (set.add(kind::response, id, at)) {
        timer = at;
        timer_armed = true;
      }
      model[id] = at;
    } else if (op == 2) {
      auto id = rng() % 64;
      set.remove(kind::response, id);
      model.erase(id);
    } else if (timer_armed) {
      now = std::max(now, timer);
      timer_armed = false;
      for (auto& x : set.expire(now)) {
        auto i = model.find(x.id);
        CAF_REQUIRE(i != model.end());
        CAF_REQUIRE(i->second <= now);
        model.erase(i);
      }
      if (auto next = set.rearm()) {
        timer = *next;
        timer_armed = true;
      }
    }
    if (!model.empty()) {
      auto earliest = model.begin()->second;
      for (auto& [id, at] : model)
        earliest = std::min(earliest, at);
      CAF_REQUIRE(timer_armed && timer <= earliest);
    }
    CAF_REQUIRE_EQUAL(set.size(), model.size());
  }
}
