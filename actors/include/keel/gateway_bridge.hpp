#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include <caf/typed_event_based_actor.hpp>

#include "keel/actors.hpp"
#include "keel/agent_catalog.hpp"
#include "keel/deadline_set.hpp"
#include "keel/request_budget.hpp"
#include "keel/store.hpp"
#include "keel/ws_server.hpp"

namespace keel {

/// Which connections follow which threads. Owned by the node, not by the
/// bridge actor, so a restarted bridge keeps every subscription. Only the
/// current bridge incarnation touches it.
struct subscription_table {
  /// Connections subscribed to each thread.
  std::unordered_map<std::string, std::unordered_set<connection_id>>
    subscribers;
  /// Threads each connection subscribed to (to clean up on close).
  std::unordered_map<connection_id, std::unordered_set<std::string>>
    subscriptions;

  void subscribe(connection_id conn, const std::string& thread);
  /// True when `conn` follows `thread` already or fewer than `max` threads.
  bool may_subscribe(connection_id conn, const std::string& thread,
                     size_t max) const;
  void unsubscribe(connection_id conn, const std::string& thread);
  void drop(connection_id conn);
};

/// Configuration of the gateway bridge.
struct gateway_bridge_config {
  /// The server the bridge answers through (owned by the node).
  std::shared_ptr<ws_server> server;
  /// Node name and data folder, for the status page.
  std::string node_name;
  std::string data_dir;
  /// When the node started.
  std::chrono::steady_clock::time_point started;
  /// The provider pools, for `GET /api/v1/providers`.
  std::vector<std::string> pools;
  /// The node's agents, for `/api/v1/agent-definitions` (their statuses
  /// change there); null: the node's one default agent.
  std::shared_ptr<const agent_catalog> agents;
  /// Thread subscriptions (outlive the bridge actor).
  std::shared_ptr<subscription_table> subscriptions
    = std::make_shared<subscription_table>();
  /// Which chaos endpoints answer (`POST /api/v1/kill`,
  /// `POST /api/v1/chaos/disk`); both off unless the node's `chaos:` says so.
  chaos_config chaos;
  /// The store's fault switches when `chaos.disk` is on (for
  /// `POST /api/v1/chaos/disk`); null otherwise.
  std::shared_ptr<fault_injection> disk_faults;
  /// Requests one connection may have under way
  /// (`gateway.max_requests_in_flight`).
  size_t max_requests_in_flight = 128;
  /// Threads one connection may follow
  /// (`gateway.max_subscriptions_per_connection`).
  size_t max_subscriptions = 1000;
  /// Timeout for a routed message to become durable.
  caf::timespan route_timeout = std::chrono::seconds{60};
};

/// State of the gateway bridge.
struct gateway_bridge_state {
  static inline const char* name = "keel.gateway_bridge";

  gateway_bridge_config cfg;
  /// The deadlines of the requests in flight, under one timer.
  deadline_set deadlines;
  /// The client requests under way, per connection.
  request_budget budget;

  /// The node's subscription table.
  subscription_table& subs() {
    return *cfg.subscriptions;
  }
};

/// Bridges the WebSocket server and the actors.
gateway_bridge_actor::behavior_type gateway_bridge(
  gateway_bridge_actor::stateful_pointer<gateway_bridge_state> self,
  gateway_bridge_config cfg);

/// Answers `request` (GET /metrics) with the node's metrics once the
/// components have given this scrape's gauges (or failed to in time).
void respond_metrics(
  gateway_bridge_actor::stateful_pointer<gateway_bridge_state> self,
  uint64_t request);

/// Answers `request`, a request of the admin API (`/api/v1/...`) or
/// GET /metrics: the endpoint of its method and path, 404 if none
/// (actors/src/admin_api.cpp).
void respond_admin(
  gateway_bridge_actor::stateful_pointer<gateway_bridge_state> self,
  uint64_t request, const std::string& method, const std::string& target,
  const std::string& body);

/// The `gateway_handler` the server calls on its I/O threads: forwards
/// everything to the current gateway bridge (found by name, so a restarted
/// bridge is found again). While no bridge runs, frames get an
/// `unavailable` error frame and HTTP requests a 503.
class bridge_handler : public gateway_handler {
public:
  explicit bridge_handler(caf::actor_system& sys);

  /// Set once the server exists (the server needs the handler first).
  void attach(std::weak_ptr<ws_server> server);

  void on_open(connection_id conn) override;
  void on_frame(connection_id conn, protocol::client_frame frame) override;
  void on_close(connection_id conn) override;
  void on_http(uint64_t request, const std::string& method,
               const std::string& target, const std::string& body) override;

private:
  caf::actor_system& sys_;
  std::weak_ptr<ws_server> server_;
};

} // namespace keel
