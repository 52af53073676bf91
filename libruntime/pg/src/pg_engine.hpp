#pragma once

// The PostgreSQL engine under the store (see `keel/pg_store.hpp`): one
// table per family, `(key bytea PRIMARY KEY, value bytea, writer text,
// writer_epoch bigint, written_at timestamptz)` in the schema `keel`; keys
// compare bytewise as in RocksDB. Reads go over the first connection; a
// group's writes over all of them, one transaction each. In a cluster, each
// transaction that writes a thread's rows first calls the write fence
// `keel.fence` (`pg_cluster_schema.hpp`) for the shards of those threads,
// and stamps each row it puts with the node and the epoch of the row's
// shard (the epoch audit of `keelctl verify` checks them).

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "keel/kv_engine.hpp"
#include "keel/pg_connection.hpp"
#include "keel/pg_store.hpp"

namespace keel::pg {

/// The qualified table of `family`: `keel.NAME`.
inline std::string table_of(size_t family) {
  return "keel." + column_families[family];
}

/// The fence of one share's transaction: the arguments of its `keel.fence`
/// call, and what it stamps its rows with.
struct share_fence {
  /// The shards, and the epochs this node holds them at, as array
  /// literals; both empty: the share is not fenced.
  std::string shards;
  std::string epochs;
  /// The epoch of each shard fenced on.
  std::map<shard_id, uint64_t> held;
  /// The node's shard table (its id is the rows' writer); null without a
  /// fence: the rows are not stamped.
  const shard_table* table = nullptr;
};

/// The thread whose rows a key of a family of threads' rows belongs to:
/// the key up to its first '/' (all of it in `sessions`).
inline std::string_view key_thread(std::string_view key) {
  return key.substr(0, key.find('/'));
}

/// A group's writes, the last write per key, each with the share
/// (connection) of the operation that wrote it. Operations of one thread
/// share a share; two shares writing one key become one, so that the key's
/// writes stay in order inside one transaction.
///
/// With a fence (a cluster's shard table), a thread's share is its shard
/// modulo the shares (one shard's writes go over one connection), and each
/// share records the shards whose threads wrote rows in it: its
/// transaction is fenced on them. Writes in `meta` and `health` (no
/// thread's rows) and of operations of no thread (empty) record none.
class batch : public kv_batch {
public:
  /// One write: the value, or none for a removal.
  struct write {
    std::optional<std::string> value;
    size_t share = 0;
  };

  /// What a share's transaction is fenced on for one of its shards.
  struct fenced_shard {
    /// A thread of it that wrote (for messages).
    std::string thread;
    /// The tenure its writers loaded their views under (see
    /// `kv_batch::begin_operation`); 0 if none of them named one.
    uint64_t tenure = 0;
    /// Another writer of the shard in the group named another tenure: at
    /// most one of them can be current, and they commit together.
    bool mixed = false;
  };

  /// The shards a share is fenced on.
  using fenced_shards = std::map<shard_id, fenced_shard>;

  batch(size_t shares, std::shared_ptr<const shard_table> fence);

  void begin_operation(std::string_view thread, uint64_t tenure) override;

  bool put(size_t family, std::string_view key,
           std::string_view value) override;

  bool erase(size_t family, std::string_view key) override;

  void clear() override;

  /// The share that commits the writes of `share` (after merges).
  size_t owner(size_t share) const;

  /// The shares that commit something.
  std::vector<size_t> owners() const;

  /// The writes per family, by key (sorted: statements touch rows in key
  /// order).
  const std::vector<std::map<std::string, write, std::less<>>>&
  families() const {
    return families_;
  }

  /// The shards the transaction of `part` (an owner) is fenced on: those
  /// of every share merged into it. Empty without a fence.
  fenced_shards fenced(size_t part) const;

  /// The shard table of the fence; null if none.
  const std::shared_ptr<const shard_table>& fence() const {
    return fence_;
  }

  /// Whether the rows of `family` are threads' rows (fenced and stamped
  /// when the batch has a fence): all but `meta` and `health`.
  bool threads_family(size_t family) const {
    return !unfenced_family_[family];
  }

private:
  void stage(size_t family, std::string_view key,
             std::optional<std::string> value);

  // Records the current operation's thread and tenure in `shard`'s fence.
  void note_fenced(fenced_shard& shard) const;

  std::vector<std::map<std::string, write, std::less<>>> families_;
  // Union-find over shares: `merged_[i]` leads towards the owner of i.
  std::vector<size_t> merged_;
  size_t current_ = 0;
  std::shared_ptr<const shard_table> fence_;
  // Per family: whether its rows are no thread's (never fenced).
  std::vector<bool> unfenced_family_;
  // Per share (before merges): the shards it is fenced on.
  std::vector<fenced_shards> fenced_;
  // The thread of the current operation and its shard, if fenced.
  std::string current_thread_;
  std::optional<shard_id> current_shard_;
  uint64_t current_tenure_ = 0;
};

class engine : public kv_engine {
public:
  explicit engine(pg_store_options opts);

  ~engine() override;

  /// Connects the first connection and creates (or checks) the schema.
  caf::error open();

  std::string describe() const override;

  bool read_only() const override;

  caf::error ensure_readable() override;

  caf::error ensure_writable() override;

  caf::expected<std::optional<std::string>> get(size_t family,
                                                std::string_view key) override;

  caf::error scan(size_t family, std::string_view lower, std::string_view upper,
                  const scan_fn& fn) override;

  caf::expected<std::optional<std::string>>
  last_key(size_t family, std::string_view lower,
           std::string_view upper) override;

  std::unique_ptr<kv_batch> new_batch() override;

  /// Commits each connection's share of the batch as one transaction, the
  /// shares side by side. A COMMIT whose outcome is unknown (the session
  /// ended during it) is resolved by reading its commit mark back, never
  /// guessed. Returns the first share's error:
  /// `ec::not_owner` for a share fenced off (nothing of that share
  /// committed; other shares may have), else `ec::storage_io`.
  caf::error write(kv_batch& batch) override;

  uint64_t reopens() const override;

private:
  // (Re)connects connection `slot` with the session settings Keel needs.
  caf::error connect(size_t slot);

  // Connection `slot`, connected.
  caf::expected<connection*> usable(size_t slot);

  // Creates the schema if missing (under an advisory lock: nodes may start
  // side by side), upgrades a layout 1 schema in place, and checks its
  // layout version.
  caf::error prepare_schema();

  // Runs `steps` (inside the transaction prepare_schema opened); rolls it
  // back on a failure.
  caf::error run_schema_steps(const std::vector<std::string>& steps);

  caf::error check_layout();

  // Runs a read over the first connection; a connection found broken
  // (the server restarted since its last use) is replaced and the read
  // asked once more: nothing was done on the broken one.
  caf::expected<result> query(const std::string& sql,
                              const std::vector<std::string_view>& params);

  // Fetches one page of [lower, upper) of `family` after `after` (if set).
  caf::expected<result> scan_page(size_t family, std::string_view lower,
                                  std::string_view upper,
                                  const std::optional<std::string>& after);

  caf::error read_failed(size_t family, const caf::error& err) const;

  // What identifies one share's transaction once its session is gone.
  struct commit_ticket {
    // Written into `keel.commit_marks` under `writer` in the transaction
    // itself: there after a COMMIT that took effect only.
    uint64_t nonce = 0;
    // The server process that ran it, and when its server started.
    int pid = 0;
    std::string server_started;
    std::string writer;
  };

  // How a share's transaction ended: `err` none (committed), or the
  // failure; `not_committed`: the session ended and reading back showed
  // the transaction did not commit.
  struct share_outcome {
    caf::error err;
    bool not_committed = false;
  };

  // Commits the writes of `part` of `batch` over connection `part`.
  caf::error commit_share(class batch& batch, size_t part);

  // One attempt of `commit_share`.
  share_outcome run_share(class batch& batch, size_t part);

  // The fence of `part`, from the shard table (read once: the fence call
  // and the rows' stamps agree); `ec::not_owner` if the table holds one of
  // its shards no more (nothing is sent then).
  caf::expected<share_fence> fence_of(const class batch& batch,
                                      size_t part) const;

  // BEGIN, the fence (if any), the commit mark of `ticket`, the writes of
  // `part` in multi-row statements, COMMIT. The statements point into
  // `batch`, `fence` and `nonce`.
  std::vector<statement>
  share_statements(class batch& batch, size_t part, const commit_ticket& ticket,
                   const share_fence& fence, std::string& nonce);

  // The writer id of connection `slot` in `keel.commit_marks`.
  std::string writer(size_t slot) const;

  // Reads back whether the transaction of `ticket` committed after its
  // session ended during COMMIT: its commit mark says it did as soon as it
  // is there (the server process may linger after the COMMIT until it
  // notices the session is gone); that it did not only once the server
  // process is gone (ended if it only waits for a COMMIT that will never
  // come). `err` none: committed.
  share_outcome resolve_commit(size_t slot, const commit_ticket& ticket);

  // Whether the commit mark of `ticket` is stored (its transaction
  // committed).
  caf::expected<bool> marked(connection& conn, const commit_ticket& ticket);

  // Whether the server process of `ticket` still runs; ends it when it
  // idles in the transaction.
  caf::expected<bool> still_running(connection& conn,
                                    const commit_ticket& ticket);

  pg_store_options opts_;
  std::vector<std::optional<connection>> conns_;
  // pg_postmaster_start_time() seen by each connection when it connected.
  std::vector<std::string> server_started_;
  // Random per engine: writer ids and nonces of no other engine match.
  std::string instance_;
  std::atomic<uint64_t> next_nonce_;
  std::atomic<uint64_t> reopens_ = 0;
};

} // namespace keel::pg
