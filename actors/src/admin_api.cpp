#include "admin_api.hpp"

#include <algorithm>
#include <string_view>

#include "keel/gateway_policy.hpp"
#include "keel/protocol.hpp"
#include "keel/text.hpp"
#include "keel/units.hpp"

namespace keel {

namespace admin {

void respond_json(self_ptr self, uint64_t request, unsigned status,
                  const nlohmann::json& body) {
  self->state.cfg.server->respond(
    request, status, "application/json",
    body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}

void respond_error(self_ptr self, uint64_t request, unsigned status,
                   const std::string& code, const std::string& message) {
  self->state.cfg.server->respond(request, status, "application/json",
                                  protocol::error_frame(code, message));
}

void respond_unavailable(self_ptr self, uint64_t request,
                         const caf::error& err) {
  respond_error(self, request, 503, error_code_name(err), render(err));
}

void respond_refused(self_ptr self, uint64_t request, const caf::error& err) {
  auto status = err == ec::not_found                              ? 404
                : err == ec::conflict || err == ec::thread_closed ? 409
                                                                  : 503;
  respond_error(self, request, status, error_code_name(err),
                readable_message(err));
}

void respond_no_endpoint(self_ptr self, const call& c, const char* expected) {
  respond_error(self, c.request, 404, to_string(ec::not_found),
                "no endpoint " + c.method + " " + c.path + " (expected "
                  + expected + ")");
}

nlohmann::json read_body(self_ptr self, uint64_t request,
                         const std::string& body,
                         std::initializer_list<api_field> fields) {
  auto j = nlohmann::json::parse(body, nullptr, false);
  auto fail = [&](std::string message) {
    respond_error(self, request, 400, "bad_request", std::move(message));
    return nlohmann::json(nlohmann::json::value_t::discarded);
  };
  if (!j.is_object())
    return fail("the request body must be a JSON object");
  for (auto& field : fields) {
    auto i = j.find(field.name);
    using type_t = nlohmann::json::value_t;
    auto type = field.type == type_t::boolean           ? "a boolean"
                : field.type == type_t::number_unsigned ? "a whole number"
                                                        : "a string";
    if (i == j.end() && field.required)
      return fail(std::string{"missing field '"} + field.name + "'");
    if (i != j.end() && i->type() != field.type)
      return fail(std::string{"field '"} + field.name + "' must be " + type);
  }
  return j;
}

std::optional<page_request> read_page(self_ptr self, const call& c) {
  page_request result;
  if (auto after = query_param(c.target, "after"))
    result.after = std::move(*after);
  auto limit = query_param(c.target, "limit");
  if (!limit)
    return result;
  auto n = parse_digits(*limit);
  if (!n || *n == 0) {
    respond_error(self, c.request, 400, "bad_request",
                  "limit must be a whole number from 1 (at most "
                    + std::to_string(max_page_rows) + " rows are answered)");
    return std::nullopt;
  }
  result.limit = std::min<uint64_t>(*n, max_page_rows);
  return result;
}

nlohmann::json next_cursor(const std::optional<std::string>& cursor) {
  return cursor ? nlohmann::json(*cursor) : nlohmann::json(nullptr);
}

namespace {

// An endpoint of the admin API.
using handler = void (*)(self_ptr self, const call& c);

struct route {
  const char* method;
  const char* path;
  handler run;
};

// The admin API: method and path (the target without its query) to
// endpoint.
constexpr route routes[] = {
  {"GET", "/api/v1/status", on_status},
  {"GET", "/api/v1/tree", on_tree},
  {"GET", "/api/v1/providers", on_providers},
  {"GET", "/api/v1/recovery", on_recovery},
  {"GET", "/api/v1/agents", on_agents},
  {"GET", "/api/v1/agent-definitions", on_agent_definitions},
  {"GET", "/api/v1/usage", on_usage},
  {"GET", "/api/v1/cluster", on_cluster},
  {"POST", "/api/v1/cluster/drain", on_drain},
  {"POST", "/api/v1/chaos/disk", on_disk_chaos},
  {"POST", "/api/v1/kill", on_kill},
  {"POST", "/api/v1/chaos/wedge", on_wedge},
  {"GET", "/api/v1/dlq", on_dead_letters},
  {"GET", "/api/v1/notifications", on_notifications},
};

// An endpoint naming what it acts on in the path below its prefix (any
// method: the endpoint checks it).
using prefixed_handler = void (*)(self_ptr self, const call& c,
                                  const std::string& rest);

struct prefixed_route {
  std::string_view prefix;
  prefixed_handler run;
};

constexpr prefixed_route prefixed_routes[] = {
  {"/api/v1/dlq/", on_dead_letter},
  {"/api/v1/agents/", on_agent_action},
  {"/api/v1/agent-definitions/", on_agent_definition},
  {"/api/v1/tasks/", on_task},
};

} // namespace

} // namespace admin

void respond_admin(admin::self_ptr self, uint64_t request,
                   const std::string& method, const std::string& target,
                   const std::string& body) {
  admin::call c{request, method, target, target.substr(0, target.find('?')),
                body};
  if (c.path == "/metrics" && method == "GET") {
    respond_metrics(self, request);
    return;
  }
  for (auto& route : admin::prefixed_routes) {
    if (c.path.compare(0, route.prefix.size(), route.prefix) == 0) {
      route.run(self, c, c.path.substr(route.prefix.size()));
      return;
    }
  }
  for (auto& route : admin::routes) {
    if (c.path == route.path && method == route.method) {
      route.run(self, c);
      return;
    }
  }
  admin::respond_error(self, request, 404, to_string(ec::not_found),
                       "no endpoint " + method + " " + c.path);
}

} // namespace keel
