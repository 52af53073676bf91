#pragma once

// Threads for blocking jobs, such as a tool's process run to completion:
// never run on a CAF worker, and never made to wait for one another.

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>

namespace keel {

/// Runs each posted job on a thread of its own, reusing threads: an idle
/// thread takes the next job, and when none is idle a new thread starts,
/// so a job never waits behind another (a tool may run for minutes). A
/// thread idle for `keep_idle` ends. Reuse spares each job the start of a
/// thread, and the kernel a fresh stack for it and for the process it
/// forks (together 0.1 to 0.2 ms on a small VM, where mapping new kernel
/// pages is slow).
class job_threads {
public:
  explicit job_threads(std::chrono::milliseconds keep_idle
                       = std::chrono::seconds{60});

  job_threads(const job_threads&) = delete;
  job_threads& operator=(const job_threads&) = delete;

  /// Waits until the jobs under way have finished and every thread ended.
  /// Nothing may be posted meanwhile.
  ~job_threads();

  /// Runs `job` on an idle thread, or on a new one if none is idle. `job`
  /// must not throw. Throws `std::system_error` if a needed thread cannot
  /// start (then `job` never runs).
  void post(std::function<void()> job);

  /// Threads alive (busy or idle).
  size_t size() const;

  /// Threads waiting for a job.
  size_t idle() const;

private:
  void work();

  mutable std::mutex mtx_;
  std::condition_variable wake_;
  std::condition_variable gone_;
  std::deque<std::function<void()>> jobs_;
  size_t threads_ = 0;
  size_t idle_ = 0;
  bool stopping_ = false;
  std::chrono::milliseconds keep_idle_;
};

/// The process's job threads for tool runs. Never destroyed: a job may
/// still run while the statics of an exiting process are torn down.
job_threads& tool_job_threads();

} // namespace keel
