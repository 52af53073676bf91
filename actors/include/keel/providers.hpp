#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <caf/typed_event_based_actor.hpp>

#include "keel/actors.hpp"
#include "keel/config.hpp"
#include "keel/provider.hpp"
#include "keel/supervisor.hpp"

namespace keel {

/// Configuration of one pool actor: the pool and its providers, resolved.
struct provider_pool_config {
  pool_config pool;
  std::vector<provider_config> providers;
};

/// Resolves a pool's chain against the node's providers. Fails with
/// `ec::config_invalid` if a chain entry names no provider.
caf::expected<provider_pool_config> resolve_pool(const node_config& cfg,
                                                 const pool_config& pool);

/// A completion waiting for its provider's (simulated) latency.
struct pending_completion {
  caf::typed_response_promise<completion> promise;
  completion_request request;
  /// Index in the chain of the provider being tried.
  size_t provider_index = 0;
  /// Attempts made on that provider.
  uint32_t attempts = 0;
  /// The outcome due when the delay ends.
  provider_outcome outcome;
  /// Errors of earlier providers, for the final message.
  std::string failures;
};

/// State of a provider pool actor.
struct provider_pool_state {
  static inline const char* name = "keel.provider_pool";

  /// The pool's name.
  std::string pool;
  /// Providers in failover order.
  std::vector<std::unique_ptr<provider>> chain;
  /// Attempts per provider.
  uint32_t max_attempts = 1;
  /// Completions waiting for their delay, by id.
  std::map<uint64_t, pending_completion> pending;
  /// Next completion id.
  uint64_t next_id = 1;

  /// Fails every pending completion (the pool is going down).
  void fail_pending(const caf::error& reason);
};

/// A provider pool: tries providers in chain order. A scripted `crash`
/// outcome throws; the exception fails this pool's in-flight completions
/// and stops the pool, which its supervisor restarts.
provider_pool_actor::behavior_type
provider_pool(provider_pool_actor::stateful_pointer<provider_pool_state> self,
              provider_pool_config cfg);

/// The providers supervisor's configuration: one child per configured pool
/// (a provider_pool actor named after the pool), with the node's
/// `supervision.providers` settings. Fails with `ec::config_invalid` if a
/// pool names an unknown provider.
caf::expected<supervisor_config> providers_spec(const node_config& cfg);

} // namespace keel
