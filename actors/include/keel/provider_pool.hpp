#pragma once

// Provider pools (docs/providers.md). The providers supervisor has one child
// per pool; each pool is itself a supervisor (one_for_one) of
//
//   router        the pool's front door: failover chain, retry budget,
//                 backoff with Retry-After as a floor, circuit breakers and
//                 health (persisted, restored after a restart);
//   PROVIDER...   one worker per provider of the chain, making the calls
//                 (offline providers on the actor clock, HTTP providers on
//                 the node's `http_io` threads) and classifying outcomes.
//
// The router reaches a worker through the pool supervisor (`atom::forward`),
// so calls are held while a worker restarts; a crashed worker fails only its
// own in-flight calls, each with a classified error the router acts on.

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <caf/actor_clock.hpp>
#include <caf/typed_event_based_actor.hpp>

#include "keel/actors.hpp"
#include "keel/config.hpp"
#include "keel/deadline_set.hpp"
#include "keel/llm_client.hpp"
#include "keel/offline_provider.hpp"
#include "keel/provider_policy.hpp"
#include "keel/supervisor.hpp"

namespace keel {

/// Id of the router among a pool supervisor's children.
constexpr const char* router_child_id = "router";

/// The message a pool supervisor forwards to its router to complete `req`;
/// send it through the providers supervisor as
/// `(atom::forward, pool, complete_message(req))`.
caf::message complete_message(completion_request req);

/// The message a pool supervisor forwards to its router to cancel the
/// request answering message `seq` of `thread` (sent like
/// `complete_message`).
caf::message cancel_message(std::string thread, seq_t seq);

/// Configuration of one pool: the pool and its providers, resolved.
struct provider_pool_config {
  pool_config pool;
  std::vector<provider_config> providers;
  /// I/O threads for HTTP providers; null if the pool has none.
  std::shared_ptr<http_io> io;
  /// The node's secrets (`configured_secrets`), redacted from the error
  /// text the pool keeps, logs and tells.
  std::vector<std::string> secrets;
};

/// Resolves a pool's chain against the node's providers. Fails with
/// `ec::config_invalid` if a chain entry names no provider.
caf::expected<provider_pool_config> resolve_pool(const node_config& cfg,
                                                 const pool_config& pool);

// -- worker -------------------------------------------------------------------

/// State of a provider worker.
struct provider_worker_state {
  static inline const char* name = "keel.provider_worker";

  provider_config cfg;
  /// Set for offline kinds.
  std::unique_ptr<provider> offline;
  /// Set for HTTP kinds.
  std::shared_ptr<llm_endpoint> remote;
  /// Calls in flight, by id.
  std::map<uint64_t, caf::typed_response_promise<attempt_outcome>> pending;
  /// Offline calls that end in a (scripted) crash when their delay passes.
  std::map<uint64_t, std::string> crashing;
  /// The pool's request id of every call in flight, by id.
  std::map<uint64_t, uint64_t> pool_calls;
  /// Cancellers of HTTP calls in flight, by id.
  std::map<uint64_t, call_canceller> cancellers;
  uint64_t next_id = 1;

  /// Registers call `id`, answering `rp`, for the pool's request `call_id`.
  void track(uint64_t id, uint64_t call_id,
             caf::typed_response_promise<attempt_outcome> rp);
  /// Answers call `id` with `outcome` and forgets it.
  void answer(uint64_t id, attempt_outcome outcome);
  /// Cancels the calls for the pool's request `call_id`: an HTTP call is
  /// closed (and answers a failure when its handler runs); an offline one
  /// answers a failure now.
  void cancel(uint64_t call_id);

  /// Answers every call in flight with a failure of class `unknown` (the
  /// worker is going down: crashed, or `stopped` by its supervisor).
  void fail_pending(const std::string& why, bool stopped);
};

/// A worker making calls to the provider `cfg` (HTTP kinds on `io`).
provider_worker_actor::behavior_type provider_worker(
  provider_worker_actor::stateful_pointer<provider_worker_state> self,
  provider_config cfg, std::shared_ptr<http_io> io);

// -- router -------------------------------------------------------------------

/// One provider of the chain as the router sees it.
struct chain_link {
  provider_config provider;
  circuit_breaker breaker;
  uint64_t calls = 0;
  uint64_t failures = 0;
};

/// One request working its way through the chain.
struct pool_call {
  caf::typed_response_promise<completion> promise;
  completion_request request;
  /// Attempts left across the whole chain.
  retry_budget budget{0};
  /// Index of the provider being tried.
  size_t link = 0;
  /// Attempts made on that provider.
  uint32_t tries_here = 0;
  /// Attempts made in all (tags deltas; "attempt N" in status details).
  uint32_t attempt = 0;
  /// `max_tokens` for the next attempt on the current provider.
  uint32_t max_tokens = 0;
  /// True once a timeout on the current provider was retried.
  bool timeout_retried = false;
  /// Stream retries made on the current provider (`stream_retries`).
  uint32_t stream_retries = 0;
  /// The note for the model of the current provider's stream retry: why
  /// its last stream broke; empty if none was retried.
  std::string stream_note;
  /// True while an attempt is out (false while waiting for a retry delay).
  bool in_flight = false;
  /// When the request's time budget is spent, if it has one.
  std::optional<caf::actor_clock::time_point> deadline;
  /// Failures so far, "provider: what" joined by "; ".
  std::string failures;
  /// Class of the last failure.
  std::optional<error_class> last_class;
  /// The class every failure so far shared, counting providers skipped for
  /// an open breaker with the class that opened it; none once two
  /// differed (`classes_differ`).
  std::optional<error_class> shared_class;
  bool classes_differ = false;

  /// Moves on to the next provider of the chain, with fresh counters.
  void next_provider();

  /// Records a failure of class `cls` (`skipped`: a provider passed over
  /// because its breaker was opened by `cls`, which is not this call's
  /// last failure).
  void note_failure(error_class cls, bool skipped = false);

  /// The class of every failure of the call, if they all had the same.
  std::optional<error_class> common_class() const;
};

/// State of a pool's router.
struct provider_router_state {
  static inline const char* name = "keel.provider_router";

  std::string pool;
  pool_config cfg;
  std::vector<chain_link> chain;
  /// The pool supervisor, which forwards attempts to the workers.
  caf::actor workers;
  std::map<uint64_t, pool_call> calls;
  uint64_t next_id = 1;
  /// The deadlines of the attempts in flight (responses) and of the
  /// calls' time budgets (work: the call id), under one timer.
  deadline_set deadlines;
  std::mt19937_64 rng;
  /// Redacted from every failure's text before it is recorded.
  std::vector<std::string> secrets;

  /// Sets up the chain of pool `config`, each provider with a new breaker;
  /// `pool_supervisor` forwards attempts to the workers.
  void init(const provider_pool_config& config, caf::actor pool_supervisor);
  /// Fails every call (the router is going down).
  void fail_all(const caf::error& reason);
  /// The persistent form of link `i`'s health, with wall-clock times.
  provider_health_record health_record(size_t i,
                                       caf::actor_clock::time_point now) const;
  /// The health of every link, in chain order.
  std::vector<provider_health_record>
  health_records(caf::actor_clock::time_point now) const;
  /// Applies a persisted record to the matching link (if any).
  void restore(const provider_health_record& rec,
               caf::actor_clock::time_point now);
};

/// The router of pool `cfg`; `workers` is its pool supervisor.
provider_router_actor::behavior_type provider_router(
  provider_router_actor::stateful_pointer<provider_router_state> self,
  provider_pool_config cfg, caf::actor workers);

// -- supervisors --------------------------------------------------------------

/// The supervisor of one pool: the router, then one worker per provider,
/// with the node's `supervision.providers` settings.
supervisor_config pool_spec(const provider_pool_config& cfg,
                            const supervisor_settings& settings);

/// The providers supervisor's configuration: one pool supervisor per
/// configured pool, named after the pool. HTTP providers share `io` (may be
/// null when no provider speaks HTTP). Fails with `ec::config_invalid` if a
/// pool names an unknown provider.
caf::expected<supervisor_config> providers_spec(const node_config& cfg,
                                                std::shared_ptr<http_io> io);

/// Returns whether any configured provider speaks HTTP or any outbound
/// channel is configured (then the node needs an `http_io`).
bool needs_http(const node_config& cfg);

} // namespace keel
