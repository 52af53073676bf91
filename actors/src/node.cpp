#include "keel/node.hpp"

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <sys/stat.h>
#include <thread>

#include <sys/prctl.h>

#include <caf/all.hpp>
#include <caf/io/middleman.hpp>
#include <caf/openssl/all.hpp>
#include <spdlog/spdlog.h>

#include "keel/actors.hpp"
#include "keel/channel_delivery.hpp"
#include "keel/cluster.hpp"
#include "keel/config_secrets.hpp"
#include "keel/conversation.hpp"
#include "keel/dashboard.hpp"
#include "keel/dead_letter_queue.hpp"
#include "keel/fd_limit.hpp"
#include "keel/gateway_bridge.hpp"
#include "keel/health_monitor.hpp"
#include "keel/logging.hpp"
#include "keel/lookup.hpp"
#include "keel/notifier.hpp"
#include "keel/orchestrator.hpp"
#include "keel/peers.hpp"
#include "keel/persistence.hpp"
#include "keel/pg_cluster_store.hpp"
#include "keel/pg_store.hpp"
#include "keel/process_tree.hpp"
#include "keel/provider_pool.hpp"
#include "keel/run_slots.hpp"
#include "keel/service_notify.hpp"
#include "keel/supervisor.hpp"
#include "keel/system_config.hpp"

namespace keel {

namespace {

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

// Persistence. Detached when asked: synced writes (RocksDB's fsync, a
// PostgreSQL COMMIT) block, and must not block a scheduler worker. (Tests
// on the test coordinator run it scheduled.)
child_spec persistence_child(const node_config& cfg, const store_options& opts,
                             bool detached,
                             std::shared_ptr<const shard_table> shards) {
  // One recovery on boot per tree, by the first persistence incarnation.
  auto boot_recovery = std::make_shared<std::atomic<bool>>(true);
  return {"persistence", names::persistence,
          [open = make_store_opener(cfg, opts, shards), detached, boot_recovery,
           max_threads = cfg.threads.max_stored_threads,
           max_history = cfg.gateway.max_history_bytes, shards,
           agents = cfg.threads.agents](caf::local_actor* parent) {
            persistence_config pcfg{open,        boot_recovery, max_threads,
                                    max_history, shards,        agents};
            if (detached)
              return caf::actor_cast<caf::actor>(
                parent->spawn<caf::detached>(persistence, pcfg));
            return caf::actor_cast<caf::actor>(
              parent->spawn(persistence, pcfg));
          }};
}

// The dynamic supervisor of conversations, one per thread; in a cluster
// each takes its tenure from `shards`.
child_spec conversations_child(const node_config& cfg,
                               std::shared_ptr<const shard_table> shards) {
  supervisor_config convs;
  convs.name = "conversations";
  convs.dynamic = true;
  // Transient: a passivated conversation stops normally and is forgotten; a
  // crashed one is restarted and reloads its thread from the store.
  convs.child_template.restart = restart_type::transient;
  // Every live conversation's child entry holds a copy of this function:
  // it shares the node's configuration rather than copying it, and every
  // conversation shares the settings made from it.
  auto node = std::make_shared<const node_config>(cfg);
  convs.dynamic_start = [node, settings = make_conversation_settings(node),
                         shards](caf::local_actor* parent,
                                 const std::string& thread,
                                 const caf::message&) {
    auto ccfg = make_conversation_config(*node, settings, thread);
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

// The gateway bridge answering through `server`.
child_spec gateway_child(const node_config& cfg,
                         std::shared_ptr<ws_server> server,
                         std::shared_ptr<fault_injection> disk_faults) {
  gateway_bridge_config gcfg;
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
  sup.children.push_back(
    persistence_child(cfg, opts, detached_persistence, shards));
  child_spec providers_child{
    "providers", names::providers,
    [pcfg = std::move(*providers_sup)](caf::local_actor* parent) {
      return parent->spawn(supervisor, pcfg);
    }};
  providers_child.supervisor = true;
  sup.children.push_back(std::move(providers_child));
  sup.children.push_back(conversations_child(cfg, shards));
  orchestrator_config ocfg;
  ocfg.max_live = cfg.threads.max_live;
  ocfg.shards = shards;
  sup.children.push_back(
    {"orchestrator", names::orchestrator, [ocfg](caf::local_actor* parent) {
       return caf::actor_cast<caf::actor>(parent->spawn(orchestrator, ocfg));
     }});
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
    sup.children.push_back(gateway_child(cfg, std::move(server), opts.faults));
  apply_settings(sup, cfg.supervision.root);
  return sup;
}

node::node(caf::actor_system& sys, std::shared_ptr<ws_server> server,
           std::shared_ptr<http_io> io, caf::actor root)
  : sys_(sys),
    server_(std::move(server)),
    io_(std::move(io)),
    root_(std::move(root)),
    health_(std::make_unique<health_monitor>(sys, server_)) {
  // nop
}

node::~node() {
  stop();
}

namespace {

// The I/O threads HTTP providers share; null if no provider speaks HTTP.
// Each endpoint is built once here so that a bad one (unreadable ca_file)
// stops the start with its reason instead of crash-looping its worker.
caf::expected<std::shared_ptr<http_io>> make_http_io(const node_config& cfg) {
  std::shared_ptr<http_io> io;
  if (needs_http(cfg)) {
    io = std::make_shared<http_io>(1);
    for (auto& p : cfg.providers)
      if (is_http_kind(p.kind))
        if (auto ep = llm_endpoint::make(*io, p); !ep)
          return ep.error();
  }
  return io;
}

// Waits until the store answers (its cheapest question: its boot recovery
// runs before it takes any), `self` monitoring the root; returns why the
// node is not ready if the root gives up first (the store cannot be opened)
// or after 60 s.
caf::error await_ready(caf::scoped_actor& self, const caf::actor& root) {
  auto& sys = self->system();
  self->monitor(root);
  caf::error failure;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds{60};
  for (bool ready = false; !ready && !failure;) {
    if (auto db = lookup<persistence_actor>(sys, names::persistence))
      self->request(db, std::chrono::seconds{5}, atom::writable_v)
        .receive([&](bool) { ready = true; },
                 [](caf::error&) { /* not up yet */ });
    if (ready)
      break;
    self->receive([&](caf::down_msg& msg) { failure = msg.reason; },
                  caf::after(std::chrono::milliseconds{20}) >> [] {});
    if (!failure && std::chrono::steady_clock::now() > deadline)
      failure = caf::make_error(ec::timeout,
                                "the node did not become ready in 60 s");
  }
  return failure;
}

} // namespace

namespace {

// Creates the cluster's tables on first use, or checks that the cluster
// has `cluster.shards` shards: a node that disagrees must not start.
caf::error prepare_cluster(const node_config& cfg) {
  if (!cfg.cluster.enabled)
    return caf::none;
  auto db = cluster_store_of(cfg)();
  if (!db)
    return std::move(db.error());
  return (*db)->prepare(cfg.cluster.shards);
}

// The cluster's tables are ready and the PostgreSQL store opens (nothing
// to check on RocksDB, which persistence opens itself).
caf::error database_ready(const node_config& cfg) {
  if (auto err = prepare_cluster(cfg))
    return err;
  if (cfg.storage.backend != storage_backend::postgres)
    return caf::none;
  auto db = make_store_opener(cfg, store_options{}, nullptr)();
  return db ? caf::none : db.error();
}

// Waits up to `pause` for SIGINT or SIGTERM, which `run_node` blocks in
// this thread before the node starts; true if one came (and was taken).
bool stop_signal_within(std::chrono::milliseconds pause) {
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
  timespec timeout{static_cast<time_t>(pause.count() / 1000),
                   static_cast<long>(pause.count() % 1000) * 1000000L};
  return sigtimedwait(&stop, nullptr, &timeout) > 0;
}

// A starting node's database may not answer yet (starting, restarting,
// slow under load): tries again every second until it is ready or
// `storage.postgres.startup_wait` has passed, logging each failure, and
// then fails with the last one. A configuration error (a wrong shard
// count) is final at once: no wait mends it. Sets `stopped` when SIGINT
// or SIGTERM ends the wait.
caf::error wait_for_database(const node_config& cfg, bool& stopped) {
  using namespace std::chrono;
  auto wait = duration_cast<milliseconds>(cfg.storage.postgres.startup_wait);
  auto deadline = steady_clock::now() + wait;
  for (bool waited = false;; waited = true) {
    auto err = database_ready(cfg);
    auto left = duration_cast<milliseconds>(deadline - steady_clock::now());
    if (!err || err == ec::config_invalid)
      return err;
    if (left.count() <= 0)
      return !waited ? err
                     : caf::make_error(static_cast<ec>(err.code()),
                                       "the database was not ready within "
                                       "storage.postgres.startup_wait ("
                                         + std::to_string(wait.count())
                                         + " ms): " + readable_message(err));
    auto pause = std::min<milliseconds>(seconds{1}, left);
    service_notify::status("waiting for the database: "
                           + readable_message(err));
    spdlog::warn("the database is not ready (trying again in {} ms, {} ms "
                 "left of storage.postgres.startup_wait): {}",
                 pause.count(), left.count(), render(err));
    stopped = stop_signal_within(pause);
    if (stopped)
      return caf::none;
  }
}

} // namespace

caf::expected<std::unique_ptr<node>> node::start(caf::actor_system& sys,
                                                 const node_config& cfg) {
  std::error_code fs_err;
  // The owner's only (RocksDB's files, the stored messages): made 0700
  // whatever the umask of whoever starts the node.
  if (std::filesystem::create_directories(cfg.data_dir, fs_err))
    std::filesystem::permissions(cfg.data_dir,
                                 std::filesystem::perms::owner_all, fs_err);
  if (fs_err)
    return caf::make_error(ec::storage_open_failed,
                           "cannot create data folder '" + cfg.data_dir
                             + "': " + fs_err.message());
  auto io = make_http_io(cfg);
  if (!io)
    return io.error();
  bool stopped = false;
  if (auto err = wait_for_database(cfg, stopped))
    return err;
  if (stopped)
    return std::unique_ptr<node>{};
  auto handler = std::make_shared<bridge_handler>(sys);
  auto started = ws_server::start(cfg.gateway, handler, cfg.name,
                                  dashboard_files());
  if (!started)
    return started.error();
  std::shared_ptr<ws_server> server = std::move(*started);
  handler->attach(server);
  auto spec = root_spec(cfg, server, true, *io);
  if (!spec) {
    server->stop();
    return spec.error();
  }
  auto root = sys.spawn(supervisor, std::move(*spec));
  components_of(sys).put(names::root,
                         caf::actor_cast<caf::strong_actor_ptr>(root));
  caf::scoped_actor self{sys};
  if (auto failure = await_ready(self, root)) {
    self->send_exit(root, caf::exit_reason::user_shutdown);
    components_of(sys).erase(names::root);
    server->stop();
    return failure;
  }
  self->demonitor(root);
  return std::unique_ptr<node>{
    new node(sys, std::move(server), std::move(*io), root)};
}

void node::drain(caf::timespan wait) {
  health_->draining();
  auto orch = lookup<orchestrator_actor>(sys_, names::orchestrator);
  if (!orch)
    return;
  spdlog::info(
    "draining: waiting up to {} ms for the turns under way",
    std::chrono::duration_cast<std::chrono::milliseconds>(wait).count());
  caf::scoped_actor self{sys_};
  // The conversations still running at `wait` are stopped, which takes a
  // little longer.
  self->request(orch, wait + std::chrono::seconds{10}, atom::drain_v, wait)
    .receive([](caf::ok_atom) { spdlog::info("drained"); },
             [](caf::error& err) {
               spdlog::warn("the drain did not finish: {}", render(err));
             });
}

uint16_t node::port() const {
  return server_ ? server_->port() : 0;
}

const caf::actor& node::root() const {
  return root_;
}

void node::stop() {
  health_ = nullptr;
  if (root_) {
    caf::scoped_actor self{sys_};
    self->monitor(root_);
    self->send_exit(root_, caf::exit_reason::user_shutdown);
    self->receive([](caf::down_msg&) {});
    components_of(sys_).erase(names::root);
    root_ = nullptr;
  }
  if (server_) {
    server_->stop();
    server_ = nullptr;
  }
  // After the tree: no worker is left to start a call.
  io_ = nullptr;
}

namespace {

// Takes SIGINT and SIGTERM on a thread of its own: the first asks `main`
// to drain, the second stops the tree at once (still safe: a stop commits
// what is staged, and every message acknowledged is answered after the
// next start). SIGUSR1 ends the thread once `done` is set (an outside
// SIGUSR1 is ignored).
std::thread signal_thread(sigset_t signals, caf::actor main, caf::actor root,
                          const std::atomic<bool>& done) {
  return std::thread{[signals, main, root, &done] {
    for (int received = 0;;) {
      int sig = 0;
      if (sigwait(&signals, &sig) != 0 || done)
        return;
      if (sig == SIGUSR1)
        continue;
      if (received++ == 0) {
        caf::anon_send(main, atom::drain_v);
      } else {
        spdlog::warn("second signal: stopping now");
        caf::anon_send_exit(root, caf::exit_reason::user_shutdown);
      }
    }
  }};
}

// Runs until the root stops on its own, or a signal drains and stops the
// node; returns the root's exit reason.
caf::error wait_for_stop(caf::scoped_actor& self, node& n,
                         const sigset_t& signals, caf::timespan drain_timeout) {
  std::atomic<bool> done{false};
  auto waiter = signal_thread(signals, caf::actor{self}, n.root(), done);
  caf::error reason;
  bool stopped = false;
  while (!stopped)
    self->receive(
      [&](caf::down_msg& msg) {
        reason = msg.reason;
        stopped = true;
      },
      [&](atom::drain) {
        n.drain(drain_timeout);
        self->send_exit(n.root(), caf::exit_reason::user_shutdown);
      });
  done = true;
  pthread_kill(waiter.native_handle(), SIGUSR1);
  waiter.join();
  return reason;
}

} // namespace

namespace {

// The node's side of tool containment: its /proc files are root's, so a
// tool running as the node's user cannot read its environment (API keys,
// tokens) or memory; orphans of tool runs come back to it (to be killed);
// and tool processes run at most `threads.max_concurrent_tools` at once.
void contain_tools(const node_config& cfg) {
  if (::prctl(PR_SET_DUMPABLE, 0) != 0)
    spdlog::warn("cannot make the node non-dumpable ({}): tools running as "
                 "its user can read its environment",
                 std::strerror(errno));
  if (!become_child_subreaper())
    spdlog::warn("cannot become a child subreaper ({}): a tool's process "
                 "that leaves its process group may outlive its run",
                 std::strerror(errno));
  tool_run_slots().set_limit(cfg.threads.max_concurrent_tools);
}

} // namespace

int run_node(const node_config& cfg) {
  // Everything the node creates (data, logs, sockets; also what its tools
  // write) is its user's only: files 0600, folders 0700.
  ::umask(S_IRWXG | S_IRWXO);
  if (auto err = init_logging(cfg.logging, cfg.name, configured_secrets(cfg))) {
    std::cerr << "keel-node: " << cfg.source << ": " << render(err) << '\n';
    return 2;
  }
  for (auto& warning : cfg.warnings)
    spdlog::warn("{}: {}", cfg.source, warning);
  if (auto err = ensure_fd_limit(cfg.gateway.max_connections
                                   + cfg.gateway.max_unauthenticated,
                                 store_max_open_files)) {
    spdlog::error("cannot start node '{}': {}", cfg.name, render(err));
    std::cerr << "keel-node: cannot start: " << error_message(err) << '\n';
    return 2;
  }
  contain_tools(cfg);
  // Signals are taken by a dedicated thread (sigwait), so block them in
  // every thread before any is started.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGUSR1);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  system_config sys_cfg;
  sys_cfg.configure_node(cfg);
  caf::actor_system sys{sys_cfg};
  auto started = node::start(sys, cfg);
  if (!started) {
    spdlog::error("cannot start node '{}': {}", cfg.name,
                  render(started.error()));
    std::cerr << "keel-node: cannot start: " << render(started.error()) << '\n';
    return 1;
  }
  if (!*started) {
    spdlog::info("node '{}' stopped while it waited for its database",
                 cfg.name);
    return 0;
  }
  auto& n = **started;
  std::cout << "keel-node: listening on " << cfg.gateway.host << ':' << n.port()
            << std::endl;
  spdlog::info("node '{}' ready on {}:{} (data in {})", cfg.name,
               cfg.gateway.host, n.port(), cfg.data_dir);
  caf::scoped_actor self{sys};
  self->monitor(n.root());
  auto reason = wait_for_stop(self, n, signals, cfg.shutdown.drain_timeout);
  n.stop();
  if (reason == caf::exit_reason::user_shutdown) {
    spdlog::info("node '{}' stopped", cfg.name);
    return 0;
  }
  spdlog::error("node '{}' stopped: {}", cfg.name, render(reason));
  std::cerr << "keel-node: stopped: " << render(reason) << '\n';
  return 1;
}

} // namespace keel
