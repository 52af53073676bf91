#define CAF_SUITE job_threads

// Job threads: jobs never wait for one another (each blocked job has a
// thread), an idle thread takes the next job instead of a new one
// starting, idle threads end after their keep-idle time, and the
// destructor waits for the jobs under way.

#include <caf/test/unit_test.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <set>
#include <thread>

#include "keel/job_threads.hpp"

using namespace keel;
using namespace std::chrono_literals;

namespace {

// A count that tests wait on: every wait has a deadline, so a broken pool
// fails the test instead of hanging it.
struct counter {
  std::mutex mtx;
  std::condition_variable cv;
  size_t value = 0;

  void add() {
    std::lock_guard<std::mutex> guard{mtx};
    ++value;
    cv.notify_all();
  }

  bool wait_for(size_t n) {
    std::unique_lock<std::mutex> guard{mtx};
    return cv.wait_for(guard, 10s, [&] { return value >= n; });
  }
};

} // namespace

CAF_TEST(blocked jobs never wait for one another) {
  job_threads pool;
  counter started;
  counter release;
  for (int i = 0; i < 8; ++i)
    pool.post([&] {
      started.add();
      release.wait_for(1);
    });
  // All eight run at once: each is blocked until every one has started.
  CAF_CHECK(started.wait_for(8));
  CAF_CHECK_EQUAL(pool.size(), 8u);
  release.add();
}

CAF_TEST(an idle thread takes the next job) {
  job_threads pool;
  std::mutex mtx;
  std::set<std::thread::id> ids;
  for (int i = 0; i < 20; ++i) {
    counter done;
    pool.post([&] {
      std::lock_guard<std::mutex> guard{mtx};
      ids.insert(std::this_thread::get_id());
    });
    pool.post([&] { done.add(); });
    CAF_REQUIRE(done.wait_for(1));
    // Both threads idle again before the next round.
    auto deadline = std::chrono::steady_clock::now() + 10s;
    while (pool.idle() < pool.size()
           && std::chrono::steady_clock::now() < deadline)
      std::this_thread::yield();
  }
  // Twenty rounds of two jobs ran on at most two threads.
  CAF_CHECK_LESS_OR_EQUAL(pool.size(), 2u);
  CAF_CHECK_LESS_OR_EQUAL(ids.size(), 2u);
}

CAF_TEST(an idle thread ends after its keep idle time) {
  job_threads pool{20ms};
  counter done;
  pool.post([&] { done.add(); });
  CAF_REQUIRE(done.wait_for(1));
  auto deadline = std::chrono::steady_clock::now() + 10s;
  while (pool.size() > 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::yield();
  CAF_CHECK_EQUAL(pool.size(), 0u);
  // A job posted afterwards starts a new thread.
  pool.post([&] { done.add(); });
  CAF_CHECK(done.wait_for(2));
}

CAF_TEST(the destructor waits for the jobs under way) {
  std::atomic<bool> finished{false};
  counter started;
  {
    job_threads pool;
    pool.post([&] {
      started.add();
      std::this_thread::sleep_for(50ms); // The job under way.
      finished = true;
    });
    CAF_REQUIRE(started.wait_for(1));
  }
  CAF_CHECK(finished.load());
}
