#pragma once

// What a storage backend provides to the store: ordered key-value families
// read by key and by key range, and atomic, durable group writes. The store
// (`keel/store.hpp`) keeps every record, check and staging rule on top of
// this, so both backends (RocksDB and PostgreSQL) keep the same records
// under the same keys with the same semantics.
//
// Families are numbered as in `column_families`; keys compare bytewise.
// Like the store, an engine has one owner and is not thread-safe.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "keel/error.hpp"

namespace keel {

class store;

/// What a scan callback tells the scan: go on, stop, or fail.
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

/// Called with each key and value of a scan, in key order.
using scan_fn = std::function<scan_result(std::string_view, std::string_view)>;

/// The writes of one group, applied by `kv_engine::write` all at once.
class kv_batch {
public:
  virtual ~kv_batch();

  /// Marks the writes that follow as part of one operation of `thread`:
  /// an engine that spreads a group over several connections keeps each
  /// operation's writes together. `tenure` (see `accept_request::tenure`):
  /// a cluster's fence commits the operation only while the node holds the
  /// thread's shard at that epoch; 0: at whatever epoch it holds it.
  virtual void begin_operation(std::string_view thread, uint64_t tenure) = 0;

  /// Stages writing `value` under `key`; false if it cannot (the group then
  /// fails at its flush).
  virtual bool put(size_t family, std::string_view key, std::string_view value)
    = 0;

  /// Stages removing `key`; false if it cannot.
  virtual bool erase(size_t family, std::string_view key) = 0;

  /// Drops everything staged.
  virtual void clear() = 0;
};

/// A storage backend.
class kv_engine {
public:
  virtual ~kv_engine();

  /// What the store is, for error messages ("the database in DIR").
  virtual std::string describe() const = 0;

  /// Whether the engine was opened for reading only.
  virtual bool read_only() const = 0;

  /// Makes sure reads can be served (reopening or reconnecting after a
  /// failure); the error says why not.
  virtual caf::error ensure_readable() = 0;

  /// Makes sure a group can be written; the error says why not.
  virtual caf::error ensure_writable() = 0;

  /// Reads the value under `key`, or none if there is none.
  virtual caf::expected<std::optional<std::string>>
  get(size_t family, std::string_view key) = 0;

  /// Calls `fn` for each key in [lower, upper) in order; an empty bound is
  /// open.
  virtual caf::error scan(size_t family, std::string_view lower,
                          std::string_view upper, const scan_fn& fn)
    = 0;

  /// The last key in [lower, upper), or none.
  virtual caf::expected<std::optional<std::string>>
  last_key(size_t family, std::string_view lower, std::string_view upper) = 0;

  /// A new, empty batch for `write`.
  virtual std::unique_ptr<kv_batch> new_batch() = 0;

  /// Applies `batch` durably: on success everything is stored, on failure
  /// the error says why (`ec::storage_io`; `ec::not_owner` for a write a
  /// cluster's fence refused) and nothing acknowledged may rest on it. An
  /// engine writing over several connections may have committed other
  /// parts of the batch (their retries are harmless: see `store::flush`).
  /// The batch is left as it was.
  virtual caf::error write(kv_batch& batch) = 0;

  /// How often the engine reopened its database or reconnected after a
  /// failure.
  virtual uint64_t reopens() const = 0;
};

/// A store over `engine`: checks the schema version (writing it into an
/// empty writable store) and returns the store, or why it cannot open.
caf::expected<std::unique_ptr<store>>
make_kv_store(std::unique_ptr<kv_engine> engine);

} // namespace keel
