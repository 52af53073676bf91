#pragma once

// The store's column families and how its keys are built and read back.
//
// Keys are `thread + '/' + 8-byte big-endian seq` in the per-message column
// families, `thread + '/' + client_id` in `client_ids`, `parent + '/' +
// child` in `tree`, `pool + '/' + provider` in `health` and the plain thread
// id in `sessions`, so a thread's data is one contiguous range. Thread ids
// never contain '/'.

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include <string_view>

#include "keel/error.hpp"
#include "keel/types.hpp"

namespace keel::store_backend {

/// Indexes of the column families in `cf_names` (same order).
enum cf_id : size_t {
  cf_sessions,
  cf_tree,
  cf_inbox,
  cf_context,
  cf_log,
  cf_health,
  cf_dead_letters,
  cf_meta,
  cf_client_ids,
  cf_outbox,
  cf_quarantine,
  cf_deliveries,
  cf_notices,
  cf_count,
};

/// The column family names. New column families go at the end: a database
/// of an older build lacks them, and opening it for writing creates them.
constexpr std::array<const char*, cf_count> cf_names{
  "sessions",   "tree",         "inbox",   "context",    "log",
  "health",     "dead_letters", "meta",    "client_ids", "outbox",
  "quarantine", "deliveries",   "notices",
};

/// The `meta` key of the schema version.
constexpr const char* schema_key = "schema_version";

/// The first key of `thread`'s range in a column family. The range is
/// [thread + '/', thread + '0'): '0' follows '/' in ASCII.
std::string range_begin(const std::string& thread);

/// The first key after `thread`'s range.
std::string range_end(const std::string& thread);

/// The key of `seq` in `thread`: `thread/` + 8-byte big-endian seq.
std::string seq_key(const std::string& thread, seq_t seq);

/// The key of a client message id in `client_ids`.
std::string client_id_key(const std::string& thread,
                          const std::string& client_id);

/// The key of a link in `tree`.
std::string tree_key(const std::string& parent, const std::string& child);

/// The key in `quarantine` of a record moved there from `key` in `cf`:
/// `thread/CF/key`.
std::string quarantine_key(const std::string& thread, size_t cf,
                           std::string_view key);

/// The key of a provider's health record in `health`.
std::string health_key(const std::string& pool, const std::string& provider);

/// Reads the big-endian seq behind `prefix_len` bytes, if the key has the
/// shape of a seq key.
std::optional<seq_t> key_seq(std::string_view key, size_t prefix_len);

/// Renders a key for error messages: `thread/seq` for seq keys, the key
/// itself (thread ids and client ids are printable) otherwise.
std::string printable_key(size_t cf, std::string_view key);

/// The error for a record of `cf` under `key` that is not what it should
/// be: "corrupt record in CF at KEY: WHAT".
caf::error corrupt(size_t cf, std::string_view key, const std::string& what);

/// Parses a stored decimal number (a client id's seq, the schema version).
std::optional<uint64_t> parse_decimal(const std::string& str);

} // namespace keel::store_backend
