#include "rocksdb_store.hpp"

#include <algorithm>
#include <exception>
#include <filesystem>
#include <system_error>

#include <rocksdb/filter_policy.h>
#include <rocksdb/table.h>

#include "fault_file_system.hpp"

namespace keel {

const std::vector<std::string> column_families{store_backend::cf_names.begin(),
                                               store_backend::cf_names.end()};

store::~store() {
  // nop
}

caf::expected<std::unique_ptr<store>> store::open(const std::string& dir,
                                                  const store_options& opts) {
  try {
    std::error_code err;
    if (opts.create_if_missing && !opts.read_only) {
      std::filesystem::create_directories(dir, err);
      if (err)
        return caf::make_error(ec::storage_open_failed,
                               "cannot create database folder " + dir + ": "
                                 + err.message());
    } else if (!std::filesystem::is_directory(dir, err)) {
      // RocksDB would create the folder before noticing the database is
      // missing.
      return caf::make_error(ec::storage_open_failed, "cannot open database in "
                                                        + dir
                                                        + ": no such folder");
    }
    auto result = std::make_unique<store_backend::rocksdb_store>(dir, opts);
    if (auto err = result->open_db(opts.read_only))
      return err;
    return std::unique_ptr<store>{std::move(result)};
  } catch (const std::exception& ex) {
    return caf::make_error(ec::storage_open_failed,
                           "cannot open database in " + dir + ": " + ex.what());
  }
}

} // namespace keel

namespace keel::store_backend {

// -- opening ------------------------------------------------------------------

rocksdb_store::rocksdb_store(std::string dir, store_options opts)
  : dir_(std::move(dir)), opts_(std::move(opts)) {
  if (opts_.faults) {
    fs_ = make_faulty_file_system(opts_.faults);
    env_ = rocksdb::NewCompositeEnv(fs_);
  }
  // Shared by all column families: the hot set is small (recent log
  // entries, sessions, client ids), so a modest cache goes a long way.
  cache_ = rocksdb::NewLRUCache(32 << 20);
}

rocksdb_store::~rocksdb_store() {
  close_db();
}

caf::error rocksdb_store::open_db(bool read_only) {
  auto options = db_options();
  auto descriptors = families_to_open(options, read_only);
  if (!descriptors)
    return std::move(descriptors.error());
  rocksdb::DB* db = nullptr;
  handles_.clear();
  auto status = read_only
                  ? rocksdb::DB::OpenForReadOnly(options, dir_, *descriptors,
                                                 &handles_, &db)
                  : rocksdb::DB::Open(options, dir_, *descriptors, &handles_,
                                      &db);
  if (!status.ok())
    return open_failed(status);
  db_ = db;
  writable_ = !read_only;
  if (auto err = map_families(read_only)) {
    close_db();
    return err;
  }
  if (auto err = check_schema()) {
    close_db();
    return err;
  }
  return caf::none;
}

caf::expected<std::vector<rocksdb::ColumnFamilyDescriptor>>
rocksdb_store::families_to_open(const rocksdb::Options& options,
                                bool read_only) {
  std::vector<std::string> existing;
  // Fails when there is no database yet, which is fine: we create it.
  auto listed = rocksdb::DB::ListColumnFamilies(options, dir_, &existing);
  std::vector<rocksdb::ColumnFamilyDescriptor> descriptors;
  auto cf_opts = cf_options();
  descriptors.emplace_back(rocksdb::kDefaultColumnFamilyName, cf_opts);
  for (auto name : cf_names)
    descriptors.emplace_back(name, cf_opts);
  // Column families of a newer build: RocksDB insists on opening every one
  // of them, and the schema check then says what is wrong.
  if (listed.ok())
    for (auto& name : existing)
      if (std::none_of(descriptors.begin(), descriptors.end(),
                       [&](auto& x) { return x.name == name; }))
        descriptors.emplace_back(name, cf_opts);
  if (read_only) {
    // Only existing column families can be opened read-only; missing ones
    // (an older build's database) read as empty.
    if (!listed.ok())
      return open_failed(listed);
    descriptors.erase(std::remove_if(descriptors.begin(), descriptors.end(),
                                     [&](auto& x) {
                                       return std::find(existing.begin(),
                                                        existing.end(), x.name)
                                              == existing.end();
                                     }),
                      descriptors.end());
  }
  return descriptors;
}

caf::error rocksdb_store::map_families(bool read_only) {
  cf_.fill(nullptr);
  for (auto* handle : handles_)
    for (size_t i = 0; i < cf_count; ++i)
      if (handle->GetName() == cf_names[i])
        cf_[i] = handle;
  if (!read_only && std::find(cf_.begin(), cf_.end(), nullptr) != cf_.end())
    return caf::make_error(ec::storage_open_failed,
                           "cannot open database in " + dir_
                             + ": column families missing");
  return caf::none;
}

void rocksdb_store::close_db() {
  if (db_ == nullptr)
    return;
  for (auto* handle : handles_)
    db_->DestroyColumnFamilyHandle(handle);
  handles_.clear();
  cf_.fill(nullptr);
  // Close reports earlier write errors again; there is nothing left to do
  // about them here.
  static_cast<void>(db_->Close());
  delete db_;
  db_ = nullptr;
  writable_ = false;
}

rocksdb::Options rocksdb_store::db_options() {
  rocksdb::Options options;
  // Two cores: one flush and one compaction thread at most.
  options.IncreaseParallelism(2);
  options.create_if_missing = opts_.create_if_missing;
  options.create_missing_column_families = true;
  options.max_open_files = static_cast<int>(store_max_open_files);
  if (env_)
    options.env = env_.get();
  // All memtables together; keeps nine column families from each taking
  // their own full budget.
  options.db_write_buffer_size = 64 << 20;
  // Rarely written column families would otherwise pin old WAL files.
  options.max_total_wal_size = 128 << 20;
  // A torn last record (crash mid-write) is the end of the log, not an
  // error: that record was never acknowledged.
  options.wal_recovery_mode = rocksdb::WALRecoveryMode::kPointInTimeRecovery;
  // RocksDB's own LOG: warnings only, few old copies.
  options.info_log_level = rocksdb::InfoLogLevel::WARN_LEVEL;
  options.keep_log_file_num = 2;
  options.max_log_file_size = 1 << 20;
  options.stats_dump_period_sec = 0;
  options.stats_persist_period_sec = 0;
  return options;
}

rocksdb::ColumnFamilyOptions rocksdb_store::cf_options() {
  rocksdb::ColumnFamilyOptions options;
  // Small values, many writes: 16 MB memtables (the budget above caps
  // them together), no compression on the first levels.
  options.OptimizeLevelStyleCompaction(64 << 20);
  options.write_buffer_size = 16 << 20;
  options.max_write_buffer_number = 3;
  options.min_write_buffer_number_to_merge = 1;
  rocksdb::BlockBasedTableOptions table;
  table.block_cache = cache_;
  // Point lookups (client ids, sessions) mostly miss or hit one key.
  table.filter_policy.reset(rocksdb::NewBloomFilterPolicy(10));
  options.table_factory.reset(rocksdb::NewBlockBasedTableFactory(table));
  return options;
}

caf::error rocksdb_store::check_schema() {
  std::string value;
  auto status = get(cf_meta, schema_key, value);
  if (status.ok()) {
    auto version = parse_decimal(value);
    if (!version)
      return caf::make_error(ec::storage_open_failed,
                             dir_ + ": schema version '" + value
                               + "' is not a number");
    if (*version > schema_version)
      return caf::make_error(ec::storage_open_failed,
                             dir_ + ": schema version " + value
                               + " is newer than this build's "
                               + std::to_string(schema_version));
    return caf::none;
  }
  if (!status.IsNotFound())
    return open_failed(status);
  if (!writable_)
    return caf::none;
  rocksdb::WriteOptions wopts;
  wopts.sync = true;
  status = db_->Put(wopts, cf_[cf_meta], schema_key,
                    std::to_string(schema_version));
  if (!status.ok())
    return open_failed(status);
  return caf::none;
}

caf::error rocksdb_store::reopen() {
  close_db();
  ++stats_.reopens;
  if (opts_.read_only)
    return open_db(true);
  auto err = open_db(false);
  if (err)
    static_cast<void>(open_db(true));
  return err;
}

caf::error rocksdb_store::ensure_writable() {
  if (writable_)
    return caf::none;
  if (opts_.read_only)
    return read_only_error();
  if (auto err = reopen())
    return caf::make_error(ec::storage_io,
                           "database not writable after a failed write: "
                             + error_message(err));
  return caf::none;
}

caf::error rocksdb_store::ensure_readable() {
  if (db_ != nullptr)
    return caf::none;
  if (auto err = reopen())
    return caf::make_error(ec::storage_io,
                           "database unavailable after a failed write: "
                             + error_message(err));
  return caf::none;
}

caf::error rocksdb_store::open_failed(const rocksdb::Status& status) {
  return caf::make_error(ec::storage_open_failed, "cannot open database in "
                                                    + dir_ + ": "
                                                    + status.ToString());
}

caf::error rocksdb_store::read_failed(size_t cf,
                                      const rocksdb::Status& status) {
  return caf::make_error(ec::storage_io, std::string{"read failed in "}
                                           + cf_names[cf] + ": "
                                           + status.ToString());
}

caf::error rocksdb_store::read_only_error() const {
  return caf::make_error(ec::storage_io, "the database in " + dir_
                                           + " is open read-only: cannot "
                                             "write");
}

// -- low-level reads ----------------------------------------------------------

std::unique_ptr<rocksdb::Iterator>
rocksdb_store::new_iterator(size_t cf, const rocksdb::ReadOptions& ropts) {
  if (cf_[cf] == nullptr)
    return std::unique_ptr<rocksdb::Iterator>{rocksdb::NewEmptyIterator()};
  return std::unique_ptr<rocksdb::Iterator>{db_->NewIterator(ropts, cf_[cf])};
}

rocksdb::Status rocksdb_store::get(size_t cf, const std::string& key,
                                   std::string& value) {
  if (cf_[cf] == nullptr)
    return rocksdb::Status::NotFound();
  return db_->Get(rocksdb::ReadOptions{}, cf_[cf], key, &value);
}

} // namespace keel::store_backend
