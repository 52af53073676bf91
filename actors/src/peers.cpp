#include "keel/peers.hpp"

#include <type_traits>

#include <caf/all.hpp>
#include <caf/io/middleman.hpp>
#include <caf/openssl/manager.hpp>
#include <spdlog/spdlog.h>

#include "keel/endpoint.hpp"
#include "keel/gateway_policy.hpp"
#include "keel/logging.hpp"
#include "keel/lookup.hpp"

namespace keel {

namespace {

using self_ptr = caf::stateful_actor<peers_state>*;

// True if the current message comes from another process: a peer. Such
// messages must carry the token; only this node may ask to forward.
bool from_peer(self_ptr self) {
  auto& sender = self->current_sender();
  return sender != nullptr && sender->node() != self->node();
}

// Whether a peer's message carries this node's cluster token (compared in
// constant time, as the gateway compares its tokens).
bool token_ok(self_ptr self, const std::string& token) {
  return token_matches(token, self->state.cfg.token);
}

caf::error bad_token() {
  return caf::make_error(ec::unauthorized,
                         "a peer sent a message with a wrong cluster token");
}

caf::error not_served(self_ptr self, const std::string& thread) {
  auto& table = *self->state.cfg.shards;
  return caf::make_error(ec::not_owner,
                         "node " + table.me() + " does not serve thread "
                           + thread + " (shard "
                           + std::to_string(table.shard_of(thread)) + ")");
}

// Whether a failed attempt may succeed when sent again: the owner moved or
// is not serving yet, or the link or the peer failed. Anything else is the
// request's own answer (closed thread, limits, bad input).
bool worth_resending(const caf::error& err) {
  return err == ec::not_owner || err == ec::unavailable
         || err.category() != error_category;
}

// -- links to peers -----------------------------------------------------------

void link_ready(self_ptr self, const std::string& address,
                const caf::actor& handle) {
  auto i = self->state.links.find(address);
  if (i == self->state.links.end())
    return;
  auto waiting = std::move(i->second.waiting);
  i->second.connecting = false;
  i->second.handle = handle;
  if (!handle)
    self->state.links.erase(i);
  for (auto& then : waiting)
    then(handle);
}

// Calls `then` with the peers actor at `address` (host:port of its
// middleman), connecting first if needed; with an invalid handle if it
// cannot be reached.
void with_link(self_ptr self, const std::string& address,
               std::function<void(const caf::actor&)> then) {
  auto& link = self->state.links[address];
  if (link.handle) {
    then(link.handle);
    return;
  }
  link.waiting.push_back(std::move(then));
  if (link.connecting)
    return;
  link.connecting = true;
  auto ep = parse_endpoint(address);
  if (!ep) {
    log_scope scope{log_component::peers};
    spdlog::warn("cluster: bad peer address '{}': {}", address,
                 render(ep.error()));
    link_ready(self, address, {});
    return;
  }
  auto mm = self->state.cfg.tls
              ? self->system().openssl_manager().actor_handle()
              : self->system().middleman().actor_handle();
  self
    ->request(mm, self->state.cfg.attempt_timeout, caf::connect_atom_v,
              ep->host, ep->port)
    .then(
      [self, address](const caf::node_id&, caf::strong_actor_ptr& ptr,
                      const std::set<std::string>&) {
        auto handle = caf::actor_cast<caf::actor>(ptr);
        if (handle)
          self->monitor(handle);
        link_ready(self, address, handle);
      },
      [self, address](caf::error& err) {
        log_scope scope{log_component::peers};
        spdlog::warn("cluster: cannot reach peer {}: {}", address, render(err));
        link_ready(self, address, {});
      });
}

void resend_later(self_ptr self, const std::string& thread, uint64_t id);

// The requests whose attempt under way went to `peer`, which went down,
// go again after the usual pause (to the owner the table names then)
// instead of waiting for the attempt's timeout.
void resend_sent_to(self_ptr self, const caf::actor_addr& peer) {
  auto& st = self->state;
  for (auto& [thread, q] : st.queues) {
    if (q.empty() || !q.front().sent_to || q.front().sent_to != peer)
      continue;
    auto& head = q.front();
    head.sent_to = nullptr;
    head.attempt_id = ++st.last_attempt;
    resend_later(self, thread, head.attempt_id);
  }
}

// A monitored peer or bridge went down (its link dropped, its process or
// actor ended): forget it, and resend what it was asked.
void on_down(self_ptr self, const caf::down_msg& msg) {
  auto& st = self->state;
  resend_sent_to(self, msg.source);
  for (auto i = st.links.begin(); i != st.links.end(); ++i) {
    if (i->second.handle && i->second.handle.address() == msg.source) {
      st.links.erase(i);
      return;
    }
  }
  for (auto i = st.interested.begin(); i != st.interested.end();) {
    for (auto j = i->second.begin(); j != i->second.end();)
      j = j->address() == msg.source ? i->second.erase(j) : std::next(j);
    i = i->second.empty() ? st.interested.erase(i) : std::next(i);
  }
}

// -- requests for other nodes' threads
// -----------------------------------------

void pump(self_ptr self, const std::string& thread);

// The first request of `thread` is answered: the next one goes.
void finished(self_ptr self, const std::string& thread) {
  auto i = self->state.queues.find(thread);
  if (i == self->state.queues.end())
    return;
  i->second.pop_front();
  pump(self, thread);
}

// The first request of `thread` if attempt `id` is the one under way.
peer_request* in_flight(self_ptr self, const std::string& thread, uint64_t id) {
  auto q = self->state.queues.find(thread);
  if (q == self->state.queues.end() || q->second.empty()
      || q->second.front().attempt_id != id)
    return nullptr;
  return &q->second.front();
}

// The first request of `thread` goes again after a pause, unless another
// attempt than `id` is under way by then.
void resend_later(self_ptr self, const std::string& thread, uint64_t id) {
  ++self->state.resent;
  self->delayed_send(self, self->state.cfg.retry_pause, atom::retry_v, thread,
                     id);
}

// Sends the first request of `thread` to whoever serves it now: this
// node's orchestrator, or the owner the shard table names.
void pump(self_ptr self, const std::string& thread) {
  auto& st = self->state;
  auto q = st.queues.find(thread);
  if (q == st.queues.end() || q->second.empty()) {
    if (q != st.queues.end())
      st.queues.erase(q);
    return;
  }
  auto& head = q->second.front();
  if (self->clock().now() >= head.deadline) {
    ++st.timed_out;
    head.fail(caf::make_error(ec::unavailable,
                              "no node served thread " + thread
                                + " within "
                                  "cluster.route_timeout; resend with the "
                                  "same id"));
    finished(self, thread);
    return;
  }
  auto id = head.attempt_id = ++st.last_attempt;
  head.sent_to = nullptr;
  auto retry = [self, thread, id] {
    if (in_flight(self, thread, id))
      resend_later(self, thread, id);
  };
  auto done = [self, thread, id] {
    if (in_flight(self, thread, id))
      finished(self, thread);
  };
  if (st.cfg.shards->serves(thread)) {
    head.attempt(caf::actor{}, retry, done);
    return;
  }
  auto owner = st.cfg.shards->owner(st.cfg.shards->shard_of(thread));
  if (owner.node.empty() || owner.node == st.cfg.shards->me()
      || owner.address.empty()) {
    retry(); // Moving, or unowned until a node claims it.
    return;
  }
  st.registered[thread] = owner;
  with_link(self, owner.address,
            [self, thread, id, retry, done](const caf::actor& peer) {
              auto* head = in_flight(self, thread, id);
              if (!head)
                return;
              if (!peer) {
                retry();
                return;
              }
              head->sent_to = peer.address();
              head->attempt(peer, retry, done);
            });
}

// One attempt of a request whose answer is a `Result`: sent to `peer` (or,
// if invalid, this node's orchestrator); the answer goes to `rp`, unless it
// is worth resending.
template <class Result>
void send_attempt(self_ptr self, const std::string& thread,
                  const caf::message& req, caf::response_promise rp,
                  const caf::actor& peer, std::function<void()> retry,
                  std::function<void()> done) {
  auto on_result = [rp, done](Result& x) mutable {
    rp.deliver(std::move(x));
    done();
  };
  auto on_error = [rp, retry, done](caf::error& err) mutable {
    if (worth_resending(err)) {
      retry();
      return;
    }
    rp.deliver(std::move(err));
    done();
  };
  auto& cfg = self->state.cfg;
  if (!peer) {
    request_component(self, names::orchestrator, cfg.attempt_timeout, req)
      .then(on_result, on_error);
    return;
  }
  self
    ->request(peer, cfg.attempt_timeout, atom::route_v, cfg.token, thread, req)
    .then(on_result, on_error);
}

// A request whose answer is a `Result`: sent to the thread's owner (or, if
// it is this node, its orchestrator) and answered through `rp`.
template <class Result>
peer_request make_request(self_ptr self, const std::string& thread,
                          caf::message req, caf::response_promise rp) {
  peer_request r;
  r.deadline = self->clock().now() + self->state.cfg.route_timeout;
  r.fail = [rp](caf::error err) mutable { rp.deliver(std::move(err)); };
  r.attempt = [self, thread, req, rp](const caf::actor& peer,
                                      std::function<void()> retry,
                                      std::function<void()> done) {
    send_attempt<Result>(self, thread, req, rp, peer, retry, done);
  };
  return r;
}

// Calls `f` with a null `Result*` for the answer type of `req`, an
// orchestrator request one node may send another; false if `req` is none.
template <class F>
bool with_answer_type(const caf::message& req, F&& f) {
  if (req.match_element<atom::route>(0) || req.match_element<atom::deliver>(0))
    f(static_cast<accept_result*>(nullptr));
  else if (req.match_element<atom::spawn>(0))
    f(static_cast<spawn_result*>(nullptr));
  else if (req.match_element<atom::cancel>(0))
    f(static_cast<std::vector<std::string>*>(nullptr));
  else if (req.match_element<atom::pause>(0))
    f(static_cast<caf::ok_atom*>(nullptr));
  else if (req.match_element<atom::task>(0))
    f(static_cast<log_entry*>(nullptr));
  else
    return false;
  return true;
}

caf::error not_routable() {
  return caf::make_error(ec::protocol_violation,
                         "cannot forward this request to a peer");
}

// Queues a request for another node's thread; answered by its owner.
caf::response_promise forward(self_ptr self, const std::string& thread,
                              caf::message req) {
  auto rp = self->make_response_promise();
  peer_request r;
  auto known = with_answer_type(req, [&](auto* result) {
    using result_type = std::remove_pointer_t<decltype(result)>;
    r = make_request<result_type>(self, thread, req, rp);
  });
  if (!known) {
    rp.deliver(not_routable());
    return rp;
  }
  ++self->state.forwarded;
  auto& q = self->state.queues[thread];
  q.push_back(std::move(r));
  if (q.size() == 1)
    pump(self, thread);
  return rp;
}

// -- events
// ---------------------------------------------------------------------

// Registers this node's interest in `thread`'s events with `owner`, whose
// peers actor then sends them here for this node's bridge; `done` runs once
// the owner took it, or could not be asked (the check below then tries
// again when the owner changes).
void send_interest(
  self_ptr self, const std::string& thread, const shard_owner& owner,
  std::function<void()> done = [] {}) {
  // Remembered even while the thread has no owner: the check below then
  // registers with the owner it gets.
  self->state.registered[thread] = owner;
  if (owner.address.empty()) {
    done();
    return;
  }
  with_link(self, owner.address, [self, thread, done](const caf::actor& p) {
    if (!p) {
      done();
      return;
    }
    self
      ->request(p, self->state.cfg.attempt_timeout, atom::interest_v,
                self->state.cfg.token, thread)
      .then([done](caf::ok_atom) { done(); }, [done](caf::error&) { done(); });
  });
}

// This node's bridge follows `thread`: answered once the owner registered
// it (at once if this node serves the thread).
caf::result<caf::ok_atom> follow(self_ptr self, const std::string& thread) {
  auto& table = *self->state.cfg.shards;
  if (from_peer(self))
    return bad_token();
  if (table.serves(thread))
    return caf::ok_atom_v;
  auto rp = self->make_response_promise<caf::ok_atom>();
  send_interest(self, thread, table.owner(table.shard_of(thread)),
                [rp]() mutable { rp.deliver(caf::ok_atom_v); });
  return rp;
}

// Registers again with the new owner of every thread whose owner changed.
void check_interest(self_ptr self) {
  auto& table = *self->state.cfg.shards;
  for (auto& [thread, known] : self->state.registered) {
    if (table.serves(thread))
      continue;
    auto now = table.owner(table.shard_of(thread));
    if (now.node != known.node || now.epoch != known.epoch)
      send_interest(self, thread, now);
  }
  self->delayed_send(self, self->state.cfg.interest_check, atom::tick_v);
}

// An event of a thread served here: to the peers actor of every node
// whose clients follow it, which hands it to its bridge.
void fan_out(self_ptr self, const thread_event& ev) {
  auto i = self->state.interested.find(ev.thread);
  if (i == self->state.interested.end())
    return;
  for (auto& peer : i->second)
    self->send(peer, atom::publish_v, self->state.cfg.token, ev);
}

// The peer that sent the current message follows `thread` from now on.
// `sender` is that message's sender, taken before a response promise for it
// is made (making one moves the sender out of the message).
void add_interest(self_ptr self, const std::string& thread,
                  const caf::strong_actor_ptr& sender) {
  auto peer = caf::actor_cast<caf::actor>(sender);
  if (!peer || peer.node() == self->node())
    return;
  if (self->state.interested[thread].insert(peer).second)
    self->monitor(peer);
}

// An event a peer sent for a thread this node's clients follow.
void deliver_event(self_ptr self, const std::string& token, thread_event& ev) {
  if (!from_peer(self) || !token_ok(self, token))
    return;
  if (auto bridge = lookup<gateway_bridge_actor>(self->system(),
                                                 names::gateway))
    self->send(bridge, atom::publish_v, std::move(ev));
}

// Asks this node's orchestrator and answers through `rp`. The answer is
// relayed rather than delegated, so that only this actor ever sends a
// message to another node: no other actor of the node becomes known to
// CAF's network layer, which would deliver messages from any connected
// node to it.
template <class Result>
void relay(self_ptr self, const caf::actor& orch, caf::message req,
           caf::response_promise rp) {
  self->request(orch, self->state.cfg.route_timeout, std::move(req))
    .then([rp](Result& x) mutable { rp.deliver(std::move(x)); },
          [rp](caf::error& err) mutable { rp.deliver(std::move(err)); });
}

// A peer's request for a thread: handed to the orchestrator if this node
// serves the thread, whose answer goes back to the peer.
caf::response_promise serve(self_ptr self, const std::string& token,
                            const std::string& thread, caf::message req) {
  auto sender = self->current_sender();
  auto rp = self->make_response_promise();
  if (!token_ok(self, token))
    rp.deliver(bad_token());
  else if (!self->state.cfg.shards->serves(thread))
    rp.deliver(not_served(self, thread));
  else if (auto orch = lookup<caf::actor>(self->system(), names::orchestrator);
           !orch)
    rp.deliver(caf::make_error(ec::unavailable, "the orchestrator of node "
                                                  + self->state.cfg.shards->me()
                                                  + " is restarting"));
  else if (!with_answer_type(req, [&](auto* result) {
             using result_type = std::remove_pointer_t<decltype(result)>;
             add_interest(self, thread, sender);
             relay<result_type>(self, orch, req, rp);
           }))
    rp.deliver(not_routable());
  return rp;
}

} // namespace

caf::behavior peers(self_ptr self, peers_config cfg) {
  self->state.cfg = std::move(cfg);
  self->set_down_handler([self](caf::down_msg& msg) { on_down(self, msg); });
  self->send(self, atom::tick_v);
  return {
    [self](atom::route, const std::string& token, const std::string& thread,
           caf::message& req) {
      return serve(self, token, thread, std::move(req));
    },
    [self](atom::interest, const std::string& token,
           const std::string& thread) -> caf::result<caf::ok_atom> {
      if (!token_ok(self, token))
        return bad_token();
      add_interest(self, thread, self->current_sender());
      return caf::ok_atom_v;
    },
    [self](atom::publish, const std::string& token, thread_event& ev) {
      deliver_event(self, token, ev);
    },
    [self](atom::forward, const std::string& thread, caf::message& req) {
      if (!from_peer(self))
        return forward(self, thread, std::move(req));
      auto rp = self->make_response_promise();
      rp.deliver(bad_token());
      return rp;
    },
    [self](atom::interest, const std::string& thread) {
      return follow(self, thread);
    },
    [self](atom::publish, const thread_event& ev) {
      if (!from_peer(self))
        fan_out(self, ev);
    },
    [self](atom::retry, const std::string& thread, uint64_t id) {
      if (!from_peer(self) && in_flight(self, thread, id))
        pump(self, thread);
    },
    [self](atom::tick) {
      if (!from_peer(self))
        check_interest(self);
    },
  };
}

} // namespace keel
