#pragma once

// The admin API (`/api/v1/...`), answered by the gateway bridge: the route
// table (admin_api.cpp) and the endpoints by area (admin_status.cpp,
// admin_agents.cpp, admin_definitions.cpp, admin_cluster.cpp,
// admin_chaos.cpp, admin_dlq.cpp).
// What the endpoints answer: docs/protocol.md, "HTTP endpoints".

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>

#include <caf/error.hpp>
#include <nlohmann/json.hpp>

#include "keel/gateway_bridge.hpp"

namespace keel::admin {

using self_ptr = gateway_bridge_actor::stateful_pointer<gateway_bridge_state>;

/// One request of the admin API.
struct call {
  /// The server's id of the request, to answer it.
  uint64_t request;
  std::string method;
  /// The request target, query included.
  std::string target;
  /// The target without its query.
  std::string path;
  std::string body;
};

// -- answers ------------------------------------------------------------------

void respond_json(self_ptr self, uint64_t request, unsigned status,
                  const nlohmann::json& body);

/// API errors use the protocol's error object, like the gateway's own.
void respond_error(self_ptr self, uint64_t request, unsigned status,
                   const std::string& code, const std::string& message);

/// A node component failed to answer: 503 with the rendered error.
void respond_unavailable(self_ptr self, uint64_t request,
                         const caf::error& err);

/// A component refused: 404 if what was asked for is not there, 409 if the
/// request conflicts with its state, else 503.
void respond_refused(self_ptr self, uint64_t request, const caf::error& err);

/// 404 for a path below a prefix that names no endpoint, saying which
/// ones there are (`expected`).
void respond_no_endpoint(self_ptr self, const call& c, const char* expected);

// -- request bodies -----------------------------------------------------------

/// A field of an API request body and the JSON type it must have when given.
struct api_field {
  const char* name;
  nlohmann::json::value_t type;
  bool required;
};

/// Parses an API request body: a JSON object whose `fields` have their
/// types. Anything else is answered with 400 naming what was wrong (and the
/// result is discarded).
nlohmann::json read_body(self_ptr self, uint64_t request,
                         const std::string& body,
                         std::initializer_list<api_field> fields);

// -- paged lists --------------------------------------------------------------

/// Rows a list answers when the request gives no `limit`, and the most it
/// answers whatever the request asks.
constexpr size_t default_page_rows = 100;
constexpr size_t max_page_rows = 1000;

/// What a list request asks for: `?limit=N` (1 or more; above
/// `max_page_rows` it is capped) and `?after=CURSOR`, the `next` of the
/// previous page ("": the first page).
struct page_request {
  size_t limit = default_page_rows;
  std::string after;
};

/// The paging of `c`; a bad `limit` is answered with 400 and gives none.
std::optional<page_request> read_page(self_ptr self, const call& c);

/// The `next` of a list answer: the cursor of the page after this one, or
/// null on the last page.
nlohmann::json next_cursor(const std::optional<std::string>& cursor);

// -- the endpoints ------------------------------------------------------------

// admin_status.cpp
void on_status(self_ptr self, const call& c);
void on_tree(self_ptr self, const call& c);
void on_providers(self_ptr self, const call& c);
void on_recovery(self_ptr self, const call& c);

// admin_agents.cpp
void on_agents(self_ptr self, const call& c);
/// POST /api/v1/agents/THREAD/pause|resume (`rest`: the path after
/// /api/v1/agents/).
void on_agent_action(self_ptr self, const call& c, const std::string& rest);
/// GET /api/v1/tasks/THREAD/SEQ.
void on_task(self_ptr self, const call& c, const std::string& rest);

// admin_definitions.cpp
void on_agent_definitions(self_ptr self, const call& c);
/// POST /api/v1/agent-definitions/NAME/status.
void on_agent_definition(self_ptr self, const call& c, const std::string& rest);
void on_usage(self_ptr self, const call& c);

// admin_cluster.cpp
void on_cluster(self_ptr self, const call& c);
void on_drain(self_ptr self, const call& c);

// admin_chaos.cpp
void on_disk_chaos(self_ptr self, const call& c);
void on_kill(self_ptr self, const call& c);
void on_wedge(self_ptr self, const call& c);

// admin_dlq.cpp
void on_dead_letters(self_ptr self, const call& c);
/// GET /api/v1/dlq/FROM/SEQ, POST .../retry|drop.
void on_dead_letter(self_ptr self, const call& c, const std::string& rest);
void on_notifications(self_ptr self, const call& c);

/// The cluster's figures as GET /api/v1/cluster answers them (also part of
/// GET /api/v1/status on a cluster node).
nlohmann::json cluster_json(const cluster_status& c);

} // namespace keel::admin
