#pragma once

// Supervisors with Erlang/OTP semantics (restart types, one_for_one,
// one_for_all, rest_for_one, dynamic children, restart intensity, ordered
// shutdown with timeouts) plus restart backoff with jitter and messages held
// for a child while it restarts. docs/supervision.md describes the semantics
// and how they differ from OTP.

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include <caf/actor.hpp>
#include <caf/actor_addr.hpp>
#include <caf/actor_clock.hpp>
#include <caf/atom.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/response_promise.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/system_messages.hpp>

#include "keel/actors.hpp"
#include "keel/config.hpp"

namespace keel {

/// When a child is restarted (OTP's restart types).
enum class restart_type : uint8_t {
  /// Always restarted.
  permanent,
  /// Restarted only after an abnormal exit (see `is_normal_exit`).
  transient,
  /// Never restarted; forgotten once it exits.
  temporary,
};

/// Returns "permanent", "transient" or "temporary".
std::string to_string(restart_type x);

/// Whether an exit reason is normal for restart decisions: no error,
/// `caf::exit_reason::normal`, `caf::exit_reason::user_shutdown` or
/// `ec::shutdown` (with any context). Everything else, including `ec::killed`
/// and CAF's `exit_reason::kill`, is abnormal.
bool is_normal_exit(const caf::error& reason);

/// How a supervisor stops a child (OTP's shutdown).
struct shutdown_spec {
  enum kind_t : uint8_t {
    /// Exit `ec::shutdown`, then kill after `timeout` if still alive.
    timeout,
    /// Kill at once (OTP's brutal_kill).
    brutal_kill,
    /// Exit `ec::shutdown` and wait as long as it takes (for supervisors).
    infinity,
  };
  kind_t kind = timeout;
  caf::timespan after = std::chrono::seconds{5};

  /// Stop with `ec::shutdown`, kill after `d`.
  static shutdown_spec with_timeout(caf::timespan d) {
    return {timeout, d};
  }

  static shutdown_spec brutal() {
    return {brutal_kill, caf::timespan{0}};
  }

  static shutdown_spec infinite() {
    return {infinity, caf::timespan{0}};
  }
};

/// No restart backoff (OTP's behaviour: restart at once).
inline backoff_config no_backoff() {
  backoff_config result;
  result.initial = caf::timespan{0};
  result.jitter = 0;
  return result;
}

/// How the supervisor starts, names, restarts and stops one child.
struct child_spec {
  /// The child's id, unique within its supervisor; its path segment (no '/').
  std::string id;
  /// Registry name under which the current incarnation is found, if any
  /// (put on every start, erased when it stops).
  std::optional<caf::atom_value> registry_name;
  /// Spawns the child. The supervisor monitors the result (and stops it when
  /// the supervisor stops, even if the supervisor is killed).
  std::function<caf::actor(caf::local_actor* parent)> start;
  /// Restart type.
  restart_type restart = restart_type::permanent;
  /// How the child is stopped. Unset: infinity for supervisors, a 5 s
  /// timeout for workers (OTP's defaults).
  std::optional<shutdown_spec> shutdown;
  /// Whether the child is itself a supervisor: `which_children` and
  /// `kill_child` paths descend into it.
  bool supervisor = false;
  /// Delays between consecutive restarts (none by default, as OTP).
  backoff_config backoff = no_backoff();
  /// Messages held for the child while it restarts (via `atom::forward`);
  /// past this, senders get `ec::overloaded`.
  size_t buffer = 1000;

  /// The shutdown spec in effect.
  shutdown_spec effective_shutdown() const {
    if (shutdown)
      return *shutdown;
    return supervisor ? shutdown_spec::infinite()
                      : shutdown_spec::with_timeout(std::chrono::seconds{5});
  }
};

/// Starts a child of a dynamic supervisor: its id and the arguments given to
/// `atom::start_child`.
using dynamic_start_fn = std::function<caf::actor(
  caf::local_actor* parent, const std::string& id, const caf::message& args)>;

/// Configuration of a supervisor, validated when it starts (an invalid one
/// makes it exit with `ec::config_invalid` naming the field).
struct supervisor_config {
  /// The supervisor's name, for logs and errors ("root", "providers").
  std::string name = "root";
  /// Static children in start order (empty for dynamic supervisors).
  std::vector<child_spec> children;
  /// Restart intensity: more than this many restarts within `period` stop
  /// all children and the supervisor (OTP's defaults: 1 in 5 s).
  uint32_t max_restarts = 1;
  caf::timespan period = std::chrono::seconds{5};
  /// Restart strategy of a static supervisor.
  restart_strategy strategy = restart_strategy::one_for_one;
  /// A dynamic supervisor (OTP's simple_one_for_one / DynamicSupervisor):
  /// no static children; children come and go with `atom::start_child` and
  /// `atom::stop_child`, all made from `child_template` and `dynamic_start`.
  /// Restarts are one_for_one; a child that is not restarted is forgotten.
  /// Each child has its own intensity (`max_restarts` in `period`): one that
  /// exceeds it is stopped and forgotten alone. A message forwarded to a
  /// child that is not there starts it (with no arguments).
  bool dynamic = false;
  /// Template of dynamic children (its id and start are ignored).
  child_spec child_template;
  /// Starts a dynamic child.
  dynamic_start_fn dynamic_start;
  /// Seed of the jitter's random numbers; 0 seeds from std::random_device.
  uint64_t seed = 0;
};

/// Applies a supervisor's YAML settings (strategy, intensity, and shutdown
/// timeout, buffer and backoff of every worker child and of the template)
/// to `cfg`. Child supervisors keep shutdown infinity.
void apply_settings(supervisor_config& cfg, const supervisor_settings& s);

/// Checks a supervisor config; `ec::config_invalid` naming the field.
caf::error validate(const supervisor_config& cfg);

/// Lifecycle of a child.
enum class child_status : uint8_t {
  /// Its current incarnation runs.
  running,
  /// Dead; a restart is pending (backoff or a group restart).
  restarting,
  /// Asked to stop; waiting for it to exit.
  stopping,
  /// Not running and not going to be restarted.
  stopped,
};

/// Returns "running", "restarting", "stopping" or "stopped".
const char* to_string(child_status x);

/// A message for a child, held while the child restarts; delivered with its
/// original sender and request id.
struct held_message {
  caf::strong_actor_ptr sender;
  caf::message_id mid;
  std::vector<caf::strong_actor_ptr> stages;
  caf::message content;
};

/// A supervisor's record of one child.
struct child_entry {
  /// A dynamic child's spec has no `start`: the supervisor's
  /// `dynamic_start` starts it with `dynamic_args` (no closure per child).
  child_spec spec;
  /// Position in start order (ascending; never reused).
  uint64_t order = 0;
  /// A dynamic child's arguments to `atom::start_child`.
  caf::message dynamic_args;
  /// The current incarnation, if any.
  caf::actor actor;
  child_status status = child_status::stopped;
  uint64_t restarts = 0;
  caf::error last_exit;
  /// When the current (or last) incarnation started.
  caf::actor_clock::time_point started;
  /// Base delay of the next restart; zero: `backoff.initial`.
  caf::timespan next_delay{0};
  /// Token of the child's pending timer (backoff or shutdown); a timer
  /// message with another token is stale.
  uint64_t timer = 0;
  /// While stopping: restart it afterwards (part of a group restart).
  bool restart_pending = false;
  /// While stopping: forget it afterwards.
  bool remove_on_stop = false;
  /// Messages held while it restarts, in arrival order. (Vectors here
  /// allocate nothing while empty, as they are for nearly every child of a
  /// dynamic supervisor; a deque took about 0.6 KB each.)
  std::vector<held_message> held;
  /// `atom::stop_child` requests waiting for it to stop.
  std::vector<caf::response_promise> stop_waiters;
  /// Times of its recent restarts (a dynamic child's own intensity window).
  std::vector<caf::actor_clock::time_point> restart_times;
};

/// A sequence of stops the supervisor works through (OTP does these
/// synchronously; here other child exits wait in `deferred`).
struct stop_plan {
  /// Children still to stop, one after another (static supervisors).
  std::deque<uint64_t> queue;
  /// The child being stopped now (0: none).
  uint64_t current = 0;
  /// Stop everything at once (dynamic supervisors, as OTP).
  bool parallel = false;
  /// Quit with `quit_reason` when done; otherwise restart `group`.
  bool shutdown = false;
  caf::error quit_reason;
  /// Children to start again afterwards, in start order.
  std::vector<uint64_t> group;
  /// Delay before the group restart (the failed child's backoff).
  caf::timespan delay{0};
};

/// State of a supervisor. Handlers are thin; the logic lives here.
struct supervisor_state {
  static inline const char* name = "keel.supervisor";

  using self_ptr = caf::event_based_actor*;
  using time_point = caf::actor_clock::time_point;

  explicit supervisor_state(self_ptr self);

  self_ptr self;
  supervisor_config cfg;
  /// Children by start order.
  std::map<uint64_t, child_entry> children;
  /// Child order by id.
  std::unordered_map<std::string, uint64_t> by_id;
  /// Child order by the address of its running incarnation; shared with
  /// the exit functor that stops the children if the supervisor dies.
  std::shared_ptr<std::unordered_map<caf::actor_addr, uint64_t>> by_addr;
  /// Times of recent restarts (the intensity window of a static
  /// supervisor; dynamic children count their own).
  std::vector<time_point> restarts;
  /// Next child order and next timer token.
  uint64_t next_order = 1;
  uint64_t next_token = 1;
  /// Children currently stopping.
  size_t stopping = 0;
  /// The stop sequence in progress, if any.
  std::optional<stop_plan> plan;
  /// A group restart waiting for its backoff: members and timer token.
  std::vector<uint64_t> pending_group;
  uint64_t group_timer = 0;
  /// Child exits seen during a stop plan, decided after it.
  std::deque<std::pair<uint64_t, caf::error>> deferred;
  /// Set once the supervisor stops its children to quit.
  bool shutting_down = false;
  /// Jitter source.
  std::mt19937_64 rng;
  /// Set once `quit` was called (possibly during `init`).
  bool quit_called = false;

  /// Validates `cfg` and starts the static children in order.
  caf::error init(supervisor_config config);

  /// A monitored child exited.
  void on_down(const caf::down_msg& msg);

  /// Someone (the parent, an operator) asked the supervisor to exit.
  void on_exit(const caf::exit_msg& msg);

  /// The backoff of a child (order) or of the pending group (order 0)
  /// elapsed.
  void on_restart_timer(uint64_t order, uint64_t token);

  /// A child's shutdown timeout elapsed: kill it.
  void on_stop_timer(uint64_t order, uint64_t token);

  /// Delivers or holds the current message's content for a child.
  void forward(const std::string& id, caf::message content);

  /// Answers `which_children` (asks child supervisors for theirs).
  void which_children(caf::response_promise rp);

  /// Sends an exit to the child at `path`.
  void kill(const std::string& path, caf::error reason,
            caf::response_promise rp);

  /// Starts a dynamic child.
  caf::expected<caf::actor> start_dynamic(const std::string& id,
                                          const caf::message& args);

  /// Stops a child, answering `rp` once it is gone.
  void terminate(const std::string& id, caf::response_promise rp);

  /// The child with the given id, or nullptr.
  child_entry* find(const std::string& id);

  /// Snapshot of the children (without grandchildren).
  std::vector<child_info> snapshot();

  /// Decides what an exit of a child (order) means: restart (per restart
  /// type, strategy, intensity and backoff), forget, or give up.
  void decide(uint64_t order, caf::error reason);

private:
  bool start(child_entry& child);
  void exited(child_entry& child, caf::error reason);
  bool intensity_exceeded(std::vector<time_point>& window);
  void give_up(child_entry& child, const caf::error& reason);
  caf::timespan backoff_delay(child_entry& child, time_point now);
  void schedule_restart(child_entry& child, caf::timespan delay);
  void begin_group(uint64_t failed, caf::timespan delay);
  void start_group();
  void begin_shutdown(caf::error reason);
  bool begin_stop(child_entry& child);
  void stopped(child_entry& child);
  void plan_step();
  void plan_done();
  void release_held(child_entry& child, const caf::error& why);
  void deliver_held(child_entry& child);
  void erase(uint64_t order);
  void finish();
};

/// The supervisor behaviour: validates `cfg`, starts the children in order,
/// monitors them and applies restart types, strategy, intensity and
/// backoff. See `supervisor_actor` for its messages.
caf::behavior supervisor(caf::stateful_actor<supervisor_state>* self,
                         supervisor_config cfg);

} // namespace keel
