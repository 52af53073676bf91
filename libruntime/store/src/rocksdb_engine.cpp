#include "rocksdb_engine.hpp"

#include <algorithm>
#include <exception>
#include <filesystem>
#include <system_error>

#include <rocksdb/filter_policy.h>
#include <rocksdb/table.h>

#include "fault_file_system.hpp"

namespace keel {

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
    auto engine = std::make_unique<store_backend::rocksdb_engine>(dir, opts);
    if (auto err = engine->open_db(opts.read_only))
      return err;
    return make_kv_store(std::move(engine));
  } catch (const std::exception& ex) {
    return caf::make_error(ec::storage_open_failed,
                           "cannot open database in " + dir + ": " + ex.what());
  }
}

} // namespace keel

namespace keel::store_backend {

// -- opening ------------------------------------------------------------------

rocksdb_engine::rocksdb_engine(std::string dir, store_options opts)
  : dir_(std::move(dir)), opts_(std::move(opts)) {
  if (opts_.faults) {
    fs_ = make_faulty_file_system(opts_.faults);
    env_ = rocksdb::NewCompositeEnv(fs_);
  }
  // Shared by all column families: the hot set is small (recent log
  // entries, sessions, client ids), so a modest cache goes a long way.
  cache_ = rocksdb::NewLRUCache(opts_.block_cache_bytes);
}

rocksdb_engine::~rocksdb_engine() {
  close_db();
}

caf::error rocksdb_engine::open_db(bool read_only) {
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
  return caf::none;
}

caf::expected<std::vector<rocksdb::ColumnFamilyDescriptor>>
rocksdb_engine::families_to_open(const rocksdb::Options& options,
                                 bool read_only) {
  std::vector<std::string> existing;
  // Fails when there is no database yet, which is fine: we create it.
  auto listed = rocksdb::DB::ListColumnFamilies(options, dir_, &existing);
  std::vector<rocksdb::ColumnFamilyDescriptor> descriptors;
  auto cf_opts = cf_options();
  descriptors.emplace_back(rocksdb::kDefaultColumnFamilyName, cf_opts);
  for (auto name : cf_names) {
    auto opts = cf_opts;
    // Each accepted message looks its client id up, and nearly always
    // misses: a bloom filter over each memtable's keys (2 % of its size)
    // answers a miss without searching the memtable's skip list.
    if (name == cf_names[cf_client_ids] || name == cf_names[cf_sessions]) {
      opts.memtable_prefix_bloom_size_ratio = 0.02;
      opts.memtable_whole_key_filtering = true;
    }
    descriptors.emplace_back(name, opts);
  }
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

caf::error rocksdb_engine::map_families(bool read_only) {
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

void rocksdb_engine::close_db() {
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

rocksdb::Options rocksdb_engine::db_options() {
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
  options.db_write_buffer_size = opts_.memtable_bytes;
  // Rarely written column families would otherwise pin old WAL files, and
  // an open after a crash replays all of it (about 5 ms per MiB).
  options.max_total_wal_size = opts_.memtable_bytes / 2;
  // A torn last record (crash mid-write) is the end of the log, not an
  // error: that record was never acknowledged.
  options.wal_recovery_mode = rocksdb::WALRecoveryMode::kPointInTimeRecovery;
  // Opening after a crash replays the WAL into memtables and keeps it,
  // instead of writing the replayed data to new SST files first.
  options.avoid_flush_during_recovery = true;
  // RocksDB's own LOG: warnings only, few old copies.
  options.info_log_level = rocksdb::InfoLogLevel::WARN_LEVEL;
  options.keep_log_file_num = 2;
  options.max_log_file_size = 1 << 20;
  options.stats_dump_period_sec = 0;
  options.stats_persist_period_sec = 0;
  options.statistics = opts_.statistics;
  return options;
}

rocksdb::ColumnFamilyOptions rocksdb_engine::cf_options() {
  rocksdb::ColumnFamilyOptions options;
  // Small values, many writes: memtables of a quarter of the budget above
  // (which caps them together), at most 16 MiB, no compression on the
  // first levels.
  options.OptimizeLevelStyleCompaction(64 << 20);
  options.write_buffer_size = std::clamp<size_t>(opts_.memtable_bytes / 4,
                                                 1u << 20, 16u << 20);
  options.max_write_buffer_number = 3;
  options.min_write_buffer_number_to_merge = 1;
  rocksdb::BlockBasedTableOptions table;
  table.block_cache = cache_;
  // Point lookups (client ids, sessions) mostly miss or hit one key.
  table.filter_policy.reset(rocksdb::NewBloomFilterPolicy(10));
  options.table_factory.reset(rocksdb::NewBlockBasedTableFactory(table));
  return options;
}

caf::error rocksdb_engine::reopen() {
  close_db();
  ++reopens_;
  if (opts_.read_only)
    return open_db(true);
  auto err = open_db(false);
  if (err)
    static_cast<void>(open_db(true));
  return err;
}

caf::error rocksdb_engine::ensure_writable() {
  if (writable_)
    return caf::none;
  if (opts_.read_only)
    return caf::make_error(ec::storage_io, describe()
                                             + " is open read-only: cannot "
                                               "write");
  if (auto err = reopen())
    return caf::make_error(ec::storage_io,
                           "database not writable after a failed write: "
                             + error_message(err));
  return caf::none;
}

caf::error rocksdb_engine::ensure_readable() {
  if (db_ != nullptr)
    return caf::none;
  if (auto err = reopen())
    return caf::make_error(ec::storage_io,
                           "database unavailable after a failed write: "
                             + error_message(err));
  return caf::none;
}

std::string rocksdb_engine::describe() const {
  return "the database in " + dir_;
}

bool rocksdb_engine::read_only() const {
  return opts_.read_only;
}

uint64_t rocksdb_engine::reopens() const {
  return reopens_;
}

caf::error rocksdb_engine::open_failed(const rocksdb::Status& status) {
  return caf::make_error(ec::storage_open_failed, "cannot open database in "
                                                    + dir_ + ": "
                                                    + status.ToString());
}

caf::error rocksdb_engine::read_failed(size_t cf,
                                       const rocksdb::Status& status) {
  return caf::make_error(ec::storage_io, std::string{"read failed in "}
                                           + cf_names[cf] + ": "
                                           + status.ToString());
}

// -- reads --------------------------------------------------------------------

std::unique_ptr<rocksdb::Iterator>
rocksdb_engine::new_iterator(size_t cf, const rocksdb::ReadOptions& ropts) {
  if (cf_[cf] == nullptr)
    return std::unique_ptr<rocksdb::Iterator>{rocksdb::NewEmptyIterator()};
  return std::unique_ptr<rocksdb::Iterator>{db_->NewIterator(ropts, cf_[cf])};
}

caf::expected<std::optional<std::string>>
rocksdb_engine::get(size_t cf, std::string_view key) {
  if (cf_[cf] == nullptr)
    return std::optional<std::string>{};
  std::string value;
  auto status = db_->Get(rocksdb::ReadOptions{}, cf_[cf],
                         rocksdb::Slice{key.data(), key.size()}, &value);
  if (status.IsNotFound())
    return std::optional<std::string>{};
  if (!status.ok())
    return read_failed(cf, status);
  return std::optional<std::string>{std::move(value)};
}

caf::error rocksdb_engine::scan(size_t cf, std::string_view lower,
                                std::string_view upper, const scan_fn& fn) {
  rocksdb::Slice upper_slice{upper.data(), upper.size()};
  rocksdb::ReadOptions ropts;
  if (!upper.empty())
    ropts.iterate_upper_bound = &upper_slice;
  auto it = new_iterator(cf, ropts);
  for (it->Seek(rocksdb::Slice{lower.data(), lower.size()}); it->Valid();
       it->Next()) {
    auto res = fn(it->key().ToStringView(), it->value().ToStringView());
    if (res.err)
      return std::move(res.err);
    if (res.flag == scan_result::stop)
      return caf::none;
  }
  if (!it->status().ok())
    return read_failed(cf, it->status());
  return caf::none;
}

caf::expected<std::optional<std::string>>
rocksdb_engine::last_key(size_t cf, std::string_view lower,
                         std::string_view upper) {
  rocksdb::Slice lower_slice{lower.data(), lower.size()};
  rocksdb::Slice upper_slice{upper.data(), upper.size()};
  rocksdb::ReadOptions ropts;
  ropts.iterate_lower_bound = &lower_slice;
  ropts.iterate_upper_bound = &upper_slice;
  auto it = new_iterator(cf, ropts);
  it->SeekToLast();
  if (!it->Valid()) {
    if (!it->status().ok())
      return read_failed(cf, it->status());
    return std::optional<std::string>{};
  }
  return std::optional<std::string>{it->key().ToString()};
}

// -- writes -------------------------------------------------------------------

namespace {

// A group as one WriteBatch. Column family handles are looked up as writes
// are staged: a batch records column family ids, which stay the same when
// the database is reopened.
class rocksdb_batch : public kv_batch {
public:
  explicit rocksdb_batch(const rocksdb_engine& engine) : engine_(engine) {
    // nop
  }

  void begin_operation(std::string_view, uint64_t) override {
    // One WriteBatch holds the whole group.
  }

  bool put(size_t cf, std::string_view key, std::string_view value) override {
    auto* handle = engine_.handle(cf);
    // Only fails on a batch over 4 GB (max_bytes is unlimited by default).
    return handle != nullptr
           && batch_
                .Put(handle, rocksdb::Slice{key.data(), key.size()},
                     rocksdb::Slice{value.data(), value.size()})
                .ok();
  }

  bool erase(size_t cf, std::string_view key) override {
    auto* handle = engine_.handle(cf);
    return handle != nullptr
           && batch_.Delete(handle, rocksdb::Slice{key.data(), key.size()})
                .ok();
  }

  void clear() override {
    batch_.Clear();
  }

  rocksdb::WriteBatch& batch() {
    return batch_;
  }

private:
  const rocksdb_engine& engine_;
  rocksdb::WriteBatch batch_;
};

} // namespace

std::unique_ptr<kv_batch> rocksdb_engine::new_batch() {
  return std::make_unique<rocksdb_batch>(*this);
}

caf::error rocksdb_engine::write(kv_batch& batch) {
  if (auto err = ensure_writable())
    return err;
  rocksdb::WriteOptions wopts;
  wopts.sync = opts_.sync;
  auto status = db_->Write(wopts, &static_cast<rocksdb_batch&>(batch).batch());
  if (status.ok())
    return caf::none;
  // RocksDB refuses every later write after a failed WAL write; a fresh
  // instance starts a new WAL. Failing that, keep serving reads.
  reopen();
  return caf::make_error(ec::storage_io, "write failed: " + status.ToString());
}

} // namespace keel::store_backend
