#pragma once

// The durable store: RocksDB behind a small interface. RocksDB headers stay
// out of this header.
//
// Writes are staged into a group and committed with `flush()`: one WriteBatch
// written with sync=true (WAL fsynced) for everything staged since the last
// flush. That is the group commit: many callers share one fsync, and each
// staged operation is atomic because the whole group is. Until `flush()`
// returns successfully nothing staged may be acknowledged.
//
// A store is not thread-safe: one owner (the persistence actor) calls it.

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "keel/error.hpp"
#include "keel/types.hpp"

namespace keel {

/// The column families (DESIGN.md, "Persistence"), plus `client_ids`, the
/// per-thread index of client message ids used to deduplicate resends.
/// Keys are `thread + '/' + 8-byte big-endian seq` (or `thread + '/' +
/// client_id` in `client_ids`, plain `thread` in `sessions`), so a thread's
/// data is one contiguous range. Thread ids never contain '/'.
extern const std::vector<std::string> column_families;

/// The schema version this build writes (stored in `meta`).
constexpr uint32_t schema_version = 1;

/// A test hook: file-system faults the store injects on demand. The store
/// routes every file it writes through a wrapper that reads these flags on
/// each write, so a test may flip them at any time, from any thread. Meant
/// for tests and chaos runs only; grows with the fault scenarios we test.
struct fault_injection {
  /// While true, every append to a database file (WAL, SST, MANIFEST,
  /// CURRENT) fails before any byte reaches the file.
  std::atomic<bool> fail_writes{false};
  /// While true, injected failures report "no space left on device" rather
  /// than a generic I/O error.
  std::atomic<bool> no_space{false};
  /// Number of writes failed so far.
  std::atomic<uint64_t> failed_writes{0};
};

/// Options for opening a store.
struct store_options {
  /// Sync the WAL on every flush (the durability contract).
  bool sync = true;
  /// Create the database (and its folder) if it does not exist.
  bool create_if_missing = true;
  /// Test hook; null (the default) means the plain file system.
  std::shared_ptr<fault_injection> faults;
};

/// Per-store counters (for status and benchmarks).
struct store_stats {
  /// Successful non-empty flushes (synced writes).
  uint64_t flushes = 0;
  /// Operations staged since the store was opened (see `store::staged`).
  uint64_t staged_operations = 0;
  /// Flushes that failed (their groups were dropped).
  uint64_t failed_flushes = 0;
  /// Attempts to reopen the database after a failed write.
  uint64_t reopens = 0;
};

/// The durable store (RocksDB); one owner, not thread-safe.
class store {
public:
  /// Opens (or creates) the database in `dir`. Fails with
  /// `ec::storage_open_failed` naming the folder and RocksDB's reason (locked
  /// by another process, not a directory, schema from a newer version, ...).
  static caf::expected<std::unique_ptr<store>>
  open(const std::string& dir, const store_options& opts = {});

  virtual ~store();

  // Staged operations not yet flushed are dropped on destruction.

  // -- reads (see committed data only; staged writes are invisible) ---------

  /// Loads what a conversation needs to resume `thread`. A thread never seen
  /// before yields `exists == false` and `next_seq == 1`.
  virtual caf::expected<thread_snapshot> load_thread(const std::string& thread)
    = 0;

  /// Returns log entries with `seq > after`, at most `limit`.
  virtual caf::expected<history_page>
  history(const std::string& thread, seq_t after, size_t limit) = 0;

  /// Returns every thread that has at least one inbox entry, in key order.
  virtual caf::expected<std::vector<std::string>> threads_with_inbox() = 0;

  /// Returns the session record of `thread`, or `ec::not_found`.
  virtual caf::expected<session_record> session(const std::string& thread)
    = 0;

  /// Counts session records.
  virtual caf::expected<uint64_t> count_sessions() = 0;

  /// Returns every provider health record, in key order.
  virtual caf::expected<std::vector<provider_health_record>> health() = 0;
  /// Reads a `meta` value, or `ec::not_found`.
  virtual caf::expected<std::string> meta(const std::string& key) = 0;

  // -- staged writes -----------------------------------------------------------

  /// Stages accepting a message: unless `req.entry.client_id` is already
  /// known for the thread (on disk or staged), stages the inbox entry, the
  /// user log entry, the client id index entry and, if requested, the
  /// session record. Returns the seq of the message and whether it was a
  /// duplicate (then nothing is staged and `seq` is the earlier message's).
  virtual caf::expected<accept_result> stage_accept(const accept_request& req)
    = 0;

  /// Stages a turn's commit: removes the inbox entry, adds the context and
  /// log entries.
  virtual void stage_commit(const turn_commit& commit) = 0;

  /// Stages writing a session record (create or update).
  virtual void stage_session(const session_record& rec) = 0;

  /// Stages writing a provider health record (create or replace).
  virtual void stage_health(const provider_health_record& rec) = 0;
  /// Stages writing a `meta` value.
  virtual void stage_meta(const std::string& key, const std::string& value)
    = 0;

  /// Number of operations staged since the last flush: one per call of a
  /// `stage_*` function that staged something (an accept, a commit, a
  /// session, a meta value each count 1; a duplicate accept counts 0).
  virtual size_t staged() const = 0;

  /// Writes everything staged as one WriteBatch (synced when the options say
  /// so); a no-op success if nothing is staged. On failure nothing of the
  /// group is on disk, the group is dropped (its operations must be retried
  /// by their owners) and the error (`ec::storage_io`) names RocksDB's
  /// reason. A record that cannot be encoded (a string that is not UTF-8)
  /// fails its whole group the same way.
  ///
  /// RocksDB refuses all writes after a failed WAL write, so a failed flush
  /// reopens the database (replaying its WAL). If that fails too (disk still
  /// full), the store serves reads from a read-only instance and every later
  /// flush first tries to reopen it for writing. Should the failure have
  /// come from fsync itself, the group's bytes may still be in the file and
  /// reappear after the reopen: retries are harmless, as accepts deduplicate
  /// by client id and commits rewrite the same keys.
  virtual caf::error flush() = 0;

  /// Counters.
  virtual store_stats stats() const = 0;
};

} // namespace keel
