#include "keel/conversation_parts.hpp"

#include <algorithm>
#include <memory>

#include <spdlog/spdlog.h>

#include "keel/kill_point.hpp"
#include "keel/logging.hpp"
#include "keel/protocol.hpp"
#include "keel/system_config.hpp"
#include "keel/text.hpp"

// Commits: a step or the answer of the running turn goes to the store; once
// durable it is applied and published (a step goes on with the turn, an
// answer ends it). A commit whose outcome is unknown is looked up before
// the turn runs again, so a turn is committed once.

namespace keel::conversation_parts {

namespace {

// Counts the answer of a finished turn in the node's metrics: a reply or
// an error, and the time since the message was accepted.
void count_answer(caf::actor_system& sys, const turn_commit& commit) {
  auto& metrics = metrics_of(sys);
  for (auto& entry : commit.log) {
    if (entry.kind == log_kind::user)
      metrics.reply_latency(
        static_cast<double>(std::max<millis>(wall_clock_millis() - entry.at, 0))
        / 1000.0);
    else if (entry.kind == log_kind::reply)
      metrics.answered();
    else if (entry.kind == log_kind::error)
      metrics.failed(entry.code);
  }
}

// The current turn's commit is durable: applies it, publishes its outcome,
// sends its messages and moves on to the next turn.
void committed(self_ptr self, const turn_commit& commit) {
  count_answer(self->system(), commit);
  self->state.apply(commit);
  for (auto& entry : commit.log)
    if (entry.kind != log_kind::user) // The message's task: not an outcome.
      publish(self, protocol::outcome_frame(commit.thread, entry));
  self->state.turn_running = false;
  for (auto& x : self->state.extras().owner_notices)
    notify_owner(self->system(), x.kind, x.subject, x.text);
  self->state.end_turn();
  if (!commit.outbox.empty()) {
    // Durable in our outbox, not yet in any target's inbox.
    reach(kill_point::message_enqueued);
    deliver_outbox(self);
  }
  // Durable with its delivery record: the channels send it (held for them
  // while they restart; after a node restart they find the record).
  for (auto& reply : commit.deliveries)
    request_component(self, names::channels, self->state.cfg->storage_timeout,
                      atom::deliver_v, reply)
      .then([] {}, [](caf::error&) {});
  drain(self);
}

// A step of the turn is durable: applies and publishes it, sends its
// messages, and goes on with the turn.
void step_committed(self_ptr self, const turn_commit& commit) {
  self->state.apply(commit);
  for (auto& entry : commit.log)
    if (entry.kind != log_kind::user) // The message's task: not an outcome.
      publish(self, protocol::outcome_frame(commit.thread, entry));
  if (!commit.outbox.empty()) {
    reach(kill_point::message_enqueued);
    deliver_outbox(self);
  }
  continue_turn(self);
}

// The store says what became of the unsure commit: without the message in
// the stored inbox, the commit landed and the turn is done; with it, the
// turn runs again. A step's commit leaves the message either way: the
// stored steps say where the turn is, and it resumes from them.
void learned_fate(self_ptr self, thread_snapshot& snapshot) {
  auto& st = self->state;
  auto commit = std::move(*st.unsure_commit);
  st.unsure_commit.reset();
  auto pending = std::any_of(snapshot.inbox.begin(), snapshot.inbox.end(),
                             [&commit](const inbox_entry& x) {
                               return x.seq == commit.inbox_seq;
                             });
  if (!pending && !commit.keeps_inbox) {
    committed(self, commit);
    return;
  }
  if (commit.keeps_inbox)
    st.resume_steps(snapshot);
  st.turn_running = false;
  drain(self);
}

} // namespace

// Tells the thread that its turn could not be stored and runs it again
// after `commit_retry_delay`; the message stays in the inbox, unanswered.
void retry_turn_later(self_ptr self, const std::string& what,
                      const caf::error& err) {
  auto& st = self->state;
  log_scope scope{log_component::conversation, st.cfg.thread};
  spdlog::warn("thread {}: {}: {}", st.cfg.thread, what, render(err));
  auto& msg = st.inbox.front();
  publish(self, protocol::status_frame(
                  st.cfg.thread, msg.client_id, msg.seq, "retrying",
                  what + " (" + render(err) + "); the turn runs again"));
  self->delayed_send(self, st.cfg->commit_retry_delay, atom::drain_v);
  ++st.attempts;
  // The turn stays "running" until the retry so nothing overtakes it.
}

// Commits the outcome of the current turn, then moves on to the next one.
// A failed commit keeps the message in the inbox: nothing is acknowledged as
// answered that is not durable. It may still land (a timeout), so before
// the turn runs again the store says whether it did (see `retry_turn`): a
// turn is committed once, whatever the timing.
void commit_turn(self_ptr self, turn_commit commit) {
  auto& st = self->state;
  for (auto& notice : std::exchange(st.notices, {}))
    publish(self, protocol::status_frame(
                    st.cfg.thread, st.inbox.front().client_id,
                    st.inbox.front().seq, notice.state, notice.detail));
  commit.tenure = self->state.tenure;
  // The request carries a copy; both outcomes share this one.
  auto kept = std::make_shared<const turn_commit>(std::move(commit));
  request_component(self, names::persistence, self->state.cfg->storage_timeout,
                    atom::commit_v, *kept)
    .then(
      [self, kept](caf::ok_atom) {
        if (kept->keeps_inbox)
          step_committed(self, *kept);
        else
          committed(self, *kept);
      },
      [self, kept](caf::error& err) {
        self->state.unsure_commit = std::make_unique<turn_commit>(*kept);
        retry_turn_later(self, "storing the answer failed", err);
      });
}

// The retry of a turn that could not be stored is due. After an unsure
// commit the stored inbox decides: without the message, the commit landed
// and the turn is done; with it, the turn runs again.
void retry_turn(self_ptr self) {
  auto& st = self->state;
  if (!st.unsure_commit) {
    st.turn_running = false;
    drain(self);
    return;
  }
  read_back(
    self, [self](thread_snapshot& snapshot) { learned_fate(self, snapshot); },
    [self](caf::error& err) {
      retry_turn_later(self, "reading the thread back failed", err);
    });
}

void fail_turn(self_ptr self, const std::string& code, const std::string& text,
               const std::string& detail) {
  commit_turn(self, self->state.make_error_commit(code, text,
                                                  wall_clock_millis(), detail));
}

void cancel_turn(self_ptr self) {
  fail_turn(self, to_string(ec::cancelled), turn_errors::cancelled);
}

} // namespace keel::conversation_parts
