#pragma once

#include <functional>
#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <caf/typed_event_based_actor.hpp>

#include "keel/actors.hpp"
#include "keel/store.hpp"

namespace keel {

/// Configuration of the persistence actor.
struct persistence_config {
  /// The database folder.
  std::string dir;
  /// Store options (sync, create).
  store_options options;
  /// Shared by every incarnation of the node's persistence actor: true until
  /// the first one has run the recovery on boot (a restarted persistence
  /// actor must not: conversations are live then).
  std::shared_ptr<std::atomic<bool>> boot_recovery_pending;
};

/// State of the persistence actor.
struct persistence_state {
  static inline const char* name = "keel.persistence";

  /// The open database; null if opening failed (the actor then quits).
  std::unique_ptr<store> db;

  /// Replies waiting for the pending group: each is called with the flush
  /// outcome (none on success) once the group is committed or dropped.
  std::vector<std::function<void(const caf::error&)>> waiting;

  /// True while a flush message is on its way to ourselves.
  bool flush_scheduled = false;
  /// The boot recovery's plan until the orchestrator has fetched it.
  std::optional<recovery_plan> boot_plan;

  /// Commits the pending group and answers everyone waiting on it.
  void flush();
};

/// Opens the store in `cfg.dir` and serves the persistence interface. Quits
/// with `ec::storage_open_failed` if the database cannot be opened.
persistence_actor::behavior_type
persistence(persistence_actor::stateful_pointer<persistence_state> self,
            persistence_config cfg);

} // namespace keel
