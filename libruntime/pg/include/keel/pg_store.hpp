#pragma once

// The PostgreSQL backend of `store`: the same records under the same keys
// as the RocksDB backend, one table per family in the schema `keel`, each
// `(key bytea PRIMARY KEY, value bytea, writer text, writer_epoch bigint,
// written_at timestamptz)`. A group is one transaction per connection,
// committed with synchronous_commit on.

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>

#include "keel/shard_table.hpp"
#include "keel/store.hpp"

namespace keel {

/// The PostgreSQL schema version this build creates and reads (the table
/// layout; the records in them carry `schema_version` in `meta` as on
/// RocksDB). 2: every data table has the audit columns `writer`,
/// `writer_epoch` and `written_at`, which a fenced transaction (a cluster
/// node's) fills in each row it puts: the node, the epoch at which the
/// fence found it owning the shard of the row's thread (NULL if the
/// transaction was not fenced on that shard), and the transaction's now().
/// Rows put without a fence (one node, `keelctl migrate`; `meta` and
/// `health` always) have all three NULL. A writable open upgrades a layout
/// 1 database in place (adds the columns); a read-only open reads layout 1
/// as it is. A newer layout refuses to open.
constexpr int pg_layout_version = 2;

struct pg_store_options {
  /// A libpq URI or conninfo string; never shown in messages.
  std::string url;
  /// Connections kept open. A group's writes are spread over them by
  /// thread: a thread's writes always go over the same connection.
  size_t connections = 2;
  /// The server cancels a statement running longer (statement_timeout).
  std::chrono::milliseconds statement_timeout{std::chrono::seconds{10}};
  /// How long connecting may take.
  std::chrono::milliseconds connect_timeout{std::chrono::seconds{5}};
  /// Read only: no tables created, every write fails (`keelctl verify`).
  bool read_only = false;
  /// In a cluster, the node's shard table: every transaction that writes a
  /// thread's rows first checks in the database, with the shard rows
  /// locked FOR SHARE, that this node still owns each of those threads'
  /// shards at the epoch it holds them at; if not, nothing of it commits
  /// and the write fails with `ec::not_owner`. Writes of no thread (meta,
  /// health) are not fenced. Null (one node): no fence.
  std::shared_ptr<const shard_table> fence;
};

/// Connects, creates the schema on first use (or checks the one there) and
/// returns the store. Fails with `ec::storage_open_failed` naming the
/// reason (never the URL).
caf::expected<std::unique_ptr<store>>
open_pg_store(const pg_store_options& opts);

} // namespace keel
