#include "pg_engine.hpp"

#include <chrono>
#include <functional>
#include <thread>

#include "pg_cluster_schema.hpp"

namespace keel::pg {

namespace {

// Rows per INSERT or DELETE statement: far below the protocol's 65535
// parameters, large enough that a group takes few statements.
constexpr size_t rows_per_statement = 1000;

// How often `resolve_commit` asks before it gives up.
constexpr int resolve_attempts = 20;

constexpr auto resolve_pause = std::chrono::milliseconds{100};

// "INSERT INTO T (key, value) VALUES ($1, $2), ... ON CONFLICT ..." for
// `rows` rows. With `epochs` (one per row: a number, or NULL), the rows are
// stamped: "(key, value, writer, writer_epoch, written_at) VALUES ($1, $2,
// $W, EPOCH, now()), ...", the writer $W the parameter after the rows'.
// A row put again takes the new stamp, or none.
std::string upsert_sql(size_t family, size_t rows,
                       const std::vector<std::string>& epochs) {
  bool stamped = !epochs.empty();
  auto writer = ", $" + std::to_string(2 * rows + 1) + ", ";
  std::string sql = "INSERT INTO " + table_of(family)
                    + (stamped ? " (key, value, writer, writer_epoch, "
                                 "written_at) VALUES "
                               : " (key, value) VALUES ");
  for (size_t i = 0; i < rows; ++i) {
    sql += i == 0 ? "($" : ", ($";
    sql += std::to_string(2 * i + 1) + ", $" + std::to_string(2 * i + 2);
    if (stamped)
      sql += writer + epochs[i] + ", now()";
    sql += ')';
  }
  return sql
         + " ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value, "
           "writer = EXCLUDED.writer, writer_epoch = "
           "EXCLUDED.writer_epoch, written_at = EXCLUDED.written_at";
}

// "DELETE FROM T WHERE key IN ($1, ...)" for `rows` keys.
std::string delete_sql(size_t family, size_t rows) {
  std::string sql = "DELETE FROM " + table_of(family) + " WHERE key IN (";
  for (size_t i = 0; i < rows; ++i)
    sql += (i == 0 ? "$" : ", $") + std::to_string(i + 1);
  return sql + ")";
}

caf::error write_failed(const caf::error& err) {
  return caf::make_error(ec::storage_io, "write failed: " + error_message(err));
}

// A statement the server refused: the fence's refusal (this node does not
// own a shard at the epoch it holds it at) is `ec::not_owner` with the
// server's message, anything else a failed write.
caf::error refused(const caf::error& err) {
  if (sqlstate_of(err) != fence_sqlstate)
    return write_failed(err);
  auto msg = error_message(err);
  // "SQLSTATE KL001: shard 17 is not owned by ...": the server's words.
  auto text = msg.find(": ");
  return caf::make_error(ec::not_owner, "write fenced off: "
                                          + (text == std::string::npos
                                               ? msg
                                               : msg.substr(text + 2)));
}

// Whether the rows of `family` belong to no thread: `meta`, `health` and
// `notices`, which a node writes whatever shards it holds.
bool unfenced(const std::string& family) {
  return family == "meta" || family == "health" || family == "notices";
}

// One family's writes of a share, as statements: removals in `DELETE`s,
// puts in multi-row upserts, up to `rows_per_statement` rows each. The
// statements point into the keys, values and the stamp's writer.
class family_statements {
public:
  // `stamp`: the fence of the share if its rows of this family are
  // stamped, else null.
  family_statements(std::vector<statement>& steps, size_t family,
                    const share_fence* stamp)
    : steps_(steps), family_(family), stamp_(stamp) {
    // nop
  }

  void put(std::string_view key, std::string_view value) {
    puts_.insert(puts_.end(), {key, value});
    if (stamp_)
      epochs_.push_back(epoch_of(key));
    if (puts_.size() == 2 * rows_per_statement)
      flush_puts();
  }

  void erase(std::string_view key) {
    removals_.push_back(key);
    if (removals_.size() == rows_per_statement)
      flush_removals();
  }

  void finish() {
    flush_removals();
    flush_puts();
  }

private:
  // The epoch the fence checks the shard of `key`'s thread at; NULL if the
  // transaction is not fenced on it (a row of another tree's thread).
  std::string epoch_of(std::string_view key) const {
    auto i = stamp_->held.find(stamp_->table->shard_of(key_thread(key)));
    return i == stamp_->held.end() ? "NULL" : std::to_string(i->second);
  }

  void flush_puts() {
    if (puts_.empty())
      return;
    auto sql = upsert_sql(family_, puts_.size() / 2, epochs_);
    if (stamp_)
      puts_.push_back(stamp_->table->me());
    steps_.push_back({std::move(sql), std::move(puts_)});
    puts_.clear();
    epochs_.clear();
  }

  void flush_removals() {
    if (removals_.empty())
      return;
    steps_.push_back(
      {delete_sql(family_, removals_.size()), std::move(removals_)});
    removals_.clear();
  }

  std::vector<statement>& steps_;
  size_t family_;
  const share_fence* stamp_;
  std::vector<std::string_view> puts_;
  std::vector<std::string_view> removals_;
  std::vector<std::string> epochs_;
};

} // namespace

// -- batch --------------------------------------------------------------------

batch::batch(size_t shares, std::shared_ptr<const shard_table> fence)
  : merged_(std::max<size_t>(shares, 1)),
    fence_(std::move(fence)),
    fenced_(merged_.size()) {
  families_.resize(column_families.size());
  for (auto& family : column_families)
    unfenced_family_.push_back(unfenced(family));
  clear();
}

void batch::begin_operation(std::string_view thread, uint64_t tenure) {
  current_shard_.reset();
  current_tenure_ = tenure;
  if (!fence_ || thread.empty()) {
    current_ = std::hash<std::string_view>{}(thread) % merged_.size();
    return;
  }
  current_thread_ = std::string{thread};
  current_shard_ = fence_->shard_of(thread);
  current_ = *current_shard_ % merged_.size();
}

bool batch::put(size_t family, std::string_view key, std::string_view value) {
  stage(family, key, std::string{value});
  return true;
}

bool batch::erase(size_t family, std::string_view key) {
  stage(family, key, std::nullopt);
  return true;
}

void batch::stage(size_t family, std::string_view key,
                  std::optional<std::string> value) {
  if (current_shard_ && !unfenced_family_[family])
    note_fenced(fenced_[current_][*current_shard_]);
  auto& writes = families_[family];
  auto i = writes.find(key);
  if (i == writes.end()) {
    writes.emplace(std::string{key}, write{std::move(value), current_});
    return;
  }
  // Another operation wrote this key in this group: both commit together.
  auto a = owner(i->second.share);
  auto b = owner(current_);
  if (a != b)
    merged_[std::max(a, b)] = std::min(a, b);
  i->second = write{std::move(value), current_};
}

void batch::note_fenced(fenced_shard& shard) const {
  if (shard.thread.empty())
    shard.thread = current_thread_;
  if (current_tenure_ == 0 || shard.tenure == current_tenure_)
    return;
  if (shard.tenure == 0)
    shard.thread = current_thread_; // Named in a refusal for its tenure.
  shard.mixed = shard.mixed || shard.tenure != 0;
  shard.tenure = current_tenure_;
}

void batch::clear() {
  for (auto& writes : families_)
    writes.clear();
  for (size_t i = 0; i < merged_.size(); ++i)
    merged_[i] = i;
  for (auto& shards : fenced_)
    shards.clear();
  current_ = 0;
  current_thread_.clear();
  current_shard_.reset();
  current_tenure_ = 0;
}

size_t batch::owner(size_t share) const {
  while (merged_[share] != share)
    share = merged_[share];
  return share;
}

batch::fenced_shards batch::fenced(size_t part) const {
  fenced_shards result;
  for (size_t share = 0; share < fenced_.size(); ++share)
    if (owner(share) == part)
      result.insert(fenced_[share].begin(), fenced_[share].end());
  return result;
}

std::vector<size_t> batch::owners() const {
  std::vector<bool> used(merged_.size(), false);
  for (auto& writes : families_)
    for (auto& entry : writes)
      used[owner(entry.second.share)] = true;
  std::vector<size_t> result;
  for (size_t i = 0; i < used.size(); ++i)
    if (used[i])
      result.push_back(i);
  return result;
}

// -- writing a group ----------------------------------------------------------

std::unique_ptr<kv_batch> engine::new_batch() {
  return std::make_unique<batch>(conns_.size(), opts_.fence);
}

caf::error engine::write(kv_batch& given) {
  if (auto err = ensure_writable())
    return err;
  auto& group = static_cast<batch&>(given);
  auto owners = group.owners();
  if (owners.size() <= 1)
    return owners.empty() ? caf::none : commit_share(group, owners.front());
  // Shares touch disjoint keys: their transactions commit side by side.
  std::vector<caf::error> errors(owners.size());
  std::vector<std::thread> workers;
  for (size_t i = 1; i < owners.size(); ++i)
    workers.emplace_back(
      [&, i] { errors[i] = commit_share(group, owners[i]); });
  errors[0] = commit_share(group, owners[0]);
  for (auto& worker : workers)
    worker.join();
  for (auto& err : errors)
    if (err)
      return std::move(err);
  return caf::none;
}

std::string engine::writer(size_t slot) const {
  return instance_ + "-" + std::to_string(slot);
}

caf::expected<share_fence> engine::fence_of(const batch& group,
                                            size_t part) const {
  share_fence result;
  result.table = group.fence().get();
  for (auto& [shard, fenced] : group.fenced(part)) {
    if (fenced.mixed)
      return caf::make_error(ec::not_owner,
                             "write fenced off: writes of shard "
                               + std::to_string(shard)
                               + " loaded under different epochs in one group");
    if (auto err = group.fence()->check_tenure(fenced.thread, fenced.tenure))
      return err;
    auto epoch = group.fence()->held_epoch(shard);
    if (!epoch)
      return caf::make_error(ec::not_owner,
                             "write fenced off: this node does not hold shard "
                               + std::to_string(shard) + " (thread "
                               + fenced.thread + ")");
    result.held.emplace(shard, *epoch);
    result.shards += (result.shards.empty() ? "{" : ",")
                     + std::to_string(shard);
    result.epochs += (result.epochs.empty() ? "{" : ",")
                     + std::to_string(*epoch);
  }
  if (!result.shards.empty()) {
    result.shards += '}';
    result.epochs += '}';
  }
  return result;
}

std::vector<statement>
engine::share_statements(batch& group, size_t part, const commit_ticket& ticket,
                         const share_fence& fence, std::string& nonce) {
  nonce = std::to_string(ticket.nonce);
  std::vector<statement> steps;
  steps.push_back({"BEGIN", {}});
  // First, so that nothing is written unless this node owns every shard
  // written here, at its epoch; the shard rows stay locked until COMMIT.
  if (!fence.shards.empty())
    steps.push_back({"SELECT keel.fence($1::text, $2::text::int[], "
                     "$3::text::bigint[])",
                     {group.fence()->me(), fence.shards, fence.epochs}});
  // Text parameters cast from text: binary format is then their bytes.
  steps.push_back({"INSERT INTO keel.commit_marks (writer, nonce) VALUES "
                   "($1::text, $2::text::bigint) ON CONFLICT (writer) DO "
                   "UPDATE SET nonce = EXCLUDED.nonce",
                   {ticket.writer, nonce}});
  auto& families = group.families();
  for (size_t family = 0; family < families.size(); ++family) {
    // With a fence, a thread's rows are stamped; `meta` and `health` never.
    bool stamped = fence.table != nullptr && group.threads_family(family);
    family_statements out{steps, family, stamped ? &fence : nullptr};
    for (auto& [key, entry] : families[family]) {
      if (group.owner(entry.share) != part)
        continue;
      if (entry.value)
        out.put(key, *entry.value);
      else
        out.erase(key);
    }
    out.finish();
  }
  steps.push_back({"COMMIT", {}});
  return steps;
}

engine::share_outcome engine::run_share(batch& group, size_t part) {
  // A shard the table holds no more fails the share before anything goes.
  auto fence = fence_of(group, part);
  if (!fence)
    return {std::move(fence.error()), false};
  auto conn = usable(part);
  if (!conn)
    return {write_failed(conn.error()), false};
  commit_ticket ticket{next_nonce_++, (*conn)->backend_pid(),
                       server_started_[part], writer(part)};
  std::string nonce;
  // One round trip: BEGIN, the fence, the commit mark, the writes, COMMIT.
  auto done
    = (*conn)->pipeline(share_statements(group, part, ticket, *fence, nonce));
  if (done)
    return {};
  if ((*conn)->ok()) {
    // The server refused a statement: the transaction is rolled back (or
    // left aborted, which would fail every later statement: end it).
    if (!(*conn)->idle())
      static_cast<void>((*conn)->exec("ROLLBACK"));
    return {refused(done.error()), false};
  }
  // The session ended: whether the COMMIT took effect is read back.
  return resolve_commit(part, ticket);
}

caf::error engine::commit_share(batch& group, size_t part) {
  auto first = run_share(group, part);
  // A connection found dead (the server restarted since its last use) took
  // nothing: once that is read back, the share goes again on a fresh one.
  if (first.not_committed)
    return run_share(group, part).err;
  return std::move(first.err);
}

caf::expected<bool> engine::still_running(connection& conn,
                                          const commit_ticket& ticket) {
  auto res = conn.exec("SELECT state FROM pg_stat_activity WHERE pid = "
                       "$1::int AND pg_postmaster_start_time()::text = $2",
                       {std::to_string(ticket.pid), ticket.server_started});
  if (!res)
    return std::move(res.error());
  if (res->rows() == 0)
    return false;
  // Idle in the transaction: the COMMIT never reached it, and ending the
  // process rolls the transaction back. Anything else (running the COMMIT,
  // waiting for a synchronous standby) is left to finish.
  if (res->value(0, 0).substr(0, 19) == "idle in transaction")
    static_cast<void>(conn.exec("SELECT pg_terminate_backend($1::int)",
                                {std::to_string(ticket.pid)}));
  return true;
}

caf::expected<bool> engine::marked(connection& conn,
                                   const commit_ticket& ticket) {
  auto mark = conn.exec("SELECT nonce::text FROM keel.commit_marks "
                        "WHERE writer = $1",
                        {ticket.writer});
  if (!mark)
    return std::move(mark.error());
  return mark->rows() == 1 && mark->value(0, 0) == std::to_string(ticket.nonce);
}

engine::share_outcome engine::resolve_commit(size_t slot,
                                             const commit_ticket& ticket) {
  caf::error last;
  for (int attempt = 0; attempt < resolve_attempts; ++attempt) {
    if (attempt > 0)
      std::this_thread::sleep_for(resolve_pause);
    auto conn = usable(slot);
    if (!conn) {
      last = std::move(conn.error());
      continue;
    }
    // The mark first: once it is there the outcome is known, however long
    // the server process takes to notice its session is gone.
    if (auto done = marked(**conn, ticket); done && *done)
      return {};
    auto running = still_running(**conn, ticket);
    if (!running || *running) {
      last = running ? caf::make_error(ec::storage_io,
                                       "its server process still runs")
                     : std::move(running.error());
      continue;
    }
    // Read again: the transaction may have committed after the first read.
    auto done = marked(**conn, ticket);
    if (!done) {
      last = std::move(done.error());
      continue;
    }
    if (*done)
      return {};
    return {caf::make_error(ec::storage_io,
                            "write failed: the session ended during COMMIT "
                            "and the transaction did not commit (read back)"),
            true};
  }
  return {caf::make_error(ec::storage_io,
                          "write failed: the session ended during COMMIT and "
                          "whether the transaction committed could not be "
                          "read back (not acknowledged): "
                            + error_message(last)),
          false};
}

} // namespace keel::pg
