// The node's wait for its database on start: the cluster's tables prepared
// and the PostgreSQL store open, tried again until it is ready.

#include "node_impl.hpp"

#include <algorithm>
#include <chrono>
#include <csignal>
#include <string>

#include <spdlog/spdlog.h>

#include "keel/service_notify.hpp"

namespace keel::node_impl {

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

} // namespace

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

} // namespace keel::node_impl
