#pragma once

// Process-wide logging (spdlog): Debian's CAF is built without its logger,
// so Keel logs through spdlog. Configured once from `logging:`; the formats
// are in docs/operations.md ("Logs").
//
// Log as before with `spdlog::info(...)`, `spdlog::warn(...)`, ... . What an
// event is about (the JSON fields `component`, `thread` and `message`) comes
// from the innermost `log_scope` alive on the logging thread:
//
//   [self](atom::run, const std::string& thread, seq_t seq) {
//     log_scope scope{log_component::conversation, thread, seq};
//     spdlog::warn("thread {}: turn failed: {}", thread, why); // has all 3
//
// CAF runs a handler to its end on one worker thread, so a scope made as
// the first statement of a handler (or of the function that logs) covers
// exactly that handler's events. A `.then` callback is a handler of its
// own: it needs its own scope. Without a scope the component is `node`.
// `log_scope scope{log_component::cluster};` sets only the component (the
// thread and message stay those of the enclosing scope, if any).

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <spdlog/formatter.h>
#include <spdlog/spdlog.h>

#include "keel/config.hpp"
#include "keel/error.hpp"

namespace keel {

/// Sets the level (trace, debug, info, warn, error or off), sink (stderr, or
/// `cfg.file` when it is not empty; appended to) and format (`text` or
/// `json`) of the default logger; `node` names the node in every JSON
/// event. Fails with `ec::config_invalid` naming `logging.level`,
/// `logging.format` or `logging.file` if the level or format is unknown or
/// the file cannot be opened (the logger is then left as it was). Each of
/// `secrets` (`configured_secrets`) is redacted from every event's text.
caf::error init_logging(const logging_config& cfg, const std::string& node,
                        std::vector<std::string> secrets = {});

/// The formatter `init_logging` gives its sink for `format` (`text` or
/// `json`; null for anything else): for tests and extra sinks.
std::unique_ptr<spdlog::formatter> make_log_formatter(std::string_view format,
                                                      std::string node);

/// The component names in use (any short literal works; these keep the
/// names the same across files). A component is a part of the node, not
/// an instance of it: the thread, pool or peer goes into the text.
namespace log_component {

constexpr std::string_view node = "node"; // The default: no scope.
constexpr std::string_view gateway = "gateway";
constexpr std::string_view orchestrator = "orchestrator";
constexpr std::string_view conversation = "conversation";
constexpr std::string_view persistence = "persistence";
constexpr std::string_view providers = "providers"; // The provider pools.
constexpr std::string_view supervisor = "supervisor";
constexpr std::string_view cluster = "cluster";
constexpr std::string_view peers = "peers";
constexpr std::string_view dead_letters = "dead_letters";
constexpr std::string_view channels = "channels";
constexpr std::string_view notifier = "notifier";
constexpr std::string_view tools = "tools";

} // namespace log_component

/// What the events logged on this thread now are about.
struct log_context {
  /// `node` when no scope is alive.
  std::string_view component;
  /// Empty: unknown (the JSON event has no `thread`).
  std::string_view thread;
  /// The message's sequence number in its thread, if known.
  std::optional<uint64_t> message;
};

/// The context of the innermost `log_scope` alive on the calling thread.
/// The views are valid while that scope is.
log_context current_log_context() noexcept;

/// Sets what the events logged on the calling thread are about, until it
/// is destroyed; then the enclosing scope's context applies again. Only as
/// a local variable (scopes must end in reverse order of their making).
/// `component` must outlive the scope (a literal or a `log_component`
/// name); the thread is copied. Costs a pointer swap, plus the copy of the
/// thread id. The formats read the scope when the event is formatted, which
/// is on the logging thread because the logger is synchronous.
class log_scope {
public:
  /// A component; thread and message stay those of the enclosing scope
  /// (none at the top of a handler).
  explicit log_scope(std::string_view component) noexcept;

  /// A component and thread; no message.
  log_scope(std::string_view component, std::string thread) noexcept;

  /// A component, thread and message (its sequence number in the thread).
  /// An empty thread is an unknown one: the message is then unknown too.
  log_scope(std::string_view component, std::string thread,
            uint64_t message) noexcept;

  ~log_scope();

  log_scope(const log_scope&) = delete;
  log_scope& operator=(const log_scope&) = delete;

  /// This scope's context (see `current_log_context`).
  const log_context& context() const noexcept {
    return context_;
  }

private:
  void enter() noexcept;

  std::string thread_;
  log_context context_;
  const log_scope* previous_ = nullptr;
};

} // namespace keel
