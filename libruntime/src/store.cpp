#include "keel/store.hpp"

#include <algorithm>
#include <array>
#include <exception>
#include <filesystem>
#include <limits>
#include <optional>
#include <string_view>
#include <system_error>
#include <unordered_map>

#include <rocksdb/cache.h>
#include <rocksdb/db.h>
#include <rocksdb/env.h>
#include <rocksdb/file_system.h>
#include <rocksdb/filter_policy.h>
#include <rocksdb/options.h>
#include <rocksdb/table.h>
#include <rocksdb/write_batch.h>

#include "keel/json_codec.hpp"

namespace keel {

namespace {

// Indexes of our column families in `column_families` (same order).
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
  cf_count,
};

constexpr std::array<const char*, cf_count> cf_names{
  "sessions", "tree",         "inbox", "context",    "log",
  "health",   "dead_letters", "meta",  "client_ids",
};

constexpr const char* schema_key = "schema_version";

// -- keys ---------------------------------------------------------------------

// A thread's range in a column family is [thread + '/', thread + '0'):
// '0' follows '/' in ASCII, and thread ids never contain '/'.
std::string range_begin(const std::string& thread) {
  return thread + '/';
}

std::string range_end(const std::string& thread) {
  return thread + '0';
}

std::string seq_key(const std::string& thread, seq_t seq) {
  auto key = range_begin(thread);
  for (int shift = 56; shift >= 0; shift -= 8)
    key += static_cast<char>((seq >> shift) & 0xFF);
  return key;
}

std::string client_id_key(const std::string& thread,
                          const std::string& client_id) {
  return range_begin(thread) + client_id;
}

// Reads the big-endian seq behind `prefix_len` bytes, if the key has the
// shape of a seq key.
std::optional<seq_t> key_seq(const rocksdb::Slice& key, size_t prefix_len) {
  if (key.size() != prefix_len + 8)
    return std::nullopt;
  seq_t result = 0;
  for (size_t i = prefix_len; i < key.size(); ++i)
    result = (result << 8) | static_cast<unsigned char>(key[i]);
  return result;
}

// Renders a key for error messages: `thread/seq` for seq keys, the key
// itself (thread ids and client ids are printable) otherwise.
std::string printable_key(size_t cf, const rocksdb::Slice& key) {
  std::string_view str{key.data(), key.size()};
  if (cf == cf_inbox || cf == cf_context || cf == cf_log) {
    auto slash = str.find('/');
    if (slash != std::string_view::npos) {
      if (auto seq = key_seq(key, slash + 1))
        return std::string{str.substr(0, slash + 1)} + std::to_string(*seq);
    }
  }
  std::string result;
  for (auto c : str) {
    if (c >= 0x20 && c < 0x7F) {
      result += c;
    } else {
      static constexpr const char* hex = "0123456789abcdef";
      auto u = static_cast<unsigned char>(c);
      result += "\\x";
      result += hex[u >> 4];
      result += hex[u & 0x0F];
    }
  }
  return result;
}

caf::error corrupt(size_t cf, const rocksdb::Slice& key,
                   const std::string& what) {
  return caf::make_error(ec::storage_corrupt,
                         std::string{"corrupt record in "} + cf_names[cf]
                           + " at " + printable_key(cf, key) + ": " + what);
}

// Decodes the value stored under `key` in `cf`.
template <class T>
caf::expected<T> decode_at(size_t cf, const rocksdb::Slice& key,
                           const rocksdb::Slice& value) {
  auto result = decode<T>(std::string_view{value.data(), value.size()});
  if (!result)
    return corrupt(cf, key, error_message(result.error()));
  return result;
}

// Decodes a record stored under a seq key and checks that both agree.
template <class T>
caf::expected<T> decode_seq_record(size_t cf, size_t prefix_len,
                                   const rocksdb::Slice& key,
                                   const rocksdb::Slice& value) {
  auto seq = key_seq(key, prefix_len);
  if (!seq)
    return corrupt(cf, key, "key is not thread/seq");
  auto result = decode_at<T>(cf, key, value);
  if (result && result->seq != *seq)
    return corrupt(cf, key,
                   "record has seq " + std::to_string(result->seq));
  return result;
}

std::optional<uint64_t> parse_decimal(const std::string& str) {
  if (str.empty() || str.size() > 19)
    return std::nullopt;
  uint64_t result = 0;
  for (auto c : str) {
    if (c < '0' || c > '9')
      return std::nullopt;
    result = result * 10 + static_cast<uint64_t>(c - '0');
  }
  return result;
}

// -- fault injection ----------------------------------------------------------

rocksdb::IOStatus injected_error(fault_injection& faults) {
  ++faults.failed_writes;
  if (faults.no_space)
    return rocksdb::IOStatus::NoSpace("injected fault");
  return rocksdb::IOStatus::IOError("injected fault");
}

// A writable file whose appends fail while `faults.fail_writes` is set.
class faulty_file : public rocksdb::FSWritableFileOwnerWrapper {
public:
  faulty_file(std::unique_ptr<rocksdb::FSWritableFile> file,
              std::shared_ptr<fault_injection> faults)
    : FSWritableFileOwnerWrapper(std::move(file)), faults_(std::move(faults)) {
    // nop
  }

  rocksdb::IOStatus Append(const rocksdb::Slice& data,
                           const rocksdb::IOOptions& opts,
                           rocksdb::IODebugContext* dbg) override {
    if (faults_->fail_writes)
      return injected_error(*faults_);
    return FSWritableFileOwnerWrapper::Append(data, opts, dbg);
  }

  rocksdb::IOStatus Append(const rocksdb::Slice& data,
                           const rocksdb::IOOptions& opts,
                           const rocksdb::DataVerificationInfo& info,
                           rocksdb::IODebugContext* dbg) override {
    if (faults_->fail_writes)
      return injected_error(*faults_);
    return FSWritableFileOwnerWrapper::Append(data, opts, info, dbg);
  }

  rocksdb::IOStatus PositionedAppend(const rocksdb::Slice& data,
                                     uint64_t offset,
                                     const rocksdb::IOOptions& opts,
                                     rocksdb::IODebugContext* dbg) override {
    if (faults_->fail_writes)
      return injected_error(*faults_);
    return FSWritableFileOwnerWrapper::PositionedAppend(data, offset, opts,
                                                        dbg);
  }

  rocksdb::IOStatus
  PositionedAppend(const rocksdb::Slice& data, uint64_t offset,
                   const rocksdb::IOOptions& opts,
                   const rocksdb::DataVerificationInfo& info,
                   rocksdb::IODebugContext* dbg) override {
    if (faults_->fail_writes)
      return injected_error(*faults_);
    return FSWritableFileOwnerWrapper::PositionedAppend(data, offset, opts,
                                                        info, dbg);
  }

private:
  std::shared_ptr<fault_injection> faults_;
};

// The default file system with every writable file wrapped in faulty_file.
class faulty_file_system : public rocksdb::FileSystemWrapper {
public:
  explicit faulty_file_system(std::shared_ptr<fault_injection> faults)
    : FileSystemWrapper(rocksdb::FileSystem::Default()),
      faults_(std::move(faults)) {
    // nop
  }

  const char* Name() const override {
    return "keel.faulty_file_system";
  }

  rocksdb::IOStatus
  NewWritableFile(const std::string& name, const rocksdb::FileOptions& opts,
                  std::unique_ptr<rocksdb::FSWritableFile>* result,
                  rocksdb::IODebugContext* dbg) override {
    return wrap(target()->NewWritableFile(name, opts, result, dbg), result);
  }

  rocksdb::IOStatus
  ReopenWritableFile(const std::string& name, const rocksdb::FileOptions& opts,
                     std::unique_ptr<rocksdb::FSWritableFile>* result,
                     rocksdb::IODebugContext* dbg) override {
    return wrap(target()->ReopenWritableFile(name, opts, result, dbg),
                result);
  }

  rocksdb::IOStatus
  ReuseWritableFile(const std::string& name, const std::string& old_name,
                    const rocksdb::FileOptions& opts,
                    std::unique_ptr<rocksdb::FSWritableFile>* result,
                    rocksdb::IODebugContext* dbg) override {
    return wrap(target()->ReuseWritableFile(name, old_name, opts, result, dbg),
                result);
  }

private:
  rocksdb::IOStatus wrap(rocksdb::IOStatus status,
                         std::unique_ptr<rocksdb::FSWritableFile>* result) {
    if (status.ok())
      *result = std::make_unique<faulty_file>(std::move(*result), faults_);
    return status;
  }

  std::shared_ptr<fault_injection> faults_;
};

// -- the store ----------------------------------------------------------------

class rocksdb_store : public store {
public:
  rocksdb_store(std::string dir, store_options opts)
    : dir_(std::move(dir)), opts_(std::move(opts)) {
    if (opts_.faults) {
      fs_ = std::make_shared<faulty_file_system>(opts_.faults);
      env_ = rocksdb::NewCompositeEnv(fs_);
    }
    // Shared by all column families: the hot set is small (recent log
    // entries, sessions, client ids), so a modest cache goes a long way.
    cache_ = rocksdb::NewLRUCache(32 << 20);
  }

  ~rocksdb_store() override {
    close_db();
  }

  // Opens the database for writing (or, if `read_only`, for reading only).
  caf::error open_db(bool read_only) {
    auto options = db_options();
    std::vector<std::string> existing;
    // Fails when there is no database yet, which is fine: we create it.
    auto listed = rocksdb::DB::ListColumnFamilies(options, dir_, &existing);
    std::vector<rocksdb::ColumnFamilyDescriptor> descriptors;
    auto cf_opts = cf_options();
    descriptors.emplace_back(rocksdb::kDefaultColumnFamilyName, cf_opts);
    for (auto name : cf_names)
      descriptors.emplace_back(name, cf_opts);
    // Column families of a newer build: RocksDB insists on opening every one
    // of them, and the schema check below then says what is wrong.
    if (listed.ok())
      for (auto& name : existing)
        if (std::none_of(descriptors.begin(), descriptors.end(),
                         [&](auto& x) { return x.name == name; }))
          descriptors.emplace_back(name, cf_opts);
    if (read_only) {
      // Only existing column families can be opened read-only.
      if (!listed.ok())
        return open_failed(listed);
      descriptors.erase(std::remove_if(descriptors.begin(), descriptors.end(),
                                       [&](auto& x) {
                                         return std::find(existing.begin(),
                                                          existing.end(),
                                                          x.name)
                                                == existing.end();
                                       }),
                        descriptors.end());
    }
    rocksdb::DB* db = nullptr;
    handles_.clear();
    auto status = read_only ? rocksdb::DB::OpenForReadOnly(options, dir_,
                                                           descriptors,
                                                           &handles_, &db)
                            : rocksdb::DB::Open(options, dir_, descriptors,
                                                &handles_, &db);
    if (!status.ok())
      return open_failed(status);
    db_ = db;
    writable_ = !read_only;
    cf_.fill(nullptr);
    for (auto* handle : handles_)
      for (size_t i = 0; i < cf_count; ++i)
        if (handle->GetName() == cf_names[i])
          cf_[i] = handle;
    if (std::find(cf_.begin(), cf_.end(), nullptr) != cf_.end()) {
      close_db();
      return caf::make_error(ec::storage_open_failed,
                             "cannot open database in " + dir_
                               + ": column families missing");
    }
    if (auto err = check_schema()) {
      close_db();
      return err;
    }
    return caf::none;
  }

  void close_db() {
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

  // -- reads ------------------------------------------------------------------

  caf::expected<thread_snapshot> load_thread(const std::string& thread)
    override {
    if (auto err = ensure_readable())
      return err;
    thread_snapshot result;
    auto rec = session(thread);
    if (rec) {
      result.exists = true;
      result.session = std::move(*rec);
    } else if (rec.error() != ec::not_found) {
      return std::move(rec.error());
    }
    auto prefix_len = thread.size() + 1;
    auto err = scan(cf_inbox, thread, range_begin(thread),
                    [&](const rocksdb::Slice& key, const rocksdb::Slice& val) {
                      auto x = decode_seq_record<inbox_entry>(
                        cf_inbox, prefix_len, key, val);
                      if (!x)
                        return scan_result{std::move(x.error())};
                      result.inbox.emplace_back(std::move(*x));
                      return scan_result{};
                    });
    if (err)
      return err;
    err = scan(cf_context, thread, range_begin(thread),
               [&](const rocksdb::Slice& key, const rocksdb::Slice& val) {
                 auto x = decode_seq_record<context_entry>(
                   cf_context, prefix_len, key, val);
                 if (!x)
                   return scan_result{std::move(x.error())};
                 result.context.emplace_back(std::move(*x));
                 return scan_result{};
               });
    if (err)
      return err;
    auto last_log = last_seq(cf_log, thread);
    if (!last_log)
      return std::move(last_log.error());
    seq_t last = *last_log;
    if (!result.inbox.empty())
      last = std::max(last, result.inbox.back().seq);
    result.next_seq = last + 1;
    return result;
  }

  caf::expected<history_page>
  history(const std::string& thread, seq_t after, size_t limit) override {
    if (auto err = ensure_readable())
      return err;
    history_page result;
    result.thread = thread;
    if (after == std::numeric_limits<seq_t>::max())
      return result;
    auto prefix_len = thread.size() + 1;
    auto err = scan(cf_log, thread, seq_key(thread, after + 1),
                    [&](const rocksdb::Slice& key, const rocksdb::Slice& val) {
                      if (result.entries.size() == limit) {
                        result.more = true;
                        return scan_result{scan_result::stop};
                      }
                      auto x = decode_seq_record<log_entry>(cf_log, prefix_len,
                                                            key, val);
                      if (!x)
                        return scan_result{std::move(x.error())};
                      result.entries.emplace_back(std::move(*x));
                      return scan_result{};
                    });
    if (err)
      return err;
    return result;
  }

  caf::expected<std::vector<std::string>> threads_with_inbox() override {
    if (auto err = ensure_readable())
      return err;
    std::vector<std::string> result;
    std::unique_ptr<rocksdb::Iterator> it{
      db_->NewIterator(rocksdb::ReadOptions{}, cf_[cf_inbox])};
    for (it->SeekToFirst(); it->Valid();) {
      auto key = it->key();
      std::string_view str{key.data(), key.size()};
      auto slash = str.find('/');
      if (slash == std::string_view::npos)
        return corrupt(cf_inbox, key, "key is not thread/seq");
      result.emplace_back(str.substr(0, slash));
      // Skip the rest of this thread's range in one seek.
      it->Seek(range_end(result.back()));
    }
    if (!it->status().ok())
      return read_failed(cf_inbox, it->status());
    return result;
  }

  caf::expected<session_record> session(const std::string& thread) override {
    if (auto err = ensure_readable())
      return err;
    std::string value;
    auto status = db_->Get(rocksdb::ReadOptions{}, cf_[cf_sessions], thread,
                           &value);
    if (status.IsNotFound())
      return caf::make_error(ec::not_found, "no session for thread " + thread);
    if (!status.ok())
      return read_failed(cf_sessions, status);
    return decode_at<session_record>(cf_sessions, thread, value);
  }

  caf::expected<uint64_t> count_sessions() override {
    if (auto err = ensure_readable())
      return err;
    uint64_t result = 0;
    std::unique_ptr<rocksdb::Iterator> it{
      db_->NewIterator(rocksdb::ReadOptions{}, cf_[cf_sessions])};
    for (it->SeekToFirst(); it->Valid(); it->Next())
      ++result;
    if (!it->status().ok())
      return read_failed(cf_sessions, it->status());
    return result;
  }

  caf::expected<std::vector<provider_health_record>> health() override {
    if (auto err = ensure_readable())
      return err;
    std::vector<provider_health_record> result;
    std::unique_ptr<rocksdb::Iterator> it{
      db_->NewIterator(rocksdb::ReadOptions{}, cf_[cf_health])};
    for (it->SeekToFirst(); it->Valid(); it->Next()) {
      auto rec = decode_at<provider_health_record>(cf_health, it->key(),
                                                   it->value());
      if (!rec)
        return rec.error();
      result.push_back(std::move(*rec));
    }
    if (!it->status().ok())
      return read_failed(cf_health, it->status());
    return result;
  }

  caf::expected<std::string> meta(const std::string& key) override {
    if (auto err = ensure_readable())
      return err;
    std::string value;
    auto status = db_->Get(rocksdb::ReadOptions{}, cf_[cf_meta], key, &value);
    if (status.IsNotFound())
      return caf::make_error(ec::not_found, "no meta value " + key);
    if (!status.ok())
      return read_failed(cf_meta, status);
    return value;
  }

  // -- staged writes ----------------------------------------------------------

  caf::expected<accept_result> stage_accept(const accept_request& req)
    override {
    const auto& entry = req.entry;
    auto id_key = client_id_key(req.thread, entry.client_id);
    // The staged group first: a resend may arrive before its first copy is
    // flushed.
    if (auto i = pending_ids_.find(id_key); i != pending_ids_.end())
      return accept_result{i->second, true};
    if (auto err = ensure_readable())
      return err;
    std::string value;
    auto status = db_->Get(rocksdb::ReadOptions{}, cf_[cf_client_ids], id_key,
                           &value);
    if (status.ok()) {
      auto seq = parse_decimal(value);
      if (!seq)
        return corrupt(cf_client_ids, id_key, "not a sequence number");
      return accept_result{*seq, true};
    }
    if (!status.IsNotFound())
      return read_failed(cf_client_ids, status);
    log_entry user;
    user.seq = entry.seq;
    user.kind = log_kind::user;
    user.client_id = entry.client_id;
    user.text = entry.text;
    user.at = entry.accepted_at;
    std::string inbox_value;
    std::string log_value;
    std::string session_value;
    try {
      inbox_value = encode(entry);
      log_value = encode(user);
      if (req.create_session)
        session_value = encode(req.session);
    } catch (const std::exception& ex) {
      return caf::make_error(ec::storage_io, "cannot encode the message "
                                               + printable_key(cf_log,
                                                               seq_key(
                                                                 req.thread,
                                                                 entry.seq))
                                               + ": " + ex.what());
    }
    auto key = seq_key(req.thread, entry.seq);
    batch_put(cf_inbox, key, inbox_value);
    batch_put(cf_log, key, log_value);
    batch_put(cf_client_ids, id_key, std::to_string(entry.seq));
    if (req.create_session)
      batch_put(cf_sessions, req.thread, session_value);
    pending_ids_.emplace(std::move(id_key), entry.seq);
    count_staged();
    return accept_result{entry.seq, false};
  }

  void stage_commit(const turn_commit& commit) override {
    if (!ready_to_stage())
      return;
    // Encode everything first so that a failure stages nothing.
    std::vector<std::pair<std::string, std::string>> context;
    std::vector<std::pair<std::string, std::string>> log;
    try {
      for (auto& x : commit.context)
        context.emplace_back(seq_key(commit.thread, x.seq), encode(x));
      for (auto& x : commit.log)
        log.emplace_back(seq_key(commit.thread, x.seq), encode(x));
    } catch (const std::exception& ex) {
      poison("cannot encode the commit of "
               + printable_key(cf_inbox,
                               seq_key(commit.thread, commit.inbox_seq))
               + ": " + ex.what());
      return;
    }
    batch_delete(cf_inbox, seq_key(commit.thread, commit.inbox_seq));
    for (auto& [key, value] : context)
      batch_put(cf_context, key, value);
    for (auto& [key, value] : log)
      batch_put(cf_log, key, value);
    count_staged();
  }

  void stage_session(const session_record& rec) override {
    stage_record(cf_sessions, rec.thread, rec, "the session of " + rec.thread);
  }

  void stage_health(const provider_health_record& rec) override {
    auto key = rec.pool + '/' + rec.provider;
    stage_record(cf_health, key, rec, "the health of " + key);
  }

  void stage_meta(const std::string& key, const std::string& value) override {
    if (!ready_to_stage())
      return;
    batch_put(cf_meta, key, value);
    count_staged();
  }

  size_t staged() const override {
    return staged_;
  }

  caf::error flush() override {
    if (staged_ == 0 && !poisoned_)
      return caf::none;
    if (poisoned_) {
      auto err = std::move(poisoned_);
      drop_group();
      return err;
    }
    if (auto err = ensure_writable()) {
      drop_group();
      return err;
    }
    rocksdb::WriteOptions wopts;
    wopts.sync = opts_.sync;
    auto status = db_->Write(wopts, &batch_);
    if (!status.ok()) {
      drop_group();
      // RocksDB refuses every later write after a failed WAL write; a fresh
      // instance starts a new WAL. Failing that, keep serving reads.
      reopen();
      return caf::make_error(ec::storage_io,
                             "write failed: " + status.ToString());
    }
    ++stats_.flushes;
    batch_.Clear();
    pending_ids_.clear();
    staged_ = 0;
    return caf::none;
  }

  store_stats stats() const override {
    return stats_;
  }

private:
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

  // Calls `fn(key, value)` for each key of `thread` in `cf` from `start` on.
  template <class Fn>
  caf::error scan(size_t cf, const std::string& thread,
                  const std::string& start, Fn fn) {
    auto end = range_end(thread);
    rocksdb::Slice upper{end};
    rocksdb::ReadOptions ropts;
    ropts.iterate_upper_bound = &upper;
    std::unique_ptr<rocksdb::Iterator> it{db_->NewIterator(ropts, cf_[cf])};
    for (it->Seek(start); it->Valid(); it->Next()) {
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

  // Returns the seq of the last key of `thread` in `cf`, or 0.
  caf::expected<seq_t> last_seq(size_t cf, const std::string& thread) {
    auto begin = range_begin(thread);
    rocksdb::Slice lower{begin};
    rocksdb::ReadOptions ropts;
    ropts.iterate_lower_bound = &lower;
    std::unique_ptr<rocksdb::Iterator> it{db_->NewIterator(ropts, cf_[cf])};
    it->SeekForPrev(seq_key(thread, std::numeric_limits<seq_t>::max()));
    if (!it->Valid()) {
      if (!it->status().ok())
        return read_failed(cf, it->status());
      return seq_t{0};
    }
    auto seq = key_seq(it->key(), begin.size());
    if (!seq || !it->key().starts_with(begin))
      return corrupt(cf, it->key(), "key is not thread/seq");
    return *seq;
  }

  rocksdb::Options db_options() {
    rocksdb::Options options;
    // Two cores: one flush and one compaction thread at most.
    options.IncreaseParallelism(2);
    options.create_if_missing = opts_.create_if_missing;
    options.create_missing_column_families = true;
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

  rocksdb::ColumnFamilyOptions cf_options() {
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

  caf::error check_schema() {
    std::string value;
    auto status = db_->Get(rocksdb::ReadOptions{}, cf_[cf_meta], schema_key,
                           &value);
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

  caf::error open_failed(const rocksdb::Status& status) {
    return caf::make_error(ec::storage_open_failed,
                           "cannot open database in " + dir_ + ": "
                             + status.ToString());
  }

  caf::error read_failed(size_t cf, const rocksdb::Status& status) {
    return caf::make_error(ec::storage_io, std::string{"read failed in "}
                                             + cf_names[cf] + ": "
                                             + status.ToString());
  }

  // Closes the database and opens it again, for writing if possible.
  caf::error reopen() {
    close_db();
    ++stats_.reopens;
    auto err = open_db(false);
    if (err)
      static_cast<void>(open_db(true));
    return err;
  }

  caf::error ensure_writable() {
    if (writable_)
      return caf::none;
    if (auto err = reopen())
      return caf::make_error(ec::storage_io,
                             "database not writable after a failed write: "
                               + error_message(err));
    return caf::none;
  }

  caf::error ensure_readable() {
    if (db_ != nullptr)
      return caf::none;
    if (auto err = reopen())
      return caf::make_error(ec::storage_io,
                             "database unavailable after a failed write: "
                               + error_message(err));
    return caf::none;
  }

  // Makes sure column family handles exist for staging (a batch records
  // column family ids, which stay the same when the database is reopened).
  // A `void` stage reports failure through the group.
  bool ready_to_stage() {
    if (auto err = ensure_readable()) {
      poison(error_message(err));
      return false;
    }
    return true;
  }

  void batch_put(size_t cf, const std::string& key, const std::string& value) {
    // Only fails on a batch over 4 GB (max_bytes is unlimited by default).
    static_cast<void>(batch_.Put(cf_[cf], key, value));
  }

  // Stages one record under `key`; one that cannot be encoded (a string
  // that is not UTF-8) fails the group, naming `what`.
  template <class T>
  void stage_record(size_t cf, const std::string& key, const T& rec,
                    const std::string& what) {
    if (!ready_to_stage())
      return;
    std::string value;
    try {
      value = encode(rec);
    } catch (const std::exception& ex) {
      poison("cannot encode " + what + ": " + ex.what());
      return;
    }
    batch_put(cf, key, value);
    count_staged();
  }

  void batch_delete(size_t cf, const std::string& key) {
    static_cast<void>(batch_.Delete(cf_[cf], key));
  }

  void count_staged() {
    ++staged_;
    ++stats_.staged_operations;
  }

  // Fails the current group at its flush (a `void` stage cannot report).
  void poison(std::string what) {
    if (!poisoned_)
      poisoned_ = caf::make_error(ec::storage_io, std::move(what));
  }

  void drop_group() {
    batch_.Clear();
    pending_ids_.clear();
    staged_ = 0;
    poisoned_ = caf::none;
    ++stats_.failed_flushes;
  }

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
  size_t staged_ = 0;
  caf::error poisoned_;
  store_stats stats_;
};

} // namespace

const std::vector<std::string> column_families{cf_names.begin(),
                                               cf_names.end()};

store::~store() {
  // nop
}

caf::expected<std::unique_ptr<store>> store::open(const std::string& dir,
                                                  const store_options& opts) {
  try {
    std::error_code err;
    if (opts.create_if_missing) {
      std::filesystem::create_directories(dir, err);
      if (err)
        return caf::make_error(ec::storage_open_failed,
                               "cannot create database folder " + dir + ": "
                                 + err.message());
    } else if (!std::filesystem::is_directory(dir, err)) {
      // RocksDB would create the folder before noticing the database is
      // missing.
      return caf::make_error(ec::storage_open_failed,
                             "cannot open database in " + dir
                               + ": no such folder");
    }
    auto result = std::make_unique<rocksdb_store>(dir, opts);
    if (auto err = result->open_db(false))
      return err;
    return std::unique_ptr<store>{std::move(result)};
  } catch (const std::exception& ex) {
    return caf::make_error(ec::storage_open_failed,
                           "cannot open database in " + dir + ": "
                             + ex.what());
  }
}

} // namespace keel
