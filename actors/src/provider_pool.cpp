#include "keel/providers.hpp"

#include <stdexcept>

#include <caf/all.hpp>

namespace keel {

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
  return result;
}

void provider_pool_state::fail_pending(const caf::error& reason) {
  for (auto& [id, call] : pending)
    call.promise.deliver(reason);
  pending.clear();
}

namespace {

using pool_ptr = provider_pool_actor::stateful_pointer<provider_pool_state>;

// Asks the current provider of `call` and either resolves the outcome now
// or parks the call until its delay has passed.
void attempt(pool_ptr self, pending_completion call);

void resolve(pool_ptr self, pending_completion call) {
  auto& st = self->state;
  auto& out = call.outcome;
  switch (out.what) {
    case provider_outcome::kind::reply:
      call.promise.deliver(std::move(out.reply));
      return;
    case provider_outcome::kind::crash:
      // Simulates a bug inside the pool: the exception handler fails every
      // in-flight completion, then the pool stops and is restarted.
      st.pending.emplace(st.next_id++, std::move(call));
      throw std::runtime_error("pool '" + st.pool
                               + "' crashed (scripted crash)");
    case provider_outcome::kind::failure:
      break;
  }
  auto& failed = *st.chain[call.provider_index];
  if (!call.failures.empty())
    call.failures += "; ";
  call.failures += failed.name() + ": " + render(out.error);
  if (++call.attempts >= st.max_attempts) {
    call.attempts = 0;
    ++call.provider_index;
  }
  if (call.provider_index >= st.chain.size()) {
    call.promise.deliver(caf::make_error(
      ec::provider_failed,
      "every provider of pool '" + st.pool + "' failed (" + call.failures + ")"));
    return;
  }
  attempt(self, std::move(call));
}

void attempt(pool_ptr self, pending_completion call) {
  auto& st = self->state;
  call.outcome = st.chain[call.provider_index]->complete(call.request);
  if (call.outcome.delay.count() == 0) {
    resolve(self, std::move(call));
    return;
  }
  auto id = st.next_id++;
  auto delay = call.outcome.delay;
  st.pending.emplace(id, std::move(call));
  self->delayed_send(self, delay, atom::deliver_v, id);
}

} // namespace

provider_pool_actor::behavior_type
provider_pool(provider_pool_actor::stateful_pointer<provider_pool_state> self,
              provider_pool_config cfg) {
  auto& st = self->state;
  st.pool = cfg.pool.name;
  st.max_attempts = std::max<uint32_t>(cfg.pool.max_attempts, 1);
  for (auto& pcfg : cfg.providers) {
    auto p = make_provider(pcfg);
    if (!p) {
      self->quit(p.error());
      return provider_pool_actor::behavior_type::make_empty_behavior();
    }
    st.chain.push_back(std::move(*p));
  }
  self->set_exception_handler([self](std::exception_ptr& ptr) -> caf::error {
    std::string what = "unknown exception";
    try {
      std::rethrow_exception(ptr);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
      // nop
    }
    auto err = caf::make_error(ec::provider_failed, what);
    self->state.fail_pending(err);
    return err;
  });
  // Stopped or killed by its supervisor: fail the completions in flight now
  // rather than leaving their threads to the turn timeout.
  self->set_exit_handler([self](caf::exit_msg& msg) {
    self->state.fail_pending(caf::make_error(
      ec::provider_failed, "pool '" + self->state.pool + "' stopped: "
                             + render(msg.reason)));
    self->quit(msg.reason);
  });
  return {
    [self](atom::complete, completion_request& req)
      -> caf::result<completion> {
      pending_completion call;
      call.promise = self->make_response_promise<completion>();
      call.request = std::move(req);
      auto rp = call.promise;
      attempt(self, std::move(call));
      return rp;
    },
    [self](atom::deliver, uint64_t id) {
      auto& pending = self->state.pending;
      auto i = pending.find(id);
      if (i == pending.end())
        return;
      auto call = std::move(i->second);
      pending.erase(i);
      resolve(self, std::move(call));
    },
  };
}

caf::expected<supervisor_config> providers_spec(const node_config& cfg) {
  supervisor_config sup;
  sup.name = "providers";
  for (auto& pool : cfg.pools) {
    auto resolved = resolve_pool(cfg, pool);
    if (!resolved)
      return resolved.error();
    child_spec spec;
    spec.id = pool.name;
    spec.start = [pcfg = std::move(*resolved)](caf::local_actor* parent) {
      return caf::actor_cast<caf::actor>(parent->spawn(provider_pool, pcfg));
    };
    sup.children.push_back(std::move(spec));
  }
  apply_settings(sup, cfg.supervision.providers);
  return sup;
}

} // namespace keel
