#include "keel/provider_pool.hpp"

#include <stdexcept>

#include <caf/all.hpp>
#include <spdlog/spdlog.h>

#include "keel/config_secrets.hpp"
#include "keel/kill_point.hpp"
#include "keel/logging.hpp"
#include "keel/lookup.hpp"
#include "keel/redact.hpp"
#include "keel/text.hpp"
#include "keel/timed_request.hpp"

namespace keel {

caf::message complete_message(completion_request req) {
  return caf::make_message(atom::forward_v, std::string{router_child_id},
                           caf::make_message(atom::complete_v, std::move(req)));
}

caf::message cancel_message(std::string thread, seq_t seq) {
  return caf::make_message(atom::forward_v, std::string{router_child_id},
                           caf::make_message(atom::cancel_v, std::move(thread),
                                             seq));
}

caf::expected<provider_pool_config> resolve_pool(const node_config& cfg,
                                                 const pool_config& pool) {
  provider_pool_config result;
  result.pool = pool;
  for (auto& name : pool.chain) {
    auto p = cfg.find_provider(name);
    if (p == nullptr)
      return caf::make_error(ec::config_invalid, "pools." + pool.name
                                                   + ".chain: no provider '"
                                                   + name + "'");
    result.providers.push_back(*p);
  }
  result.secrets = configured_secrets(cfg);
  return result;
}

namespace {

using std::chrono::duration_cast;
using std::chrono::milliseconds;
using time_point = caf::actor_clock::time_point;

/// Describes an exception caught by an exception handler.
std::string describe(std::exception_ptr& ptr) {
  try {
    std::rethrow_exception(ptr);
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "unknown exception";
  }
}

/// Renders a duration for status details: "850 ms", "2.5 s", "3 min".
std::string say_duration(milliseconds d) {
  auto ms = d.count();
  if (ms < 1000)
    return std::to_string(ms) + " ms";
  if (ms < 60'000) {
    auto tenths = (ms + 50) / 100;
    return std::to_string(tenths / 10)
           + (tenths % 10 != 0 ? "." + std::to_string(tenths % 10) : "") + " s";
  }
  return std::to_string((ms + 30'000) / 60'000) + " min";
}

} // namespace

// -- worker -------------------------------------------------------------------

void provider_worker_state::fail_pending(const std::string& why, bool stopped) {
  for (auto& [id, promise] : pending) {
    auto out = attempt_outcome::failed(error_class::unknown, why);
    out.worker_stopped = stopped;
    promise.deliver(std::move(out));
  }
  pending.clear();
  crashing.clear();
  pool_calls.clear();
  cancellers.clear();
}

void provider_worker_state::track(
  uint64_t id, uint64_t call_id,
  caf::typed_response_promise<attempt_outcome> rp) {
  pending.emplace(id, std::move(rp));
  pool_calls.emplace(id, call_id);
}

void provider_worker_state::answer(uint64_t id, attempt_outcome outcome) {
  if (auto i = pending.find(id); i != pending.end()) {
    i->second.deliver(std::move(outcome));
    pending.erase(i);
  }
  crashing.erase(id);
  pool_calls.erase(id);
  cancellers.erase(id);
}

void provider_worker_state::cancel(uint64_t call_id) {
  std::vector<uint64_t> ids;
  for (auto& [id, pool_call] : pool_calls)
    if (pool_call == call_id)
      ids.push_back(id);
  for (auto id : ids) {
    if (auto i = cancellers.find(id); i != cancellers.end()) {
      i->second("its turn ended");
      continue;
    }
    answer(id, attempt_outcome::failed(error_class::unknown,
                                       cfg.name
                                         + ": call cancelled: its turn "
                                           "ended"));
  }
}

namespace {

using worker_ptr
  = provider_worker_actor::stateful_pointer<provider_worker_state>;

attempt_outcome to_outcome(const provider_outcome& out) {
  if (out.what == provider_outcome::kind::reply) {
    attempt_outcome result;
    result.ok = true;
    result.reply = out.reply;
    return result;
  }
  auto result = attempt_outcome::failed(out.failure,
                                        sanitize_utf8(out.message));
  if (out.retry_after)
    result.retry_after_ms = out.retry_after->count();
  return result;
}

attempt_outcome to_outcome(call_result&& res) {
  if (auto reply = std::get_if<completion>(&res)) {
    attempt_outcome result;
    result.ok = true;
    result.reply = std::move(*reply);
    return result;
  }
  auto& failed = std::get<call_failure>(res);
  // The message quotes the provider; it becomes health records and frames,
  // which must be well-formed UTF-8.
  auto result = attempt_outcome::failed(classify(failed.failure),
                                        sanitize_utf8(failed.message));
  if (failed.retry_after)
    result.retry_after_ms = failed.retry_after->count();
  result.partial = failed.partial;
  return result;
}

// An offline call: the outcome is known now and due after its delay (on the
// actor clock, so tests run it on the test clock).
caf::result<attempt_outcome> call_offline(worker_ptr self,
                                          attempt_request& req) {
  auto& st = self->state;
  auto out = st.offline->complete(req.request, req.max_tokens);
  auto crash = out.what == provider_outcome::kind::crash;
  if (out.delay.count() == 0 && !crash)
    return to_outcome(out);
  auto id = st.next_id++;
  auto rp = self->make_response_promise<attempt_outcome>();
  // Pending before any throw: the exception handler answers it.
  st.track(id, req.call_id, rp);
  auto what = "provider '" + st.cfg.name + "' crashed (scripted crash)";
  if (crash && out.delay.count() == 0)
    throw std::runtime_error(what);
  if (crash)
    st.crashing.emplace(id, std::move(what));
  self->delayed_send(self, out.delay, atom::deliver_v, id, to_outcome(out));
  return rp;
}

// An HTTP call on the node's I/O threads; streamed text goes straight to the
// thread's subscribers, the outcome comes back as a message.
caf::result<attempt_outcome> call_remote(worker_ptr self,
                                         attempt_request& req) {
  auto& st = self->state;
  auto id = st.next_id++;
  auto rp = self->make_response_promise<attempt_outcome>();
  st.track(id, req.call_id, rp);
  delta_handler on_delta;
  if (st.cfg.stream && !req.request.quiet)
    on_delta = [sys = &self->system(), thread = req.request.thread,
                client_id = req.request.client_id, seq = req.request.seq,
                attempt = req.attempt](std::string_view text) {
      publish_event(*sys, thread,
                    protocol::delta_frame(thread, client_id, seq, attempt,
                                          text));
    };
  // A weak handle: an outcome arriving after the worker is gone is dropped.
  caf::weak_actor_ptr me{self->ctrl()};
  auto on_done = [me, id](call_result result) {
    if (auto ptr = me.lock())
      caf::anon_send(caf::actor_cast<provider_worker_actor>(ptr),
                     atom::deliver_v, id, to_outcome(std::move(result)));
  };
  st.cancellers.emplace(id, st.remote->complete(req.request, req.max_tokens,
                                                std::move(on_delta),
                                                std::move(on_done)));
  return rp;
}

} // namespace

provider_worker_actor::behavior_type
provider_worker(worker_ptr self, provider_config cfg,
                std::shared_ptr<http_io> io) {
  auto& st = self->state;
  st.cfg = std::move(cfg);
  if (is_http_kind(st.cfg.kind)) {
    caf::expected<std::shared_ptr<llm_endpoint>> ep{caf::make_error(
      ec::config_invalid, "provider '" + st.cfg.name + "' needs I/O threads")};
    if (io)
      ep = llm_endpoint::make(*io, st.cfg);
    if (!ep) {
      self->quit(ep.error());
      return provider_worker_actor::behavior_type::make_empty_behavior();
    }
    st.remote = std::move(*ep);
  } else {
    auto p = make_provider(st.cfg);
    if (!p) {
      self->quit(p.error());
      return provider_worker_actor::behavior_type::make_empty_behavior();
    }
    st.offline = std::move(*p);
  }
  // A bug (or a scripted crash) fails this worker's calls, each with a
  // classified outcome, and stops the worker; its supervisor restarts it.
  self->set_exception_handler([self](std::exception_ptr& ptr) -> caf::error {
    auto what = describe(ptr);
    self->state.fail_pending(what, false);
    return caf::make_error(ec::provider_failed, what);
  });
  self->set_exit_handler([self](caf::exit_msg& msg) {
    self->state.fail_pending("provider worker '" + self->state.cfg.name
                               + "' stopped: " + render(msg.reason),
                             true);
    self->quit(msg.reason);
  });
  return {
    [self](atom::attempt,
           attempt_request& req) -> caf::result<attempt_outcome> {
      auto result = self->state.offline ? call_offline(self, req)
                                        : call_remote(self, req);
      reach(kill_point::provider_call); // The call is under way.
      return result;
    },
    [self](atom::deliver, uint64_t id, attempt_outcome& outcome) {
      auto& st = self->state;
      if (auto c = st.crashing.find(id); c != st.crashing.end())
        throw std::runtime_error(c->second);
      st.answer(id, std::move(outcome));
    },
    [self](atom::cancel, uint64_t call_id) { self->state.cancel(call_id); },
  };
}

// -- router -------------------------------------------------------------------

void pool_call::next_provider() {
  ++link;
  tries_here = 0;
  timeout_retried = false;
  max_tokens = 0;
}

void pool_call::note_failure(error_class cls, bool skipped) {
  if (!skipped)
    last_class = cls;
  if (shared_class && *shared_class != cls)
    classes_differ = true;
  shared_class = cls;
}

std::optional<error_class> pool_call::common_class() const {
  if (classes_differ)
    return std::nullopt;
  return shared_class;
}

void provider_router_state::init(const provider_pool_config& config,
                                 caf::actor pool_supervisor) {
  pool = config.pool.name;
  cfg = config.pool;
  workers = std::move(pool_supervisor);
  secrets = config.secrets;
  rng.seed(std::random_device{}());
  for (auto& p : config.providers)
    chain.push_back(chain_link{p, circuit_breaker{config.pool.breaker}});
}

void provider_router_state::fail_all(const caf::error& reason) {
  for (auto& [id, call] : calls)
    call.promise.deliver(reason);
  calls.clear();
}

provider_health_record
provider_router_state::health_record(size_t i, time_point now) const {
  auto& link = chain[i];
  auto& h = link.breaker.health();
  auto wall = [now, base = wall_clock_millis()](time_point t) {
    return base + duration_cast<milliseconds>(t - now).count();
  };
  provider_health_record rec;
  rec.pool = pool;
  rec.provider = link.provider.name;
  rec.status = to_string(h.status);
  rec.breaker = to_string(link.breaker.state());
  rec.consecutive_failures = h.consecutive_failures;
  rec.last_error = h.last_error;
  if (h.last_error_class)
    rec.last_error_class = to_string(*h.last_error_class);
  if (h.last_success)
    rec.last_success = wall(*h.last_success);
  if (h.status == health_status::down)
    rec.cooldown_until = wall(h.cooldown_until);
  rec.calls = link.calls;
  rec.failures = link.failures;
  return rec;
}

std::vector<provider_health_record>
provider_router_state::health_records(time_point now) const {
  std::vector<provider_health_record> result;
  for (size_t i = 0; i < chain.size(); ++i)
    result.push_back(health_record(i, now));
  return result;
}

void provider_router_state::restore(const provider_health_record& rec,
                                    time_point now) {
  if (rec.pool != pool)
    return;
  for (auto& link : chain) {
    if (link.provider.name != rec.provider)
      continue;
    auto local = [now, base = wall_clock_millis()](millis t) {
      return now + milliseconds{t - base};
    };
    provider_health h;
    h.status = parse_health_status(rec.status).value_or(health_status::healthy);
    h.consecutive_failures = rec.consecutive_failures;
    // Redacted again: a record stored by an older node may hold a key.
    h.last_error = redact(rec.last_error, secrets);
    h.last_error_class = parse_error_class(rec.last_error_class);
    if (rec.last_success != 0)
      h.last_success = local(rec.last_success);
    if (h.status == health_status::down) {
      // A cooldown that ended while the node was down leaves the breaker
      // open with its probe due at once: the next call finds out.
      h.cooldown_until = local(rec.cooldown_until);
    }
    link.breaker.restore(h);
    return;
  }
}

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

// The error a request ends with, by the class of its last failure.
caf::error final_error(const provider_router_state& st, const pool_call& call,
                       const std::string& why) {
  auto text = "pool '" + st.pool + "': " + why;
  if (!call.failures.empty())
    text += " (" + call.failures + ")";
  // Set up wrong or out of credit only if every provider was.
  if (call.common_class() == error_class::auth)
    return caf::make_error(ec::provider_unauthorized, std::move(text));
  if (call.common_class() == error_class::billing)
    return caf::make_error(ec::credits_exhausted, std::move(text));
  switch (call.last_class.value_or(error_class::unknown)) {
    case error_class::timeout:
      return caf::make_error(ec::provider_timeout, std::move(text));
    case error_class::context_overflow:
      return caf::make_error(ec::context_overflow, std::move(text));
    case error_class::invalid_request:
      return caf::make_error(ec::provider_rejected, std::move(text));
    default: return caf::make_error(ec::provider_failed, std::move(text));
  }
}

caf::error budget_used_up(const provider_router_state& st,
                          const pool_call& call) {
  return final_error(st, call,
                     "the retry budget of " + std::to_string(call.budget.used())
                       + " attempts is used up");
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

// True if a retryable failure of class `cls` is retried on the same
// provider (a timeout only once).
bool retry_here(const provider_router_state& st, const pool_call& call,
                error_class cls) {
  return call.tries_here < st.cfg.retry.max_attempts
         && !(cls == error_class::timeout && call.timeout_retried)
         && st.chain[call.link].breaker.state() != breaker_state::open
         && !call.budget.exhausted();
}

// Retries call `id` on its provider after the backoff delay (Retry-After as
// its floor); a retried timeout asks for fewer tokens.
void retry_later(router_ptr self, uint64_t id, pool_call& call,
                 const attempt_outcome& out, error_class cls) {
  auto& st = self->state;
  auto& link = st.chain[call.link];
  if (cls == error_class::timeout) {
    call.timeout_retried = true;
    auto current = call.max_tokens != 0 ? call.max_tokens
                                        : link.provider.max_tokens;
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
  } else if (!retryable(cls) || !retry_here(st, call, cls)) {
    // Auth, billing, model_not_found, format: this provider cannot serve the
    // request; another one may. Likewise once retries here are used up.
    fail_over(self, id, call, to_string(cls));
  } else {
    retry_later(self, id, call, out, cls);
  }
}

// Moves `call` past the providers whose breaker lets no call through now,
// noting them in the call's failures.
void skip_cooling_down(provider_router_state& st, pool_call& call,
                       time_point now) {
  std::string skipped;
  while (call.link < st.chain.size()
         && !st.chain[call.link].breaker.admit(now)) {
    auto& link = st.chain[call.link];
    // What opened the breaker speaks for the provider (credits used up).
    if (auto cls = link.breaker.health().last_error_class)
      call.note_failure(*cls, true);
    auto wait = duration_cast<milliseconds>(link.breaker.probe_at() - now);
    if (!skipped.empty())
      skipped += ", ";
    skipped += link.provider.name + " cooling down for "
               + say_duration(std::max(wait, milliseconds{0}));
    call.next_provider();
  }
  if (!skipped.empty()) {
    if (!call.failures.empty())
      call.failures += "; ";
    call.failures += "skipped " + skipped;
  }
}

// Sends the next attempt of call `id` to the worker of its provider,
// through the pool supervisor.
void attempt(router_ptr self, uint64_t id, pool_call& call) {
  auto& link = self->state.chain[call.link];
  ++call.attempt;
  ++call.tries_here;
  call.in_flight = true;
  attempt_request req{call.request,
                      call.max_tokens != 0 ? call.max_tokens
                                           : link.provider.max_tokens,
                      call.attempt, id};
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
  auto budget = st.cfg.budget != 0 ? st.cfg.budget
                                   : st.cfg.retry.max_attempts
                                       * static_cast<uint32_t>(st.chain.size());
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

// -- supervisors --------------------------------------------------------------

supervisor_config pool_spec(const provider_pool_config& cfg,
                            const supervisor_settings& settings) {
  supervisor_config sup;
  sup.name = "pool " + cfg.pool.name;
  sup.children.push_back(
    {router_child_id, std::nullopt, [cfg](caf::local_actor* parent) {
       return caf::actor_cast<caf::actor>(parent->spawn(
         provider_router, cfg, caf::actor_cast<caf::actor>(parent)));
     }});
  for (auto& p : cfg.providers)
    sup.children.push_back(
      {p.name, std::nullopt, [p, io = cfg.io](caf::local_actor* parent) {
         return caf::actor_cast<caf::actor>(
           parent->spawn(provider_worker, p, io));
       }});
  apply_settings(sup, settings);
  return sup;
}

bool needs_http(const node_config& cfg) {
  for (auto& p : cfg.providers)
    if (is_http_kind(p.kind))
      return true;
  return !cfg.delivery.channels.empty();
}

caf::expected<supervisor_config> providers_spec(const node_config& cfg,
                                                std::shared_ptr<http_io> io) {
  supervisor_config sup;
  sup.name = "providers";
  for (auto& pool : cfg.pools) {
    auto resolved = resolve_pool(cfg, pool);
    if (!resolved)
      return resolved.error();
    resolved->io = io;
    child_spec spec;
    spec.id = pool.name;
    spec.supervisor = true;
    spec.start = [pcfg = pool_spec(*resolved, cfg.supervision.providers)](
                   caf::local_actor* parent) {
      return parent->spawn(supervisor, pcfg);
    };
    sup.children.push_back(std::move(spec));
  }
  apply_settings(sup, cfg.supervision.providers);
  return sup;
}

} // namespace keel
