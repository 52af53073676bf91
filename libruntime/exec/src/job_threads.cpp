#include "keel/job_threads.hpp"

#include <thread>

namespace keel {

job_threads::job_threads(std::chrono::milliseconds keep_idle)
  : keep_idle_(keep_idle) {
  // nop
}

job_threads::~job_threads() {
  std::unique_lock<std::mutex> guard{mtx_};
  stopping_ = true;
  wake_.notify_all();
  gone_.wait(guard, [this] { return threads_ == 0; });
}

void job_threads::post(std::function<void()> job) {
  std::lock_guard<std::mutex> guard{mtx_};
  jobs_.push_back(std::move(job));
  // Every queued job has an idle thread of its own, or gets a new one
  // (which waits for the lock we hold before it counts anything).
  if (jobs_.size() > idle_) {
    try {
      std::thread{[this] { work(); }}.detach();
    } catch (...) {
      jobs_.pop_back(); // Not run, not counted: the caller learns why.
      throw;
    }
    ++threads_;
  } else {
    wake_.notify_one();
  }
}

size_t job_threads::size() const {
  std::lock_guard<std::mutex> guard{mtx_};
  return threads_;
}

size_t job_threads::idle() const {
  std::lock_guard<std::mutex> guard{mtx_};
  return idle_;
}

void job_threads::work() {
  std::unique_lock<std::mutex> guard{mtx_};
  for (;;) {
    if (jobs_.empty()) {
      ++idle_;
      wake_.wait_for(guard, keep_idle_,
                     [this] { return !jobs_.empty() || stopping_; });
      --idle_;
    }
    if (jobs_.empty()) {
      // Idle for `keep_idle_`, or stopping. The notify under the lock:
      // the destructor cannot return before this thread let go of it.
      --threads_;
      gone_.notify_all();
      return;
    }
    auto job = std::move(jobs_.front());
    jobs_.pop_front();
    guard.unlock();
    job();
    job = nullptr; // Its captures go before the lock is taken again.
    guard.lock();
  }
}

job_threads& tool_job_threads() {
  static auto* instance = new job_threads;
  return *instance;
}

} // namespace keel
