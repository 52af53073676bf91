#include "keel/dead_letter_queue.hpp"

#include <algorithm>
#include <functional>
#include <memory>
#include <utility>

#include <caf/all.hpp>
#include <spdlog/spdlog.h>

#include "keel/logging.hpp"
#include "keel/lookup.hpp"
#include "keel/text.hpp"

namespace keel {

// -- the schedule of one letter -----------------------------------------------

dead_letter_timing timing_of(const dead_letter& x,
                             const dead_letter_schedule& schedule) {
  dead_letter_timing t;
  t.retries = x.retries;
  t.first_attempt = x.at;
  t.last_attempt = x.last_attempt_at != 0 ? x.last_attempt_at : x.at;
  t.status = x.status;
  if (x.next_retry_at != 0)
    t.next_retry = x.next_retry_at;
  else if (x.status == dead_letter_status::pending)
    t.next_retry = x.at + schedule.interval.count();
  return t;
}

void apply_timing(dead_letter& x, const dead_letter_timing& t) {
  x.retries = t.retries;
  x.at = t.first_attempt;
  x.last_attempt_at = t.last_attempt;
  x.next_retry_at = t.next_retry.value_or(0);
  x.status = t.status;
}

dead_letter make_dead_letter(const outbox_entry& entry, std::string reason,
                             const dead_letter_schedule& schedule,
                             epoch_ms now) {
  dead_letter result;
  result.entry = entry;
  result.reason = std::move(reason);
  apply_timing(result, new_dead_letter(schedule, now, now));
  return result;
}

dead_letter after_retry(dead_letter x, const dead_letter_schedule& schedule,
                        bool scheduled, const retry_result& result,
                        epoch_ms now) {
  auto t = timing_of(x, schedule);
  if (result.delivered)
    t = after_delivered(t, now);
  else if (scheduled)
    t = after_failed_retry(schedule, t, now);
  else
    t.last_attempt = now;
  apply_timing(x, t);
  x.events.push_back(
    {now, scheduled ? "scheduled retry" : "operator retry",
     result.delivered ? std::string{"delivered"} : result.error});
  return x;
}

dead_letter after_drop(dead_letter x, const std::string& reason, epoch_ms now) {
  x.status = dead_letter_status::dropped;
  x.next_retry_at = 0;
  x.events.push_back({now, "operator drop", reason});
  return x;
}

// -- state --------------------------------------------------------------------

std::vector<dead_letter>
dead_letter_queue_state::pick_due(std::vector<dead_letter> letters,
                                  epoch_ms now) const {
  auto not_due = [&](const dead_letter& x) {
    return !due(timing_of(x, cfg.schedule), now)
           || busy.count(dead_letter_id(x)) > 0;
  };
  letters.erase(std::remove_if(letters.begin(), letters.end(), not_due),
                letters.end());
  auto due_at = [&](const dead_letter& x) {
    return timing_of(x, cfg.schedule).next_retry.value_or(0);
  };
  std::stable_sort(letters.begin(), letters.end(),
                   [&](auto& x, auto& y) { return due_at(x) < due_at(y); });
  if (letters.size() > cfg.schedule.batch)
    letters.resize(cfg.schedule.batch);
  return letters;
}

std::optional<epoch_ms> dead_letter_queue_state::next_round_after(
  const std::vector<dead_letter>& letters, epoch_ms now) const {
  std::optional<epoch_ms> result;
  if (cfg.poll)
    result = now + cfg.schedule.interval.count();
  for (auto& x : letters) {
    auto t = timing_of(x, cfg.schedule);
    if (t.status == dead_letter_status::pending && t.next_retry
        && *t.next_retry > now)
      result = std::min(result.value_or(*t.next_retry), *t.next_retry);
  }
  return result;
}

caf::expected<dead_letter>
dead_letter_queue_state::actionable(std::vector<dead_letter>& letters,
                                    const std::string& from, seq_t seq) const {
  auto id = from + "/" + std::to_string(seq);
  auto i = std::find_if(letters.begin(), letters.end(), [&](auto& x) {
    return x.entry.from == from && x.entry.seq == seq;
  });
  if (i == letters.end())
    return caf::make_error(ec::not_found, "no dead letter " + id);
  if (i->status == dead_letter_status::delivered
      || i->status == dead_letter_status::dropped)
    return caf::make_error(ec::conflict, "dead letter " + id + " is already "
                                           + to_string(i->status));
  if (busy.count(id) > 0)
    return caf::make_error(ec::conflict,
                           "a retry of dead letter " + id + " is under way");
  return std::move(*i);
}

// -- the actor ----------------------------------------------------------------

namespace {

using self_ptr = dead_letter_queue_state::self_ptr;

epoch_ms now_of(self_ptr self) {
  return self->state.clock.now(self->clock());
}

// Arms the round timer for `at` unless one is armed for that time or
// earlier.
void arm_round(self_ptr self, epoch_ms at) {
  auto& st = self->state;
  if (st.next_round && *st.next_round <= at)
    return;
  st.next_round = at;
  auto delay = at - now_of(self);
  if (delay <= 0)
    self->send(self, atom::tick_v);
  else
    self->delayed_send(self, std::chrono::milliseconds{delay}, atom::tick_v);
}

// Stores `letter` as updated by the queue and calls `done` with the
// outcome. A failure is logged: the stored letter stays as it was (and is
// retried again; the target deduplicates).
void store(self_ptr self, const dead_letter& letter,
           std::function<void(caf::error)> done) {
  request_component(self, names::persistence, self->state.cfg.attempt_timeout,
                    caf::put_atom_v, letter, uint64_t{0})
    .then([done](caf::ok_atom) { done(caf::none); },
          [self, id = dead_letter_id(letter), thread = letter.entry.from,
           seq = letter.entry.seq, done](caf::error& err) {
            log_scope scope{log_component::dead_letters, thread, seq};
            spdlog::warn("dead letter {}: cannot store its update: {}", id,
                         render(err));
            done(std::move(err));
          });
}

// Logs what a retry did to `x`.
void log_outcome(const dead_letter& x) {
  log_scope scope{log_component::dead_letters, x.entry.from, x.entry.seq};
  auto id = dead_letter_id(x);
  auto& last = x.events.back();
  auto& action = last.action;
  if (x.status == dead_letter_status::delivered)
    spdlog::info("dead letter {} delivered by {}", id, action);
  else if (x.status == dead_letter_status::abandoned)
    spdlog::warn("dead letter {} abandoned after {} retries: {}", id, x.retries,
                 last.outcome);
  else
    spdlog::info("dead letter {}: {} failed: {}", id, action, last.outcome);
}

// Where `x` goes, for the owner: "thread T" or "channel a,b".
std::string destination_of(const dead_letter& x) {
  if (x.channels.empty())
    return "thread " + x.entry.to;
  std::string result = "channel ";
  for (auto& name : x.channels)
    result += (&name == &x.channels.front() ? "" : ",") + name;
  return result;
}

// Tells the owner that `x` was abandoned (its update is stored).
void notify_abandoned(self_ptr self, const dead_letter& x) {
  auto to = destination_of(x);
  notify_owner(self->system(), notice_kind::dead_letter_abandoned, to,
               "Dead letter " + dead_letter_id(x) + " to " + to
                 + " was abandoned after " + std::to_string(x.retries)
                 + " retries: " + x.events.back().outcome
                 + ". keelctl dlq retry can still send it.");
}

// Tells the owner when `dead_letter_digest_threshold` or more letters
// are pending.
void notify_if_many_pending(self_ptr self,
                            const std::vector<dead_letter>& letters) {
  auto pending = std::count_if(letters.begin(), letters.end(), [](auto& x) {
    return x.status == dead_letter_status::pending;
  });
  if (static_cast<size_t>(pending) < dead_letter_digest_threshold)
    return;
  notify_owner(self->system(), notice_kind::dead_letters_pending,
               "dead letters",
               std::to_string(pending)
                 + " dead letters are pending their retries (keelctl dlq "
                   "list shows them).");
}

// A retried letter's update is stored (or could not be): it is free again,
// its next retry is armed, and `done` learns how it ended.
void retry_stored(self_ptr self, const dead_letter& updated,
                  const caf::error& err,
                  const std::function<void(caf::expected<dead_letter>)>& done) {
  self->state.busy.erase(dead_letter_id(updated));
  if (err) {
    done(err);
    return;
  }
  if (updated.next_retry_at != 0)
    arm_round(self, updated.next_retry_at);
  if (updated.status == dead_letter_status::abandoned)
    notify_abandoned(self, updated);
  done(updated);
}

// Asks for `letter` to be delivered once more: to its target thread, or a
// reply's to its channels. `done` learns the outcome and the channels that
// still failed.
void redeliver(
  self_ptr self, const dead_letter& letter,
  std::function<void(retry_result, std::vector<std::string>)> done) {
  auto timeout = self->state.cfg.attempt_timeout;
  auto failed = [done, channels = letter.channels](caf::error& err) {
    done({false, render(err)}, channels);
  };
  if (letter.channels.empty()) {
    request_component(self, names::orchestrator, timeout, atom::deliver_v,
                      letter.entry)
      .then(
        [done](accept_result&) {
          done({true, {}}, {});
        },
        failed);
    return;
  }
  request_component(self, names::channels, timeout, atom::retry_v, letter)
    .then(
      [done](dead_letter& after) {
        done({after.channels.empty(), after.reason}, after.channels);
      },
      failed);
}

// Delivers `letter` again (`scheduled`: by the schedule, not an operator),
// stores the outcome and calls `done` with the letter as stored, or with
// the error that kept it from being stored.
void retry_letter(self_ptr self, dead_letter letter, bool scheduled,
                  std::function<void(caf::expected<dead_letter>)> done) {
  self->state.busy.insert(dead_letter_id(letter));
  auto finish = [self, letter, scheduled,
                 done](retry_result result, std::vector<std::string> failed) {
    auto& st = self->state;
    auto updated = after_retry(letter, st.cfg.schedule, scheduled, result,
                               now_of(self));
    if (!updated.channels.empty() && !failed.empty())
      updated.channels = std::move(failed);
    log_outcome(updated);
    store(self, updated, [self, updated, done](caf::error err) {
      retry_stored(self, updated, err, done);
    });
  };
  redeliver(self, letter, finish);
}

// Ends a round: arms the next at `next` (none: no letter is pending), or
// at once if a tick came while the round ran; after a failed write one
// interval later, so a store that refuses writes is not hammered.
void end_round(self_ptr self, std::optional<epoch_ms> next, bool failed) {
  auto& st = self->state;
  st.round_running = false;
  auto now = now_of(self);
  if (std::exchange(st.rerun, false))
    next = now;
  if (failed)
    next = now + st.cfg.schedule.interval.count();
  if (next)
    arm_round(self, *next);
}

// A round's letters are read: retries the due ones, then arms the next
// round (at once if a whole batch was due: more may be).
void start_round(self_ptr self, std::vector<dead_letter>& letters) {
  auto& st = self->state;
  auto now = now_of(self);
  notify_if_many_pending(self, letters);
  auto due = st.pick_due(letters, now);
  auto next = due.size() >= st.cfg.schedule.batch
                ? std::optional<epoch_ms>{now}
                : st.next_round_after(letters, now);
  if (due.empty()) {
    end_round(self, next, false);
    return;
  }
  struct progress {
    size_t left;
    bool failed = false;
  };
  auto round = std::make_shared<progress>(progress{due.size()});
  for (auto& letter : due)
    retry_letter(self, std::move(letter), true,
                 [self, round, next](caf::expected<dead_letter> stored) {
                   round->failed |= !stored;
                   if (--round->left == 0)
                     end_round(self, next, round->failed);
                 });
}

void run_round(self_ptr self) {
  auto& st = self->state;
  st.next_round.reset();
  if (st.round_running) {
    st.rerun = true; // Due meanwhile (an operator's retry left it so).
    return;
  }
  st.round_running = true;
  request_component(self, names::persistence, st.cfg.attempt_timeout,
                    atom::dead_letters_v, true)
    .then(
      [self](std::vector<dead_letter>& letters) { start_round(self, letters); },
      [self](caf::error& err) {
        log_scope scope{log_component::dead_letters};
        spdlog::warn("dead letters: cannot read them for a retry round: "
                     "{}",
                     render(err));
        end_round(self, std::nullopt, true);
      });
}

// Writes a new dead letter and arms the round that retries it.
caf::result<caf::ok_atom> write_new(self_ptr self, const dead_letter& letter,
                                    uint64_t tenure) {
  auto& st = self->state;
  if (letter.next_retry_at != 0)
    arm_round(self, letter.next_retry_at);
  auto rp = self->make_response_promise<caf::ok_atom>();
  request_component(self, names::persistence, st.cfg.attempt_timeout,
                    caf::put_atom_v, letter, tenure)
    .then([rp](caf::ok_atom) mutable { rp.deliver(caf::ok_atom_v); },
          [rp](caf::error& err) mutable { rp.deliver(std::move(err)); });
  return rp;
}

caf::result<caf::ok_atom> add(self_ptr self, const outbox_entry& entry,
                              std::string reason, uint64_t tenure) {
  auto letter = make_dead_letter(entry, std::move(reason),
                                 self->state.cfg.schedule, now_of(self));
  log_scope scope{log_component::dead_letters, entry.from, entry.seq};
  spdlog::info("thread {}: message for {} is a dead letter: {}", entry.from,
               entry.to, letter.reason);
  return write_new(self, letter, tenure);
}

// A reply no channel delivered.
caf::result<caf::ok_atom> add_reply(self_ptr self, dead_letter given) {
  auto letter = make_dead_letter(given.entry, std::move(given.reason),
                                 self->state.cfg.schedule, now_of(self));
  letter.channels = std::move(given.channels);
  letter.reply_to = given.reply_to;
  return write_new(self, letter, 0);
}

// Finds letter `from/seq` for an operator's action and calls `act` with it
// unless it is gone, settled or busy; the action's answer goes to `rp`.
void with_letter(self_ptr self, const std::string& from, seq_t seq,
                 caf::typed_response_promise<dead_letter> rp,
                 std::function<void(dead_letter&)> act) {
  request_component(self, names::persistence, self->state.cfg.attempt_timeout,
                    atom::dead_letters_v, false)
    .then(
      [self, from, seq, rp, act](std::vector<dead_letter>& letters) mutable {
        auto found = self->state.actionable(letters, from, seq);
        if (found)
          act(*found);
        else
          rp.deliver(std::move(found.error()));
      },
      [rp](caf::error& err) mutable { rp.deliver(std::move(err)); });
}

caf::result<dead_letter> operator_retry(self_ptr self, const std::string& from,
                                        seq_t seq) {
  auto rp = self->make_response_promise<dead_letter>();
  with_letter(self, from, seq, rp, [self, rp](dead_letter& x) mutable {
    retry_letter(self, std::move(x), false,
                 [rp](caf::expected<dead_letter> stored) mutable {
                   if (stored)
                     rp.deliver(std::move(*stored));
                   else
                     rp.deliver(std::move(stored.error()));
                 });
  });
  return rp;
}

caf::result<dead_letter> operator_drop(self_ptr self, const std::string& from,
                                       seq_t seq, std::string reason) {
  auto rp = self->make_response_promise<dead_letter>();
  with_letter(self, from, seq, rp, [self, rp, reason](dead_letter& x) mutable {
    auto dropped = after_drop(std::move(x), reason, now_of(self));
    auto id = dead_letter_id(dropped);
    log_scope scope{log_component::dead_letters, dropped.entry.from,
                    dropped.entry.seq};
    spdlog::info("dead letter {} dropped by an operator: {}", id, reason);
    self->state.busy.insert(id);
    store(self, dropped, [self, rp, dropped, id](caf::error err) mutable {
      self->state.busy.erase(id);
      if (err)
        rp.deliver(std::move(err));
      else
        rp.deliver(dropped);
    });
  });
  return rp;
}

caf::result<std::vector<dead_letter>> list(self_ptr self) {
  auto rp = self->make_response_promise<std::vector<dead_letter>>();
  request_component(self, names::persistence, self->state.cfg.attempt_timeout,
                    atom::dead_letters_v, false)
    .then([rp](std::vector<dead_letter>& xs) mutable { rp.deliver(xs); },
          [rp](caf::error& err) mutable { rp.deliver(std::move(err)); });
  return rp;
}

} // namespace

dead_letter_queue_actor::behavior_type dead_letter_queue(
  dead_letter_queue_actor::stateful_pointer<dead_letter_queue_state> self,
  dead_letter_queue_config cfg) {
  auto& st = self->state;
  st.cfg = std::move(cfg);
  st.clock.anchor(self->clock());
  // Letters due while the node was down (or before a restart) go at once.
  self->send(self, atom::tick_v);
  return {
    [self](caf::put_atom, const outbox_entry& entry, std::string& reason,
           uint64_t tenure) {
      return add(self, entry, std::move(reason), tenure);
    },
    [self](caf::put_atom, dead_letter& letter) {
      return add_reply(self, std::move(letter));
    },
    [self](atom::dead_letters) { return list(self); },
    [self](atom::retry, const std::string& from, seq_t seq) {
      return operator_retry(self, from, seq);
    },
    [self](atom::drop, const std::string& from, seq_t seq,
           std::string& reason) {
      return operator_drop(self, from, seq, std::move(reason));
    },
    [self](atom::tick) { run_round(self); },
  };
}

} // namespace keel
