#define CAF_SUITE run_slots

// A bound on jobs running at once: jobs past it wait, in order, holding no
// thread, and start as slots free.

#include <caf/test/unit_test.hpp>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "keel/run_slots.hpp"

using namespace keel;
using namespace std::chrono_literals;

namespace {

// Jobs that block until released, recording the order they started in.
struct gate {
  std::mutex mtx;
  std::condition_variable cv;
  bool open = false;
  std::vector<int> started;

  std::function<void()> job(int id) {
    return [this, id] {
      std::unique_lock<std::mutex> guard{mtx};
      started.push_back(id);
      cv.notify_all();
      cv.wait(guard, [this] { return open; });
    };
  }

  bool wait_started(size_t n) {
    std::unique_lock<std::mutex> guard{mtx};
    return cv.wait_for(guard, 10s, [&] { return started.size() >= n; });
  }

  void release() {
    std::lock_guard<std::mutex> guard{mtx};
    open = true;
    cv.notify_all();
  }
};

} // namespace

CAF_TEST(jobs past the limit wait their turn in order) {
  auto threads = std::make_unique<job_threads>();
  run_slots slots{*threads, 2};
  gate g;
  for (int i = 0; i < 5; ++i)
    slots.post(g.job(i));
  CAF_REQUIRE(g.wait_started(2));
  CAF_CHECK_EQUAL(slots.running(), 2u);
  CAF_CHECK_EQUAL(slots.waiting(), 3u);
  // Only the two running jobs hold threads.
  CAF_CHECK_EQUAL(threads->size(), 2u);
  g.release();
  CAF_REQUIRE(g.wait_started(5));
  // Started in any order once slots free at once; taken in order.
  std::vector<int> tail(g.started.begin() + 2, g.started.end());
  std::sort(tail.begin(), tail.end());
  CAF_CHECK_EQUAL(tail, (std::vector<int>{2, 3, 4}));
  auto deadline = std::chrono::steady_clock::now() + 10s;
  while (slots.running() > 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::yield();
  CAF_CHECK_EQUAL(slots.running(), 0u);
  CAF_CHECK_EQUAL(slots.waiting(), 0u);
  threads.reset(); // Waits for the jobs' ends, which use `slots`.
}

CAF_TEST(a raised limit starts waiting jobs at once) {
  auto threads = std::make_unique<job_threads>();
  run_slots slots{*threads, 1};
  CAF_CHECK_EQUAL(slots.limit(), 1u);
  gate g;
  for (int i = 0; i < 3; ++i)
    slots.post(g.job(i));
  CAF_REQUIRE(g.wait_started(1));
  CAF_CHECK_EQUAL(slots.waiting(), 2u);
  slots.set_limit(3);
  CAF_CHECK(g.wait_started(3));
  CAF_CHECK_EQUAL(slots.running(), 3u);
  g.release();
  auto deadline = std::chrono::steady_clock::now() + 10s;
  while (slots.running() > 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::yield();
  CAF_CHECK_EQUAL(slots.running(), 0u);
  threads.reset();
}

CAF_TEST(with one slot jobs run one after another in the order posted) {
  auto threads = std::make_unique<job_threads>();
  run_slots slots{*threads, 1};
  std::mutex mtx;
  std::vector<int> order;
  std::atomic<int> at_once{0};
  std::atomic<int> most{0};
  for (int i = 0; i < 6; ++i)
    slots.post([&, i] {
      most = std::max(most.load(), ++at_once);
      {
        std::lock_guard<std::mutex> guard{mtx};
        order.push_back(i);
      }
      --at_once;
    });
  auto deadline = std::chrono::steady_clock::now() + 10s;
  while ((slots.running() > 0 || slots.waiting() > 0)
         && std::chrono::steady_clock::now() < deadline)
    std::this_thread::yield();
  threads.reset(); // Waits for the last job's end.
  CAF_CHECK_EQUAL(order, (std::vector<int>{0, 1, 2, 3, 4, 5}));
  CAF_CHECK_EQUAL(most.load(), 1);
}
