// The orchestrator's recovery: resuming the threads with pending work on
// boot, after the conversations supervisor died, and for shards gained.

#include "orchestrator_impl.hpp"

#include <algorithm>
#include <chrono>
#include <memory>

#include "keel/recovery.hpp"
#include "keel/text.hpp"

namespace keel::orchestrator_impl {

namespace {

// A recovery step starting conversations, `cfg.resume_batch` at a time.
struct resume_progress {
  std::vector<std::string> threads;
  std::function<void(uint64_t)> done;
  size_t next = 0;
  size_t in_flight = 0;
  size_t finished = 0;
  /// True while `resume_more` runs: a start answered at once must not
  /// recurse into it (a long recovery would overflow the stack).
  bool pumping = false;
};

void resume_more(self_ptr self, std::shared_ptr<resume_progress> p) {
  if (p->pumping)
    return;
  p->pumping = true;
  auto batch = std::max<size_t>(1, self->state.cfg.resume_batch);
  while (p->in_flight < batch && p->next < p->threads.size()) {
    ++p->in_flight;
    ensure_started(self, p->threads[p->next++], [self, p] {
      --p->in_flight;
      if (++p->finished == p->threads.size())
        p->done(p->threads.size());
      else
        resume_more(self, p);
    });
  }
  p->pumping = false;
}

// Starts `threads` (a recovery step) and calls `done` with the count once
// the supervisor answered for all of them.
void resume_all(self_ptr self, std::vector<std::string> threads,
                std::function<void(uint64_t)> done) {
  if (threads.empty()) {
    done(0);
    return;
  }
  auto p = std::make_shared<resume_progress>();
  p->threads = std::move(threads);
  p->done = std::move(done);
  resume_more(self, p);
}

using steady = std::chrono::steady_clock;

int64_t micros_since(steady::time_point start) {
  return std::chrono::duration_cast<std::chrono::microseconds>(steady::now()
                                                               - start)
    .count();
}

// Stores the report of the recovery on boot (best effort: logged if not).
void store_report(self_ptr self, const recovery_report& report) {
  log_scope scope{log_component::orchestrator};
  spdlog::info("{}", describe(report));
  if (auto db = lookup<persistence_actor>(self->system(), names::persistence))
    timed_request(self, db, self->state.cfg.request_timeout, caf::put_atom_v,
                  report)
      .then([](caf::ok_atom) {},
            [](caf::error& err) {
              log_scope scope{log_component::orchestrator};
              spdlog::warn("cannot store the recovery report: {}", render(err));
            });
}

// The last steps of the recovery, once every thread with pending work is
// resumed: finishes the interrupted cancels; stores the boot report.
void finish_recovery(self_ptr self, recovery_plan& plan) {
  for (auto& thread : plan.cancels)
    cancel_all(self, {thread}, [thread](auto result) {
      log_scope scope{log_component::orchestrator, thread};
      if (!result)
        spdlog::warn("cannot finish cancelling {}: {}", thread,
                     render(result.error()));
    });
  plan.report.finished_at = wall_clock_millis();
  self->state.recovered = true;
  if (plan.boot)
    store_report(self, plan.report);
}

// Step 6 of the recovery: resumes the children, then finishes.
void resume_children(self_ptr self, std::shared_ptr<recovery_plan> plan) {
  auto start = steady::now();
  resume_all(self, plan->children, [self, plan, start](uint64_t children) {
    plan->report.children_resumed = children;
    plan->report.steps.push_back(
      recovery_step{"resume_children", children, micros_since(start)});
    finish_recovery(self, *plan);
  });
}

// Steps 5-6 of the recovery (roots, then children), then the interrupted
// cancels; stores the boot recovery's report.
void resume(self_ptr self, recovery_plan plan) {
  auto shared = std::make_shared<recovery_plan>(std::move(plan));
  auto start = steady::now();
  resume_all(self, shared->roots, [self, shared, start](uint64_t roots) {
    shared->report.roots_resumed = roots;
    shared->report.steps.push_back(
      recovery_step{"resume_roots", roots, micros_since(start)});
    resume_children(self, shared);
  });
}

} // namespace

// The conversations supervisor died, and every conversation with it: the
// routing table is void. Work queued behind a passivation is routed again
// (to the new incarnation, or refused as `unavailable` until it runs), and
// the threads with unanswered messages are started again once it runs.
void conversations_lost(self_ptr self, const caf::actor_addr& lost) {
  log_scope scope{log_component::orchestrator};
  spdlog::warn("the conversations supervisor stopped; resuming the threads "
               "with pending work once it runs again");
  self->state.conversations = caf::actor{};
  self->state.lost_conversations = lost;
  auto threads = self->state.take_all();
  for (auto& [thread, entry] : threads) {
    if (entry.queued.empty())
      continue;
    ensure_started(self, thread);
    for (auto& work : entry.queued)
      work();
  }
  self->send(self, atom::recover_v);
}

// Asks persistence for the recovery plan and runs it; retried every second
// until persistence and the conversations supervisor both run and a plan
// comes back (resuming starts conversations under the supervisor).
void recover(self_ptr self) {
  auto db = lookup<persistence_actor>(self->system(), names::persistence);
  if (!db || !conversations(self)) {
    self->delayed_send(self, std::chrono::seconds{1}, atom::recover_v);
    return;
  }
  timed_request(self, db, std::chrono::seconds{60}, atom::recover_v)
    .then([self](recovery_plan& plan) { resume(self, std::move(plan)); },
          [self](caf::error& err) {
            // Pending work stays unanswered until a plan runs: retry.
            log_scope scope{log_component::orchestrator};
            spdlog::error("cannot plan the recovery (retrying in 1 s): {}",
                          render(err));
            self->delayed_send(self, std::chrono::seconds{1}, atom::recover_v);
          });
}

// Recovers the threads of `shards`, which this node just came to hold, and
// resumes those with pending work; retried every second until it worked.
// Conversations of them still running from an earlier tenure (the shard
// left and came back before they stopped) are replaced first.
void recover_shards(self_ptr self, const std::vector<uint32_t>& shards) {
  for (auto& thread : threads_of(self, shards))
    if (auto i = self->state.threads.find(thread);
        i != self->state.threads.end() && self->state.stale(thread, i->second))
      stop_stale(self, thread);
  auto db = lookup<persistence_actor>(self->system(), names::persistence);
  if (!db || !conversations(self)) {
    self->delayed_send(self, std::chrono::seconds{1}, atom::recover_v, shards);
    return;
  }
  timed_request(self, db, std::chrono::seconds{60}, atom::recover_v, shards)
    .then([self](recovery_plan& plan) { resume(self, std::move(plan)); },
          [self, shards](caf::error& err) {
            log_scope scope{log_component::orchestrator};
            spdlog::error("cannot recover {} shards (retrying in 1 s): {}",
                          shards.size(), render(err));
            self->delayed_send(self, std::chrono::seconds{1}, atom::recover_v,
                               shards);
          });
}

} // namespace keel::orchestrator_impl
