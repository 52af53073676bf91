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
#include "keel/text.hpp"

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
  cf_outbox,
  cf_count,
};

// New column families go at the end: a database of an older build lacks
// them, and opening it for writing creates them.
constexpr std::array<const char*, cf_count> cf_names{
  "sessions", "tree",         "inbox", "context",    "log",
  "health",   "dead_letters", "meta",  "client_ids", "outbox",
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

std::string tree_key(const std::string& parent, const std::string& child) {
  return parent + '/' + child;
}

bool has_seq_keys(size_t cf) {
  return cf == cf_inbox || cf == cf_context || cf == cf_log
         || cf == cf_outbox || cf == cf_dead_letters;
}

// Renders a key for error messages: `thread/seq` for seq keys, the key
// itself (thread ids and client ids are printable) otherwise.
std::string printable_key(size_t cf, const rocksdb::Slice& key) {
  std::string_view str{key.data(), key.size()};
  if (has_seq_keys(cf)) {
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

// -- records and their keys ---------------------------------------------------

// Each `key_mismatch` returns what is wrong when a decoded record does not
// belong under `key`, or nothing.

// Records under `thread/seq`: the seq must agree.
std::optional<std::string> seq_mismatch(const rocksdb::Slice& key,
                                        seq_t seq) {
  std::string_view str{key.data(), key.size()};
  auto slash = str.find('/');
  auto key_seq_value = slash == std::string_view::npos
                         ? std::nullopt
                         : key_seq(key, slash + 1);
  if (!key_seq_value)
    return "key is not thread/seq";
  if (*key_seq_value != seq)
    return "record has seq " + std::to_string(seq);
  return std::nullopt;
}

std::optional<std::string> key_mismatch(const rocksdb::Slice& key,
                                        const inbox_entry& x) {
  return seq_mismatch(key, x.seq);
}

std::optional<std::string> key_mismatch(const rocksdb::Slice& key,
                                        const context_entry& x) {
  return seq_mismatch(key, x.seq);
}

std::optional<std::string> key_mismatch(const rocksdb::Slice& key,
                                        const log_entry& x) {
  return seq_mismatch(key, x.seq);
}

std::optional<std::string> key_mismatch(const rocksdb::Slice& key,
                                        const session_record& x) {
  if (key != rocksdb::Slice{x.thread})
    return "record has thread " + x.thread;
  return std::nullopt;
}

std::optional<std::string> key_mismatch(const rocksdb::Slice& key,
                                        const tree_link& x) {
  if (key != rocksdb::Slice{tree_key(x.parent, x.child)})
    return "record links " + x.parent + " -> " + x.child;
  return std::nullopt;
}

std::optional<std::string> key_mismatch(const rocksdb::Slice& key,
                                        const outbox_entry& x) {
  if (key != rocksdb::Slice{seq_key(x.from, x.seq)})
    return "record is from " + x.from + "/" + std::to_string(x.seq);
  return std::nullopt;
}

std::optional<std::string> key_mismatch(const rocksdb::Slice& key,
                                        const dead_letter& x) {
  return key_mismatch(key, x.entry);
}

std::optional<std::string> key_mismatch(const rocksdb::Slice& key,
                                        const provider_health_record& x) {
  if (key != rocksdb::Slice{x.pool + '/' + x.provider})
    return "record is for " + x.pool + "/" + x.provider;
  return std::nullopt;
}

// Decodes the value stored under `key` into `out`; returns what is wrong
// instead if it cannot be decoded or does not belong under its key.
template <class T>
std::optional<std::string> read_record(const rocksdb::Slice& key,
                                       const rocksdb::Slice& value, T& out) {
  auto result = decode<T>(std::string_view{value.data(), value.size()});
  if (!result)
    return error_message(result.error());
  if (auto why = key_mismatch(key, *result))
    return why;
  out = std::move(*result);
  return std::nullopt;
}

// Decodes the value stored under `key` in `cf`.
template <class T>
caf::expected<T> decode_at(size_t cf, const rocksdb::Slice& key,
                           const rocksdb::Slice& value) {
  T result;
  if (auto why = read_record(key, value, result))
    return corrupt(cf, key, *why);
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
      // Only existing column families can be opened read-only; missing ones
      // (an older build's database) read as empty.
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
    if (!read_only
        && std::find(cf_.begin(), cf_.end(), nullptr) != cf_.end()) {
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
    auto begin = range_begin(thread);
    auto end = range_end(thread);
    if (auto err = collect(cf_inbox, begin, end, result.inbox, nullptr))
      return err;
    if (auto err = collect(cf_context, begin, end, result.context, nullptr))
      return err;
    if (auto err = collect(cf_outbox, begin, end, result.outbox, nullptr))
      return err;
    auto kids = children(thread);
    if (!kids)
      return std::move(kids.error());
    result.children = std::move(*kids);
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
    auto err = scan(cf_log, seq_key(thread, after + 1), range_end(thread),
                    [&](const rocksdb::Slice& key, const rocksdb::Slice& val) {
                      if (result.entries.size() == limit) {
                        result.more = true;
                        return scan_result{scan_result::stop};
                      }
                      auto x = decode_at<log_entry>(cf_log, key, val);
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
    auto counts = inbox_counts();
    if (!counts)
      return std::move(counts.error());
    std::vector<std::string> result;
    for (auto& entry : *counts)
      result.emplace_back(std::move(entry.first));
    return result;
  }

  caf::expected<session_record> session(const std::string& thread) override {
    if (auto err = ensure_readable())
      return err;
    std::string value;
    auto status = get(cf_sessions, thread, value);
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
    auto err = scan(cf_sessions, {}, {},
                    [&](const rocksdb::Slice&, const rocksdb::Slice&) {
                      ++result;
                      return scan_result{};
                    });
    if (err)
      return err;
    return result;
  }

  caf::expected<std::vector<session_record>> sessions() override {
    return collect_all<session_record>(cf_sessions, nullptr);
  }

  caf::expected<std::vector<session_record>>
  sessions(std::vector<bad_record>& bad) override {
    return collect_all<session_record>(cf_sessions, &bad);
  }

  caf::expected<std::vector<tree_link>> tree_links() override {
    return collect_all<tree_link>(cf_tree, nullptr);
  }

  caf::expected<std::vector<tree_link>>
  tree_links(std::vector<bad_record>& bad) override {
    return collect_all<tree_link>(cf_tree, &bad);
  }

  caf::expected<std::vector<std::string>>
  children(const std::string& parent) override {
    if (auto err = ensure_readable())
      return err;
    std::vector<std::string> result;
    auto begin = range_begin(parent);
    // The keys say it all; `tree_links` reads the records.
    auto err = scan(cf_tree, begin, range_end(parent),
                    [&](const rocksdb::Slice& key, const rocksdb::Slice&) {
                      result.emplace_back(key.data() + begin.size(),
                                          key.size() - begin.size());
                      return scan_result{};
                    });
    if (err)
      return err;
    return result;
  }

  caf::expected<std::vector<outbox_entry>> outbox() override {
    return collect_all<outbox_entry>(cf_outbox, nullptr);
  }

  caf::expected<std::vector<outbox_entry>>
  outbox(std::vector<bad_record>& bad) override {
    return collect_all<outbox_entry>(cf_outbox, &bad);
  }

  caf::expected<std::vector<dead_letter>> dead_letters() override {
    return collect_all<dead_letter>(cf_dead_letters, nullptr);
  }

  caf::expected<std::vector<std::pair<std::string, uint64_t>>>
  inbox_counts() override {
    if (auto err = ensure_readable())
      return err;
    std::vector<std::pair<std::string, uint64_t>> result;
    auto err = scan(cf_inbox, {}, {},
                    [&](const rocksdb::Slice& key, const rocksdb::Slice&) {
                      std::string_view str{key.data(), key.size()};
                      auto slash = str.find('/');
                      if (slash == std::string_view::npos
                          || !key_seq(key, slash + 1))
                        return scan_result{
                          corrupt(cf_inbox, key, "key is not thread/seq")};
                      auto thread = str.substr(0, slash);
                      if (result.empty() || result.back().first != thread)
                        result.emplace_back(std::string{thread}, 0);
                      ++result.back().second;
                      return scan_result{};
                    });
    if (err)
      return err;
    return result;
  }

  caf::expected<thread_dump> dump_thread(const std::string& thread) override {
    return dump(thread, nullptr);
  }

  caf::expected<thread_dump>
  dump_thread(const std::string& thread,
              std::vector<bad_record>& bad) override {
    return dump(thread, &bad);
  }

  caf::expected<std::vector<provider_health_record>> health() override {
    return collect_all<provider_health_record>(cf_health, nullptr);
  }

  caf::expected<std::string> meta(const std::string& key) override {
    if (auto err = ensure_readable())
      return err;
    std::string value;
    auto status = get(cf_meta, key, value);
    if (status.IsNotFound())
      return caf::make_error(ec::not_found, "no meta value " + key);
    if (!status.ok())
      return read_failed(cf_meta, status);
    return value;
  }

  // -- staged writes ----------------------------------------------------------

  caf::expected<accept_result> stage_accept(const accept_request& req)
    override {
    if (opts_.read_only)
      return read_only_error();
    const auto& entry = req.entry;
    auto id_key = client_id_key(req.thread, entry.client_id);
    // A message from another thread leaves the sender's outbox in the same
    // batch; so does a duplicate, which is in the target already.
    auto delivered = [&] {
      if (!req.outbox_from.empty())
        batch_delete(cf_outbox, seq_key(req.outbox_from, req.outbox_seq));
    };
    auto duplicate = [&](seq_t seq) {
      if (!req.outbox_from.empty()) {
        delivered();
        count_staged();
      }
      return accept_result{seq, true};
    };
    // The staged group first: a resend may arrive before its first copy is
    // flushed.
    if (auto i = pending_ids_.find(id_key); i != pending_ids_.end())
      return duplicate(i->second);
    if (auto err = ensure_readable())
      return err;
    std::string value;
    auto status = get(cf_client_ids, id_key, value);
    if (status.ok()) {
      auto seq = parse_decimal(value);
      if (!seq)
        return corrupt(cf_client_ids, id_key, "not a sequence number");
      return duplicate(*seq);
    }
    if (!status.IsNotFound())
      return read_failed(cf_client_ids, status);
    log_entry user;
    user.seq = entry.seq;
    user.kind = log_kind::user;
    user.client_id = entry.client_id;
    user.text = entry.text;
    user.at = entry.accepted_at;
    std::optional<session_record> session;
    if (req.create_session) {
      auto rec = with_stored_parent(req.session);
      if (!rec)
        return std::move(rec.error());
      session = std::move(*rec);
    }
    std::string inbox_value;
    std::string log_value;
    std::string session_value;
    try {
      inbox_value = encode(entry);
      log_value = encode(user);
      if (session)
        session_value = encode(*session);
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
    if (session) {
      batch_put(cf_sessions, req.thread, session_value);
      pending_sessions_[req.thread] = std::move(*session);
    }
    delivered();
    pending_ids_.emplace(std::move(id_key), entry.seq);
    count_staged();
    return accept_result{entry.seq, false};
  }

  void stage_commit(const turn_commit& commit) override {
    if (!ready_to_stage())
      return;
    // Encode everything first so that a failure stages nothing.
    using kv_list = std::vector<std::pair<std::string, std::string>>;
    kv_list context;
    kv_list log;
    kv_list sessions;
    kv_list outbox;
    std::optional<session_record> session;
    if (commit.write_session) {
      auto rec = with_stored_parent(commit.session);
      if (!rec) {
        poison("cannot read the session of " + commit.thread + ": "
               + render(rec.error()));
        return;
      }
      session = std::move(*rec);
    }
    try {
      for (auto& x : commit.context)
        context.emplace_back(seq_key(commit.thread, x.seq), encode(x));
      for (auto& x : commit.log)
        log.emplace_back(seq_key(commit.thread, x.seq), encode(x));
      if (session)
        sessions.emplace_back(session->thread, encode(*session));
      for (auto& x : commit.outbox)
        outbox.emplace_back(seq_key(x.from, x.seq), encode(x));
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
    for (auto& [key, value] : sessions)
      batch_put(cf_sessions, key, value);
    for (auto& [key, value] : outbox)
      batch_put(cf_outbox, key, value);
    if (session)
      pending_sessions_[session->thread] = std::move(*session);
    count_staged();
  }

  caf::expected<spawn_result> stage_spawn(const spawn_request& req) override {
    if (opts_.read_only)
      return read_only_error();
    const auto& child = req.child.thread;
    const auto& parent = req.link.parent;
    if (auto err = ensure_readable())
      return err;
    auto refuse = [&](ec code, const std::string& why) {
      return caf::make_error(code, "cannot spawn " + child + " under "
                                     + parent + ": " + why);
    };
    // The ids become key prefixes: a '/' in one would corrupt the ranges.
    if (!valid_thread_id(child) || !valid_thread_id(parent))
      return refuse(ec::conflict, "not a valid thread id");
    if (child == parent)
      return refuse(ec::conflict, "a thread cannot be its own child");
    if (req.link.child != child || req.child.parent != parent)
      return refuse(ec::conflict, "the link (" + req.link.parent + " -> "
                                    + req.link.child
                                    + ") does not match the child's session "
                                      "(parent "
                                    + req.child.parent + ")");
    auto parent_rec = find_session(parent);
    if (!parent_rec)
      return std::move(parent_rec.error());
    if (!*parent_rec)
      return refuse(ec::not_found, "the parent has no session");
    if ((*parent_rec)->state == session_state::closed)
      return refuse(ec::conflict, "the parent is CLOSED");
    auto existing = find_session(child);
    if (!existing)
      return std::move(existing.error());
    if (*existing) {
      const auto& other = (*existing)->parent;
      if (other == parent)
        return spawn_result{parent, child, false};
      return refuse(ec::conflict,
                    other.empty() ? "the thread exists as a root"
                                  : "the thread exists under " + other);
    }
    std::string session_value;
    std::string link_value;
    try {
      session_value = encode(req.child);
      link_value = encode(req.link);
    } catch (const std::exception& ex) {
      return caf::make_error(ec::storage_io, "cannot encode the spawn of "
                                               + child + ": " + ex.what());
    }
    batch_put(cf_sessions, child, session_value);
    batch_put(cf_tree, tree_key(parent, child), link_value);
    pending_sessions_[child] = req.child;
    count_staged();
    return spawn_result{parent, child, true};
  }

  void stage_dead_letter(const outbox_entry& entry,
                         const std::string& reason) override {
    dead_letter letter{entry, reason, wall_clock_millis()};
    auto key = seq_key(entry.from, entry.seq);
    if (stage_record(cf_dead_letters, key, letter,
                     "the dead letter " + printable_key(cf_outbox, key)))
      batch_delete(cf_outbox, key);
  }

  void stage_session(const session_record& given) override {
    if (!ready_to_stage())
      return;
    auto rec = with_stored_parent(given);
    if (!rec) {
      poison("cannot read the session of " + given.thread + ": "
             + render(rec.error()));
      return;
    }
    if (stage_record(cf_sessions, rec->thread, *rec,
                     "the session of " + rec->thread))
      pending_sessions_[rec->thread] = std::move(*rec);
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
    if (opts_.read_only) {
      drop_group();
      return read_only_error();
    }
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
    clear_group();
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

  // Calls `fn(key, value)` for each key of `cf` in [lower, upper); an empty
  // bound is open.
  template <class Fn>
  caf::error scan(size_t cf, const std::string& lower,
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

  // Appends the records of `cf` in [lower, upper) to `out`. A record that
  // cannot be read fails the call, or, given `bad`, is listed there and
  // skipped.
  template <class T>
  caf::error collect(size_t cf, const std::string& lower,
                     const std::string& upper, std::vector<T>& out,
                     std::vector<bad_record>* bad) {
    return scan(cf, lower, upper,
                [&](const rocksdb::Slice& key, const rocksdb::Slice& val) {
                  T x;
                  auto why = read_record(key, val, x);
                  if (!why)
                    out.emplace_back(std::move(x));
                  else if (bad != nullptr)
                    bad->push_back(bad_record{cf_names[cf],
                                              printable_key(cf, key), *why});
                  else
                    return scan_result{corrupt(cf, key, *why)};
                  return scan_result{};
                });
  }

  // Returns every record of `cf` (see `collect`).
  template <class T>
  caf::expected<std::vector<T>> collect_all(size_t cf,
                                            std::vector<bad_record>* bad) {
    if (auto err = ensure_readable())
      return err;
    std::vector<T> result;
    if (auto err = collect(cf, {}, {}, result, bad))
      return err;
    return result;
  }

  caf::expected<thread_dump> dump(const std::string& thread,
                                  std::vector<bad_record>* bad) {
    if (auto err = ensure_readable())
      return err;
    thread_dump result;
    result.thread = thread;
    auto begin = range_begin(thread);
    auto end = range_end(thread);
    caf::error err;
    if ((err = collect(cf_log, begin, end, result.log, bad))
        || (err = collect(cf_inbox, begin, end, result.inbox, bad))
        || (err = collect(cf_context, begin, end, result.context, bad))
        || (err = collect(cf_outbox, begin, end, result.outbox, bad)))
      return err;
    err = scan(cf_client_ids, begin, end,
               [&](const rocksdb::Slice& key, const rocksdb::Slice& val) {
                 auto seq = parse_decimal(val.ToString());
                 if (seq)
                   result.client_ids.emplace_back(
                     std::string{key.data() + begin.size(),
                                 key.size() - begin.size()},
                     *seq);
                 else if (bad != nullptr)
                   bad->push_back(bad_record{cf_names[cf_client_ids],
                                             printable_key(cf_client_ids, key),
                                             "not a sequence number"});
                 else
                   return scan_result{corrupt(cf_client_ids, key,
                                              "not a sequence number")};
                 return scan_result{};
               });
    if (err)
      return err;
    return result;
  }

  // The session of `thread` as the next flush leaves it: staged, else on
  // disk, else none.
  // The tree is written by spawns alone: a session write from a thread's
  // conversation keeps the parent its stored record has (a conversation
  // that began before its thread was spawned as a child knows none). A
  // record naming a parent is right as it is: parents never change.
  caf::expected<session_record> with_stored_parent(session_record rec) {
    if (!rec.parent.empty())
      return rec;
    auto existing = find_session(rec.thread);
    if (!existing)
      return std::move(existing.error());
    if (*existing && !(*existing)->parent.empty())
      rec.parent = (*existing)->parent;
    return rec;
  }

  caf::expected<std::optional<session_record>>
  find_session(const std::string& thread) {
    if (auto i = pending_sessions_.find(thread); i != pending_sessions_.end())
      return std::optional<session_record>{i->second};
    auto rec = session(thread);
    if (rec)
      return std::optional<session_record>{std::move(*rec)};
    if (rec.error() == ec::not_found)
      return std::optional<session_record>{};
    return std::move(rec.error());
  }

  // An iterator over `cf`; an empty one for a column family the database
  // lacks (read-only open of an older build's database).
  std::unique_ptr<rocksdb::Iterator>
  new_iterator(size_t cf, const rocksdb::ReadOptions& ropts) {
    if (cf_[cf] == nullptr)
      return std::unique_ptr<rocksdb::Iterator>{rocksdb::NewEmptyIterator()};
    return std::unique_ptr<rocksdb::Iterator>{db_->NewIterator(ropts,
                                                               cf_[cf])};
  }

  // Reads one value; NotFound in a column family the database lacks.
  rocksdb::Status get(size_t cf, const std::string& key, std::string& value) {
    if (cf_[cf] == nullptr)
      return rocksdb::Status::NotFound();
    return db_->Get(rocksdb::ReadOptions{}, cf_[cf], key, &value);
  }

  caf::error read_only_error() const {
    return caf::make_error(ec::storage_io, "the database in " + dir_
                                             + " is open read-only: cannot "
                                               "write");
  }

  // Returns the seq of the last key of `thread` in `cf`, or 0.
  caf::expected<seq_t> last_seq(size_t cf, const std::string& thread) {
    auto begin = range_begin(thread);
    rocksdb::Slice lower{begin};
    rocksdb::ReadOptions ropts;
    ropts.iterate_lower_bound = &lower;
    auto it = new_iterator(cf, ropts);
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
    if (opts_.read_only)
      return open_db(true);
    auto err = open_db(false);
    if (err)
      static_cast<void>(open_db(true));
    return err;
  }

  caf::error ensure_writable() {
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
    if (opts_.read_only) {
      poison(error_message(read_only_error()));
      return false;
    }
    if (auto err = ensure_readable()) {
      poison(error_message(err));
      return false;
    }
    return true;
  }

  // A column family can only be missing in a read-only instance, which
  // takes no writes; the guard keeps a null handle out of the batch anyway.
  bool have_family(size_t cf) {
    if (cf_[cf] != nullptr)
      return true;
    poison(std::string{"column family "} + cf_names[cf] + " is missing");
    return false;
  }

  void batch_put(size_t cf, const std::string& key, const std::string& value) {
    // Only fails on a batch over 4 GB (max_bytes is unlimited by default).
    if (have_family(cf))
      static_cast<void>(batch_.Put(cf_[cf], key, value));
  }

  void batch_delete(size_t cf, const std::string& key) {
    if (have_family(cf))
      static_cast<void>(batch_.Delete(cf_[cf], key));
  }

  // Stages one record under `key`; one that cannot be encoded (a string
  // that is not UTF-8) fails the group, naming `what`. Returns whether it
  // staged the record.
  template <class T>
  bool stage_record(size_t cf, const std::string& key, const T& rec,
                    const std::string& what) {
    if (!ready_to_stage())
      return false;
    std::string value;
    try {
      value = encode(rec);
    } catch (const std::exception& ex) {
      poison("cannot encode " + what + ": " + ex.what());
      return false;
    }
    batch_put(cf, key, value);
    count_staged();
    return true;
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

  void clear_group() {
    batch_.Clear();
    pending_ids_.clear();
    pending_sessions_.clear();
    staged_ = 0;
    poisoned_ = caf::none;
  }

  void drop_group() {
    clear_group();
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
  // The latest staged session record per thread, for `stage_spawn`.
  std::unordered_map<std::string, session_record> pending_sessions_;
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
    if (opts.create_if_missing && !opts.read_only) {
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
    if (auto err = result->open_db(opts.read_only))
      return err;
    return std::unique_ptr<store>{std::move(result)};
  } catch (const std::exception& ex) {
    return caf::make_error(ec::storage_open_failed,
                           "cannot open database in " + dir + ": "
                             + ex.what());
  }
}

} // namespace keel
