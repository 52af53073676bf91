#include "keel/run_slots.hpp"

#include <algorithm>
#include <utility>

namespace keel {

run_slots::run_slots(job_threads& threads, size_t limit)
  : threads_(threads), limit_(std::max<size_t>(limit, 1)) {
  // nop
}

void run_slots::set_limit(size_t limit) {
  {
    std::lock_guard<std::mutex> guard{mtx_};
    limit_ = std::max<size_t>(limit, 1);
  }
  next();
}

void run_slots::post(std::function<void()> job) {
  std::unique_lock<std::mutex> guard{mtx_};
  if (running_ >= limit_ || !waiting_.empty()) {
    waiting_.push_back(std::move(job));
    return;
  }
  ++running_;
  guard.unlock();
  try {
    start(job);
  } catch (...) {
    guard.lock();
    --running_;
    throw;
  }
}

size_t run_slots::limit() const {
  std::lock_guard<std::mutex> guard{mtx_};
  return limit_;
}

size_t run_slots::running() const {
  std::lock_guard<std::mutex> guard{mtx_};
  return running_;
}

size_t run_slots::waiting() const {
  std::lock_guard<std::mutex> guard{mtx_};
  return waiting_.size();
}

void run_slots::start(const std::function<void()>& job) {
  threads_.post([this, job = std::function<void()>{job}]() mutable {
    job();
    job = nullptr; // Its captures go before the next job starts.
    {
      std::lock_guard<std::mutex> guard{mtx_};
      --running_;
    }
    next();
  });
}

void run_slots::next() {
  for (;;) {
    std::unique_lock<std::mutex> guard{mtx_};
    if (waiting_.empty() || running_ >= limit_)
      return;
    auto job = std::move(waiting_.front());
    waiting_.pop_front();
    ++running_;
    guard.unlock();
    try {
      start(job);
    } catch (...) {
      // No thread for it now: it waits again, first in line, for the
      // next slot that frees.
      guard.lock();
      --running_;
      waiting_.push_front(std::move(job));
      return;
    }
  }
}

run_slots& tool_run_slots() {
  static auto* instance = new run_slots{tool_job_threads()};
  return *instance;
}

} // namespace keel
