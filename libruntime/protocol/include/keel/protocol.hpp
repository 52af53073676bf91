#pragma once

// The client wire protocol (version 1): JSON text frames over WebSocket.
// docs/protocol.md is the reference; this codec is its only implementation,
// used by the gateway, keelctl, keel-bench and the tests.

#include <cstdint>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "keel/error.hpp"
#include "keel/types.hpp"

namespace keel::protocol {

/// The protocol version this build speaks (sent in the `hello` frame).
constexpr int version = 1;

/// The WebSocket endpoint path.
constexpr const char* ws_path = "/ws";

/// Largest `limit` a history request may ask for.
constexpr size_t max_history_limit = 1000;

/// Kinds of client frames.
enum class client_frame_type : uint8_t {
  send,
  subscribe,
  unsubscribe,
  history,
  ping,
  /// Spawn a child agent of `thread` named `child`.
  spawn,
  /// Cancel `thread` and all its descendants.
  cancel,
};

/// A decoded, validated client frame.
struct client_frame {
  client_frame_type type = client_frame_type::ping;
  /// The client's id for this frame: the message id for `send` (the
  /// deduplication key), a correlation id for the others (optional there).
  std::string id;
  /// The thread (`send`, `subscribe`, `unsubscribe`, `history`).
  std::string thread;
  /// The message text (`send`).
  std::string text;
  /// History: return entries with `seq > after`.
  seq_t after = 0;
  /// History: at most this many entries.
  size_t limit = 100;
  /// Spawn: the child's thread id.
  std::string child;
  /// Send and spawn: the agent the new thread binds to (empty: the default
  /// agent for a send, the parent's for a spawn).
  std::string agent;
};

/// Why a client frame was refused. `code` is machine-readable and stable:
/// bad_json, bad_frame (not a JSON object), unknown_type, missing_field,
/// wrong_type, bad_value, too_large, invalid_utf8, binary_frame (the last
/// one is produced by the server, not by `decode_client_frame`).
struct frame_error {
  std::string code;
  /// Human-readable explanation naming the field.
  std::string message;
  /// The frame's `id`, when present and valid (so the client can correlate).
  std::string id;
  /// The frame's `thread`, when present and valid.
  std::string thread;
};

/// Limits applied while decoding.
struct decode_limits {
  /// Longest `text` in bytes.
  size_t max_text_bytes = 64 * 1024;
};

/// Decodes and validates one client text frame. Unknown fields are ignored
/// and a `null` field counts as absent (forward compatibility).
std::variant<client_frame, frame_error>
decode_client_frame(std::string_view text, const decode_limits& limits);

// -- server frames (encoding) -------------------------------------------------

/// Sent once after the upgrade: `{"type":"hello","protocol":1,"node":...}`.
std::string hello_frame(const std::string& node);

/// The message is durable: `{"type":"ack","thread","id","seq","duplicate"}`.
std::string ack_frame(const std::string& thread, const std::string& client_id,
                      seq_t seq, bool duplicate);

/// What a chat shows the user while a turn goes on despite a setback.
namespace status_texts {

/// The turn is retried ("retrying", "retrying_provider").
constexpr const char* retrying = "Just a moment while I think about that...";
/// The pool moves on to the next provider of its chain ("failing_over").
constexpr const char* model_fallback = "Give me one more moment...";
/// A tool failed once too often and is disabled ("tool_disabled").
constexpr const char* tool_failed
  = "I ran into an issue with that action. Let me try another approach.";
/// A tool's command ran past its timeout and was stopped
/// ("tool_timed_out").
constexpr const char* tool_timed_out
  = "A command I was running timed out. Let me know if you'd like me to try "
    "again.";

} // namespace status_texts

/// What a chat shows the user for a status `state` (`status_texts`);
/// empty for the other states.
std::string status_text(std::string_view state);

/// A status event of a thread, about the message `client_id` / `reply_to`.
/// States: "thinking", "retrying" (storing failed, the turn is retried),
/// "retrying_provider", "failing_over", "stream_interrupted", "tool",
/// "tool_disabled", "tool_timed_out" and more; `detail`, when
/// non-empty, says what happened in words for operators (sent as `detail`),
/// `text` what to show the user (`status_text`, sent when non-empty).
std::string status_frame(const std::string& thread,
                         const std::string& client_id, seq_t reply_to,
                         const std::string& state,
                         const std::string& detail = {});

/// Streamed text of the answer to `client_id` / `reply_to` as the provider
/// produces it: `{"type":"delta","thread","id","reply_to","attempt","text"}`.
/// Deltas of a later `attempt` start the answer over; only the `reply` frame
/// is the complete, stored answer.
std::string delta_frame(const std::string& thread, const std::string& client_id,
                        seq_t reply_to, uint32_t attempt,
                        std::string_view text);

/// A reply (entry.kind == reply), a tool step (entry.kind == tool, a `tool`
/// frame carrying `thread`, `seq`, `reply_to`, `id`, `tool` and `text`)
/// or a descriptive error in the thread
/// (entry.kind == error, encoded as an `error` frame carrying `thread`,
/// `reply_to`, `seq`, `client_id` and, when set, the operators' `detail`).
std::string outcome_frame(const std::string& thread, const log_entry& entry);

/// An error about a frame or request: `{"type":"error","code","message",...}`
/// with `id` and `thread` when known.
std::string error_frame(const std::string& code, const std::string& message,
                        const std::string& id = {},
                        const std::string& thread = {});

/// Convenience: the error frame for a refused client frame.
std::string error_frame(const frame_error& err);

/// A page of history: `{"type":"history","id","thread","entries","more"}`.
std::string history_frame(const std::string& id, const history_page& page);

/// Confirms a subscribe or unsubscribe: `{"type":"subscribed","thread",
/// "subscribed":true|false,"id"}`. Events of the thread flow (or stop) from
/// this frame on.
std::string subscribed_frame(const std::string& thread, bool subscribed,
                             const std::string& id);

/// A spawn is durable (the child's session and tree link are synced):
/// `{"type":"spawned","id","thread","child","created"}`; `created` is false
/// for a resent spawn of an existing child.
std::string spawned_frame(const spawn_result& result, const std::string& id);

/// A cancel is done: `{"type":"cancelled","id","thread","threads"}` listing
/// every thread it closed (the thread and its descendants).
std::string cancelled_frame(const std::string& thread,
                            const std::vector<std::string>& threads,
                            const std::string& id);

/// Answers a ping: `{"type":"pong","id"}`.
std::string pong_frame(const std::string& id);

// -- client frames (encoding) and server frames (decoding), for clients ------

std::string send_frame(const std::string& thread, const std::string& id,
                       const std::string& text, const std::string& agent = {});
std::string subscribe_frame(const std::string& thread,
                            const std::string& id = {});
std::string unsubscribe_frame(const std::string& thread,
                              const std::string& id = {});
std::string history_request_frame(const std::string& thread,
                                  const std::string& id, seq_t after,
                                  size_t limit);
std::string spawn_frame(const std::string& parent, const std::string& child,
                        const std::string& id, const std::string& agent = {});
std::string cancel_frame(const std::string& thread, const std::string& id = {});
std::string ping_frame(const std::string& id);

/// A server frame as a client sees it.
struct server_frame {
  /// The `type` field.
  std::string type;
  /// The whole frame.
  nlohmann::json body;
};

/// Parses a server frame; fails with ec::protocol_violation if the text is
/// not a JSON object with a string `type`.
caf::expected<server_frame> decode_server_frame(std::string_view text);

} // namespace keel::protocol
