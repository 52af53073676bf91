// The supervisor's configuration: names of its enums, settings applied to
// a configuration, and the validation of one.

#include "keel/supervisor.hpp"

#include <string>
#include <unordered_set>

#include <caf/all.hpp>

#include "keel/error.hpp"

namespace keel {

namespace {

caf::error invalid(const supervisor_config& cfg, const std::string& what) {
  return caf::make_error(ec::config_invalid,
                         "supervisor '" + cfg.name + "': " + what);
}

caf::error validate_spec(const supervisor_config& cfg, const child_spec& spec,
                         const std::string& field) {
  auto& b = spec.backoff;
  if (b.initial < caf::timespan{0})
    return invalid(cfg, field + ".backoff.initial: must not be negative");
  if (b.max < b.initial)
    return invalid(cfg, field + ".backoff.max: must be at least initial");
  if (!(b.multiplier >= 1.0))
    return invalid(cfg, field + ".backoff.multiplier: must be at least 1");
  if (!(b.jitter >= 0.0 && b.jitter <= 1.0))
    return invalid(cfg, field + ".backoff.jitter: must be in 0..1");
  if (b.reset_after < caf::timespan{0})
    return invalid(cfg, field + ".backoff.reset_after: must not be negative");
  auto sd = spec.effective_shutdown();
  if (sd.kind == shutdown_spec::timeout && sd.after <= caf::timespan{0})
    return invalid(cfg, field + ".shutdown: timeout must be positive");
  return caf::none;
}

} // namespace

std::string to_string(restart_type x) {
  switch (x) {
    case restart_type::permanent: return "permanent";
    case restart_type::transient: return "transient";
    case restart_type::temporary: return "temporary";
  }
  return "unknown";
}

const char* to_string(child_status x) {
  switch (x) {
    case child_status::running: return "running";
    case child_status::restarting: return "restarting";
    case child_status::stopping: return "stopping";
    case child_status::stopped: return "stopped";
  }
  return "unknown";
}

bool is_normal_exit(const caf::error& reason) {
  if (!reason || reason == caf::exit_reason::normal
      || reason == caf::exit_reason::user_shutdown)
    return true;
  return reason.category() == error_category
         && reason.code() == static_cast<uint8_t>(ec::shutdown);
}

void apply_settings(supervisor_config& cfg, const supervisor_settings& s) {
  cfg.strategy = s.strategy;
  cfg.max_restarts = s.max_restarts;
  cfg.period = s.period;
  auto apply = [&](child_spec& spec) {
    spec.buffer = s.buffer;
    spec.backoff = s.backoff;
    if (!spec.supervisor)
      spec.shutdown = shutdown_spec::with_timeout(s.shutdown_timeout);
  };
  for (auto& spec : cfg.children)
    apply(spec);
  apply(cfg.child_template);
}

caf::error validate(const supervisor_config& cfg) {
  if (cfg.name.empty())
    return caf::make_error(ec::config_invalid, "supervisor: name: empty");
  if (cfg.period <= caf::timespan{0})
    return invalid(cfg, "period: must be positive");
  if (cfg.dynamic) {
    if (!cfg.children.empty())
      return invalid(cfg, "children: a dynamic supervisor has none");
    if (!cfg.dynamic_start)
      return invalid(cfg, "dynamic_start: missing");
    if (cfg.child_template.registry_name)
      return invalid(cfg, "child_template.registry_name: dynamic children "
                          "cannot share one registry name");
    return validate_spec(cfg, cfg.child_template, "child_template");
  }
  std::unordered_set<std::string> ids;
  std::unordered_set<caf::atom_value> names;
  for (size_t i = 0; i < cfg.children.size(); ++i) {
    auto& spec = cfg.children[i];
    auto field = "children[" + std::to_string(i) + "]";
    if (spec.id.empty() || spec.id.find('/') != std::string::npos)
      return invalid(cfg, field + ".id: must be non-empty without '/'");
    if (!ids.insert(spec.id).second)
      return invalid(cfg, field + ".id: duplicate id '" + spec.id + "'");
    if (spec.registry_name && !names.insert(*spec.registry_name).second)
      return invalid(cfg, field + ".registry_name: duplicate");
    if (!spec.start)
      return invalid(cfg, field + ".start: missing");
    if (auto err = validate_spec(cfg, spec, field))
      return err;
  }
  return caf::none;
}

} // namespace keel
