#pragma once

// The data model shared by the store, the actors and the wire protocol.
// Every type here is a plain struct with an `inspect` overload so it can
// travel in CAF messages (and, later, across nodes).

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <caf/meta/type_name.hpp>

namespace keel {

/// Milliseconds since the Unix epoch (wall clock, for display and records).
using millis = int64_t;

/// Per-thread sequence number. Every log entry of a thread gets the next one;
/// inbox and context entries reuse the sequence number of the log entry they
/// came from. Starts at 1; 0 means "none".
using seq_t = uint64_t;

/// Lifecycle of a thread's session record (seed 004).
enum class session_state : uint8_t {
  /// A conversation actor is running for the thread.
  active,
  /// No actor runs; the thread comes back on its next message.
  suspended,
  /// Closed by its owner; new messages are refused.
  closed,
};

/// Returns the stored name of `x` ("ACTIVE", "SUSPENDED", "CLOSED").
const char* to_string(session_state x);

/// Parses a stored session state name.
std::optional<session_state> parse_session_state(const std::string& str);

/// The durable record of one thread (column family `sessions`).
struct session_record {
  /// Thread id (also the agent id).
  std::string thread;
  /// Parent thread id for sub-agents; empty for roots.
  std::string parent;
  /// Provider pool that answers this thread.
  std::string pool;
  /// Model name, when the thread pins one.
  std::string model;
  /// Current lifecycle state.
  session_state state = session_state::suspended;
  /// Creation time.
  millis created_at = 0;
  /// Opaque provider state (seed 004: stored, never interpreted).
  std::string provider_state;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, session_record& x) {
  return f(caf::meta::type_name("keel::session_record"), x.thread, x.parent,
           x.pool, x.model, x.state, x.created_at, x.provider_state);
}

/// An accepted message that has not been answered yet (column family
/// `inbox`). It stays until the turn that answers it commits.
struct inbox_entry {
  /// Sequence number of the user message in the thread's log.
  seq_t seq = 0;
  /// The client's message id, unique per thread (deduplication key).
  std::string client_id;
  /// The message text.
  std::string text;
  /// When the node accepted the message.
  millis accepted_at = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, inbox_entry& x) {
  return f(caf::meta::type_name("keel::inbox_entry"), x.seq, x.client_id,
           x.text, x.accepted_at);
}

/// What kind of visible event a log entry records.
enum class log_kind : uint8_t {
  /// A message from the user (client).
  user,
  /// The assistant's reply to a user message.
  reply,
  /// A descriptive error posted in place of a reply.
  error,
};

/// Returns the stored name of `x` ("user", "reply", "error").
const char* to_string(log_kind x);

/// Parses a stored log kind name.
std::optional<log_kind> parse_log_kind(const std::string& str);

/// One entry of a thread's visible history (column family `log`).
struct log_entry {
  /// Position in the thread.
  seq_t seq = 0;
  /// What this entry is.
  log_kind kind = log_kind::user;
  /// For user messages the client's id; for replies and errors the client id
  /// of the message they answer.
  std::string client_id;
  /// For replies and errors: the sequence number of the answered message.
  seq_t reply_to = 0;
  /// The text shown to the user.
  std::string text;
  /// For errors: the machine-readable error code; empty otherwise.
  std::string code;
  /// Which provider produced a reply (empty otherwise).
  std::string provider;
  /// When the entry was written.
  millis at = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, log_entry& x) {
  return f(caf::meta::type_name("keel::log_entry"), x.seq, x.kind,
           x.client_id, x.reply_to, x.text, x.code, x.provider, x.at);
}

/// One message of the model's working memory (column family `context`).
struct context_entry {
  /// Sequence number of the log entry this came from.
  seq_t seq = 0;
  /// "user", "assistant" or "system".
  std::string role;
  /// The message content.
  std::string content;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, context_entry& x) {
  return f(caf::meta::type_name("keel::context_entry"), x.seq, x.role,
           x.content);
}

/// Everything a conversation actor needs to resume a thread.
struct thread_snapshot {
  /// True if the thread has a session record (it was seen before).
  bool exists = false;
  /// The session record, valid if `exists`.
  session_record session;
  /// Unanswered messages in order.
  std::vector<inbox_entry> inbox;
  /// The model's working memory in order.
  std::vector<context_entry> context;
  /// The next free sequence number.
  seq_t next_seq = 1;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, thread_snapshot& x) {
  return f(caf::meta::type_name("keel::thread_snapshot"), x.exists, x.session,
           x.inbox,
           x.context, x.next_seq);
}

/// A message to append to a thread's inbox (and log) with one synced write.
struct accept_request {
  /// The thread.
  std::string thread;
  /// True for the first message of a thread: `session` is written with it.
  bool create_session = false;
  /// The session record to create, valid if `create_session`.
  session_record session;
  /// The entry to append (its `seq` assigned by the conversation actor).
  inbox_entry entry;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, accept_request& x) {
  return f(caf::meta::type_name("keel::accept_request"), x.thread,
           x.create_session, x.session, x.entry);
}

/// The outcome of an accept: where the message is, and whether it had been
/// accepted before under the same client id.
struct accept_result {
  /// Sequence number of the (possibly earlier) user message.
  seq_t seq = 0;
  /// True if the client id was already known: nothing was written.
  bool duplicate = false;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, accept_result& x) {
  return f(caf::meta::type_name("keel::accept_result"), x.seq, x.duplicate);
}

/// Everything one turn changes, committed in one synced WriteBatch: the
/// inbox entry's removal, the new context entries and the new log entries.
struct turn_commit {
  /// The thread.
  std::string thread;
  /// The inbox entry this turn answered (removed by the commit).
  seq_t inbox_seq = 0;
  /// Context entries to add.
  std::vector<context_entry> context;
  /// Log entries to add (the reply or the error).
  std::vector<log_entry> log;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, turn_commit& x) {
  return f(caf::meta::type_name("keel::turn_commit"), x.thread, x.inbox_seq,
           x.context, x.log);
}

/// A page of a thread's history.
struct history_page {
  /// The thread.
  std::string thread;
  /// Entries with `seq > after`, in order, at most `limit` of them.
  std::vector<log_entry> entries;
  /// True if more entries follow the last one returned.
  bool more = false;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, history_page& x) {
  return f(caf::meta::type_name("keel::history_page"), x.thread, x.entries,
           x.more);
}

/// A thread event pushed to subscribers (status changes and replies).
struct thread_event {
  /// The thread.
  std::string thread;
  /// The event as a ready-to-send server frame (JSON text).
  std::string frame;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, thread_event& x) {
  return f(caf::meta::type_name("keel::thread_event"), x.thread, x.frame);
}

/// Checks a thread id: 1 to 128 characters of `[A-Za-z0-9._:-]`. The
/// restricted alphabet keeps RocksDB key prefixes unambiguous.
bool valid_thread_id(const std::string& id);

/// Checks a client message id: 1 to 128 printable ASCII characters.
bool valid_client_id(const std::string& id);

/// The durable health of one provider of one pool (column family `health`,
/// key `pool + '/' + provider`), so cooldowns survive a restart. Times are
/// wall clock; an actor converts them to its own clock when restoring.
struct provider_health_record {
  std::string pool;
  std::string provider;
  /// "healthy", "degraded" or "down".
  std::string status = "healthy";
  /// "closed", "open" or "half_open".
  std::string breaker = "closed";
  /// Failures (counting against the provider) since the last success.
  uint32_t consecutive_failures = 0;
  /// Text and class (see `error_class`) of the last failure; empty if none.
  std::string last_error;
  std::string last_error_class;
  /// Last success; 0 if never.
  millis last_success = 0;
  /// End of the cooldown while down; 0 otherwise.
  millis cooldown_until = 0;
  /// Calls and failures since the pool started (not persisted totals).
  uint64_t calls = 0;
  uint64_t failures = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f,
                                        provider_health_record& x) {
  return f(caf::meta::type_name("keel::provider_health_record"), x.pool,
           x.provider, x.status, x.breaker, x.consecutive_failures,
           x.last_error, x.last_error_class, x.last_success, x.cooldown_until,
           x.calls, x.failures);
}

} // namespace keel
