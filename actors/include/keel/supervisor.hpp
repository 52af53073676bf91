#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <caf/actor.hpp>
#include <caf/atom.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/actor_clock.hpp>

namespace keel {

/// When a child is restarted (OTP's restart types).
enum class restart_type : uint8_t {
  /// Always restarted.
  permanent,
  /// Restarted only after an abnormal exit.
  transient,
  /// Never restarted.
  temporary,
};

/// How the supervisor starts, names and restarts one child.
struct child_spec {
  /// The child's id (its path segment, e.g. "persistence").
  std::string id;
  /// Registry name under which the current incarnation is found, if any.
  std::optional<caf::atom_value> registry_name;
  /// Spawns the child. The supervisor links itself to the result.
  std::function<caf::actor(caf::local_actor* parent)> start;
  /// Restart type.
  restart_type restart = restart_type::permanent;
};

/// Configuration of a supervisor (one_for_one for now; the full OTP
/// strategies come with the supervision issue).
struct supervisor_config {
  /// The supervisor's path name, for logs ("root", "providers").
  std::string name = "root";
  /// Children in start order.
  std::vector<child_spec> children;
  /// Restarts allowed within `period`; one more stops the supervisor.
  uint32_t max_restarts = 1;
  caf::timespan period = std::chrono::seconds{5};
};

/// A running child.
struct child_state {
  child_spec spec;
  caf::actor actor;
  uint64_t restarts = 0;
  caf::error last_exit;
};

/// State of a supervisor.
struct supervisor_state {
  static inline const char* name = "keel.supervisor";

  supervisor_config cfg;
  /// Children in start order.
  std::vector<child_state> children;
  /// Times of recent restarts (restart intensity window).
  std::deque<caf::actor_clock::time_point> restarts;
};

/// Starts the children in order, links to them, traps their exits and
/// restarts them per their restart type. More than `max_restarts` restarts
/// within `period` stop all children in reverse start order, and the
/// supervisor exits with the last child's failure.
caf::behavior supervisor(caf::stateful_actor<supervisor_state>* self,
                         supervisor_config cfg);

} // namespace keel
