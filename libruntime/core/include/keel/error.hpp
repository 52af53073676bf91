#pragma once

#include <cstdint>
#include <string>

#include <caf/error.hpp>
#include <caf/expected.hpp>
#include <caf/make_message.hpp>
#include <caf/message.hpp>

namespace keel {

/// Keel's error codes. Context (a key path, a thread id, a file name) is
/// attached at the call site: `make_error(ec::config_invalid, "gateway.port:
/// expected an integer in 1..65535")`.
enum class ec : uint8_t {
  /// Not an error.
  none = 0,
  /// A configuration file could not be read.
  config_unreadable,
  /// A configuration value is missing, unknown, of the wrong type or invalid.
  config_invalid,
  /// A client frame is not valid JSON, has an unknown type or bad fields.
  bad_frame,
  /// A client frame or text exceeds a configured size limit.
  too_large,
  /// The client did not present the configured token.
  unauthorized,
  /// A thread, entry or actor does not exist.
  not_found,
  /// The database could not be opened or its schema is not ours.
  storage_open_failed,
  /// A read or write against the database failed (disk full, I/O error).
  storage_io,
  /// A stored record could not be decoded.
  storage_corrupt,
  /// Every provider of a pool failed for this request.
  provider_failed,
  /// A provider did not answer in time.
  provider_timeout,
  /// A provider answered with something that cannot be used.
  provider_bad_answer,
  /// A provider refused the request itself (a 4xx other than auth, quota,
  /// rate limit or model): retrying cannot help.
  provider_rejected,
  /// The conversation no longer fits the model's context window.
  context_overflow,
  /// A turn failed inside the conversation actor (exception or error).
  turn_failed,
  /// A component is not running (restarting, shutting down).
  unavailable,
  /// A bounded queue is full.
  overloaded,
  /// A request conflicts with the current state (e.g. draining).
  conflict,
  /// A network connection failed or was refused.
  connection_failed,
  /// A peer spoke the protocol wrongly.
  protocol_violation,
  /// An operation did not complete in time.
  timeout,
  /// Exit reason of an orderly stop: a supervisor stops its children with it,
  /// and exits with it after its restart intensity was exceeded. Not an
  /// abnormal exit (a transient child exiting with it is not restarted).
  shutdown,
  /// Exit reason of an actor killed on purpose (`keelctl kill`); abnormal,
  /// and, unlike CAF's untrappable `exit_reason::kill`, trappable.
  killed,
  /// The thread was cancelled (closed): it takes no new messages.
  thread_closed,
  /// A pending message of a thread was answered by its cancellation.
  cancelled,
  /// A new thread would pass the node's `threads.max_stored_threads`.
  thread_limit,
  /// This node does not own the thread's shard (any more): the write was
  /// fenced off, or the message belongs on another node.
  not_owner,
  /// A spawn or a message between agents would pass a limit of the agent
  /// tree (`threads.agents`).
  agent_limit,
  /// Every provider of a pool refused the credentials (401/403, or a key
  /// missing): the node is not set up to answer.
  provider_unauthorized,
  /// Every provider of a pool has used up its credit or quota (402,
  /// `insufficient_quota`).
  credits_exhausted,
  /// The node is draining before it stops: it takes no new work (send it
  /// to another node, or again after the restart).
  draining,
  /// A message or spawn names an agent the node does not have (and no
  /// system agent answers in its place).
  unknown_agent,
  /// A message names another agent than the one its thread is bound to.
  agent_mismatch,
};

/// Returns the stable, machine-readable name of `x` (also used on the wire).
const char* to_string(ec x);

/// Keel's error category, registered with the actor system configuration.
constexpr caf::atom_value error_category = caf::atom("keel");

/// Renders a `caf::error` of any category as a single human-readable line.
std::string render(const caf::error& err);

/// Returns the human-readable context message attached to `err`, or an empty
/// string if there is none.
std::string error_message(const caf::error& err);

/// What a person should read about `err`: its context message, or the
/// rendered error when it has none.
std::string readable_message(const caf::error& err);

/// Returns the wire name of `err`'s code: Keel codes by name; CAF's
/// `request_receiver_down` and `request_timeout` (the receiver stopped, or
/// did not answer in time) as `"unavailable"`; every other CAF error as
/// `"internal"`, which only a bug of the node sends.
std::string error_code_name(const caf::error& err);

} // namespace keel

CAF_ERROR_CODE_ENUM(keel::ec, "keel")
