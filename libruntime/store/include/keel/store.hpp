#pragma once

// The durable store: an interface (`store`) to what Keel keeps, with two
// backends over one key-value engine interface (`keel/kv_engine.hpp`):
// RocksDB (`store::open`) and PostgreSQL (`open_pg_store`,
// `keel/pg_store.hpp`). Neither's headers are in this header.
//
// Writes are staged into a group and committed with `flush()`: on RocksDB
// one WriteBatch written with sync=true (WAL fsynced), on PostgreSQL one
// transaction per connection, for everything staged since the last flush.
// That is the group commit: many callers share one fsync, and each staged
// operation is atomic. Until `flush()` returns successfully nothing staged
// may be acknowledged.
//
// A store is not thread-safe: one owner (the persistence actor) calls it.

#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "keel/error.hpp"
#include "keel/fault_injection.hpp"
#include "keel/types.hpp"

namespace rocksdb {
class Statistics;
} // namespace rocksdb

namespace keel {

/// The column families: `sessions`, `tree`, `inbox`, `context`, `log`,
/// `health`, `dead_letters`, `meta`, plus `client_ids`, the per-thread index
/// of client message ids used to deduplicate resends, `outbox`, messages
/// between threads not delivered yet (see `outbox_entry`), `quarantine`,
/// `deliveries`, replies on their way to outbound channels (see
/// `reply_delivery`), and `notices`, what the owner was told (see
/// `owner_notice`).
/// Keys are `thread + '/' + 8-byte big-endian seq` (or `thread + '/' +
/// client_id` in `client_ids`, plain `thread` in `sessions`), so a thread's
/// data is one contiguous range. Thread ids never contain '/'.
extern const std::vector<std::string> column_families;

/// The schema version this build writes (stored in `meta`): 2, records in
/// their binary form (keel/stored_form.hpp). A store of version 1 (records
/// as JSON, which this build still reads) is marked 2 when it is opened for
/// writing.
constexpr uint32_t schema_version = 2;

/// Options for opening a store.
/// Table files RocksDB keeps open at once (its `max_open_files`): bounded,
/// so the node's file descriptor budget (`keel/fd_limit.hpp`) holds however
/// large the database grows; beyond it RocksDB reopens files as needed.
constexpr size_t store_max_open_files = 128;

struct store_options {
  /// Sync the WAL on every flush (the durability contract).
  bool sync = true;
  /// Create the database (and its folder) if it does not exist.
  bool create_if_missing = true;
  /// Open for reading only (RocksDB's read-only mode: no lock taken, works
  /// beside a running node, every stage/flush fails). For `keelctl verify`.
  bool read_only = false;
  /// Test hook; null (the default) means the plain file system.
  std::shared_ptr<fault_injection> faults;
  /// Test hook: RocksDB counts into it (`rocksdb::CreateDBStatistics()`),
  /// e.g. the WAL syncs that make each flush durable; null: no counting.
  std::shared_ptr<rocksdb::Statistics> statistics;
  /// RocksDB: all memtables together, and the shared block cache.
  size_t memtable_bytes = 64u << 20;
  size_t block_cache_bytes = 32u << 20;
};

/// A record that a lenient read (see `store::sessions(bad)`) skipped because
/// it cannot be decoded or does not match its key.
struct bad_record {
  /// The column family ("sessions", "log", ...).
  std::string column_family;
  /// The key, printable: `thread/seq` for seq keys, `parent/child` in
  /// `tree`, the thread id in `sessions`.
  std::string key;
  /// What is wrong ("record is not valid JSON", "record has seq 9", ...).
  std::string what;
};

/// What `store::stage_quarantine` moved aside for one thread.
struct quarantine_report {
  std::string thread;
  /// The records that could not be read, each with what was wrong.
  std::vector<bad_record> unreadable;
  /// Readable records moved with them: the rest of a context with a hole
  /// (the model must not see a conversation with parts missing).
  size_t readable_moved = 0;
  /// True if an unreadable context record belonged to the turn of the
  /// oldest unanswered message (seq at or after its inbox seq): the turn's
  /// committed steps went with it, and the message must be answered with
  /// an error rather than run again (a tool call may have had effects).
  /// Otherwise those steps stay: the turn resumes where it was.
  bool steps_lost = false;
};

/// One record in quarantine (column family `quarantine`, key
/// `thread/CF/original key`, value the original bytes).
struct quarantined_record {
  std::string thread;
  /// The column family it was moved from.
  std::string column_family;
  /// Its original key, printable (see `bad_record::key`).
  std::string key;
  /// Size of the stored bytes.
  uint64_t bytes = 0;
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

/// The durable store; one owner, not thread-safe. `open` returns the
/// RocksDB backend.
class store {
public:
  /// Opens (or creates) the RocksDB database in `dir`. Fails with
  /// `ec::storage_open_failed` naming the folder and RocksDB's reason (locked
  /// by another process, not a directory, schema from a newer version, ...).
  /// With `opts.read_only` nothing is created; column families the database
  /// lacks (written by an older build) read as empty.
  static caf::expected<std::unique_ptr<store>>
  open(const std::string& dir, const store_options& opts = {});

  virtual ~store();

  // Staged operations not yet flushed are dropped on destruction.

  // -- reads (see committed data only; staged writes are invisible) ---------

  /// Loads what a conversation needs to resume `thread`. A thread never seen
  /// before yields `exists == false` and `next_seq == 1`.
  virtual caf::expected<thread_snapshot> load_thread(const std::string& thread)
    = 0;

  /// Returns log entries with `seq > after`, at most `limit`, and no more
  /// than `max_bytes` of entries as the wire encodes them (`json_size`, a
  /// comma each): the page stops early (with `more`) before an entry that
  /// would pass it. The first entry is always returned, however long, so
  /// paging progresses.
  virtual caf::expected<history_page>
  history(const std::string& thread, seq_t after, size_t limit,
          size_t max_bytes = std::numeric_limits<size_t>::max())
    = 0;

  /// Returns every thread that has at least one inbox entry, in key order.
  virtual caf::expected<std::vector<std::string>> threads_with_inbox() = 0;

  /// Returns the session record of `thread`, or `ec::not_found`.
  virtual caf::expected<session_record> session(const std::string& thread) = 0;

  /// Counts session records.
  virtual caf::expected<uint64_t> count_sessions() = 0;

  /// Returns every session record, in key order. A record that cannot be
  /// decoded fails the call with `ec::storage_corrupt` naming its key.
  virtual caf::expected<std::vector<session_record>> sessions() = 0;

  /// Returns a page of the session records: at most `limit`, the first
  /// ones whose thread id sorts after `after` (from the first when empty),
  /// in key order. A seek and `limit` reads, however many are stored.
  virtual caf::expected<std::vector<session_record>>
  sessions_after(const std::string& after, size_t limit) = 0;

  /// Returns every tree link, in key order (parent, then child).
  virtual caf::expected<std::vector<tree_link>> tree_links() = 0;

  /// Returns the children of `parent` from the tree, in key order.
  virtual caf::expected<std::vector<std::string>>
  children(const std::string& parent) = 0;

  /// Returns every undelivered outbox entry, in key order.
  virtual caf::expected<std::vector<outbox_entry>> outbox() = 0;

  /// Returns the number of inbox entries per thread, for threads that have
  /// any, in key order.
  virtual caf::expected<std::vector<std::pair<std::string, uint64_t>>>
  inbox_counts() = 0;

  /// Everything stored about one thread, for the invariant checker: the
  /// whole log, the inbox, the client id index (client id -> seq) and the
  /// outbox. Fails with `ec::storage_corrupt` naming the first bad record.
  virtual caf::expected<thread_dump> dump_thread(const std::string& thread) = 0;

  /// Returns every dead letter, in key order.
  virtual caf::expected<std::vector<dead_letter>> dead_letters() = 0;

  /// Returns every reply still on its way to an outbound channel, in key
  /// order.
  virtual caf::expected<std::vector<reply_delivery>> deliveries() = 0;

  // Lenient reads for the invariant checker: like the reads above, but a
  // record that cannot be decoded (or does not match its key) is appended to
  // `bad` and skipped, so that one corrupt record hides nothing else. They
  // fail only when the database cannot be read at all.

  virtual caf::expected<std::vector<session_record>>
  sessions(std::vector<bad_record>& bad) = 0;

  virtual caf::expected<std::vector<tree_link>>
  tree_links(std::vector<bad_record>& bad) = 0;

  virtual caf::expected<std::vector<outbox_entry>>
  outbox(std::vector<bad_record>& bad) = 0;

  virtual caf::expected<thread_dump>
  dump_thread(const std::string& thread, std::vector<bad_record>& bad) = 0;

  /// Returns every quarantined record, in key order (grouped by thread).
  virtual caf::expected<std::vector<quarantined_record>> quarantined() = 0;

  /// Returns every provider health record, in key order.
  virtual caf::expected<std::vector<provider_health_record>> health() = 0;

  /// Returns every owner notice record, in key order.
  virtual caf::expected<std::vector<owner_notice>> notices() = 0;
  /// Reads a `meta` value, or `ec::not_found`.
  virtual caf::expected<std::string> meta(const std::string& key) = 0;

  // -- staged writes
  // -----------------------------------------------------------
  //
  // On a read-only store every write fails with `ec::storage_io` ("... is
  // open read-only"): the ones returning a result at once, the others (and
  // every flush) at the next flush.

  /// Stages accepting a message: unless `req.entry.client_id` is already
  /// known for the thread (on disk or staged), stages the inbox entry, the
  /// user log entry, the client id index entry and, if requested, the
  /// session record. If `req.outbox_from` is set, the outbox entry
  /// `outbox_from/outbox_seq` is removed in the same batch (also for a
  /// duplicate: the message is in the target already). Returns the seq of
  /// the message and whether it was a duplicate (then nothing else is
  /// staged and `seq` is the earlier message's).
  virtual caf::expected<accept_result> stage_accept(const accept_request& req)
    = 0;

  /// Stages a turn's commit: removes the inbox entry, adds the context and
  /// log entries, and writes what else the commit carries (session record,
  /// outbox entries). Children a turn asks for are spawned before its
  /// commit, with `stage_spawn`'s checks.
  virtual void stage_commit(const turn_commit& commit) = 0;

  /// Stages a spawn: the child's session record and its tree link. Fails
  /// with `ec::not_found` if the parent has no session (committed or
  /// staged), `ec::conflict` if the parent is CLOSED or the child exists
  /// with another parent or as a root. A child that exists under the same
  /// parent is a resent spawn: nothing is staged, `created == false`.
  virtual caf::expected<spawn_result> stage_spawn(const spawn_request& req) = 0;

  /// Stages writing `letter` to `dead_letters` (key `from/seq` of its
  /// entry), removing the entry from the outbox (a reply's letter: the
  /// reply from `deliveries`) if it is still there: a new dead letter moves
  /// out, a known one is updated. `tenure`: the writer's, as in
  /// `accept_request`.
  virtual void stage_dead_letter(const dead_letter& letter, uint64_t tenure = 0)
    = 0;

  /// Stages rewriting a reply's delivery record (key `thread/seq`), or
  /// removing it when `rec.channels` is empty. `tenure` as above.
  virtual void stage_delivery(const reply_delivery& rec, uint64_t tenure = 0)
    = 0;

  /// Stages writing a session record (create or update). `tenure`: the
  /// writer's, as in `accept_request`.
  virtual void stage_session(const session_record& rec, uint64_t tenure = 0)
    = 0;

  /// Stages rewriting a session record as this store returned it, its parent
  /// unchanged and not reopened if it was CLOSED: unlike `stage_session`,
  /// which keeps the stored parent of a record that names none, it looks
  /// nothing up (a recovery rewrites every ACTIVE session at once).
  virtual void
  stage_stored_session(const session_record& rec, uint64_t tenure = 0)
    = 0;

  /// Stages writing a provider health record (create or replace).
  virtual void stage_health(const provider_health_record& rec) = 0;

  /// Stages writing an owner notice record (key `kind/subject`; create or
  /// replace).
  virtual void stage_notice(const owner_notice& rec) = 0;
  /// Stages writing a `meta` value.
  virtual void stage_meta(const std::string& key, const std::string& value) = 0;

  /// Stages moving every record of `thread` that `load_thread` cannot read
  /// (its session, inbox, context and outbox entries, its links to children)
  /// to the `quarantine` column family, bytes unchanged: never deleted, so
  /// an operator can inspect or restore them. One unreadable context entry
  /// moves the whole context, except the steps of the oldest unanswered
  /// message's turn when they are all readable (see
  /// `quarantine_report::steps_lost`). Afterwards the thread loads (fresh, as
  /// far as the moved records go). Fails on a read-only store or if nothing of
  /// the thread can be read at all.
  virtual caf::expected<quarantine_report>
  stage_quarantine(const std::string& thread) = 0;

  /// Number of operations staged since the last flush: one per call of a
  /// `stage_*` function that staged something (an accept, a commit, a
  /// session, a meta value each count 1; a duplicate accept counts 0, or 1
  /// when it removes an outbox entry, which then needs a flush like any
  /// other write), plus 1 once a `void` stage could not stage its write
  /// (the store unreachable, read-only): that failure is the flush's to
  /// report, so the caller must flush before acknowledging anything.
  virtual size_t staged() const = 0;

  /// Writes everything staged as one group: on RocksDB one WriteBatch
  /// (synced when the options say so), on PostgreSQL one transaction per
  /// connection; a no-op success if nothing is staged. On failure the group
  /// is dropped (its operations must be retried by their owners) and the
  /// error (`ec::storage_io`) names the backend's reason; nothing of it may
  /// be acknowledged. No single record can fail a group: every record
  /// encodes (ill-formed UTF-8 in a text field is stored as U+FFFD).
  ///
  /// Part of a failed group may be stored all the same, and retries are
  /// harmless then: an accept retried finds its client id known and reports
  /// a duplicate, every other write puts the same values again. On RocksDB
  /// that happens when fsync itself failed (the bytes may reappear after
  /// the reopen); on PostgreSQL when one connection's transaction committed
  /// and another's failed. RocksDB refuses all writes after a failed WAL
  /// write, so a failed flush reopens the database (replaying its WAL); if
  /// that fails too (disk still full), the store serves reads from a
  /// read-only instance and every later flush first tries to reopen it for
  /// writing.
  virtual caf::error flush() = 0;

  /// Counters.
  virtual store_stats stats() const = 0;
};

/// What `copy_store` copied.
struct copy_report {
  /// Records per column family (every family, in `column_families` order).
  std::vector<std::pair<std::string, uint64_t>> families;
  uint64_t records = 0;
};

/// Copies every record of `from` into `to` byte for byte under the same
/// keys, in groups of at most 1,000 records, then reads both back and
/// compares every record. `to` must hold nothing but its schema version.
/// Fails naming what is in the way or the first record that differs.
caf::expected<copy_report> copy_store(store& from, store& to);

} // namespace keel
