// The node's supervision tree: the root supervisor's children, each
// configured from the node's configuration.

#include "node_impl.hpp"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <iostream>

#include <caf/all.hpp>
#include <caf/io/middleman.hpp>
#include <caf/openssl/all.hpp>
#include <spdlog/spdlog.h>

#include "keel/agent_catalog.hpp"
#include "keel/channel_delivery.hpp"
#include "keel/config_secrets.hpp"
#include "keel/conversation.hpp"
#include "keel/dead_letter_queue.hpp"
#include "keel/gateway_bridge.hpp"
#include "keel/node.hpp"
#include "keel/notifier.hpp"
#include "keel/orchestrator.hpp"
#include "keel/peers.hpp"
#include "keel/pg_cluster_store.hpp"
#include "keel/pg_store.hpp"
#include "keel/provider_pool.hpp"
#include "keel/supervisor.hpp"
#include "keel/system_config.hpp"

namespace keel {

namespace node_impl {

// Opens the store `cfg.storage.backend` names: RocksDB in `data_dir/db`,
// or the PostgreSQL database of `storage.postgres`.
// In a cluster, the PostgreSQL store fences every write with `shards`.
store_opener make_store_opener(const node_config& cfg,
                               const store_options& opts,
                               std::shared_ptr<const shard_table> shards) {
  if (cfg.storage.backend == storage_backend::postgres) {
    pg_store_options pg;
    pg.url = cfg.storage.postgres.url;
    pg.connections = cfg.storage.postgres.connections;
    pg.statement_timeout
      = std::chrono::duration_cast<std::chrono::milliseconds>(
        cfg.storage.postgres.statement_timeout);
    pg.fence = std::move(shards);
    return [pg] { return open_pg_store(pg); };
  }
  auto db_dir = (std::filesystem::path{cfg.data_dir} / "db").string();
  return [db_dir, opts] { return store::open(db_dir, opts); };
}

// The cluster store of `cfg`'s database.
cluster_store_opener cluster_store_of(const node_config& cfg) {
  pg_cluster_options opts;
  opts.url = cfg.storage.postgres.url;
  // Half a lease: a silent database must not hold the cluster actor past
  // the point where it has to fence itself.
  opts.statement_timeout = std::max<std::chrono::milliseconds>(
    std::chrono::duration_cast<std::chrono::milliseconds>(cfg.cluster.lease_ttl
                                                          / 2),
    std::chrono::milliseconds{100});
  opts.connect_timeout = std::chrono::seconds{2};
  return [opts] { return open_pg_cluster_store(opts); };
}

} // namespace node_impl

namespace {

using node_impl::cluster_store_of;
using node_impl::make_store_opener;

// Persistence. Detached when asked: synced writes (RocksDB's fsync, a
// PostgreSQL COMMIT) block, and must not block a scheduler worker. (Tests
// on the test coordinator run it scheduled.)
child_spec persistence_child(const node_config& cfg, const store_options& opts,
                             bool detached,
                             std::shared_ptr<const shard_table> shards,
                             std::shared_ptr<const agent_catalog> catalog) {
  // One recovery on boot per tree, by the first persistence incarnation.
  auto boot_recovery = std::make_shared<std::atomic<bool>>(true);
  return {
    "persistence", names::persistence,
    [open = make_store_opener(cfg, opts, shards), detached, boot_recovery,
     max_threads = cfg.threads.max_stored_threads,
     max_history = cfg.gateway.max_history_bytes, shards,
     agents = cfg.threads.agents, catalog](caf::local_actor* parent) {
      persistence_config pcfg{open,   boot_recovery, max_threads, max_history,
                              shards, agents,        catalog};
      if (detached)
        return caf::actor_cast<caf::actor>(
          parent->spawn<caf::detached>(persistence, pcfg));
      return caf::actor_cast<caf::actor>(parent->spawn(persistence, pcfg));
    }};
}

// The dynamic supervisor of conversations, one per thread; in a cluster
// each takes its tenure from `shards`.
child_spec conversations_child(const node_config& cfg,
                               std::shared_ptr<const shard_table> shards,
                               std::shared_ptr<const agent_catalog> catalog) {
  supervisor_config convs;
  convs.name = "conversations";
  convs.dynamic = true;
  // Transient: a passivated conversation stops normally and is forgotten; a
  // crashed one is restarted and reloads its thread from the store.
  convs.child_template.restart = restart_type::transient;
  // Every live conversation's child entry holds a copy of this function:
  // it shares the node's configuration rather than copying it, and every
  // conversation of an agent shares the settings the catalog made for it.
  auto node = std::make_shared<const node_config>(cfg);
  convs.dynamic_start = [node, catalog, shards](caf::local_actor* parent,
                                                const std::string& thread,
                                                const caf::message&) {
    auto ccfg = make_conversation_config(*node, catalog, thread);
    ccfg.shards = shards;
    return caf::actor_cast<caf::actor>(parent->spawn(conversation, ccfg));
  };
  apply_settings(convs, cfg.supervision.conversations);
  child_spec result{"conversations", names::conversations,
                    [convs](caf::local_actor* parent) {
                      return parent->spawn(supervisor, convs);
                    }};
  result.supervisor = true;
  return result;
}

// The orchestrator; in a cluster it routes by `shards`.
child_spec orchestrator_child(const node_config& cfg,
                              std::shared_ptr<shard_table> shards) {
  orchestrator_config ocfg;
  ocfg.max_live = cfg.threads.max_live;
  ocfg.shards = std::move(shards);
  return {
    "orchestrator", names::orchestrator, [ocfg](caf::local_actor* parent) {
      return caf::actor_cast<caf::actor>(parent->spawn(orchestrator, ocfg));
    }};
}

// The gateway bridge answering through `server`.
child_spec gateway_child(const node_config& cfg,
                         std::shared_ptr<ws_server> server,
                         std::shared_ptr<fault_injection> disk_faults,
                         std::shared_ptr<const agent_catalog> catalog) {
  gateway_bridge_config gcfg;
  gcfg.agents = std::move(catalog);
  gcfg.server = std::move(server);
  gcfg.node_name = cfg.name;
  gcfg.data_dir = cfg.data_dir;
  gcfg.disk_faults = std::move(disk_faults);
  gcfg.chaos = cfg.chaos;
  gcfg.max_requests_in_flight = cfg.gateway.max_requests_in_flight;
  gcfg.max_subscriptions = cfg.gateway.max_subscriptions_per_connection;
  gcfg.started = std::chrono::steady_clock::now();
  for (auto& pool : cfg.pools)
    gcfg.pools.push_back(pool.name);
  return {"gateway", names::gateway, [gcfg](caf::local_actor* parent) {
            return caf::actor_cast<caf::actor>(
              parent->spawn(gateway_bridge, gcfg));
          }};
}

// A node declared dead must stop at once: whatever it still does is fenced,
// and its service manager restarts it as a new incarnation.
void exit_declared_dead(const std::string& why) {
  spdlog::critical("{}", why);
  spdlog::default_logger()->flush();
  std::cerr << "keel-node: " << why << std::endl;
  std::_Exit(75);
}

// Publishes the peers actor on the middleman port. A restarted peers actor
// publishes itself again: the port then stops handing out the old one.
caf::actor publish_peers(caf::actor handle, const std::string& host,
                         uint16_t port, bool tls) {
  auto& sys = handle->home_system();
  // Before the port opens: BASP would deliver a peer's messages to them.
  unregister_caf_utility_actors(sys);
  auto published = tls ? caf::openssl::publish(handle, port, host.c_str(), true)
                       : sys.middleman().publish(handle, port, host.c_str(),
                                                 true);
  if (!published) {
    spdlog::error("cluster: cannot listen for peers on {}:{}: {}", host, port,
                  render(published.error()));
    return handle;
  }
  auto mm = tls ? sys.openssl_manager().actor_handle()
                : sys.middleman().actor_handle();
  handle->attach_functor([mm, addr = handle.address(), port] {
    caf::anon_send(mm, caf::unpublish_atom_v, addr, port);
  });
  return handle;
}

// The cluster actor (detached: it waits on the database) and the peers
// actor, published on the middleman port for the other nodes.
void add_cluster_children(supervisor_config& sup, const node_config& cfg,
                          const std::shared_ptr<shard_table>& shards) {
  peers_config pcfg;
  pcfg.shards = shards;
  pcfg.token = cfg.cluster.token;
  pcfg.route_timeout = cfg.cluster.route_timeout;
  pcfg.attempt_timeout = std::max<caf::timespan>(
    cfg.cluster.route_timeout / 3, std::chrono::milliseconds{300});
  pcfg.tls = cfg.cluster.tls.enabled();
  auto host = cfg.cluster.listen_host;
  auto port = cfg.cluster.listen_port;
  sup.children.push_back(
    {"peers", names::peers, [pcfg, host, port](caf::local_actor* parent) {
       return publish_peers(parent->spawn(peers, pcfg), host, port, pcfg.tls);
     }});
  cluster_actor_config ccfg;
  ccfg.cluster = cfg.cluster;
  ccfg.open_store = cluster_store_of(cfg);
  ccfg.shards = shards;
  ccfg.declared_dead = exit_declared_dead;
  sup.children.push_back(
    {"cluster", names::cluster, [ccfg](caf::local_actor* parent) {
       return caf::actor_cast<caf::actor>(
         parent->spawn<caf::detached>(cluster, ccfg));
     }});
}

// The outbound channels; fails naming a channel whose client cannot be
// set up (an unreadable CA file).
caf::expected<child_spec> channels_child(const node_config& cfg,
                                         const std::shared_ptr<http_io>& io) {
  channel_delivery_config dcfg;
  dcfg.channels = cfg.delivery.channels;
  dcfg.io = io;
  dcfg.store_timeout = cfg.storage.request_timeout;
  dcfg.secrets = configured_secrets(cfg);
  if (cfg.cluster.enabled)
    dcfg.poll = cfg.delivery.dead_letters.interval;
  for (auto& channel : dcfg.channels)
    if (auto client = channel_client::make(*io, channel); !client)
      return std::move(client.error());
  return child_spec{
    "channels", names::channels, [dcfg](caf::local_actor* parent) {
      return caf::actor_cast<caf::actor>(parent->spawn(channel_delivery, dcfg));
    }};
}

// The owner's notifications, through `owner.channel` if set.
child_spec notifier_child(const node_config& cfg) {
  notifier_config ncfg;
  ncfg.channel = cfg.owner.channel;
  ncfg.windows = cfg.owner.notice_windows;
  ncfg.store_timeout = cfg.storage.request_timeout;
  ncfg.secrets = configured_secrets(cfg);
  if (auto channel = cfg.delivery.find_channel(ncfg.channel)) {
    // Every attempt may time out and wait the longest backoff.
    auto& retry = channel->retry;
    ncfg.send_timeout = retry.backoff.max_attempts
                          * (retry.send_timeout + retry.backoff.max_delay)
                        + std::chrono::seconds{5};
  }
  return {"notifier", names::notifier, [ncfg](caf::local_actor* parent) {
            return caf::actor_cast<caf::actor>(parent->spawn(notifier, ncfg));
          }};
}

} // namespace

caf::expected<supervisor_config>
root_spec(const node_config& cfg, std::shared_ptr<ws_server> server,
          bool detached_persistence, std::shared_ptr<http_io> io,
          std::shared_ptr<shard_table> shards) {
  auto channels = channels_child(cfg, io);
  if (!channels)
    return channels.error();
  auto providers_sup = providers_spec(cfg, std::move(io));
  if (!providers_sup)
    return providers_sup.error();
  supervisor_config sup;
  sup.name = "root";
  store_options opts;
  opts.sync = cfg.storage.sync;
  opts.memtable_bytes = cfg.storage.rocksdb.memtables;
  opts.block_cache_bytes = cfg.storage.rocksdb.block_cache;
  if (cfg.chaos.disk)
    opts.faults = std::make_shared<fault_injection>();
  if (cfg.cluster.enabled && !shards)
    shards = std::make_shared<shard_table>(cfg.cluster.node_id,
                                           cfg.cluster.shards);
  auto catalog = std::make_shared<const agent_catalog>(
    std::make_shared<const node_config>(cfg));
  sup.children.push_back(
    persistence_child(cfg, opts, detached_persistence, shards, catalog));
  child_spec providers_child{
    "providers", names::providers,
    [pcfg = std::move(*providers_sup)](caf::local_actor* parent) {
      return parent->spawn(supervisor, pcfg);
    }};
  providers_child.supervisor = true;
  sup.children.push_back(std::move(providers_child));
  sup.children.push_back(conversations_child(cfg, shards, catalog));
  sup.children.push_back(orchestrator_child(cfg, shards));
  dead_letter_queue_config dcfg;
  dcfg.schedule = cfg.delivery.dead_letters;
  dcfg.poll = cfg.cluster.enabled;
  // A reply letter's retry is a send and maybe its plain-text resend.
  for (auto& channel : cfg.delivery.channels)
    dcfg.attempt_timeout = std::max<caf::timespan>(
      dcfg.attempt_timeout,
      2 * channel.retry.send_timeout + std::chrono::seconds{5});
  sup.children.push_back(
    {"dead_letters", names::dead_letters, [dcfg](caf::local_actor* parent) {
       return caf::actor_cast<caf::actor>(
         parent->spawn(dead_letter_queue, dcfg));
     }});
  sup.children.push_back(std::move(*channels));
  sup.children.push_back(notifier_child(cfg));
  if (cfg.cluster.enabled)
    add_cluster_children(sup, cfg, shards);
  if (server)
    sup.children.push_back(
      gateway_child(cfg, std::move(server), opts.faults, catalog));
  apply_settings(sup, cfg.supervision.root);
  return sup;
}

} // namespace keel
