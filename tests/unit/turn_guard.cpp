#define CAF_SUITE turn_guard

// The turn loop's safety guard: each limit stops the turn with the report
// that ends the message, loops and repeated errors are caught, repeated
// answers get a note, and (a property over random turns) no limit is ever
// passed and a stop is final.

#include <caf/test/unit_test.hpp>

#include <random>

#include "keel/turn_guard.hpp"

using namespace keel;
using namespace std::chrono_literals;

namespace {

using clock_type = std::chrono::steady_clock;

const clock_type::time_point t0{};

guard_limits small_limits() {
  guard_limits limits;
  limits.max_events = 20;
  limits.max_tool_calls = 5;
  limits.max_duration = 1min;
  limits.per_tool = {{"delete_file", 2}};
  return limits;
}

// The report's first part, before the figures.
std::string what_of(const guard_stop& stop) {
  return stop.report.substr(0, stop.report.find(" Events processed:"));
}

std::string report_of(const std::optional<guard_stop>& stop) {
  return stop ? stop->report : std::string{"<none>"};
}

} // namespace

CAF_TEST(the tool call limit stops the call past it with the report) {
  guard_limits limits;
  turn_guard guard{std::make_shared<const guard_limits>(limits), t0};
  for (int i = 0; i < 400; ++i)
    CAF_REQUIRE(!guard.on_tool_call("read", std::to_string(i), t0 + 1s));
  for (int i = 0; i < 846; ++i) {
    bool nudge = false;
    CAF_REQUIRE(
      !guard.on_reply("step " + std::string(i % 7, 'x'), t0 + 1s, nudge));
  }
  auto stop = guard.on_tool_call("read", "again", t0 + 443s);
  CAF_REQUIRE(stop);
  CAF_CHECK_EQUAL(to_string(stop->reason), std::string{"tool_calls"});
  CAF_CHECK_EQUAL(stop->report,
                  "Forced stop: reached maximum of 400 tool invocations. "
                  "Events processed: 1,247 | Tool calls: 400 | Elapsed: 7m "
                  "23s. Please review the work completed so far.");
  // Final: every later step gets the same stop.
  CAF_CHECK_EQUAL(report_of(guard.on_tool_result("read", "", t0 + 444s)),
                  stop->report);
}

CAF_TEST(events time and per tool caps each stop the turn) {
  turn_guard events{std::make_shared<const guard_limits>(small_limits()), t0};
  bool nudge = false;
  for (int i = 0; i < 20; ++i)
    CAF_REQUIRE(!events.on_reply("answer " + std::to_string(i)
                                   + std::string(static_cast<size_t>(i), 'y'),
                                 t0, nudge));
  auto stop = events.on_reply("one more", t0, nudge);
  CAF_REQUIRE(stop);
  CAF_CHECK_EQUAL(stop->reason, guard_reason::events);
  CAF_CHECK_EQUAL(what_of(*stop), "Forced stop: reached maximum of 20 events.");
  turn_guard timed{std::make_shared<const guard_limits>(small_limits()), t0};
  CAF_CHECK(!timed.on_tool_call("read", "a", t0 + 59s));
  stop = timed.on_tool_result("read", "", t0 + 61s);
  CAF_REQUIRE(stop);
  CAF_CHECK_EQUAL(stop->report,
                  "Forced stop: reached the time limit of 1m 0s. Events "
                  "processed: 1 | Tool calls: 1 | Elapsed: 1m 1s. Please "
                  "review the work completed so far.");
  turn_guard capped{std::make_shared<const guard_limits>(small_limits()), t0};
  CAF_CHECK(!capped.on_tool_call("delete_file", "a", t0));
  CAF_CHECK(!capped.on_tool_call("delete_file", "b", t0));
  stop = capped.on_tool_call("delete_file", "c", t0);
  CAF_REQUIRE(stop);
  CAF_CHECK_EQUAL(stop->reason, guard_reason::tool_cap);
  CAF_CHECK_EQUAL(what_of(*stop),
                  "Forced stop: reached maximum of 2 delete_file invocations.");
}

CAF_TEST(the same call four times in a row is a loop) {
  turn_guard guard{std::make_shared<const guard_limits>(), t0};
  for (int i = 0; i < 3; ++i)
    CAF_REQUIRE(!guard.on_tool_call("edit_file", R"({"path":"a"})", t0));
  // Other arguments in between start the count again.
  CAF_REQUIRE(!guard.on_tool_call("edit_file", R"({"path":"b"})", t0));
  for (int i = 0; i < 3; ++i)
    CAF_REQUIRE(!guard.on_tool_call("read", "x", t0));
  auto stop = guard.on_tool_call("read", "x", t0);
  CAF_REQUIRE(stop);
  CAF_CHECK_EQUAL(stop->reason, guard_reason::repeated_call);
  CAF_CHECK_EQUAL(what_of(*stop),
                  "Forced stop: read was called 4 times in a row with the "
                  "same arguments.");
  CAF_CHECK_EQUAL(guard.tool_calls(), 7u);
}

CAF_TEST(more than four calls on one target are a file loop) {
  turn_guard guard{std::make_shared<const guard_limits>(), t0};
  auto edit = [&](const std::string& path, int n) {
    auto args = R"({"path":")" + path + R"(","text":")" + std::to_string(n)
                + R"("})";
    return guard.on_tool_call("write", args, t0, path);
  };
  // Other arguments each time: no repeated call, but the same file.
  for (int i = 0; i < 4; ++i)
    CAF_REQUIRE(!edit("a.txt", i));
  // Another target counts apart.
  CAF_REQUIRE(!edit("b.txt", 0));
  auto stop = edit("a.txt", 4);
  CAF_REQUIRE(stop);
  CAF_CHECK_EQUAL(stop->reason, guard_reason::file_loop);
  CAF_CHECK_EQUAL(to_string(stop->reason), std::string{"file_loop"});
  CAF_CHECK_EQUAL(what_of(*stop),
                  "Forced stop: write was called 5 times on a.txt (a file "
                  "loop).");
  // Without a target, calls are not counted per target.
  turn_guard plain{std::make_shared<const guard_limits>(), t0};
  for (int i = 0; i < 6; ++i)
    CAF_REQUIRE(!plain.on_tool_call("write", std::to_string(i), t0));
}

CAF_TEST(the same error three times in a row stops retrying) {
  turn_guard guard{std::make_shared<const guard_limits>(), t0};
  CAF_CHECK(!guard.on_tool_result("fetch", "exit status 1", t0));
  CAF_CHECK(!guard.on_tool_result("fetch", "exit status 1", t0));
  // A success in between starts the count again.
  CAF_CHECK(!guard.on_tool_result("fetch", "", t0));
  CAF_CHECK(!guard.on_tool_result("fetch", "exit status 1", t0));
  CAF_CHECK(!guard.on_tool_result("fetch", "exit status 1", t0));
  auto stop = guard.on_tool_result("fetch", "exit status 1", t0);
  CAF_REQUIRE(stop);
  CAF_CHECK_EQUAL(stop->reason, guard_reason::repeated_error);
  CAF_CHECK_EQUAL(what_of(*stop),
                  "Forced stop: the same tool error 3 times in a row (fetch: "
                  "exit status 1).");
}

CAF_TEST(more than two near identical answers get the note) {
  turn_guard guard{std::make_shared<const guard_limits>(), t0};
  bool nudge = false;
  guard.on_reply("I will look at the file now.", t0, nudge);
  CAF_CHECK(!nudge);
  guard.on_reply("I will look at the file  now.", t0, nudge);
  CAF_CHECK(!nudge);
  guard.on_reply("i will look at the FILE now.", t0, nudge);
  CAF_CHECK(nudge);
  // The note starts a new run: two more are needed for the next one.
  guard.on_reply("I will look at the file now.", t0, nudge);
  CAF_CHECK(!nudge);
  guard.on_reply("Here is something else entirely.", t0, nudge);
  CAF_CHECK(!nudge);
  CAF_CHECK(near_identical("Step 12 of 40 done, moving on to the next part",
                           "Step 13 of 40 done, moving on to the next part"));
  CAF_CHECK(
    !near_identical("the cat sat on the mat", "the dog sat on the log"));
}

CAF_TEST(random turns never pass a limit and a stop is final) {
  std::mt19937 gen{20261126};
  for (int turn = 0; turn < 500; ++turn) {
    auto limits = small_limits();
    turn_guard guard{std::make_shared<const guard_limits>(limits), t0};
    std::optional<guard_stop> first_stop;
    auto now = t0;
    for (int step = 0; step < 60; ++step) {
      now += std::chrono::milliseconds{gen() % 3000};
      auto tool = gen() % 2 == 0 ? std::string{"delete_file"}
                                 : std::string{"read"};
      auto args = std::to_string(gen() % 2);
      std::optional<guard_stop> stop;
      bool nudge = false;
      switch (gen() % 3) {
        case 0: stop = guard.on_tool_call(tool, args, now); break;
        case 1:
          stop = guard.on_tool_result(tool, gen() % 2 ? "boom" : "", now);
          break;
        default: stop = guard.on_reply(gen() % 2 ? "same" : "", now, nudge);
      }
      if (first_stop)
        CAF_REQUIRE_EQUAL(report_of(stop), first_stop->report);
      else if (stop)
        first_stop = stop;
      CAF_REQUIRE_LESS_OR_EQUAL(guard.tool_calls(), limits.max_tool_calls);
      CAF_REQUIRE_LESS_OR_EQUAL(guard.events(), limits.max_events);
    }
  }
}
