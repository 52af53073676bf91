#define CAF_SUITE system_config

// What a node's configuration asks of the actor system before it starts:
// the scheduler's policy and its number of worker threads; and how the
// `sharing` policy (keel::handoff_sharing) runs actors on real workers.

#include <caf/test/unit_test.hpp>

#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include <caf/all.hpp>
#include <caf/scheduler/coordinator.hpp>

#include "keel/config.hpp"
#include "keel/handoff_sharing.hpp"
#include "keel/system_config.hpp"

using namespace keel;

namespace {

size_t configured_workers(const system_config& cfg) {
  return caf::get_or(cfg, "scheduler.max-threads", size_t{0});
}

caf::atom_value configured_policy(const system_config& cfg) {
  return caf::get_or(cfg, "scheduler.policy", caf::atom(""));
}

using thread_log = std::vector<std::thread::id>;

// Hop `i` of a chain: notes the thread it runs on and passes the message on
// (the last hop answers `done`).
caf::behavior hop(caf::event_based_actor* self, std::shared_ptr<thread_log> log,
                  caf::actor next, caf::actor done) {
  return {[=](int i) {
    (*log)[static_cast<size_t>(i)] = std::this_thread::get_id();
    if (next)
      self->send(next, i + 1);
    else
      self->send(done, caf::ok_atom_v);
    // Busy for a moment after sending, so that an idle worker would have
    // taken the next hop by now if the send had woken one.
    auto until = std::chrono::steady_clock::now()
                 + std::chrono::milliseconds(1);
    while (std::chrono::steady_clock::now() < until)
      ;
  }};
}

// Bounces an int with `partner` forever (on `partner`'s first message).
caf::behavior bouncer(caf::event_based_actor* self) {
  return {[=](int n) {
    auto partner = caf::actor_cast<caf::actor>(self->current_sender());
    self->send(partner, n);
  }};
}

struct node_system {
  node_system() {
    cfg.configure_node(node);
  }
  node_config node;
  system_config cfg;
};

struct sharing_system : node_system {
  ~sharing_system() {
    for (auto& x : endless)
      caf::anon_send_exit(x, caf::exit_reason::kill);
  }
  caf::actor_system sys{cfg};
  /// Actors that never go idle on their own: stopped before the system.
  std::vector<caf::actor> endless;
};

} // namespace

CAF_TEST(the scheduler has one worker per core and at least two by default) {
  auto cores = static_cast<size_t>(std::thread::hardware_concurrency());
  size_t expected = cores > 2 ? cores : 2;
  CAF_CHECK_EQUAL(scheduler_workers(0), expected);
  node_config node;
  system_config cfg;
  cfg.configure_node(node);
  CAF_CHECK_EQUAL(configured_workers(cfg), expected);
  CAF_CHECK_EQUAL(configured_policy(cfg), caf::atom("sharing"));
  CAF_CHECK_EQUAL(caf::get_or(cfg, "scheduler.max-throughput", size_t{0}),
                  sharing_max_throughput);
  caf::actor_system sys{cfg};
  using handoff_coordinator = caf::scheduler::coordinator<handoff_sharing>;
  CAF_CHECK(dynamic_cast<handoff_coordinator*>(&sys.scheduler()) != nullptr);
}

CAF_TEST(node workers and scheduler set the scheduler as configured) {
  node_config node;
  node.workers = 7;
  node.scheduler = scheduler_policy::stealing;
  system_config cfg;
  cfg.configure_node(node);
  CAF_CHECK_EQUAL(scheduler_workers(1), 1u);
  CAF_CHECK_EQUAL(configured_workers(cfg), 7u);
  CAF_CHECK_EQUAL(configured_policy(cfg), caf::atom("stealing"));
}

CAF_TEST_FIXTURE_SCOPE(handoff_sharing_tests, sharing_system)

CAF_TEST(a message passed along a chain of actors stays on one worker) {
  // Every hop is an actor made runnable by the handler before it: each runs
  // next on the same worker instead of waking another one.
  constexpr int hops = 64;
  auto log = std::make_shared<thread_log>(hops);
  caf::scoped_actor self{sys};
  caf::actor next;
  for (int i = hops - 1; i >= 0; --i)
    next = sys.spawn<caf::lazy_init>(hop, log, next, caf::actor{self});
  // The first hop reaches a worker from outside: the rest follow it. (The
  // hops start on their first message, so that no start of theirs waits in
  // the shared queue meanwhile.)
  caf::anon_send(next, 0);
  bool done = false;
  self->receive([&](caf::ok_atom) { done = true; },
                caf::after(std::chrono::seconds(30)) >> [] {});
  CAF_REQUIRE(done);
  for (int i = 1; i < hops; ++i)
    CAF_CHECK_EQUAL((*log)[static_cast<size_t>(i)], (*log)[0]);
}

CAF_TEST(chains that never end leave the shared queue its turn) {
  // One endless ping-pong per worker keeps every worker busy with its own
  // hand-offs; a message from outside must still be handled.
  for (size_t i = 0; i < scheduler_workers(0); ++i) {
    auto a = sys.spawn(bouncer);
    auto b = sys.spawn(bouncer);
    caf::send_as(a, b, 0);
    endless.insert(endless.end(), {a, b});
  }
  auto echo
    = sys.spawn([]() -> caf::behavior { return {[](int n) { return n; }}; });
  caf::scoped_actor self{sys};
  int answer = 0;
  self->request(echo, std::chrono::seconds(10), 41)
    .receive([&](int n) { answer = n; },
             [&](const caf::error& err) { CAF_FAIL(sys.render(err)); });
  CAF_CHECK_EQUAL(answer, 41);
}

CAF_TEST_FIXTURE_SCOPE_END()
