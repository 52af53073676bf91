#pragma once

// The RocksDB backend of `store`. Its members are defined in three files:
// rocksdb_store.cpp (opening, reopening, options, low-level access),
// rocksdb_store_reads.cpp and rocksdb_store_writes.cpp (the staged group
// and its flush).

#include <array>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include <rocksdb/cache.h>
#include <rocksdb/db.h>
#include <rocksdb/env.h>
#include <rocksdb/file_system.h>
#include <rocksdb/options.h>
#include <rocksdb/write_batch.h>

#include "keel/store.hpp"
#include "keys.hpp"

namespace keel::store_backend {

class rocksdb_store : public store {
public:
  rocksdb_store(std::string dir, store_options opts);

  ~rocksdb_store() override;

  /// Opens the database for writing (or, if `read_only`, for reading only).
  caf::error open_db(bool read_only);

  void close_db();

  // -- reads ------------------------------------------------------------------

  caf::expected<thread_snapshot>
  load_thread(const std::string& thread) override;

  caf::expected<history_page> history(const std::string& thread, seq_t after,
                                      size_t limit, size_t max_bytes) override;

  caf::expected<std::vector<std::string>> threads_with_inbox() override;

  caf::expected<session_record> session(const std::string& thread) override;

  caf::expected<uint64_t> count_sessions() override;

  caf::expected<std::vector<session_record>> sessions() override;

  caf::expected<std::vector<session_record>>
  sessions(std::vector<bad_record>& bad) override;

  caf::expected<std::vector<tree_link>> tree_links() override;

  caf::expected<std::vector<tree_link>>
  tree_links(std::vector<bad_record>& bad) override;

  caf::expected<std::vector<std::string>>
  children(const std::string& parent) override;

  caf::expected<std::vector<outbox_entry>> outbox() override;

  caf::expected<std::vector<outbox_entry>>
  outbox(std::vector<bad_record>& bad) override;

  caf::expected<std::vector<dead_letter>> dead_letters() override;

  caf::expected<std::vector<std::pair<std::string, uint64_t>>>
  inbox_counts() override;

  caf::expected<thread_dump> dump_thread(const std::string& thread) override;

  caf::expected<thread_dump> dump_thread(const std::string& thread,
                                         std::vector<bad_record>& bad) override;

  caf::expected<std::vector<quarantined_record>> quarantined() override;

  caf::expected<std::vector<provider_health_record>> health() override;

  caf::expected<std::string> meta(const std::string& key) override;

  // -- staged writes ----------------------------------------------------------

  caf::expected<accept_result> stage_accept(const accept_request& req) override;

  void stage_commit(const turn_commit& commit) override;

  caf::expected<spawn_result> stage_spawn(const spawn_request& req) override;

  void stage_dead_letter(const outbox_entry& entry,
                         const std::string& reason) override;

  void stage_session(const session_record& given) override;

  void stage_health(const provider_health_record& rec) override;

  void stage_meta(const std::string& key, const std::string& value) override;

  caf::expected<quarantine_report>
  stage_quarantine(const std::string& thread) override;

  size_t staged() const override;

  caf::error flush() override;

  store_stats stats() const override;

private:
  // -- opening (rocksdb_store.cpp) --------------------------------------------

  // The column families to open: ours plus any of a newer build's (RocksDB
  // insists on opening every one). Read-only: only those that exist.
  caf::expected<std::vector<rocksdb::ColumnFamilyDescriptor>>
  families_to_open(const rocksdb::Options& options, bool read_only);

  // Points `cf_` at the opened handles; fails if one of ours is missing
  // from a writable instance.
  caf::error map_families(bool read_only);

  rocksdb::Options db_options();

  rocksdb::ColumnFamilyOptions cf_options();

  // Checks the stored schema version; writes ours into a new database.
  caf::error check_schema();

  // Closes the database and opens it again, for writing if possible.
  caf::error reopen();

  caf::error ensure_writable();

  caf::error ensure_readable();

  caf::error open_failed(const rocksdb::Status& status);

  caf::error read_failed(size_t cf, const rocksdb::Status& status);

  caf::error read_only_error() const;

  // -- low-level reads (rocksdb_store.cpp) ------------------------------------

  // What a scan callback tells the scan: go on, stop, or fail.
  struct scan_result {
    enum flag_t { next, stop };
    scan_result() = default;
    explicit scan_result(flag_t x) : flag(x) {
      // nop
    }
    explicit scan_result(caf::error x) : err(std::move(x)) {
      // nop
    }
    flag_t flag = next;
    caf::error err;
  };

  // Calls `fn(key, value)` for each key of `cf` in [lower, upper); an empty
  // bound is open.
  template <class Fn>
  caf::error
  scan(size_t cf, const std::string& lower, const std::string& upper, Fn fn);

  // An iterator over `cf`; an empty one for a column family the database
  // lacks (read-only open of an older build's database).
  std::unique_ptr<rocksdb::Iterator>
  new_iterator(size_t cf, const rocksdb::ReadOptions& ropts);

  // Reads one value; NotFound in a column family the database lacks.
  rocksdb::Status get(size_t cf, const std::string& key, std::string& value);

  // -- reading records (rocksdb_store_reads.cpp) ------------------------------

  // Appends the records of `cf` in [lower, upper) to `out`. A record that
  // cannot be read fails the call, or, given `bad`, is listed there and
  // skipped.
  template <class T>
  caf::error collect(size_t cf, const std::string& lower,
                     const std::string& upper, std::vector<T>& out,
                     std::vector<bad_record>* bad);

  // Returns every record of `cf` (see `collect`).
  template <class T>
  caf::expected<std::vector<T>>
  collect_all(size_t cf, std::vector<bad_record>* bad);

  caf::expected<thread_dump> dump(const std::string& thread,
                                  std::vector<bad_record>* bad);

  // Returns the seq of the last key of `thread` in `cf`, or 0.
  caf::expected<seq_t> last_seq(size_t cf, const std::string& thread);

  // -- quarantine (rocksdb_store_quarantine.cpp) ------------------------------

  // Stages moving the records of `thread` in `cf` (decoded as `T`) that
  // cannot be read to quarantine; with `whole`, all of them once one is bad.
  template <class T>
  caf::error quarantine_range(size_t cf, const std::string& thread, bool whole,
                              quarantine_report& report);

  // Stages moving one record to quarantine.
  void move_to_quarantine(size_t cf, const std::string& thread,
                          const rocksdb::Slice& key,
                          const rocksdb::Slice& value);

  // -- the staged group (rocksdb_store_writes.cpp) ----------------------------

  // The seq stored for a client id of a thread (staged, else on disk), or
  // none if the id is new.
  caf::expected<std::optional<seq_t>>
  known_client_id(const std::string& id_key);

  // Stages removing the outbox entry an accepted message came from, if it
  // came from another thread. Returns whether it staged anything.
  bool remove_delivered(const accept_request& req);

  // Stages a new message: inbox entry, user log entry, client id and, if
  // requested, the session record.
  caf::error stage_new_message(const accept_request& req, std::string id_key);

  // Checks a spawn against the ids and the stored sessions; returns the
  // refusal, or a `spawn_result` with `created == false` for a resent spawn,
  // or nothing if the spawn is new.
  caf::expected<std::optional<spawn_result>>
  check_spawn(const spawn_request& req);

  // The session of `thread` as the next flush leaves it: staged, else on
  // disk, else none.
  caf::expected<std::optional<session_record>>
  find_session(const std::string& thread);

  // The tree is written by spawns alone: a session write from a thread's
  // conversation keeps the parent its stored record has (a conversation
  // that began before its thread was spawned as a child knows none). A
  // record naming a parent is right as it is: parents never change.
  caf::expected<session_record> with_stored_parent(session_record rec);

  // Makes sure column family handles exist for staging (a batch records
  // column family ids, which stay the same when the database is reopened).
  // A `void` stage reports failure through the group.
  bool ready_to_stage();

  // A column family can only be missing in a read-only instance, which
  // takes no writes; the guard keeps a null handle out of the batch anyway.
  bool have_family(size_t cf);

  void batch_put(size_t cf, const std::string& key, const std::string& value);

  void batch_delete(size_t cf, const std::string& key);

  // Stages one record under `key` (encoding never fails: see `encode`).
  // Returns whether it staged the record (false once the group failed).
  template <class T>
  bool stage_record(size_t cf, const std::string& key, const T& rec);

  void count_staged();

  // Fails the current group at its flush (a `void` stage cannot report).
  void poison(std::string what);

  void clear_group();

  void drop_group();

  // -- state ------------------------------------------------------------------

  std::string dir_;
  store_options opts_;
  // The file system and Env for fault injection (null otherwise); they must
  // outlive db_.
  std::shared_ptr<rocksdb::FileSystem> fs_;
  std::unique_ptr<rocksdb::Env> env_;
  std::shared_ptr<rocksdb::Cache> cache_;
  rocksdb::DB* db_ = nullptr;
  bool writable_ = false;
  std::vector<rocksdb::ColumnFamilyHandle*> handles_;
  std::array<rocksdb::ColumnFamilyHandle*, cf_count> cf_{};
  // The staged group.
  rocksdb::WriteBatch batch_;
  std::unordered_map<std::string, seq_t> pending_ids_;
  // The latest staged session record per thread, for `stage_spawn`.
  std::unordered_map<std::string, session_record> pending_sessions_;
  size_t staged_ = 0;
  caf::error poisoned_;
  store_stats stats_;
};

template <class Fn>
caf::error rocksdb_store::scan(size_t cf, const std::string& lower,
                               const std::string& upper, Fn fn) {
  rocksdb::Slice upper_slice{upper};
  rocksdb::ReadOptions ropts;
  if (!upper.empty())
    ropts.iterate_upper_bound = &upper_slice;
  auto it = new_iterator(cf, ropts);
  for (it->Seek(lower); it->Valid(); it->Next()) {
    auto res = fn(it->key(), it->value());
    if (res.err)
      return std::move(res.err);
    if (res.flag == scan_result::stop)
      return caf::none;
  }
  if (!it->status().ok())
    return read_failed(cf, it->status());
  return caf::none;
}

} // namespace keel::store_backend
