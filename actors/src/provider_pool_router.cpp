// The provider router: a pool's calls, each working its way through the
// chain of providers (retries, failover, breakers, the turn's time budget).

#include "provider_pool_impl.hpp"

#include <algorithm>

#include <caf/all.hpp>
#include <spdlog/spdlog.h>

#include "keel/logging.hpp"
#include "keel/lookup.hpp"
#include "keel/redact.hpp"
#include "keel/timed_request.hpp"

namespace keel::provider_pool_impl {

namespace {

using router_ptr
  = provider_router_actor::stateful_pointer<provider_router_state>;

void dispatch(router_ptr self, uint64_t id);

// Publishes a status event about the message `call` answers.
void tell_thread(router_ptr self, const pool_call& call,
                 const std::string& state, const std::string& detail) {
  auto& req = call.request;
  if (req.quiet)
    return;
  publish_event(self->system(), req.thread,
                protocol::status_frame(req.thread, req.client_id, req.seq,
                                       state, detail));
}

// Persists the health of link `i` (best effort: a failed write is logged;
// the in-memory breaker stays authoritative).
void persist_health(router_ptr self, size_t i) {
  auto rec = self->state.health_record(i, self->clock().now());
  request_component(self, names::persistence, std::chrono::seconds{30},
                    caf::put_atom_v, std::move(rec))
    .then([](caf::ok_atom) {},
          [self, i](caf::error& err) {
            log_scope scope{log_component::providers};
            spdlog::warn("pool {}: cannot store the health of {}: {}",
                         self->state.pool, self->state.chain[i].provider.name,
                         render(err));
          });
}

void finish(router_ptr self, uint64_t id, caf::error err) {
  auto& calls = self->state.calls;
  auto i = calls.find(id);
  if (i == calls.end())
    return;
  // Erased before the answer: the request's context is no longer shared
  // when the conversation commits.
  auto promise = std::move(i->second.promise);
  calls.erase(i);
  self->state.deadlines.remove(deadline_set::kind::work, id);
  promise.deliver(std::move(err));
}

// Ends call `id` now, its attempt in flight (if any) cancelled at the
// worker, with `err`: nothing about it is published after this.
void end_call(router_ptr self, uint64_t id, caf::error err) {
  auto& st = self->state;
  auto i = st.calls.find(id);
  if (i == st.calls.end())
    return;
  auto& call = i->second;
  if (call.in_flight && call.link < st.chain.size())
    caf::anon_send(st.workers, atom::forward_v,
                   st.chain[call.link].provider.name,
                   caf::make_message(atom::cancel_v, id));
  finish(self, id, std::move(err));
}

// The time budget of call `id` is spent: it ends as a timeout.
void budget_spent(router_ptr self, uint64_t id) {
  auto& st = self->state;
  auto i = st.calls.find(id);
  if (i == st.calls.end())
    return;
  auto& call = i->second;
  call.note_failure(error_class::timeout);
  auto budget = milliseconds{call.request.time_budget_ms};
  end_call(self, id,
           final_error(st, call,
                       "no answer within the turn's " + say_duration(budget)));
}

// Cancels the call answering message `seq` of `thread` (its turn ended).
void cancel_call(router_ptr self, const std::string& thread, seq_t seq) {
  for (auto& [id, call] : self->state.calls)
    if (call.request.thread == thread && call.request.seq == seq) {
      end_call(self, id,
               caf::make_error(ec::cancelled,
                               "the turn ended; call cancelled"));
      return;
    }
}

// Moves `call` to the next provider of the chain.
void fail_over(router_ptr self, uint64_t id, pool_call& call,
               const std::string& why) {
  auto& st = self->state;
  if (call.budget.exhausted()) {
    finish(self, id, budget_used_up(st, call));
    return;
  }
  auto from = st.chain[call.link].provider.name;
  call.next_provider();
  if (call.link < st.chain.size())
    tell_thread(self, call, "failing_over",
                from + " failed (" + why + "); trying "
                  + st.chain[call.link].provider.name);
  dispatch(self, id);
}

// Notes a failed attempt of `call` on its current provider: in the call's
// failures and, unless the worker was merely stopped, in the provider's
// breaker and health.
void record_failure(router_ptr self, pool_call& call,
                    const attempt_outcome& out, error_class cls,
                    time_point now) {
  auto& st = self->state;
  auto& link = st.chain[call.link];
  call.note_failure(cls);
  if (!call.failures.empty())
    call.failures += "; ";
  call.failures += out.message;
  log_scope scope{log_component::providers};
  spdlog::info("pool {}: attempt {} at {} failed ({}): {}", st.pool,
               call.attempt, link.provider.name, to_string(cls), out.message);
  // A stopped worker says nothing of the provider (a node shutdown must not
  // open breakers that the next start restores).
  if (!out.worker_stopped) {
    ++link.failures;
    link.breaker.record_failure(now, cls, out.message);
    persist_health(self, call.link);
  }
  if (out.partial)
    tell_thread(self, call, "stream_interrupted",
                link.provider.name
                  + " stopped mid-answer; the partial answer "
                    "is discarded");
}

// The output limit of the call's next attempt: the one a timeout reduced,
// else its request's or its provider's.
uint32_t attempt_limit(const pool_call& call, const provider_config& provider) {
  return call.max_tokens != 0
           ? call.max_tokens
           : output_token_limit(provider.params, call.request.params);
}

// Retries call `id` on its provider after the backoff delay (Retry-After as
// its floor); a retried timeout asks for fewer tokens.
void retry_later(router_ptr self, uint64_t id, pool_call& call,
                 const attempt_outcome& out, error_class cls) {
  auto& st = self->state;
  auto& link = st.chain[call.link];
  if (cls == error_class::timeout) {
    call.timeout_retried = true;
    auto current = attempt_limit(call, link.provider);
    call.max_tokens = std::max<uint32_t>(
      1, static_cast<uint32_t>(current * st.cfg.timeout_max_tokens_factor));
  }
  std::optional<milliseconds> retry_after;
  if (out.retry_after_ms >= 0)
    retry_after = milliseconds{out.retry_after_ms};
  auto delay = next_delay(st.cfg.retry, call.tries_here, retry_after, st.rng);
  if (call.deadline && self->clock().now() + delay >= *call.deadline) {
    // The retry would come after the turn's deadline: end now.
    budget_spent(self, id);
    return;
  }
  tell_thread(self, call, "retrying_provider",
              out.message + "; retrying " + link.provider.name + " in "
                + say_duration(delay) + " (attempt "
                + std::to_string(call.tries_here + 1) + " of "
                + std::to_string(st.cfg.retry.max_attempts) + ")");
  self->delayed_send(self, delay, atom::retry_v, id);
}

// Retries call `id`, whose stream broke (`out`), on its provider after the
// stream layer's delay, the next attempt telling the model what failed.
void retry_broken_stream(router_ptr self, uint64_t id, pool_call& call,
                         const attempt_outcome& out) {
  auto& st = self->state;
  ++call.stream_retries;
  auto delay = next_delay(stream_backoff(st.cfg), call.stream_retries,
                          std::nullopt, st.rng);
  if (call.deadline && self->clock().now() + delay >= *call.deadline) {
    budget_spent(self, id);
    return;
  }
  call.stream_note = stream_retry_note(out.message);
  tell_thread(self, call, "retrying_provider",
              out.message + "; retrying the stream from "
                + st.chain[call.link].provider.name + " in "
                + say_duration(delay) + " (stream retry "
                + std::to_string(call.stream_retries) + " of "
                + std::to_string(st.cfg.stream_retries) + ")");
  self->delayed_send(self, delay, atom::retry_v, id);
}

// The outcome of an attempt of call `id`: a reply answers the call; a
// failure finishes it, fails over or retries, as its class says.
void on_outcome(router_ptr self, uint64_t id, attempt_outcome& out) {
  auto& st = self->state;
  auto i = st.calls.find(id);
  if (i == st.calls.end())
    return;
  auto& call = i->second;
  call.in_flight = false;
  auto& link = st.chain[call.link];
  auto now = self->clock().now();
  ++link.calls;
  metrics_of(self->system())
    .provider_call(link.provider.name, out.ok ? "none" : out.error_class,
                   out.ok);
  if (out.ok) {
    // Stored on changes only: a success on a healthy provider costs no
    // write (the live record, with its last success, is at /api/v1/providers).
    auto was = link.breaker.health().status;
    link.breaker.record_success(now);
    if (was != health_status::healthy)
      persist_health(self, call.link);
    auto promise = std::move(call.promise);
    st.calls.erase(i);
    st.deadlines.remove(deadline_set::kind::work, id);
    promise.deliver(std::move(out.reply));
    return;
  }
  auto cls = parse_error_class(out.error_class).value_or(error_class::unknown);
  // A provider may quote the request's key back ("Incorrect API key
  // provided: sk-..."): the text goes into health, logs, frames, notices.
  out.message = redact(out.message, st.secrets);
  record_failure(self, call, out, cls, now);
  if (!counts_against_provider(cls)) {
    // The request itself is wrong: no provider can help.
    finish(self, id, final_error(st, call, "the provider refused the request"));
  } else if (retry_stream(st, call, out, cls)) {
    retry_broken_stream(self, id, call, out);
  } else if (!retryable(cls) || !retry_here(st, call, cls)) {
    // Auth, billing, model_not_found, format: this provider cannot serve the
    // request; another one may. Likewise once retries here are used up.
    fail_over(self, id, call, to_string(cls));
  } else {
    retry_later(self, id, call, out, cls);
  }
}

// Sends the next attempt of call `id` to the worker of its provider,
// through the pool supervisor.
void attempt(router_ptr self, uint64_t id, pool_call& call) {
  auto& link = self->state.chain[call.link];
  ++call.attempt;
  ++call.tries_here;
  call.in_flight = true;
  attempt_request req{call.request, attempt_limit(call, link.provider),
                      call.attempt, id};
  auto& context = req.request.context;
  if (!call.stream_note.empty() && !context.empty())
    context.push_back({context.back().seq, "system", call.stream_note});
  if (call.deadline) {
    // The attempt gets what is left of the budget, never more.
    auto left
      = duration_cast<milliseconds>(*call.deadline - self->clock().now());
    req.request.time_budget_ms
      = static_cast<uint64_t>(std::max<int64_t>(1, left.count()));
  }
  // The worker enforces the provider's own timeouts; this one only guards
  // against a worker that died holding the call.
  auto guard = caf::timespan{link.provider.total_timeout}
               + std::chrono::seconds{5};
  timed_request(self, self->state.workers, guard, atom::forward_v,
                link.provider.name,
                caf::make_message(atom::attempt_v, std::move(req)))
    .then([self, id](attempt_outcome& out) { on_outcome(self, id, out); },
          [self, id, name = link.provider.name](caf::error& err) {
            auto cls = err == caf::sec::request_timeout ? error_class::timeout
                                                        : error_class::unknown;
            auto out = attempt_outcome::failed(
              cls, name + ": worker unavailable: " + render(err));
            // Only a call that outlived its guard may be the provider's.
            out.worker_stopped = cls != error_class::timeout;
            on_outcome(self, id, out);
          });
}

// Makes the next attempt of call `id`: on the current provider if its
// breaker lets it through, else on the next one that does.
void dispatch(router_ptr self, uint64_t id) {
  auto& st = self->state;
  auto i = st.calls.find(id);
  if (i == st.calls.end())
    return;
  auto& call = i->second;
  skip_cooling_down(st, call, self->clock().now());
  if (call.link >= st.chain.size()) {
    finish(self, id,
           final_error(st, call,
                       call.attempt == 0 ? "every provider is cooling down"
                                         : "every provider failed"));
    return;
  }
  if (!call.budget.take()) {
    finish(self, id, budget_used_up(st, call));
    return;
  }
  attempt(self, id, call);
}

// Opens a call working its way through the chain; answers its completion.
caf::result<completion> complete(router_ptr self, completion_request& req) {
  auto& st = self->state;
  auto id = st.next_id++;
  auto per_provider = st.cfg.retry.max_attempts + st.cfg.stream_retries;
  auto budget = st.cfg.budget != 0
                  ? st.cfg.budget
                  : per_provider * static_cast<uint32_t>(st.chain.size());
  pool_call call;
  call.promise = self->make_response_promise<completion>();
  call.request = std::move(req);
  call.budget = retry_budget{budget};
  if (call.request.time_budget_ms > 0) {
    auto budget = milliseconds{call.request.time_budget_ms};
    call.deadline = self->clock().now() + budget;
    add_deadline(self, deadline_set::kind::work, id, budget);
  }
  auto rp = call.promise;
  st.calls.emplace(id, std::move(call));
  dispatch(self, id);
  return rp;
}

// Cooldowns survive restarts: picks up the persisted health before anything
// else. `await` holds every other message (calls delivered with the restart
// included) until the health is in, so no call ignores a cooldown and no
// late restore overwrites what a call just learned.
void load_health(router_ptr self) {
  request_component(self, names::persistence, std::chrono::seconds{30},
                    atom::health_v)
    .await(
      [self](std::vector<provider_health_record>& records) {
        auto now = self->clock().now();
        for (auto& rec : records)
          self->state.restore(rec, now);
      },
      [self](caf::error& err) {
        log_scope scope{log_component::providers};
        spdlog::warn("pool {}: cannot load provider health: {}",
                     self->state.pool, render(err));
      });
}

} // namespace

} // namespace keel::provider_pool_impl

namespace keel {

// The behaviour calls the router's parts by their names (this file only).
using namespace provider_pool_impl;

provider_router_actor::behavior_type
provider_router(router_ptr self, provider_pool_config cfg, caf::actor workers) {
  self->state.init(cfg, std::move(workers));
  self->set_exception_handler([self](std::exception_ptr& ptr) -> caf::error {
    auto err = caf::make_error(ec::provider_failed,
                               "pool '" + self->state.pool
                                 + "' router crashed: " + describe(ptr));
    self->state.fail_all(err);
    return err;
  });
  // Stopped or killed by its supervisor: fail the requests in flight now
  // rather than leaving their threads to the turn timeout.
  self->set_exit_handler([self](caf::exit_msg& msg) {
    self->state.fail_all(caf::make_error(
      ec::provider_failed,
      "pool '" + self->state.pool + "' stopped: " + render(msg.reason)));
    self->quit(msg.reason);
  });
  load_health(self);
  return {
    [self](atom::complete, completion_request& req) {
      return complete(self, req);
    },
    [self](atom::health) {
      return self->state.health_records(self->clock().now());
    },
    [self](atom::cancel, const std::string& thread, seq_t seq) {
      cancel_call(self, thread, seq);
    },
    [self](atom::retry, uint64_t id) { dispatch(self, id); },
    [self](atom::expire) {
      expire_deadlines(self, [self](uint64_t id) { budget_spent(self, id); });
    },
  };
}

} // namespace keel
