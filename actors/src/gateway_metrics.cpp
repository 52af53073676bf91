// GET /metrics: the node's metrics in the Prometheus text format. The
// counters and histograms are recorded where things happen; the gauges are
// set here from the components' own figures, asked at each scrape.

#include <algorithm>
#include <functional>
#include <memory>

#include <caf/all.hpp>

#include "keel/gateway_bridge.hpp"
#include "keel/lookup.hpp"
#include "keel/provider_pool.hpp"

namespace keel {

namespace {

using self_ptr = gateway_bridge_actor::stateful_pointer<gateway_bridge_state>;

/// How long a scrape waits for each component; one that does not answer
/// in time keeps its gauges' last values.
constexpr auto scrape_timeout = std::chrono::seconds{5};

/// One scrape: the figures gathered so far and the answers still due.
struct scrape {
  metrics_snapshot snap;
  size_t left = 1;
  std::function<void(const metrics_snapshot&)> done;

  /// Expects one more answer.
  void expect() {
    ++left;
  }

  /// One answer (or failure) came in.
  void answered() {
    if (--left == 0)
      done(snap);
  }
};

breaker_gauge breaker_of(const std::string& state) {
  if (state == "open")
    return breaker_gauge::open;
  if (state == "half_open")
    return breaker_gauge::half_open;
  return breaker_gauge::closed;
}

void ask_conversations(self_ptr self, std::shared_ptr<scrape> s) {
  s->expect();
  request_component(self, names::orchestrator, scrape_timeout, atom::stats_v)
    .then(
      [s](uint64_t live, uint64_t, uint64_t) {
        s->snap.live_conversations = live;
        s->answered();
      },
      [s](caf::error&) { s->answered(); });
}

void ask_store(self_ptr self, std::shared_ptr<scrape> s) {
  s->expect();
  request_component(self, names::persistence, scrape_timeout, atom::stats_v)
    .then(
      [s](persistence_stats& ps) {
        s->snap.stored_threads = ps.sessions;
        s->answered();
      },
      [s](caf::error&) { s->answered(); });
}

void ask_dead_letters(self_ptr self, std::shared_ptr<scrape> s) {
  s->expect();
  request_component(self, names::dead_letters, scrape_timeout,
                    atom::dead_letters_v)
    .then(
      [s](std::vector<dead_letter>& letters) {
        s->snap.dead_letters_pending = std::count_if(
          letters.begin(), letters.end(), [](const dead_letter& x) {
            return x.status == dead_letter_status::pending;
          });
        s->answered();
      },
      [s](caf::error&) { s->answered(); });
}

void ask_breakers(self_ptr self, std::shared_ptr<scrape> s) {
  auto providers = lookup<caf::actor>(self->system(), names::providers);
  if (!providers)
    return;
  for (auto& pool : self->state.cfg.pools) {
    s->expect();
    self
      ->request(providers, scrape_timeout, atom::forward_v, pool,
                caf::make_message(atom::forward_v, std::string{router_child_id},
                                  caf::make_message(atom::health_v)))
      .then(
        [s](std::vector<provider_health_record>& records) {
          for (auto& rec : records)
            s->snap.breakers[rec.provider] = breaker_of(rec.breaker);
          s->answered();
        },
        [s](caf::error&) { s->answered(); });
  }
}

} // namespace

void respond_metrics(self_ptr self, uint64_t request) {
  auto s = std::make_shared<scrape>();
  auto server = self->state.cfg.server;
  auto gw = server->stats();
  s->snap.connections_open = gw.connections_open;
  s->snap.connections_total = gw.connections_total;
  s->snap.queued_bytes = gw.queued_bytes;
  auto& metrics = metrics_of(self->system());
  s->done = [server, request, &metrics](const metrics_snapshot& snap) {
    metrics.update(snap);
    server->respond(request, 200, node_metrics::content_type(),
                    metrics.exposition());
  };
  ask_conversations(self, s);
  ask_store(self, s);
  ask_dead_letters(self, s);
  ask_breakers(self, s);
  s->answered();
}

} // namespace keel
