#include "keel/channel_delivery.hpp"

#include <algorithm>
#include <utility>

#include <caf/all.hpp>
#include <spdlog/spdlog.h>

#include "keel/logging.hpp"
#include "keel/lookup.hpp"
#include "keel/redact.hpp"
#include "keel/text.hpp"

namespace keel {

// -- records ------------------------------------------------------------------

dead_letter reply_letter(const reply_delivery& reply,
                         const std::vector<std::string>& failed,
                         const std::vector<std::string>& errors) {
  dead_letter letter;
  letter.entry.from = reply.thread;
  letter.entry.seq = reply.seq;
  letter.entry.text = reply.text;
  letter.entry.created_at = reply.at;
  letter.channels = failed;
  letter.reply_to = reply.reply_to;
  for (size_t i = 0; i < failed.size() && i < errors.size(); ++i) {
    if (!letter.reason.empty())
      letter.reason += "; ";
    letter.reason += "channel " + failed[i] + ": " + errors[i];
  }
  return letter;
}

reply_delivery reply_of(const dead_letter& letter) {
  reply_delivery result;
  result.thread = letter.entry.from;
  result.seq = letter.entry.seq;
  result.text = letter.entry.text;
  result.reply_to = letter.reply_to;
  result.at = letter.entry.created_at;
  result.channels = letter.channels;
  return result;
}

// -- state --------------------------------------------------------------------

namespace {

std::string reply_key(const reply_delivery& reply) {
  return reply.thread + "/" + std::to_string(reply.seq);
}

} // namespace

bool channel_delivery_state::busy(const reply_delivery& reply) const {
  return busy_replies.count(reply_key(reply)) > 0;
}

send_decision
channel_delivery_state::after_failure(const channel_send_state& send,
                                      const send_failure& failure) {
  auto& policy = clients.at(send.channel)->config().retry;
  auto decision = after_failed_send(policy, send.attempt, send.plain_text,
                                    failure, rng);
  // A dead letter's attempt is one send (plus the plain-text one).
  if (jobs.at(send.job).answer && decision.what == send_decision::action::retry)
    decision.what = send_decision::action::dead_letter;
  return decision;
}

// -- the actor ----------------------------------------------------------------

namespace {

using self_ptr = channel_delivery_state::self_ptr;

outbound_message message_of(const delivery_job& job,
                            const std::string& channel) {
  if (job.notice)
    return notice_message(*job.notice);
  auto& reply = job.reply;
  outbound_message msg;
  msg.id = reply_idempotency_key(channel, reply.thread, reply.seq);
  msg.thread = reply.thread;
  msg.seq = reply.seq;
  msg.reply_to = reply.reply_to;
  msg.text = reply.text;
  msg.at = reply.at;
  return msg;
}

// Makes the next attempt of send `id`; its outcome comes back as a
// message (the client answers on an I/O thread). A reply's own send waits
// in its channel's line while the channel is full; a dead letter's attempt
// or a notice goes at once (its caller waits with a timeout that must not
// include the line: it may wait at the client instead, where the wait
// counts against the send's own timeout).
void attempt(self_ptr self, uint64_t id) {
  auto& st = self->state;
  auto i = st.sends.find(id);
  if (i == st.sends.end())
    return;
  auto& send = i->second;
  auto& job = st.jobs.at(send.job);
  auto& line = st.lines[send.channel];
  auto answered = job.answer || job.notice_answer;
  if (!answered && line.in_flight >= channel_client::max_in_flight) {
    line.waiting.push_back(id);
    return;
  }
  ++line.in_flight;
  ++send.attempt;
  auto handle = caf::actor_cast<channel_delivery_actor>(self);
  st.clients.at(send.channel)
    ->send(message_of(job, send.channel), send.plain_text,
           [handle, id](send_result r) {
             auto after = r.failure.retry_after ? r.failure.retry_after->count()
                                                : int64_t{-1};
             caf::anon_send(handle, atom::attempt_v, id, r.delivered,
                            static_cast<uint8_t>(r.failure.kind), after,
                            std::move(r.description));
           });
}

// The outcome of reply `key` is stored (or could not be): it is free again.
// After a failed write its record is still there: read the records again
// one retry interval later, so it is not left until a restart.
void outcome_stored(self_ptr self, const std::string& key, caf::error err) {
  auto& st = self->state;
  st.busy_replies.erase(key);
  if (!err)
    return;
  log_scope scope{log_component::channels};
  spdlog::warn("reply {}: cannot store its delivery: {} (tried again in {})",
               key, render(err), human_duration(st.cfg.reload_after_failure));
  self->delayed_send(self, st.cfg.reload_after_failure, atom::tick_v);
}

// Answers a notice's job: sent, or failed with its error.
void answer_notice(delivery_job& job) {
  job.notice->status = job.failed.empty() ? notice_status::sent
                                          : notice_status::failed;
  job.notice->error = job.errors.empty() ? "" : job.errors.front();
  job.notice_answer->deliver(std::move(*job.notice));
}

// Tells the owner about each channel that gave up on a reply's own send.
void notify_unhealthy(self_ptr self, const delivery_job& job) {
  for (size_t i = 0; i < job.failed.size(); ++i)
    notify_owner(self->system(), notice_kind::channel_unhealthy, job.failed[i],
                 "Channel " + job.failed[i] + " did not take reply "
                   + std::to_string(job.reply.seq) + " of thread "
                   + job.reply.thread + " after its retries: " + job.errors[i]
                   + ". The reply waits in the dead-letter queue.");
}

// Job `id` has no send under way any more: stores its outcome (a reply's
// own delivery) or answers it (a dead letter's attempt, a notice).
void finish_job(self_ptr self, uint64_t id) {
  auto& st = self->state;
  auto job = std::move(st.jobs.at(id));
  st.jobs.erase(id);
  if (job.notice_answer) {
    answer_notice(job);
    return;
  }
  auto letter = reply_letter(job.reply, job.failed, job.errors);
  auto key = reply_key(job.reply);
  if (job.answer) {
    st.busy_replies.erase(key);
    job.answer->deliver(std::move(letter));
    return;
  }
  auto done = [self, key](caf::ok_atom) { outcome_stored(self, key, {}); };
  auto failed = [self, key](caf::error& err) {
    outcome_stored(self, key, std::move(err));
  };
  if (job.failed.empty()) {
    auto delivered = job.reply;
    delivered.channels.clear();
    request_component(self, names::persistence, st.cfg.store_timeout,
                      caf::put_atom_v, delivered, uint64_t{0})
      .then(done, failed);
    return;
  }
  log_scope scope{log_component::channels, job.reply.thread, job.reply.seq};
  spdlog::warn("thread {}: reply {} is a dead letter: {}", job.reply.thread,
               job.reply.seq, letter.reason);
  notify_unhealthy(self, job);
  request_component(self, names::dead_letters, st.cfg.store_timeout,
                    caf::put_atom_v, std::move(letter))
    .then(done, failed);
}

// Stores that a reply reached `channel` while other channels still wait,
// so a restart does not send it there again.
void store_progress(self_ptr self, const delivery_job& job) {
  auto rest = job.reply;
  auto& done = job.delivered;
  rest.channels.erase(std::remove_if(rest.channels.begin(), rest.channels.end(),
                                     [&](auto& x) {
                                       return std::find(done.begin(),
                                                        done.end(), x)
                                              != done.end();
                                     }),
                      rest.channels.end());
  request_component(self, names::persistence, self->state.cfg.store_timeout,
                    caf::put_atom_v, rest, uint64_t{0})
    .then([](caf::ok_atom) {},
          [thread = rest.thread, seq = rest.seq](caf::error& err) {
            log_scope scope{log_component::channels, thread, seq};
            spdlog::warn("thread {}: cannot store a delivery's progress: {}",
                         thread, render(err));
          });
}

// Send `id` is over: delivered, or failed for good with `error`.
void settle(self_ptr self, uint64_t id, bool delivered, std::string error) {
  auto& st = self->state;
  auto send = std::move(st.sends.at(id));
  st.sends.erase(id);
  auto& job = st.jobs.at(send.job);
  --job.in_flight;
  if (delivered) {
    job.delivered.push_back(send.channel);
  } else {
    job.failed.push_back(send.channel);
    job.errors.push_back(std::move(error));
  }
  if (job.in_flight == 0)
    finish_job(self, send.job);
  else if (delivered && !job.answer)
    store_progress(self, job);
}

// A send to `channel` left the client: the next one waiting goes.
void release(self_ptr self, const std::string& channel) {
  auto& line = self->state.lines[channel];
  --line.in_flight;
  while (!line.waiting.empty()
         && line.in_flight < channel_client::max_in_flight) {
    auto next = line.waiting.front();
    line.waiting.pop_front();
    attempt(self, next);
  }
}

void on_result(self_ptr self, uint64_t id, bool delivered, uint8_t kind,
               int64_t retry_after, std::string description) {
  auto& st = self->state;
  auto i = st.sends.find(id);
  if (i == st.sends.end())
    return;
  release(self, i->second.channel);
  if (delivered) {
    settle(self, id, true, {});
    return;
  }
  send_failure failure{static_cast<send_failure_kind>(kind), std::nullopt};
  if (retry_after >= 0)
    failure.retry_after = std::chrono::milliseconds{retry_after};
  auto decision = st.after_failure(i->second, failure);
  using action = send_decision::action;
  if (decision.what == action::dead_letter) {
    settle(self, id, false, std::move(description));
    return;
  }
  auto& reply = st.jobs.at(i->second.job).reply; // Empty for a notice.
  log_scope scope{log_component::channels, reply.thread, reply.seq};
  spdlog::info("channel {}: attempt {} failed: {}", i->second.channel,
               i->second.attempt, description);
  if (decision.what == action::retry_plain_text)
    i->second.plain_text = true;
  if (decision.delay.count() <= 0)
    attempt(self, id);
  else
    self->delayed_send(self, decision.delay, atom::attempt_v, id);
}

// Starts sending `notice` to `channel`, answering its outcome.
caf::result<owner_notice> send_notice(self_ptr self, owner_notice notice,
                                      const std::string& channel) {
  auto& st = self->state;
  if (st.clients.count(channel) == 0)
    return caf::make_error(ec::not_found,
                           "channel " + channel + " is not configured");
  auto job_id = st.next_id++;
  auto& job = st.jobs[job_id];
  job.notice = std::move(notice);
  auto rp = self->make_response_promise<owner_notice>();
  job.notice_answer = rp;
  job.in_flight = 1;
  auto id = st.next_id++;
  st.sends[id] = channel_send_state{job_id, channel, 0, false};
  attempt(self, id);
  return rp;
}

// Starts sending `reply` to each of its channels; `answer`: a dead
// letter's attempt.
void start_job(self_ptr self, const reply_delivery& reply,
               std::optional<caf::typed_response_promise<dead_letter>> answer) {
  auto& st = self->state;
  auto job_id = st.next_id++;
  st.busy_replies.insert(reply_key(reply));
  auto& job = st.jobs[job_id];
  job.reply = reply;
  job.answer = std::move(answer);
  std::vector<uint64_t> started;
  for (auto& channel : reply.channels) {
    if (st.clients.count(channel) == 0) {
      job.failed.push_back(channel);
      job.errors.push_back("not configured on this node");
      continue;
    }
    auto id = st.next_id++;
    st.sends[id] = channel_send_state{job_id, channel, 0, false};
    started.push_back(id);
  }
  job.in_flight = started.size();
  if (started.empty()) {
    finish_job(self, job_id);
    return;
  }
  for (auto id : started)
    attempt(self, id);
}

void load(self_ptr self) {
  auto& cfg = self->state.cfg;
  request_component(self, names::persistence, cfg.store_timeout,
                    atom::deliveries_v)
    .then(
      [self](std::vector<reply_delivery>& replies) {
        for (auto& reply : replies)
          if (!self->state.busy(reply))
            start_job(self, reply, std::nullopt);
        if (auto poll = self->state.cfg.poll)
          self->delayed_send(self, *poll, atom::tick_v);
      },
      [self](caf::error& err) {
        log_scope scope{log_component::channels};
        spdlog::warn("channels: cannot read the replies to deliver: {}",
                     render(err));
        self->delayed_send(self, self->state.cfg.reload_after_failure,
                           atom::tick_v);
      });
}

caf::result<dead_letter> retry_letter(self_ptr self, const dead_letter& x) {
  auto reply = reply_of(x);
  if (self->state.busy(reply))
    return caf::make_error(ec::conflict, "reply " + dead_letter_id(x)
                                           + " is being delivered already");
  auto rp = self->make_response_promise<dead_letter>();
  start_job(self, reply, rp);
  return rp;
}

} // namespace

channel_delivery_actor::behavior_type channel_delivery(
  channel_delivery_actor::stateful_pointer<channel_delivery_state> self,
  channel_delivery_config cfg) {
  auto& st = self->state;
  st.cfg = std::move(cfg);
  st.rng.seed(st.cfg.seed);
  for (auto& channel : st.cfg.channels) {
    auto client = channel_client::make(*st.cfg.io, channel);
    if (client) {
      st.clients.emplace(channel.name, std::move(*client));
    } else {
      log_scope scope{log_component::channels};
      spdlog::error("channel {}: {}", channel.name, render(client.error()));
    }
  }
  self->send(self, atom::tick_v);
  return {
    [self](atom::deliver, const reply_delivery& reply) {
      if (!self->state.busy(reply))
        start_job(self, reply, std::nullopt);
    },
    [self](atom::retry, const dead_letter& x) { return retry_letter(self, x); },
    [self](atom::notify, owner_notice& x, const std::string& channel) {
      return send_notice(self, std::move(x), channel);
    },
    [self](atom::attempt, uint64_t id) { attempt(self, id); },
    [self](atom::attempt, uint64_t id, bool delivered, uint8_t kind,
           int64_t retry_after, std::string& description) {
      on_result(self, id, delivered, kind, retry_after,
                redact(description, self->state.cfg.secrets));
    },
    [self](atom::tick) { load(self); },
  };
}

} // namespace keel
