// The reader of model parameters (a provider's own keys, an agent's
// `model:` mapping) and the check that they fit the wires of the
// providers they go to.

#include <algorithm>

#include "config_parser.hpp"

namespace keel::config_detail {

using strict_yaml::describe;

void parser::read_model_params(const map_reader& m, model_params& out) {
  model_param_keys().read(*this, m, out);
  auto x = m.get("extra_body");
  if (!x)
    return;
  if (!x->IsMap())
    fail(m.line("extra_body"), m.path("extra_body"),
         "expected a mapping of request fields, got " + describe(*x));
  out.extra_body = json_object(*x, m.path("extra_body")).dump();
}

void parser::check_params_fit(const provider_config& provider,
                              const model_params& params,
                              const std::string& effort_path) const {
  if (provider.kind != "anthropic" || params.reasoning_effort.empty())
    return;
  // Anthropic's effort is low, medium or high; it has no "off" to send.
  for (auto effort : {"none", "minimal"})
    if (params.reasoning_effort == effort)
      fail(line(effort_path), effort_path,
           "provider " + quote(provider.name)
             + " is anthropic, whose effort is low, medium or high (got "
             + quote(params.reasoning_effort) + ")");
}

void parser::check_agent_params(const agent_config& agent,
                                const std::string& path,
                                const node_config& cfg) const {
  auto own = std::find_if(agent_pools_.begin(), agent_pools_.end(),
                          [&](auto& x) { return x.name == agent.pool; });
  auto pool = own != agent_pools_.end() ? &*own : cfg.find_pool(agent.pool);
  if (pool == nullptr)
    return; // check_agents names the unknown pool.
  for (auto& name : pool->chain)
    if (auto provider = cfg.find_provider(name))
      check_params_fit(*provider, agent.params,
                       path + ".model.reasoning_effort");
}

} // namespace keel::config_detail
