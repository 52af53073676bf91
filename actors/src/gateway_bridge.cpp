#include "keel/gateway_bridge.hpp"

#include <utility>

#include <caf/all.hpp>

#include "keel/lookup.hpp"
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
                    atom::route_v, f.thread, f.id, std::move(f.text),
                    std::move(f.agent))
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
                    atom::spawn_v, f.thread, f.child, f.agent)
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
      respond_admin(self, request, method, target, body);
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
