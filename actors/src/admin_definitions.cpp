#include "admin_api.hpp"

#include <chrono>
#include <map>
#include <optional>

#include <caf/all.hpp>

#include "keel/agent_catalog.hpp"
#include "keel/gateway_policy.hpp"
#include "keel/json_codec.hpp"
#include "keel/lookup.hpp"

// The node's agent definitions, their statuses and their threads' token
// usage: what `keelctl agents` and `keelctl usage` show.

namespace keel::admin {

namespace {

nlohmann::json usage_json(const usage_count& x) {
  return {{"input_tokens", x.input_tokens},
          {"output_tokens", x.output_tokens},
          {"model_calls", x.model_calls},
          {"estimated_calls", x.estimated_calls}};
}

// What the stored sessions say about the agents: threads and usage each.
struct agent_figures {
  uint64_t stored_threads = 0;
  usage_count usage;
};

std::map<std::string, agent_figures>
figures_of(const std::vector<session_record>& sessions) {
  std::map<std::string, agent_figures> result;
  for (auto& rec : sessions) {
    auto& x = result[agent_of(rec)];
    ++x.stored_threads;
    x.usage += rec.usage;
  }
  return result;
}

nlohmann::json definition_json(const agent_catalog& catalog,
                               const agent_config& agent,
                               const agent_figures& figures) {
  auto settings = catalog.find(agent.name);
  return {
    {"name", agent.name},
    {"description", agent.description},
    {"status",
     agent_status_names[static_cast<size_t>(catalog.status(agent.name))]},
    {"configured_status",
     agent_status_names[static_cast<size_t>(agent.status)]},
    {"pool", agent.pool},
    {"prompt_files", agent.prompt_files},
    {"spawns", agent.spawns},
    {"default", agent.name == catalog.default_agent()},
    {"system", agent.name == catalog.system_agent()},
    {"live_threads", catalog.live_threads(agent.name)},
    {"stored_threads", figures.stored_threads},
    {"usage", usage_json(figures.usage)},
    {"turn_timeout_ms",
     std::chrono::duration_cast<std::chrono::milliseconds>(agent.turn_timeout)
       .count()},
    {"tools", settings ? settings->root_tools.size() : 0}};
}

// Reads every stored session, then calls `then` with them.
template <class F>
void with_sessions(self_ptr self, uint64_t request, F then) {
  request_component(self, names::persistence, std::chrono::seconds{30},
                    atom::agents_v)
    .then([then](std::vector<session_record>& sessions,
                 std::vector<tree_link>&) mutable { then(sessions); },
          [self, request](caf::error& err) {
            respond_unavailable(self, request, err);
          });
}

} // namespace

// GET /api/v1/agent-definitions: every agent with its status, its live and
// stored threads and their usage.
void on_agent_definitions(self_ptr self, const call& c) {
  auto catalog = self->state.cfg.agents;
  if (!catalog) {
    respond_json(self, c.request, 200, {{"agents", nlohmann::json::array()}});
    return;
  }
  with_sessions(self, c.request,
                [self, catalog,
                 request = c.request](std::vector<session_record>& sessions) {
                  auto figures = figures_of(sessions);
                  auto list = nlohmann::json::array();
                  for (auto& agent : catalog->definitions())
                    list.push_back(
                      definition_json(*catalog, agent, figures[agent.name]));
                  respond_json(self, request, 200, {{"agents", list}});
                });
}

// POST /api/v1/agent-definitions/NAME/status {"status"}: stored, then in
// effect for the agent's next turns (a running turn finishes).
void on_agent_definition(self_ptr self, const call& c,
                         const std::string& rest) {
  auto slash = rest.find('/');
  auto catalog = self->state.cfg.agents;
  if (c.method != "POST" || slash == std::string::npos
      || rest.substr(slash + 1) != "status") {
    respond_no_endpoint(self, c, "POST /api/v1/agent-definitions/NAME/status");
    return;
  }
  auto name = rest.substr(0, slash);
  if (!catalog || !catalog->find(name)) {
    respond_error(self, c.request, 404, to_string(ec::unknown_agent),
                  "no agent '" + name + "' on this node");
    return;
  }
  using type = nlohmann::json::value_t;
  auto body = read_body(self, c.request, c.body,
                        {{"status", type::string, true}});
  if (body.is_discarded())
    return;
  auto text = body["status"].get<std::string>();
  auto status = parse_agent_status(text);
  if (!status) {
    respond_error(self, c.request, 400, "bad_request",
                  "status must be active, paused or archived, got '" + text
                    + "'");
    return;
  }
  request_component(self, names::persistence, std::chrono::seconds{30},
                    atom::agent_status_v, name, text)
    .then(
      [self, catalog, request = c.request, name, text,
       s = *status](caf::ok_atom) {
        catalog->set_status(name, s);
        respond_json(self, request, 200, {{"agent", name}, {"status", text}});
      },
      [self, request = c.request](caf::error& err) {
        respond_unavailable(self, request, err);
      });
}

namespace {

// The usage report of `sessions`: the node's total, each agent's (only
// `agent`'s if given) and, with `thread`, that thread's; none if `thread`
// is given and not among them.
std::optional<nlohmann::json>
usage_report(const std::vector<session_record>& sessions,
             const std::optional<std::string>& agent,
             const std::optional<std::string>& thread) {
  usage_count node;
  auto agents = nlohmann::json::object();
  auto threads = nlohmann::json::array();
  for (auto& [name, x] : figures_of(sessions))
    if (!agent || *agent == name)
      agents[name] = {{"threads", x.stored_threads},
                      {"usage", usage_json(x.usage)}};
  for (auto& rec : sessions) {
    node += rec.usage;
    if (thread && *thread == rec.thread)
      threads.push_back({{"thread", rec.thread},
                         {"agent", agent_of(rec)},
                         {"usage", usage_json(rec.usage)}});
  }
  if (thread && threads.empty())
    return std::nullopt;
  return nlohmann::json{
    {"node", usage_json(node)}, {"agents", agents}, {"threads", threads}};
}

} // namespace

// GET /api/v1/usage[?agent=A|thread=T]: the tokens of the stored turns, by
// node, agent and (with `thread`) thread.
void on_usage(self_ptr self, const call& c) {
  auto agent = query_param(c.target, "agent");
  auto thread = query_param(c.target, "thread");
  with_sessions(self, c.request,
                [self, request = c.request, agent,
                 thread](std::vector<session_record>& sessions) {
                  if (auto report = usage_report(sessions, agent, thread))
                    respond_json(self, request, 200, *report);
                  else
                    respond_error(self, request, 404, to_string(ec::not_found),
                                  "thread '" + *thread + "' does not exist");
                });
}

} // namespace keel::admin
