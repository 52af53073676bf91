// The provider pool's configuration and supervision tree: one supervisor
// per pool over its router and its providers' workers.

#include "keel/provider_pool.hpp"

#include <caf/all.hpp>

#include "keel/config_secrets.hpp"

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
