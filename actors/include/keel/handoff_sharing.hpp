#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <mutex>
#include <utility>

#include <caf/policy/unprofiled.hpp>
#include <caf/resumable.hpp>

namespace keel {

/// CAF scheduler policy (`node.scheduler: sharing`): one shared queue that
/// idle workers sleep on, plus a hand-off slot per worker. The last actor
/// that a worker's own handler makes runnable (a message sent from it) goes
/// into that worker's slot and runs there next, instead of waking another
/// worker for it; the actor it displaces from the slot goes to the shared
/// queue. So a message passed along a chain of actors costs no wake-up and
/// no context switch per hop, while every other job stays on the shared
/// queue for any worker to take.
///
/// Guarantees: a job in a slot waits for the rest of the current actor's
/// run on that worker, which `scheduler.max-throughput` bounds (see
/// `system_config::configure_node`), and which a handler that blocks
/// prolongs; at most `max_handoffs` slot jobs run in a row while the shared
/// queue is not empty: then the worker hands its slot job to the queue and
/// takes the queue's first, so slot chains never starve it.
class handoff_sharing : public caf::policy::unprofiled {
public:
  using queue_type = std::deque<caf::resumable*>;

  /// Slot jobs a worker runs in a row before the shared queue's turn.
  static constexpr size_t max_handoffs = 8;

  struct coordinator_data {
    explicit coordinator_data(caf::scheduler::abstract_coordinator*) {
    }
    queue_type queue;
    std::mutex lock;
    std::condition_variable cv;
  };

  struct worker_data {
    explicit worker_data(caf::scheduler::abstract_coordinator*) {
    }
    /// The job this worker runs next; only its own thread touches it.
    caf::resumable* next = nullptr;
    /// Slot jobs run in a row.
    size_t handoffs = 0;
  };

  template <class Coordinator>
  void central_enqueue(Coordinator* self, caf::resumable* job) {
    share(d(self), job);
  }

  template <class Worker>
  void external_enqueue(Worker* self, caf::resumable* job) {
    share(d(self->parent()), job);
  }

  /// CAF calls this with the execution unit the sending actor last ran
  /// on, which is another thread's when a response promise is delivered
  /// from outside the actor: only the worker's own thread uses its slot.
  template <class Worker>
  void internal_enqueue(Worker* self, caf::resumable* job) {
    if (&d(self) != running_) {
      share(d(self->parent()), job);
      return;
    }
    if (auto displaced = std::exchange(d(self).next, job))
      share(d(self->parent()), displaced);
  }

  template <class Worker>
  void resume_job_later(Worker* self, caf::resumable* job) {
    share(d(self->parent()), job);
  }

  template <class Worker>
  caf::resumable* dequeue(Worker* self) {
    auto& own = d(self);
    running_ = &own;
    if (own.next != nullptr && own.handoffs < max_handoffs) {
      ++own.handoffs;
      return std::exchange(own.next, nullptr);
    }
    own.handoffs = 0;
    auto& shared = d(self->parent());
    std::unique_lock<std::mutex> guard{shared.lock};
    if (own.next != nullptr) {
      if (shared.queue.empty()) {
        own.handoffs = 1;
        return std::exchange(own.next, nullptr);
      }
      shared.queue.push_back(std::exchange(own.next, nullptr));
      shared.cv.notify_one();
    }
    shared.cv.wait(guard, [&] { return !shared.queue.empty(); });
    auto* job = shared.queue.front();
    shared.queue.pop_front();
    return job;
  }

  template <class Worker, class UnaryFunction>
  void foreach_resumable(Worker* self, UnaryFunction f) {
    if (auto* job = std::exchange(d(self).next, nullptr))
      f(job);
  }

  template <class Coordinator, class UnaryFunction>
  void foreach_central_resumable(Coordinator* self, UnaryFunction f) {
    auto& shared = d(self);
    std::unique_lock<std::mutex> guard{shared.lock};
    while (!shared.queue.empty()) {
      auto* job = shared.queue.front();
      shared.queue.pop_front();
      f(job);
    }
  }

private:
  /// The slot data of the worker running on this thread, if any.
  static inline thread_local worker_data* running_ = nullptr;

  static void share(coordinator_data& shared, caf::resumable* job) {
    {
      std::lock_guard<std::mutex> guard{shared.lock};
      shared.queue.push_back(job);
    }
    shared.cv.notify_one();
  }
};

} // namespace keel
