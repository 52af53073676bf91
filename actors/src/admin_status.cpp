#include "admin_api.hpp"

#include <algorithm>
#include <chrono>
#include <memory>

#include <caf/all.hpp>

#include "keel/gateway_policy.hpp"
#include "keel/json_codec.hpp"
#include "keel/lookup.hpp"
#include "keel/proc.hpp"
#include "keel/protocol.hpp"
#include "keel/provider_pool.hpp"
#include "keel/run_slots.hpp"
#include "keel/text.hpp"

namespace keel::admin {

namespace {

// The node's own memory figures; zeros when /proc cannot be read.
memory_usage own_memory() {
  auto mem = read_memory_usage();
  return mem ? *mem : memory_usage{};
}

/// The orchestrator's counts of conversations.
struct conversation_counts {
  uint64_t active;
  uint64_t passivations;
  uint64_t evictions;
};

// The body of GET /api/v1/status, from the orchestrator's counts of
// conversations and the persistence counters.
nlohmann::json status_body(const gateway_bridge_config& cfg,
                           const conversation_counts& counts,
                           const persistence_stats& ps) {
  auto gw = cfg.server->stats();
  auto uptime = std::chrono::steady_clock::now() - cfg.started;
  auto mem = own_memory();
  // User plus system CPU seconds since the node started (0 when /proc
  // cannot say), so that a client can compute CPU per message.
  auto cpu = read_cpu_seconds();
  return {
    {"node", cfg.node_name},
    {"version", KEEL_VERSION},
    {"protocol", protocol::version},
    {"uptime_ms",
     std::chrono::duration_cast<std::chrono::milliseconds>(uptime).count()},
    {"threads",
     {{"active", counts.active},
      {"passivations", counts.passivations},
      {"evictions", counts.evictions},
      {"stored", ps.sessions},
      {"quarantined", ps.quarantined_threads}}},
    {"gateway",
     {{"connections_open", gw.connections_open},
      {"connections_total", gw.connections_total},
      {"frames_in", gw.frames_in},
      {"frames_out", gw.frames_out},
      {"bad_frames", gw.bad_frames},
      {"slow_client_disconnects", gw.slow_client_disconnects},
      {"rate_limited_frames", gw.rate_limited_frames}}},
    {"store",
     {{"flushes", ps.flushes},
      {"staged_operations", ps.staged_operations},
      {"failed_flushes", ps.failed_flushes}}},
    {"tools",
     {{"running", tool_run_slots().running()},
      {"waiting", tool_run_slots().waiting()},
      {"max_concurrent", tool_run_slots().limit()}}},
    {"rss_bytes", mem.rss_bytes},
    {"peak_rss_bytes", mem.peak_rss_bytes},
    {"cpu_seconds", cpu ? *cpu : 0.0},
    {"data_dir", cfg.data_dir},
  };
}

// Answers the status body, with the cluster's figures on a cluster node.
void respond_status(self_ptr self, uint64_t request, nlohmann::json body) {
  auto cluster = lookup<cluster_actor>(self->system(), names::cluster);
  if (!cluster) {
    respond_json(self, request, 200, body);
    return;
  }
  self->request(cluster, std::chrono::seconds{10}, atom::stats_v)
    .then(
      [self, request, body](cluster_status& c) mutable {
        body["cluster"] = cluster_json(c);
        respond_json(self, request, 200, body);
      },
      [self, request, body](caf::error& err) mutable {
        body["cluster"] = {{"error", render(err)}};
        respond_json(self, request, 200, body);
      });
}

/// What a tree request asks for: below each supervisor, at most `limit`
/// children whose path contains `filter` or has a descendant whose does.
struct tree_request {
  size_t limit = default_page_rows;
  std::string filter;
};

/// True if `x`, at `path`, is shown for `filter`: its path or a
/// descendant's contains it.
bool tree_matches(const child_info& x, const std::string& path,
                  const std::string& filter) {
  if (filter.empty() || path.find(filter) != std::string::npos)
    return true;
  for (auto& child : x.children)
    if (tree_matches(child, path + "/" + child.id, filter))
      return true;
  return false;
}

/// `x` at `path` as the API shows it: its matching children up to the
/// limit, and `children_total`, how many match in all (the rest are left
/// out, so a supervisor of 100,000 conversations costs a page, not them
/// all).
nlohmann::json to_json(const child_info& x, const std::string& path,
                       const tree_request& req) {
  nlohmann::json children = nlohmann::json::array();
  size_t total = 0;
  for (auto& child : x.children) {
    auto child_path = path + "/" + child.id;
    if (!tree_matches(child, child_path, req.filter))
      continue;
    if (++total <= req.limit)
      children.push_back(to_json(child, child_path, req));
  }
  return {
    {"id", x.id},
    {"state", x.state},
    {"supervisor", x.supervisor},
    {"restarts", x.restarts},
    {"last_exit", x.last_exit},
    {"uptime_ms",
     std::chrono::duration_cast<std::chrono::milliseconds>(x.uptime).count()},
    {"children", std::move(children)},
    {"children_total", total}};
}

// An RFC 3339 time, or null for a time that never was (0).
nlohmann::json time_or_null(millis t) {
  return t != 0 ? nlohmann::json(rfc3339_utc(t)) : nlohmann::json(nullptr);
}

nlohmann::json health_json(const provider_health_record& x) {
  auto j = to_json(x);
  // Operators read times; wall-clock milliseconds stay for scripts.
  j["last_success_at"] = time_or_null(x.last_success);
  j["last_failure_at"] = time_or_null(x.last_failure);
  j["circuit_open_until"] = time_or_null(x.cooldown_until);
  j["cooldown_remaining_ms"]
    = x.cooldown_until != 0
        ? std::max<millis>(0, x.cooldown_until - wall_clock_millis())
        : 0;
  return j;
}

} // namespace

// GET /api/v1/status: the node's figures (see `status_body`).
void on_status(self_ptr self, const call& c) {
  auto request = c.request;
  auto orch = lookup<orchestrator_actor>(self->system(), names::orchestrator);
  auto db = lookup<persistence_actor>(self->system(), names::persistence);
  if (!orch || !db) {
    respond_error(self, request, 503, to_string(ec::unavailable),
                  "a node component is restarting");
    return;
  }
  auto timeout = std::chrono::seconds{10};
  self->request(orch, timeout, atom::stats_v)
    .then(
      [self, request, db, timeout](uint64_t active, uint64_t passivations,
                                   uint64_t evictions) {
        conversation_counts counts{active, passivations, evictions};
        self->request(db, timeout, atom::stats_v)
          .then(
            [self, request, counts](persistence_stats& ps) {
              respond_status(self, request,
                             status_body(self->state.cfg, counts, ps));
            },
            [self, request](caf::error& err) {
              respond_unavailable(self, request, err);
            });
      },
      [self, request](caf::error& err) {
        respond_unavailable(self, request, err);
      });
}

// GET /api/v1/tree?limit=&filter=: the live supervision tree from the
// root down, each supervisor's children paged (see `tree_request`).
void on_tree(self_ptr self, const call& c) {
  auto page = read_page(self, c);
  if (!page)
    return;
  tree_request req{page->limit, query_param(c.target, "filter").value_or("")};
  auto request = c.request;
  auto root = lookup<supervisor_actor>(self->system(), names::root);
  if (!root) {
    respond_error(self, request, 503, to_string(ec::unavailable),
                  "the root supervisor is not running");
    return;
  }
  self->request(root, std::chrono::seconds{10}, atom::children_v)
    .then(
      [self, request, req](std::vector<child_info>& children) {
        child_info top;
        top.id = "root";
        top.state = "running";
        top.supervisor = true;
        top.uptime = std::chrono::steady_clock::now() - self->state.cfg.started;
        top.children = std::move(children);
        respond_json(self, request, 200,
                     {{"node", self->state.cfg.node_name},
                      {"tree", to_json(top, "", req)}});
      },
      [self, request](caf::error& err) {
        respond_unavailable(self, request, err);
      });
}

// GET /api/v1/providers: the live health of every provider of every pool,
// asked of each pool's router (through the supervisors, so a restarting
// router answers once it is back).
void on_providers(self_ptr self, const call& c) {
  auto request = c.request;
  auto providers = lookup<caf::actor>(self->system(), names::providers);
  if (!providers) {
    respond_error(self, request, 503, to_string(ec::unavailable),
                  "the providers supervisor is restarting");
    return;
  }
  struct gathered {
    nlohmann::json pools = nlohmann::json::array();
    size_t left = 0;
  };
  auto acc = std::make_shared<gathered>();
  auto& pools = self->state.cfg.pools;
  acc->left = pools.size();
  auto done = [self, request, acc] {
    if (--acc->left == 0)
      respond_json(self, request, 200,
                   {{"node", self->state.cfg.node_name},
                    {"pools", std::move(acc->pools)}});
  };
  for (auto& pool : pools)
    self
      ->request(providers, std::chrono::seconds{10}, atom::forward_v, pool,
                caf::make_message(atom::forward_v, std::string{router_child_id},
                                  caf::make_message(atom::health_v)))
      .then(
        [acc, done, pool](std::vector<provider_health_record>& records) {
          auto list = nlohmann::json::array();
          for (auto& rec : records)
            list.push_back(health_json(rec));
          acc->pools.push_back({{"pool", pool}, {"providers", list}});
          done();
        },
        [acc, done, pool](caf::error& err) {
          acc->pools.push_back({{"pool", pool}, {"error", render(err)}});
          done();
        });
}

// GET /api/v1/recovery: the report of the last recovery on boot.
void on_recovery(self_ptr self, const call& c) {
  auto request = c.request;
  request_component(self, names::persistence, std::chrono::seconds{10},
                    atom::report_v)
    .then(
      [self, request](recovery_report& report) {
        respond_json(self, request, 200, to_json(report));
      },
      [self, request](caf::error& err) {
        respond_refused(self, request, err);
      });
}

} // namespace keel::admin
