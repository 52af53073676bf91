#pragma once

// The RocksDB backend: one column family per record family, a group as one
// WriteBatch written with sync=true (WAL fsynced).

#include <array>
#include <memory>
#include <string>
#include <vector>

#include <rocksdb/cache.h>
#include <rocksdb/db.h>
#include <rocksdb/env.h>
#include <rocksdb/file_system.h>
#include <rocksdb/options.h>
#include <rocksdb/write_batch.h>

#include "keel/kv_engine.hpp"
#include "keel/store.hpp"
#include "keys.hpp"

namespace keel::store_backend {

class rocksdb_engine : public kv_engine {
public:
  rocksdb_engine(std::string dir, store_options opts);

  ~rocksdb_engine() override;

  /// Opens the database for writing (or, if `read_only`, for reading only).
  caf::error open_db(bool read_only);

  std::string describe() const override;

  bool read_only() const override;

  caf::error ensure_readable() override;

  caf::error ensure_writable() override;

  caf::expected<std::optional<std::string>> get(size_t cf,
                                                std::string_view key) override;

  caf::error scan(size_t cf, std::string_view lower, std::string_view upper,
                  const scan_fn& fn) override;

  caf::expected<std::optional<std::string>>
  last_key(size_t cf, std::string_view lower, std::string_view upper) override;

  std::unique_ptr<kv_batch> new_batch() override;

  /// Writes the batch; RocksDB refuses every later write after a failed WAL
  /// write, so a failure reopens the database (replaying its WAL), or,
  /// failing that, keeps serving reads from a read-only instance until a
  /// later write can reopen it for writing.
  caf::error write(kv_batch& batch) override;

  uint64_t reopens() const override;

  /// The handle of `cf`, null in a read-only instance of a database that
  /// lacks it (written by an older build).
  rocksdb::ColumnFamilyHandle* handle(size_t cf) const {
    return cf_[cf];
  }

private:
  // The column families to open: ours plus any of a newer build's (RocksDB
  // insists on opening every one). Read-only: only those that exist.
  caf::expected<std::vector<rocksdb::ColumnFamilyDescriptor>>
  families_to_open(const rocksdb::Options& options, bool read_only);

  // Points `cf_` at the opened handles; fails if one of ours is missing
  // from a writable instance.
  caf::error map_families(bool read_only);

  void close_db();

  rocksdb::Options db_options();

  rocksdb::ColumnFamilyOptions cf_options();

  // Closes the database and opens it again, for writing if possible.
  caf::error reopen();

  caf::error open_failed(const rocksdb::Status& status);

  caf::error read_failed(size_t cf, const rocksdb::Status& status);

  // An iterator over `cf`; an empty one for a column family the database
  // lacks.
  std::unique_ptr<rocksdb::Iterator>
  new_iterator(size_t cf, const rocksdb::ReadOptions& ropts);

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
  uint64_t reopens_ = 0;
};

} // namespace keel::store_backend
