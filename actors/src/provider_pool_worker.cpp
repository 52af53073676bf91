// The provider worker: one provider's calls, offline (scripted) or over
// HTTP on the node's I/O threads, each answered with a classified outcome.

#include "provider_pool_impl.hpp"

#include <stdexcept>

#include <caf/all.hpp>

#include "keel/kill_point.hpp"
#include "keel/lookup.hpp"
#include "keel/text.hpp"

namespace keel {

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
  result.partial = out.cut;
  result.in_stream = out.cut;
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
  result.in_stream = failed.in_stream;
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
    auto what = provider_pool_impl::describe(ptr);
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

} // namespace keel
