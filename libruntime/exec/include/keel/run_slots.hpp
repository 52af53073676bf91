#pragma once

// A bound on the jobs running at once (e.g. the node's tool processes,
// `threads.max_concurrent_tools`): a job past the bound waits its turn in
// order, holding no thread, and starts on the job threads when one ends.

#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>

#include "keel/job_threads.hpp"

namespace keel {

class run_slots {
public:
  /// Runs at most `limit` (at least 1) jobs at once on `threads`.
  explicit run_slots(job_threads& threads, size_t limit = 8);

  run_slots(const run_slots&) = delete;
  run_slots& operator=(const run_slots&) = delete;

  /// Changes the bound; jobs waiting start if it grew.
  void set_limit(size_t limit);

  /// Runs `job` on the job threads now if a slot is free, else once one
  /// is (in the order posted). `job` must not throw. Throws
  /// `std::system_error` if a thread for a job starting now cannot start
  /// (then `job` never runs and holds no slot).
  void post(std::function<void()> job);

  size_t limit() const;

  /// Jobs running.
  size_t running() const;

  /// Jobs waiting for a slot.
  size_t waiting() const;

private:
  /// Starts `job` holding a slot, which it frees when done.
  void start(const std::function<void()>& job);
  /// A slot was freed: starts the next waiting job, if any fits.
  void next();

  mutable std::mutex mtx_;
  job_threads& threads_;
  std::deque<std::function<void()>> waiting_;
  size_t running_ = 0;
  size_t limit_;
};

/// The node's slots for tool runs on `tool_job_threads()`. Never
/// destroyed, like those threads.
run_slots& tool_run_slots();

} // namespace keel
