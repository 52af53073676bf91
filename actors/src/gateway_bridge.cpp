#include "keel/gateway_bridge.hpp"

#include <fstream>
#include <map>
#include <optional>
#include <utility>

#include <caf/all.hpp>
#include <nlohmann/json.hpp>

#include "keel/agent_tree.hpp"
#include "keel/json_codec.hpp"
#include "keel/lookup.hpp"
#include "keel/proc.hpp"
#include "keel/provider_pool.hpp"
#include "keel/run_slots.hpp"
#include "keel/text.hpp"

namespace keel {

void subscription_table::subscribe(connection_id conn,
                                   const std::string& thread) {
  // The two maps mirror each other: a connection already among the
  // thread's subscribers (every send after its first) changes neither.
  if (subscribers[thread].insert(conn).second)
    subscriptions[conn].insert(thread);
}

bool subscription_table::may_subscribe(connection_id conn,
                                       const std::string& thread,
                                       size_t max) const {
  auto i = subscriptions.find(conn);
  return i == subscriptions.end() || i->second.size() < max
         || i->second.count(thread) > 0;
}

void subscription_table::unsubscribe(connection_id conn,
                                     const std::string& thread) {
  if (auto i = subscribers.find(thread); i != subscribers.end()) {
    i->second.erase(conn);
    if (i->second.empty())
      subscribers.erase(i);
  }
  if (auto i = subscriptions.find(conn); i != subscriptions.end())
    i->second.erase(thread);
}

void subscription_table::drop(connection_id conn) {
  auto i = subscriptions.find(conn);
  if (i == subscriptions.end())
    return;
  for (auto& thread : i->second) {
    auto j = subscribers.find(thread);
    if (j == subscribers.end())
      continue;
    j->second.erase(conn);
    if (j->second.empty())
      subscribers.erase(j);
  }
  subscriptions.erase(i);
}

namespace {

using self_ptr = gateway_bridge_actor::stateful_pointer<gateway_bridge_state>;

// The node's own memory figures; zeros when /proc cannot be read.
memory_usage own_memory() {
  auto mem = read_memory_usage();
  return mem ? *mem : memory_usage{};
}

// Sends the answer to a request of `conn` and gives its slot back.
void answer(self_ptr self, connection_id conn, std::string frame,
            bool history = false) {
  self->state.budget.release(conn, history);
  if (history)
    self->state.cfg.server->send_answer(conn, std::move(frame));
  else
    self->state.cfg.server->send(conn, std::move(frame));
}

void send_error(self_ptr self, connection_id conn, const caf::error& err,
                const std::string& id, const std::string& thread,
                bool history = false) {
  answer(self, conn,
         protocol::error_frame(error_code_name(err), readable_message(err), id,
                               thread),
         history);
}

// Refuses a frame that would make `conn` follow one thread too many.
bool refuse_subscription(self_ptr self, connection_id conn,
                         const protocol::client_frame& f) {
  auto max = self->state.cfg.max_subscriptions;
  if (self->state.subs().may_subscribe(conn, f.thread, max))
    return false;
  answer(self, conn,
         protocol::error_frame(
           "subscription_limit",
           "this connection follows " + std::to_string(max)
             + " threads, the most gateway.max_subscriptions_per_connection "
               "allows; unsubscribe from one first",
           f.id, f.thread));
  return true;
}

// In a cluster, asks the owner of `thread` (if another node) to send this
// bridge the thread's events; `then` runs once the owner registered it (or
// could not be asked: the peers actor registers it when the owner changes).
void follow_remote(
  self_ptr self, const std::string& thread,
  std::function<void()> then = [] {}) {
  auto peers = lookup<caf::actor>(self->system(), names::peers);
  if (!peers) {
    then();
    return;
  }
  self->request(peers, self->state.cfg.route_timeout, atom::interest_v, thread)
    .then([then](caf::ok_atom) { then(); }, [then](caf::error&) { then(); });
}

// Counts an acknowledged message (a resent one only once) and the time
// from the frame's arrival to its ack.
void count_ack(caf::actor_system& sys,
               std::chrono::steady_clock::time_point taken,
               const accept_result& res) {
  auto& metrics = metrics_of(sys);
  std::chrono::duration<double> took = std::chrono::steady_clock::now() - taken;
  metrics.ack_latency(took.count());
  if (!res.duplicate)
    metrics.accepted();
}

void on_send(self_ptr self, connection_id conn, protocol::client_frame& f) {
  // Sending to a thread subscribes the connection to it, so the sender sees
  // its reply. The cap does not refuse a message: a client writing to many
  // threads over one connection (keel-bench, a bot serving its users) must
  // keep being answered; only `subscribe` frames are refused at the cap.
  self->state.subs().subscribe(conn, f.thread);
  auto taken = std::chrono::steady_clock::now();
  request_component(self, names::orchestrator, self->state.cfg.route_timeout,
                    atom::route_v, f.thread, f.id, std::move(f.text))
    .then(
      [self, conn, thread = f.thread, id = f.id, taken](accept_result& res) {
        answer(self, conn,
               protocol::ack_frame(thread, id, res.seq, res.duplicate));
        count_ack(self->system(), taken, res);
      },
      [self, conn, thread = f.thread, id = f.id](caf::error& err) {
        send_error(self, conn, err, id, thread);
      });
}

void on_spawn(self_ptr self, connection_id conn,
              const protocol::client_frame& f) {
  request_component(self, names::orchestrator, self->state.cfg.route_timeout,
                    atom::spawn_v, f.thread, f.child)
    .then(
      [self, conn, id = f.id](spawn_result& res) {
        answer(self, conn, protocol::spawned_frame(res, id));
      },
      [self, conn, thread = f.thread, id = f.id](caf::error& err) {
        send_error(self, conn, err, id, thread);
      });
}

void on_cancel(self_ptr self, connection_id conn,
               const protocol::client_frame& f) {
  request_component(self, names::orchestrator, self->state.cfg.route_timeout,
                    atom::cancel_v, f.thread)
    .then(
      [self, conn, thread = f.thread,
       id = f.id](std::vector<std::string>& threads) {
        answer(self, conn, protocol::cancelled_frame(thread, threads, id));
      },
      [self, conn, thread = f.thread, id = f.id](caf::error& err) {
        send_error(self, conn, err, id, thread);
      });
}

// Subscribes or unsubscribes the connection to the frame's thread.
void on_subscribe(self_ptr self, connection_id conn,
                  const protocol::client_frame& f, bool subscribe) {
  auto confirm = [self, conn, thread = f.thread, id = f.id, subscribe] {
    answer(self, conn, protocol::subscribed_frame(thread, subscribe, id));
  };
  if (!subscribe) {
    self->state.subs().unsubscribe(conn, f.thread);
    confirm();
    return;
  }
  // Confirmed once the thread's owner sends us its events: they flow from
  // the `subscribed` frame on, as the protocol says, on any node.
  if (refuse_subscription(self, conn, f))
    return;
  self->state.subs().subscribe(conn, f.thread);
  follow_remote(self, f.thread, confirm);
}

// A page is read and rendered only for a connection still there to take
// it, and charged to its rate limit by its bytes (`send_answer`).
void on_history(self_ptr self, connection_id conn,
                const protocol::client_frame& f) {
  auto& server = *self->state.cfg.server;
  if (!server.connected(conn)) {
    self->state.budget.release(conn, true);
    return;
  }
  request_component(self, names::persistence, std::chrono::seconds{30},
                    atom::history_v, f.thread, f.after,
                    static_cast<uint64_t>(f.limit))
    .then(
      [self, conn, id = f.id](history_page& page) {
        if (!self->state.cfg.server->connected(conn)) {
          self->state.budget.release(conn, true);
          return;
        }
        answer(self, conn, protocol::history_frame(id, page), true);
      },
      [self, conn, thread = f.thread, id = f.id](caf::error& err) {
        send_error(self, conn, err, id, thread, true);
      });
}

void respond_json(self_ptr self, uint64_t request, unsigned status,
                  const nlohmann::json& body) {
  self->state.cfg.server->respond(
    request, status, "application/json",
    body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}

// API errors use the protocol's error object, like the gateway's own.
void respond_error(self_ptr self, uint64_t request, unsigned status,
                   const std::string& code, const std::string& message) {
  self->state.cfg.server->respond(request, status, "application/json",
                                  protocol::error_frame(code, message));
}

// A node component failed to answer: 503 with the rendered error.
void respond_unavailable(self_ptr self, uint64_t request,
                         const caf::error& err) {
  respond_error(self, request, 503, error_code_name(err), render(err));
}

// A component refused: 404 if what was asked for is not there, 409 if the
// request conflicts with its state, else 503.
void respond_refused(self_ptr self, uint64_t request, const caf::error& err) {
  auto status = err == ec::not_found                              ? 404
                : err == ec::conflict || err == ec::thread_closed ? 409
                                                                  : 503;
  respond_error(self, request, status, error_code_name(err),
                readable_message(err));
}

/// The orchestrator's counts of conversations.
struct conversation_counts {
  uint64_t active;
  uint64_t passivations;
  uint64_t evictions;
};

// The body of GET /api/v1/status, from the orchestrator's counts of
// conversations and the persistence counters.
nlohmann::json to_json(const cluster_status& c) {
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
        body["cluster"] = to_json(c);
        respond_json(self, request, 200, body);
      },
      [self, request, body](caf::error& err) mutable {
        body["cluster"] = {{"error", render(err)}};
        respond_json(self, request, 200, body);
      });
}

// GET /api/v1/status: the node's figures (see `status_body`).
void on_status(self_ptr self, uint64_t request, const std::string&) {
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

nlohmann::json to_json(const child_info& x) {
  nlohmann::json children = nlohmann::json::array();
  for (auto& child : x.children)
    children.push_back(to_json(child));
  return {
    {"id", x.id},
    {"state", x.state},
    {"supervisor", x.supervisor},
    {"restarts", x.restarts},
    {"last_exit", x.last_exit},
    {"uptime_ms",
     std::chrono::duration_cast<std::chrono::milliseconds>(x.uptime).count()},
    {"children", std::move(children)}};
}

// GET /api/v1/tree: the live supervision tree from the root down.
void on_tree(self_ptr self, uint64_t request, const std::string&) {
  auto root = lookup<supervisor_actor>(self->system(), names::root);
  if (!root) {
    respond_error(self, request, 503, to_string(ec::unavailable),
                  "the root supervisor is not running");
    return;
  }
  self->request(root, std::chrono::seconds{10}, atom::children_v)
    .then(
      [self, request](std::vector<child_info>& children) {
        child_info top;
        top.id = "root";
        top.state = "running";
        top.supervisor = true;
        top.uptime = std::chrono::steady_clock::now() - self->state.cfg.started;
        top.children = std::move(children);
        respond_json(self, request, 200,
                     {{"node", self->state.cfg.node_name},
                      {"tree", to_json(top)}});
      },
      [self, request](caf::error& err) {
        respond_unavailable(self, request, err);
      });
}

nlohmann::json health_json(const provider_health_record& x) {
  auto j = to_json(x);
  // Operators read times; wall-clock milliseconds stay for scripts.
  j["cooldown_remaining_ms"]
    = x.cooldown_until != 0
        ? std::max<millis>(0, x.cooldown_until - wall_clock_millis())
        : 0;
  return j;
}

// GET /api/v1/providers: the live health of every provider of every pool,
// asked of each pool's router (through the supervisors, so a restarting
// router answers once it is back).
void on_providers(self_ptr self, uint64_t request, const std::string&) {
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
void on_recovery(self_ptr self, uint64_t request, const std::string&) {
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

// GET /api/v1/agents: every session with its parent and children.
void on_agents(self_ptr self, uint64_t request, const std::string&) {
  request_component(self, names::persistence, std::chrono::seconds{30},
                    atom::agents_v)
    .then(
      [self, request](std::vector<session_record>& sessions,
                      std::vector<tree_link>& links) {
        respond_json(self, request, 200,
                     agents_to_json(make_agents(sessions, links)));
      },
      [self, request](caf::error& err) {
        respond_unavailable(self, request, err);
      });
}

// A field of an API request body and the JSON type it must have when given.
struct api_field {
  const char* name;
  nlohmann::json::value_t type;
  bool required;
};

// Parses an API request body: a JSON object whose `fields` have their
// types. Anything else is answered with 400 naming what was wrong (and the
// result is discarded).
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

// The cluster actor, or a 409 saying this node is not in a cluster.
cluster_actor cluster_or_refuse(self_ptr self, uint64_t request) {
  auto cluster = lookup<cluster_actor>(self->system(), names::cluster);
  if (!cluster)
    respond_error(self, request, 409, to_string(ec::conflict),
                  "this node is not in a cluster (cluster.enabled is false)");
  return cluster;
}

// GET /api/v1/cluster: members, their states and shards, this node's
// epochs.
void on_cluster(self_ptr self, uint64_t request, const std::string&) {
  auto cluster = cluster_or_refuse(self, request);
  if (!cluster)
    return;
  self->request(cluster, std::chrono::seconds{10}, atom::stats_v)
    .then(
      [self, request](cluster_status& c) {
        respond_json(self, request, 200, to_json(c));
      },
      [self, request](caf::error& err) {
        respond_unavailable(self, request, err);
      });
}

// POST /api/v1/cluster/drain {"node": "...", "force": false}: the member
// hands its shards away and takes none.
void on_drain(self_ptr self, uint64_t request, const std::string& body) {
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

// Refuses a chaos endpoint that the node's configuration leaves off: 403
// naming the key that turns it on.
void respond_chaos_off(self_ptr self, uint64_t request, const char* endpoint,
                       const char* key) {
  respond_error(self, request, 403, "forbidden",
                std::string{endpoint} + " is off on this node (set " + key
                  + ": true in its configuration to allow it)");
}

// POST /api/v1/chaos/disk {"fail_writes": bool, "no_space": bool}: turns
// injected RocksDB write failures on or off (only with
// `chaos.disk: true`); answers the switches and the count of
// writes failed so far.
void on_disk_chaos(self_ptr self, uint64_t request, const std::string& body) {
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

// POST /api/v1/kill {"path": "/persistence", "reason": "..."}: the actor's
// supervisor sees an abnormal exit and applies its strategy. Only with
// `chaos.kill: true`.
void on_kill(self_ptr self, uint64_t request, const std::string& body) {
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
void on_wedge(self_ptr self, uint64_t request, const std::string& body) {
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

// A dead letter as the API shows it: its record and its id.
nlohmann::json dead_letter_json(const dead_letter& x) {
  auto j = to_json(x);
  j["id"] = dead_letter_id(x);
  return j;
}

// GET /api/v1/dlq: every dead letter, with counts by status.
void on_dead_letters(self_ptr self, uint64_t request, const std::string&) {
  request_component(self, names::dead_letters, std::chrono::seconds{30},
                    atom::dead_letters_v)
    .then(
      [self, request](std::vector<dead_letter>& letters) {
        auto list = nlohmann::json::array();
        auto counts = nlohmann::json::object();
        for (auto& x : letters) {
          list.push_back(dead_letter_json(x));
          counts[to_string(x.status)] = counts.value(to_string(x.status), 0)
                                        + 1;
        }
        respond_json(self, request, 200,
                     {{"dead_letters", list}, {"counts", counts}});
      },
      [self, request](caf::error& err) {
        respond_refused(self, request, err);
      });
}

// GET /api/v1/notifications: the latest notice to the owner per kind and
// subject, newest first, each with its severity and suppressed count.
void on_notifications(self_ptr self, uint64_t request, const std::string&) {
  request_component(self, names::notifier, std::chrono::seconds{30},
                    atom::notices_v)
    .then(
      [self, request](std::vector<owner_notice>& notices) {
        auto list = nlohmann::json::array();
        for (auto& x : notices) {
          auto j = to_json(x);
          j["severity"] = to_string(severity_of(x.kind));
          list.push_back(std::move(j));
        }
        respond_json(self, request, 200, {{"notifications", list}});
      },
      [self, request](caf::error& err) {
        respond_refused(self, request, err);
      });
}

// Answers an operator's action on a dead letter with the letter as stored.
// The queue's own steps (read, deliver, write) are bounded by 30 s each.
template <class... Ts>
void act_on_dead_letter(self_ptr self, uint64_t request, Ts&&... xs) {
  request_component(self, names::dead_letters, std::chrono::seconds{100},
                    std::forward<Ts>(xs)...)
    .then(
      [self, request](dead_letter& x) {
        respond_json(self, request, 200, dead_letter_json(x));
      },
      [self, request](caf::error& err) {
        respond_refused(self, request, err);
      });
}

// GET /api/v1/dlq/FROM/SEQ: one dead letter.
void on_one_dead_letter(self_ptr self, uint64_t request,
                        const std::string& from, seq_t seq) {
  request_component(self, names::dead_letters, std::chrono::seconds{30},
                    atom::dead_letters_v)
    .then(
      [self, request, from, seq](std::vector<dead_letter>& letters) {
        for (auto& x : letters)
          if (x.entry.from == from && x.entry.seq == seq) {
            respond_json(self, request, 200, dead_letter_json(x));
            return;
          }
        respond_error(self, request, 404, to_string(ec::not_found),
                      "no dead letter " + from + "/" + std::to_string(seq));
      },
      [self, request](caf::error& err) {
        respond_refused(self, request, err);
      });
}

// GET /api/v1/dlq/FROM/SEQ, POST .../retry and POST .../drop
// {"reason": "..."}: one dead letter, retried now or dropped. `rest` is the
// path after /api/v1/dlq/.
void on_dead_letter(self_ptr self, uint64_t request, const std::string& method,
                    const std::string& rest, const std::string& body) {
  auto last = rest.rfind('/');
  auto action = last == std::string::npos ? std::string{}
                                          : rest.substr(last + 1);
  if (action != "retry" && action != "drop")
    action.clear();
  auto id = action.empty() ? rest : rest.substr(0, last);
  auto parsed = parse_dead_letter_id(id);
  auto allowed = action.empty() ? "GET" : "POST";
  if (!parsed || method != allowed) {
    respond_error(self, request, 404, to_string(ec::not_found),
                  "no endpoint " + method + " /api/v1/dlq/" + rest
                    + " (expected GET /api/v1/dlq/THREAD/SEQ or POST "
                      "/api/v1/dlq/THREAD/SEQ/retry|drop)");
    return;
  }
  auto& [from, seq] = *parsed;
  if (action == "retry") {
    act_on_dead_letter(self, request, atom::retry_v, from, seq);
  } else if (action == "drop") {
    auto j = read_body(self, request, body.empty() ? "{}" : body,
                       {{"reason", nlohmann::json::value_t::string, false}});
    if (!j.is_discarded())
      act_on_dead_letter(self, request, atom::drop_v, from, seq,
                         j.value("reason", std::string{"dropped by operator"}));
  } else {
    on_one_dead_letter(self, request, from, seq);
  }
}

// The thread of `METHOD /api/v1/agents/REST` and whether it asks to pause
// (POST THREAD/pause) or to resume (POST THREAD/resume); none otherwise.
std::optional<std::pair<std::string, bool>>
parse_agent_action(const std::string& method, const std::string& rest) {
  auto last = rest.rfind('/');
  if (method != "POST" || last == std::string::npos)
    return std::nullopt;
  auto action = rest.substr(last + 1);
  auto thread = rest.substr(0, last);
  if ((action != "pause" && action != "resume") || !valid_thread_id(thread))
    return std::nullopt;
  return std::make_pair(thread, action == "pause");
}

// POST /api/v1/agents/THREAD/pause or /resume: through the thread's
// conversation (its owner's in a cluster); answers once the session says
// so on disk.
void on_agent_action(self_ptr self, uint64_t request, const std::string& method,
                     const std::string& rest) {
  auto parsed = parse_agent_action(method, rest);
  if (!parsed) {
    respond_error(self, request, 404, to_string(ec::not_found),
                  "no endpoint " + method + " /api/v1/agents/" + rest
                    + " (expected POST /api/v1/agents/THREAD/pause|resume)");
    return;
  }
  auto [thread, paused] = *parsed;
  request_component(self, names::orchestrator, std::chrono::seconds{30},
                    atom::pause_v, thread, paused)
    .then(
      [self, request, thread, paused](caf::ok_atom) {
        respond_json(self, request, 200,
                     {{"thread", thread}, {"paused", paused}});
      },
      [self, request](caf::error& err) {
        respond_refused(self, request, err);
      });
}

// GET /api/v1/tasks/THREAD/SEQ: where message SEQ of THREAD stands as a
// task (a task is named like a dead letter: THREAD/SEQ).
void on_task(self_ptr self, uint64_t request, const std::string& method,
             const std::string& rest) {
  auto parsed = parse_dead_letter_id(rest);
  if (!parsed || method != "GET") {
    respond_error(self, request, 404, to_string(ec::not_found),
                  "no endpoint " + method + " /api/v1/tasks/" + rest
                    + " (expected GET /api/v1/tasks/THREAD/SEQ)");
    return;
  }
  auto [thread, seq] = *parsed;
  request_component(self, names::orchestrator, std::chrono::seconds{30},
                    atom::task_v, thread, seq)
    .then(
      [self, request, thread = thread](log_entry& x) {
        respond_json(self, request, 200,
                     {{"thread", thread},
                      {"seq", x.seq},
                      {"client_id", x.client_id},
                      {"text", x.text},
                      {"state", to_string(x.task)},
                      {"attempts", x.attempts},
                      {"accepted_at", x.at},
                      {"updated_at", x.task_at}});
      },
      [self, request](caf::error& err) {
        respond_refused(self, request, err);
      });
}

// An endpoint of the HTTP API: answers request `request`, given its body.
using http_handler = void (*)(self_ptr self, uint64_t request,
                              const std::string& body);

struct http_route {
  const char* method;
  const char* path;
  http_handler handler;
};

// The HTTP API: method and path (the target without its query) to handler.
constexpr http_route http_routes[] = {
  {"GET", "/api/v1/status", on_status},
  {"GET", "/api/v1/tree", on_tree},
  {"GET", "/api/v1/providers", on_providers},
  {"GET", "/api/v1/recovery", on_recovery},
  {"GET", "/api/v1/agents", on_agents},
  {"GET", "/api/v1/cluster", on_cluster},
  {"POST", "/api/v1/cluster/drain", on_drain},
  {"POST", "/api/v1/chaos/disk", on_disk_chaos},
  {"POST", "/api/v1/kill", on_kill},
  {"POST", "/api/v1/chaos/wedge", on_wedge},
  {"GET", "/api/v1/dlq", on_dead_letters},
  {"GET", "/api/v1/notifications", on_notifications},
};

// Endpoints below these prefixes name one dead letter or agent in their
// path.
constexpr std::string_view dead_letter_prefix = "/api/v1/dlq/";
constexpr std::string_view agent_prefix = "/api/v1/agents/";
constexpr std::string_view task_prefix = "/api/v1/tasks/";

// Hands an HTTP API request to its endpoint; 404 if there is none.
void on_http(self_ptr self, uint64_t request, const std::string& method,
             const std::string& target, const std::string& body) {
  auto path = target.substr(0, target.find('?'));
  if (path == "/metrics" && method == "GET") {
    respond_metrics(self, request);
    return;
  }
  if (path.compare(0, dead_letter_prefix.size(), dead_letter_prefix) == 0) {
    on_dead_letter(self, request, method,
                   path.substr(dead_letter_prefix.size()), body);
    return;
  }
  if (path.compare(0, agent_prefix.size(), agent_prefix) == 0) {
    on_agent_action(self, request, method, path.substr(agent_prefix.size()));
    return;
  }
  if (path.compare(0, task_prefix.size(), task_prefix) == 0) {
    on_task(self, request, method, path.substr(task_prefix.size()));
    return;
  }
  for (auto& route : http_routes) {
    if (path == route.path && method == route.method) {
      route.handler(self, request, body);
      return;
    }
  }
  respond_error(self, request, 404, to_string(ec::not_found),
                "no endpoint " + method + " " + path);
}

// Takes a slot for a request of `conn`, or refuses it with `busy`.
bool admit(self_ptr self, connection_id conn, const protocol::client_frame& f) {
  auto history = f.type == protocol::client_frame_type::history;
  auto& budget = self->state.budget;
  if (budget.admit(conn, history))
    return true;
  self->state.cfg.server->send(
    conn,
    protocol::error_frame("busy", budget.refusal(history), f.id, f.thread));
  return false;
}

// Handles a client frame from connection `conn`.
void on_frame(self_ptr self, connection_id conn, protocol::client_frame& f) {
  using type = protocol::client_frame_type;
  if (f.type != type::ping && !admit(self, conn, f))
    return;
  switch (f.type) {
    case type::send: on_send(self, conn, f); break;
    case type::subscribe: on_subscribe(self, conn, f, true); break;
    case type::unsubscribe: on_subscribe(self, conn, f, false); break;
    case type::history: on_history(self, conn, f); break;
    case type::ping:
      self->state.cfg.server->send(conn, protocol::pong_frame(f.id));
      break;
    case type::spawn: on_spawn(self, conn, f); break;
    case type::cancel: on_cancel(self, conn, f); break;
  }
}

// Fans a thread's event out to the thread's subscribers.
void on_publish(self_ptr self, const thread_event& ev) {
  auto& subscribers = self->state.subs().subscribers;
  auto i = subscribers.find(ev.thread);
  if (i == subscribers.end())
    return;
  for (auto conn : i->second)
    self->state.cfg.server->send(conn, ev.frame);
}

} // namespace

gateway_bridge_actor::behavior_type gateway_bridge(self_ptr self,
                                                   gateway_bridge_config cfg) {
  self->state.cfg = std::move(cfg);
  self->state.budget = request_budget{self->state.cfg.max_requests_in_flight};
  // A restarted bridge follows its connections' threads again.
  for (auto& entry : self->state.subs().subscribers)
    follow_remote(self, entry.first);
  return {
    [](atom::open, connection_id) {
      // nop: nothing to set up until the connection subscribes or sends.
    },
    [self](atom::frame, connection_id conn, protocol::client_frame& f) {
      on_frame(self, conn, f);
    },
    [self](atom::closed, connection_id conn) {
      self->state.subs().drop(conn);
      self->state.budget.drop(conn);
    },
    [self](atom::http, uint64_t request, const std::string& method,
           const std::string& target, const std::string& body) {
      on_http(self, request, method, target, body);
    },
    [self](atom::publish, thread_event& ev) { on_publish(self, ev); },
    [self](atom::expire) { expire_deadlines(self); },
  };
}

bridge_handler::bridge_handler(caf::actor_system& sys) : sys_(sys) {
  // nop
}

void bridge_handler::attach(std::weak_ptr<ws_server> server) {
  server_ = std::move(server);
}

namespace {

gateway_bridge_actor current_bridge(caf::actor_system& sys) {
  return lookup<gateway_bridge_actor>(sys, names::gateway);
}

} // namespace

void bridge_handler::on_open(connection_id conn) {
  if (auto bridge = current_bridge(sys_))
    caf::anon_send(bridge, atom::open_v, conn);
}

void bridge_handler::on_frame(connection_id conn,
                              protocol::client_frame frame) {
  if (auto bridge = current_bridge(sys_)) {
    caf::anon_send(bridge, atom::frame_v, conn, std::move(frame));
    return;
  }
  if (auto server = server_.lock())
    server->send(
      conn, protocol::error_frame(to_string(ec::unavailable),
                                  "the gateway bridge is restarting; try again",
                                  frame.id, frame.thread));
}

void bridge_handler::on_close(connection_id conn) {
  if (auto bridge = current_bridge(sys_))
    caf::anon_send(bridge, atom::closed_v, conn);
}

void bridge_handler::on_http(uint64_t request, const std::string& method,
                             const std::string& target,
                             const std::string& body) {
  if (auto bridge = current_bridge(sys_)) {
    caf::anon_send(bridge, atom::http_v, request, method, target, body);
    return;
  }
  if (auto server = server_.lock())
    server->respond(request, 503, "application/json",
                    protocol::error_frame(to_string(ec::unavailable),
                                          "the gateway bridge is restarting"));
}

} // namespace keel
