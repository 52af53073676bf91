#define CAF_SUITE active_sessions

// What a clean stop suspends: the threads whose session may be ACTIVE on
// disk, learnt from the writes staged since the boot recovery (a write
// leaving a session inactive counts only once its group is durable, and in
// order), and the suspension itself on a real store.

#include "keel/recovery.hpp"

#include "store_fixture.hpp"

#include <caf/test/unit_test.hpp>

#include <set>

using namespace keel;
using namespace keel::test;

namespace {

std::set<std::string> sorted(const active_sessions& x) {
  return {x.threads().begin(), x.threads().end()};
}

using strings = std::set<std::string>;

} // namespace

CAF_TEST(an active write counts at once and an inactive one once durable) {
  active_sessions x;
  x.staged("a", true);
  x.staged("b", true);
  CAF_CHECK_EQUAL(sorted(x), (strings{"a", "b"}));
  x.flushed(true);
  x.staged("a", false);
  CAF_CHECK_EQUAL(sorted(x), (strings{"a", "b"}));
  x.flushed(true);
  CAF_CHECK_EQUAL(sorted(x), (strings{"b"}));
}

CAF_TEST(a dropped group keeps every thread it may have left active) {
  active_sessions x;
  x.staged("a", true);
  x.flushed(true);
  x.staged("a", false);
  x.staged("c", true);
  x.flushed(false);
  // "a" may still be ACTIVE on disk; "c" was never written, counting it
  // costs one read at the stop.
  CAF_CHECK_EQUAL(sorted(x), (strings{"a", "c"}));
  x.flushed(true); // Nothing pending any more: nothing changes.
  CAF_CHECK_EQUAL(sorted(x), (strings{"a", "c"}));
}

CAF_TEST(writes of one group count in their order) {
  active_sessions x;
  x.staged("a", false);
  x.staged("a", true);
  x.flushed(true);
  CAF_CHECK_EQUAL(sorted(x), (strings{"a"}));
  x.staged("a", true);
  x.staged("a", false);
  x.flushed(true);
  CAF_CHECK(x.threads().empty());
}

CAF_TEST_FIXTURE_SCOPE(suspend_tests, store_fixture)

CAF_TEST(a clean stop suspends the named active sessions and reads no other) {
  auto closed = make_session("closed");
  closed.state = session_state::closed;
  for (auto& rec : {make_session("a"), make_session("b"), closed})
    db->stage_session(rec);
  CAF_REQUIRE(!db->flush());
  CAF_REQUIRE(!suspend_sessions(
    *db, std::unordered_set<std::string>{"a", "closed", "gone"}));
  CAF_CHECK(db->session("a")->state == session_state::suspended);
  CAF_CHECK(db->session("b")->state == session_state::active);
  CAF_CHECK(db->session("closed")->state == session_state::closed);
  CAF_CHECK(!db->session("gone"));
}

CAF_TEST(a clean stop without a list suspends every served active session) {
  for (auto& thread : {"a", "b", "c"})
    db->stage_session(make_session(thread));
  CAF_REQUIRE(!db->flush());
  thread_filter served = [](const std::string& thread) {
    return thread != "c";
  };
  CAF_REQUIRE(!suspend_sessions(*db, served));
  CAF_CHECK(db->session("a")->state == session_state::suspended);
  CAF_CHECK(db->session("b")->state == session_state::suspended);
  CAF_CHECK(db->session("c")->state == session_state::active);
}

CAF_TEST_FIXTURE_SCOPE_END()
