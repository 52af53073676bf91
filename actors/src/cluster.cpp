#include "keel/cluster.hpp"

#include <algorithm>

#include <caf/all.hpp>
#include <spdlog/spdlog.h>

#include "keel/logging.hpp"
#include "keel/lookup.hpp"

namespace keel {

cluster_state::cluster_state(self_ptr self) : self(self) {
  // nop
}

// -- membership ---------------------------------------------------------------

bool cluster_state::ensure_joined() {
  auto& c = cfg.cluster;
  if (!db) {
    auto opened = cfg.open_store();
    if (!opened) {
      spdlog::warn("cluster: cannot reach the cluster store: {}",
                   render(opened.error()));
      return false;
    }
    db = std::move(*opened);
  }
  if (incarnation != 0)
    return true;
  auto sent = steady::now();
  auto joined = db->join(c.node_id, c.advertise, c.lease_ttl);
  if (!joined) {
    spdlog::warn("cluster: cannot join as {}: {}", c.node_id,
                 render(joined.error()));
    return false;
  }
  incarnation = *joined;
  renewed = sent;
  counters.incarnation = incarnation;
  spdlog::info("cluster: joined as {} (incarnation {}, peers reach it at {})",
               c.node_id, incarnation, c.advertise);
  return true;
}

bool cluster_state::renew() {
  auto& c = cfg.cluster;
  auto sent = steady::now();
  auto state = db->renew(c.node_id, incarnation, c.lease_ttl);
  if (!state) {
    disconnected = true;
    if (sent - renewed > c.lease_ttl && !self_fenced)
      fence_self("cannot renew the lease: " + render(state.error()));
    else
      spdlog::warn("cluster: cannot renew the lease: {}",
                   render(state.error()));
    return false;
  }
  if (*state == member_state::dead) {
    fence_self("declared dead by the cluster");
    cfg.declared_dead("node " + c.node_id + " (incarnation "
                      + std::to_string(incarnation)
                      + ") was declared dead by the cluster or replaced by a "
                        "newer incarnation; exiting so that it restarts "
                        "cleanly");
    return false;
  }
  own_state = *state;
  renewed = sent;
  if (disconnected) {
    disconnected = false;
    connected_since = sent;
  }
  if (self_fenced) {
    self_fenced = false;
    spdlog::info("cluster: lease renewed again; taking its shards back");
  }
  return true;
}

// The lease may have run out: nothing this node writes could commit, and
// the others may own its shards soon. Stops serving them until it renews.
void cluster_state::fence_self(const std::string& why) {
  self_fenced = true;
  auto held = cfg.shards->release_all();
  spdlog::error("cluster: {}; stopped serving {} shards", why, held.size());
  release(std::vector<uint32_t>(held.begin(), held.end()));
}

bool cluster_state::bury(const cluster_view& view) {
  // Nobody could renew while the store was down, nor while this node could
  // not reach it: a lease expired then proves nothing yet.
  if (view.store_recent
      || steady::now() - connected_since < cfg.cluster.lease_ttl)
    return false;
  auto plan = plan_cluster(view, {cfg.cluster.node_id, incarnation, {}}, 0);
  std::vector<std::string> alive;
  for (auto& m : view.members)
    if (m.node_id != cfg.cluster.node_id && !m.lease_expired
        && (m.state == member_state::up || m.state == member_state::draining))
      alive.push_back(m.node_id);
  auto gone
    = alive.empty()
        ? caf::expected<std::vector<std::string>>{std::vector<std::string>{}}
        : db->vanished(alive);
  if (!gone)
    spdlog::warn("cluster: cannot check peers' sessions: {}",
                 render(gone.error()));
  else
    for (auto& m : view.members)
      if (std::find(gone->begin(), gone->end(), m.node_id) != gone->end())
        plan.declare_dead.push_back(m);
  bool any = false;
  for (auto& m : plan.declare_dead) {
    auto done = db->declare_dead(m.node_id, m.incarnation);
    if (done && *done) {
      any = true;
      ++counters.declared_dead;
      spdlog::warn("cluster: declared {} (incarnation {}) dead: {}", m.node_id,
                   m.incarnation,
                   m.lease_expired ? "its lease ran out"
                                   : "its store session ended");
    }
  }
  return any;
}

// -- shards -------------------------------------------------------------------

void cluster_state::act(const cluster_view& view) {
  last_view = view;
  publish_owners(view);
  auto plan
    = plan_cluster(view, {cfg.cluster.node_id, incarnation, cfg.shards->held()},
                   cfg.cluster.rebalance_batch);
  std::vector<uint32_t> lost;
  for (auto shard : plan.lost) {
    cfg.shards->release(shard);
    lost.push_back(shard);
  }
  if (!lost.empty()) {
    spdlog::warn("cluster: lost {} shards to other nodes", lost.size());
    release(std::move(lost));
  }
  std::vector<uint32_t> gained;
  for (auto& g : plan.gained) {
    if (handing_over.count(g.shard) > 0)
      continue; // Ours until the transfer commits, but no longer served.
    cfg.shards->hold(g.shard, g.epoch);
    gained.push_back(g.shard);
    ++counters.received;
  }
  claim(plan.claims, gained);
  if (!gained.empty())
    recover(std::move(gained));
  for (auto& h : plan.handoff_requests)
    if (auto asked = db->request_handoff(h.shard, h.epoch, cfg.cluster.node_id);
        !asked)
      spdlog::warn("cluster: cannot ask for shard {}: {}", h.shard,
                   render(asked.error()));
  for (auto& h : plan.stale_handoffs)
    static_cast<void>(db->cancel_handoff(h.shard, h.epoch));
  for (auto& t : plan.transfers)
    if (handing_over.count(t.shard) == 0
        && handing_over.size() < cfg.cluster.rebalance_batch)
      hand_over(t);
}

void cluster_state::claim(const std::vector<shard_claim>& claims,
                          std::vector<uint32_t>& gained) {
  for (auto& c : claims) {
    auto epoch = db->claim(c.shard, c.epoch, cfg.cluster.node_id, incarnation);
    if (!epoch) {
      spdlog::warn("cluster: cannot claim shard {}: {}", c.shard,
                   render(epoch.error()));
      return;
    }
    if (!*epoch)
      continue; // Claimed by another node first, or its owner lives.
    cfg.shards->hold(c.shard, **epoch);
    gained.push_back(c.shard);
    ++counters.claimed;
  }
  if (!gained.empty())
    spdlog::info("cluster: now holding {} more shards ({} in all)",
                 gained.size(), cfg.shards->held().size());
}

// Stops serving the shard here (new messages wait for the new owner), lets
// running turns finish for up to `handoff_timeout`, stops writing it, then
// moves it to the node that asked for it.
void cluster_state::hand_over(const shard_transfer& transfer) {
  handing_over.insert(transfer.shard);
  cfg.shards->retire(transfer.shard);
  auto orch = lookup<orchestrator_actor>(self->system(), names::orchestrator);
  if (!orch) {
    finish_handover(transfer);
    return;
  }
  auto wait = cfg.cluster.handoff_timeout;
  self
    ->request(orch, wait + std::chrono::seconds{5}, atom::release_v,
              std::vector<uint32_t>{transfer.shard}, wait)
    .then([this, transfer](caf::ok_atom) { finish_handover(transfer); },
          [this, transfer](caf::error& err) {
            log_scope scope{log_component::cluster};
            // Not served here any more either way: writes would be fenced.
            spdlog::warn("cluster: stopping the conversations of shard {} "
                         "failed: {}",
                         transfer.shard, render(err));
            finish_handover(transfer);
          });
}

void cluster_state::finish_handover(const shard_transfer& transfer) {
  handing_over.erase(transfer.shard);
  cfg.shards->release(transfer.shard);
  auto moved = db ? db->transfer(transfer.shard, transfer.epoch,
                                 cfg.cluster.node_id, incarnation)
                  : caf::expected<std::optional<uint64_t>>{std::nullopt};
  if (moved && *moved) {
    ++counters.handed_over;
    spdlog::info("cluster: handed shard {} to {} (epoch {})", transfer.shard,
                 transfer.to, **moved);
    return;
  }
  // Still ours (the target left, the store failed): the next round finds
  // it gained and serves it again.
  spdlog::warn(
    "cluster: shard {} was not handed to {}: {}", transfer.shard, transfer.to,
    moved ? std::string{"it changed meanwhile"} : render(moved.error()));
}

// Routing hints: every shard's live owner and its address.
void cluster_state::publish_owners(const cluster_view& view) {
  std::map<std::string, const member*> live;
  for (auto& m : view.members)
    if (m.state == member_state::up || m.state == member_state::draining)
      live.emplace(m.node_id, &m);
  for (auto& row : view.shards) {
    auto i = live.find(row.owner);
    if (i == live.end() || i->second->incarnation != row.owner_incarnation)
      cfg.shards->set_owner(row.shard, {{}, {}, row.epoch});
    else
      cfg.shards->set_owner(row.shard,
                            {row.owner, i->second->address, row.epoch});
  }
}

void cluster_state::recover(std::vector<uint32_t> shards) {
  if (auto orch = lookup<orchestrator_actor>(self->system(),
                                             names::orchestrator))
    self->send(orch, atom::recover_v, std::move(shards));
  // Else the restarted orchestrator's recovery covers every held shard.
}

void cluster_state::release(std::vector<uint32_t> shards) {
  if (auto orch = lookup<orchestrator_actor>(self->system(),
                                             names::orchestrator))
    self
      ->request(orch, std::chrono::seconds{30}, atom::release_v,
                std::move(shards), caf::timespan{0})
      .then([](caf::ok_atom) {}, [](caf::error&) {});
}

// -- operators
// ------------------------------------------------------------------

void cluster_state::tick() {
  if (ensure_joined() && renew()) {
    auto view = db->view();
    if (view && bury(*view))
      view = db->view(); // The dead members' shards are orphans now.
    if (view)
      act(*view);
    else
      spdlog::warn("cluster: cannot read the cluster tables: {}",
                   render(view.error()));
  }
  self->delayed_send(self, cfg.cluster.heartbeat, atom::tick_v);
}

cluster_status cluster_state::status() const {
  auto result = counters;
  result.node_id = cfg.cluster.node_id;
  result.state = incarnation == 0 ? "joining"
                 : self_fenced    ? "fenced"
                                  : to_string(own_state);
  result.shards = cfg.shards->shards();
  auto held = cfg.shards->held();
  result.held = held.size();
  result.min_epoch = result.max_epoch = 0;
  std::map<std::string, uint64_t> owned;
  for (auto& row : last_view.shards) {
    result.owners.push_back(row.owner);
    result.epochs.push_back(row.epoch);
    if (!row.owner.empty())
      ++owned[row.owner];
    if (!row.handoff_to.empty())
      ++result.handoffs;
  }
  for (auto shard : held) {
    auto epoch = cfg.shards->held_epoch(shard).value_or(0);
    result.min_epoch
      = result.min_epoch == 0 ? epoch : std::min(result.min_epoch, epoch);
    result.max_epoch = std::max(result.max_epoch, epoch);
  }
  auto live = candidate_owners(last_view, cfg.cluster.node_id);
  for (auto& row : last_view.shards)
    if (std::find(live.begin(), live.end(), row.owner) == live.end())
      ++result.orphans;
  for (auto& m : last_view.members)
    result.members.push_back({m.node_id, m.incarnation, m.address,
                              to_string(m.state), owned[m.node_id],
                              m.since_renewal.count()});
  return result;
}

caf::result<std::string> cluster_state::drain(const std::string& node,
                                              bool force) {
  if (!db)
    return caf::make_error(ec::unavailable, "the cluster store is unreachable");
  auto view = db->view();
  if (!view)
    return std::move(view.error());
  auto live = candidate_owners(*view, cfg.cluster.node_id);
  if (std::find(live.begin(), live.end(), node) == live.end())
    return caf::make_error(ec::not_found,
                           "no up member named " + node + " in the cluster");
  if (live.size() == 1 && !force)
    return caf::make_error(ec::conflict,
                           node
                             + " is the last up member: draining it "
                               "leaves nobody to take its shards (use "
                               "--force to drain it anyway)");
  auto done = db->set_state(node, member_state::draining);
  if (!done)
    return std::move(done.error());
  if (!*done)
    return caf::make_error(ec::not_found, "member " + node + " is gone");
  spdlog::info("cluster: {} is draining", node);
  return std::string{"draining"};
}

void cluster_state::leave() {
  if (!db || incarnation == 0)
    return;
  auto left = db->leave(cfg.cluster.node_id, incarnation);
  if (left && *left)
    spdlog::info("cluster: left the cluster (no shards held)");
}

cluster_actor::behavior_type cluster(cluster_state::self_ptr self,
                                     cluster_actor_config cfg) {
  self->state.cfg = std::move(cfg);
  self->set_exit_handler([self](caf::exit_msg& msg) {
    log_scope scope{log_component::cluster};
    self->state.leave();
    self->quit(msg.reason);
  });
  self->send(self, atom::tick_v);
  return {
    [self](atom::tick) {
      log_scope scope{log_component::cluster};
      self->state.tick();
    },
    [self](atom::stats) { return self->state.status(); },
    [self](atom::drain, const std::string& node, bool force) {
      log_scope scope{log_component::cluster};
      return self->state.drain(node, force);
    },
  };
}

} // namespace keel
