#include "admin_api.hpp"

#include <chrono>

#include <caf/all.hpp>

#include "keel/lookup.hpp"
#include "keel/text.hpp"

namespace keel::admin {

namespace {

// The cluster actor, or a 409 saying this node is not in a cluster.
cluster_actor cluster_or_refuse(self_ptr self, uint64_t request) {
  auto cluster = lookup<cluster_actor>(self->system(), names::cluster);
  if (!cluster)
    respond_error(self, request, 409, to_string(ec::conflict),
                  "this node is not in a cluster (cluster.enabled is false)");
  return cluster;
}

} // namespace

nlohmann::json cluster_json(const cluster_status& c) {
  auto members = nlohmann::json::array();
  for (auto& m : c.members)
    members.push_back({{"node", m.node_id},
                       {"incarnation", m.incarnation},
                       {"address", m.address},
                       {"state", m.state},
                       {"shards", m.shards},
                       {"since_renewal_ms", m.since_renewal_ms}});
  return {{"node", c.node_id},
          {"incarnation", c.incarnation},
          {"state", c.state},
          {"shards", c.shards},
          {"held", c.held},
          {"min_epoch", c.min_epoch},
          {"max_epoch", c.max_epoch},
          {"orphans", c.orphans},
          {"handoffs", c.handoffs},
          {"claimed", c.claimed},
          {"received", c.received},
          {"handed_over", c.handed_over},
          {"declared_dead", c.declared_dead},
          {"members", std::move(members)},
          {"owners", c.owners},
          {"epochs", c.epochs}};
}

// GET /api/v1/cluster: members, their states and shards, this node's
// epochs.
void on_cluster(self_ptr self, const call& c) {
  auto request = c.request;
  auto cluster = cluster_or_refuse(self, request);
  if (!cluster)
    return;
  self->request(cluster, std::chrono::seconds{10}, atom::stats_v)
    .then(
      [self, request](cluster_status& c) {
        respond_json(self, request, 200, cluster_json(c));
      },
      [self, request](caf::error& err) {
        respond_unavailable(self, request, err);
      });
}

// POST /api/v1/cluster/drain {"node": "...", "force": false}: the member
// hands its shards away and takes none.
void on_drain(self_ptr self, const call& c) {
  auto request = c.request;
  auto& body = c.body;
  auto cluster = cluster_or_refuse(self, request);
  if (!cluster)
    return;
  using type = nlohmann::json::value_t;
  auto j = read_body(self, request, body,
                     {{"node", type::string, true},
                      {"force", type::boolean, false}});
  if (j.is_discarded())
    return;
  auto node = j["node"].get<std::string>();
  self
    ->request(cluster, std::chrono::seconds{10}, atom::drain_v, node,
              j.value("force", false))
    .then(
      [self, request, node](std::string& state) {
        respond_json(self, request, 200, {{"node", node}, {"state", state}});
      },
      [self, request](caf::error& err) {
        auto status = err == ec::not_found  ? 404
                      : err == ec::conflict ? 409
                                            : 503;
        respond_error(self, request, status, error_code_name(err),
                      readable_message(err));
      });
}

} // namespace keel::admin
