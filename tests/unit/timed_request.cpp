#define CAF_SUITE timed_request

// Requests timed out through the actor's deadline set: an answer arrives
// as with a CAF timeout and leaves nothing behind, an unanswered request
// gets `request_timeout` at its deadline (not before), and any number of
// requests in flight keep a single entry on the actor clock.

#include <caf/test/dsl.hpp>

#include <memory>
#include <string>
#include <vector>

#include "keel/actors.hpp"
#include "keel/system_config.hpp"
#include "keel/timed_request.hpp"

using namespace keel;
using namespace std::chrono_literals;

namespace {

using outcomes = std::shared_ptr<std::vector<std::string>>;

struct requester_state {
  static inline const char* name = "keel.test.requester";
  deadline_set deadlines;
};

using requester_ptr = caf::stateful_actor<requester_state>*;

// Asks `target` (a 1 s deadline) on every `run`; logs each outcome.
caf::behavior requester(requester_ptr self, caf::actor target, outcomes log) {
  return {
    [=](atom::run) {
      timed_request(self, target, 1s, atom::load_v)
        .then([log](const std::string& x) { log->push_back(x); },
              [log](caf::error& err) {
                log->push_back(err == caf::sec::request_timeout
                                 ? "request_timeout"
                                 : to_string(err));
              });
    },
    [self](atom::expire) { expire_deadlines(self); },
  };
}

caf::behavior answering() {
  return {[](atom::load) { return std::string{"answer"}; }};
}

struct silent_state {
  std::vector<caf::response_promise> held;
};

// Keeps every request unanswered (and alive).
caf::behavior silent(caf::stateful_actor<silent_state>* self) {
  return {[self](atom::load) {
    auto rp = self->make_response_promise();
    self->state.held.push_back(rp);
    return rp;
  }};
}

struct fixture : test_coordinator_fixture<system_config> {
  outcomes log = std::make_shared<std::vector<std::string>>();

  // The silent target holds promises to the asker, which holds the target:
  // both are stopped explicitly.
  void stop(const caf::actor& asker, const caf::actor& target) {
    caf::anon_send_exit(asker, caf::exit_reason::user_shutdown);
    caf::anon_send_exit(target, caf::exit_reason::user_shutdown);
    sched.run();
  }

  size_t clock_entries() {
    return sched.clock().schedule().size();
  }
};

} // namespace

CAF_TEST_FIXTURE_SCOPE(timed_request_tests, fixture)

CAF_TEST(an answer arrives and leaves no deadline behind) {
  auto target = sys.spawn(answering);
  auto asker = sys.spawn(requester, target, log);
  caf::anon_send(asker, atom::run_v);
  sched.run();
  CAF_CHECK_EQUAL(*log, std::vector<std::string>({"answer"}));
  auto& state = deref<caf::stateful_actor<requester_state>>(asker).state;
  CAF_CHECK(state.deadlines.empty());
  advance_time(2s);
  sched.run();
  CAF_CHECK_EQUAL(log->size(), 1u);
  CAF_CHECK_EQUAL(clock_entries(), 0u);
}

CAF_TEST(an unanswered request times out at its deadline) {
  auto target = sys.spawn(silent);
  auto asker = sys.spawn(requester, target, log);
  caf::anon_send(asker, atom::run_v);
  sched.run();
  advance_time(999ms);
  sched.run();
  CAF_CHECK_EQUAL(*log, std::vector<std::string>{});
  advance_time(1ms);
  sched.run();
  CAF_CHECK_EQUAL(*log, std::vector<std::string>({"request_timeout"}));
  auto& state = deref<caf::stateful_actor<requester_state>>(asker).state;
  CAF_CHECK(state.deadlines.empty());
  stop(asker, target);
}

CAF_TEST(many requests in flight keep one clock entry) {
  auto target = sys.spawn(silent);
  auto asker = sys.spawn(requester, target, log);
  for (int i = 0; i < 100; ++i) {
    caf::anon_send(asker, atom::run_v);
    sched.run();
    advance_time(1ms);
  }
  CAF_CHECK_EQUAL(clock_entries(), 1u);
  auto& state = deref<caf::stateful_actor<requester_state>>(asker).state;
  CAF_CHECK_EQUAL(state.deadlines.size(), 100u);
  // The first deadline passes: one times out, the timer moves on.
  advance_time(900ms);
  sched.run();
  CAF_CHECK_EQUAL(log->size(), 1u);
  CAF_CHECK_EQUAL(clock_entries(), 1u);
  advance_time(1s);
  sched.run();
  CAF_CHECK_EQUAL(log->size(), 100u);
  CAF_CHECK_EQUAL(clock_entries(), 0u);
  CAF_CHECK(state.deadlines.empty());
  stop(asker, target);
}

CAF_TEST_FIXTURE_SCOPE_END()
