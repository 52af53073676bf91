#include "admin_api.hpp"

#include <chrono>

#include <caf/all.hpp>

#include "keel/lookup.hpp"
#include "keel/text.hpp"

namespace keel::admin {

namespace {

// Refuses a chaos endpoint that the node's configuration leaves off: 403
// naming the key that turns it on.
void respond_chaos_off(self_ptr self, uint64_t request, const char* endpoint,
                       const char* key) {
  respond_error(self, request, 403, "forbidden",
                std::string{endpoint} + " is off on this node (set " + key
                  + ": true in its configuration to allow it)");
}

// Asks the root supervisor to kill the actor at `relative` (below the root)
// and answers `request` with the outcome.
void kill_actor(self_ptr self, uint64_t request, const std::string& path,
                const std::string& relative, const std::string& reason) {
  auto root = lookup<supervisor_actor>(self->system(), names::root);
  if (!root || relative.empty()) {
    respond_error(self, request, root ? 400 : 503,
                  root ? "bad_request" : to_string(ec::unavailable),
                  root ? "the path names no actor below the root"
                       : "the root supervisor is not running");
    return;
  }
  if (relative == "gateway") {
    // Killing ourselves: nobody would be left to answer, so answer first.
    respond_json(self, request, 200, {{"path", path}, {"reason", reason}});
    caf::anon_send(root, atom::kill_child_v, relative,
                   caf::make_error(ec::killed, reason));
    return;
  }
  self
    ->request(root, std::chrono::seconds{10}, atom::kill_child_v, relative,
              caf::make_error(ec::killed, reason))
    .then(
      [self, request, path, reason](caf::ok_atom) {
        respond_json(self, request, 200, {{"path", path}, {"reason", reason}});
      },
      [self, request](caf::error& err) {
        respond_refused(self, request, err);
      });
}

} // namespace

// POST /api/v1/chaos/disk {"fail_writes": bool, "no_space": bool}: turns
// injected RocksDB write failures on or off (only with
// `chaos.disk: true`); answers the switches and the count of
// writes failed so far.
void on_disk_chaos(self_ptr self, const call& c) {
  auto request = c.request;
  auto& body = c.body;
  if (!self->state.cfg.chaos.disk) {
    respond_chaos_off(self, request, "POST /api/v1/chaos/disk", "chaos.disk");
    return;
  }
  auto& faults = self->state.cfg.disk_faults;
  if (!faults) {
    respond_error(self, request, 409, to_string(ec::conflict),
                  "disk fault injection is off (set chaos.disk: "
                  "true in the node's configuration)");
    return;
  }
  using type = nlohmann::json::value_t;
  auto j = read_body(self, request, body,
                     {{"fail_writes", type::boolean, false},
                      {"no_space", type::boolean, false}});
  if (j.is_discarded())
    return;
  // no_space first: a write failing between the two stores reports the
  // right kind of error.
  if (j.contains("no_space"))
    faults->no_space = j["no_space"].get<bool>();
  if (j.contains("fail_writes"))
    faults->fail_writes = j["fail_writes"].get<bool>();
  respond_json(self, request, 200,
               {{"fail_writes", faults->fail_writes.load()},
                {"no_space", faults->no_space.load()},
                {"failed_writes", faults->failed_writes.load()}});
}

// POST /api/v1/kill {"path": "/persistence", "reason": "..."}: the actor's
// supervisor sees an abnormal exit and applies its strategy. Only with
// `chaos.kill: true`.
void on_kill(self_ptr self, const call& c) {
  auto request = c.request;
  auto& body = c.body;
  if (!self->state.cfg.chaos.kill) {
    respond_chaos_off(self, request, "POST /api/v1/kill", "chaos.kill");
    return;
  }
  using type = nlohmann::json::value_t;
  auto j = read_body(self, request, body,
                     {{"path", type::string, true},
                      {"reason", type::string, false}});
  if (j.is_discarded())
    return;
  auto path = j["path"].get<std::string>();
  auto reason = j.value("reason", std::string{"killed by operator"});
  auto relative = path;
  while (!relative.empty() && relative.front() == '/')
    relative.erase(0, 1);
  kill_actor(self, request, path, relative, reason);
}

// POST /api/v1/chaos/wedge {"path": "/orchestrator", "ms": 2000}: blocks
// the orchestrator's worker that long, as a deadlocked handler would (the
// liveness check and the watchdog notice). Only with `chaos.kill: true`;
// answers at once.
void on_wedge(self_ptr self, const call& c) {
  auto request = c.request;
  auto& body = c.body;
  if (!self->state.cfg.chaos.kill) {
    respond_chaos_off(self, request, "POST /api/v1/chaos/wedge", "chaos.kill");
    return;
  }
  using type = nlohmann::json::value_t;
  auto j = read_body(self, request, body,
                     {{"path", type::string, true},
                      {"ms", type::number_unsigned, true}});
  if (j.is_discarded())
    return;
  auto path = j["path"].get<std::string>();
  if (path != "/orchestrator") {
    respond_error(self, request, 400, "bad_request",
                  "only /orchestrator can be wedged");
    return;
  }
  auto orch = lookup<orchestrator_actor>(self->system(), names::orchestrator);
  if (!orch) {
    respond_error(self, request, 503, to_string(ec::unavailable),
                  "the orchestrator is restarting");
    return;
  }
  auto ms = j["ms"].get<uint64_t>();
  self->send(orch, atom::wedge_v, caf::timespan{std::chrono::milliseconds{ms}});
  respond_json(self, request, 200, {{"path", path}, {"ms", ms}});
}

} // namespace keel::admin
