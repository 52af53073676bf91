// The node: its start (the data folder, the database, the gateway, the
// supervision tree until the store answers), its drain and its stop.

#include "keel/node.hpp"

#include <filesystem>

#include <caf/all.hpp>
#include <spdlog/spdlog.h>

#include "keel/dashboard.hpp"
#include "keel/gateway_bridge.hpp"
#include "keel/lookup.hpp"
#include "keel/orchestrator.hpp"
#include "keel/provider_pool.hpp"
#include "keel/system_config.hpp"
#include "node_impl.hpp"

namespace keel {

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
  if (auto err = node_impl::wait_for_database(cfg, stopped))
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
  std::vector<served_model> models;
  for (auto& agent : agents_of(cfg))
    models.push_back({agent.name, agent.description});
  server->set_models(std::move(models));
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

} // namespace keel
