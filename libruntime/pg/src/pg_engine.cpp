#include "pg_engine.hpp"

#include <algorithm>
#include <cstdio>
#include <random>

#include "pg_cluster_schema.hpp"

namespace keel {

caf::expected<std::unique_ptr<store>>
open_pg_store(const pg_store_options& opts) {
  if (opts.connections == 0)
    return caf::make_error(ec::storage_open_failed,
                           "cannot open the PostgreSQL store: it needs at "
                           "least one connection");
  auto engine = std::make_unique<pg::engine>(opts);
  if (auto err = engine->open())
    return err;
  return make_kv_store(std::move(engine));
}

} // namespace keel

namespace keel::pg {

namespace {

// Rows a scan fetches at a time: bounded memory however large a family.
constexpr size_t scan_page_rows = 512;

// The audit columns of the data tables (layout 2): who put the row in a
// fenced transaction, at which epoch of the row's shard, and when.
constexpr const char* audit_columns[][2] = {
  {"writer", "text"},
  {"writer_epoch", "bigint"},
  {"written_at", "timestamptz"},
};

// The statements that create the schema (each idempotent); a fresh
// database gets this build's layout.
std::vector<std::string> create_steps() {
  std::vector<std::string> steps{
    "CREATE SCHEMA IF NOT EXISTS keel",
    "CREATE TABLE IF NOT EXISTS keel.layout (version integer NOT NULL)",
    "CREATE TABLE IF NOT EXISTS keel.commit_marks (writer text PRIMARY KEY, "
    "nonce bigint NOT NULL)",
    "INSERT INTO keel.layout SELECT " + std::to_string(pg_layout_version)
      + " WHERE NOT EXISTS (SELECT 1 FROM keel.layout)",
  };
  std::string columns;
  for (auto& column : audit_columns)
    columns += std::string{", "} + column[0] + " " + column[1];
  for (size_t family = 0; family < column_families.size(); ++family)
    steps.push_back("CREATE TABLE IF NOT EXISTS " + table_of(family)
                    + " (key bytea PRIMARY KEY, value bytea NOT NULL" + columns
                    + ")");
  return steps;
}

// The statements that upgrade a layout 1 schema to layout 2: the audit
// columns (NULL in every existing row: written without a stamp), the
// clock of the shard history (see `pg_cluster_schema.hpp`: a takeover's
// `at` is taken after it got the shard row, so that no row a fenced
// transaction of the old epoch wrote can look newer), the version.
std::vector<std::string> upgrade_steps() {
  std::vector<std::string> steps;
  for (size_t family = 0; family < column_families.size(); ++family) {
    std::string sql = "ALTER TABLE " + table_of(family);
    const char* separator = " ";
    for (auto& column : audit_columns) {
      sql += std::string{separator} + "ADD COLUMN IF NOT EXISTS " + column[0]
             + " " + column[1];
      separator = ", ";
    }
    steps.push_back(std::move(sql));
  }
  steps.emplace_back("ALTER TABLE IF EXISTS keel.shard_history ALTER COLUMN "
                     "at SET DEFAULT clock_timestamp()");
  steps.emplace_back("UPDATE keel.layout SET version = 2 WHERE version = 1");
  return steps;
}

} // namespace

engine::engine(pg_store_options opts) : opts_(std::move(opts)) {
  conns_.resize(opts_.connections);
  server_started_.resize(opts_.connections);
  std::random_device rd;
  std::mt19937_64 gen{(uint64_t{rd()} << 32) ^ rd()};
  char id[17];
  std::snprintf(id, sizeof(id), "%016llx",
                static_cast<unsigned long long>(gen()));
  instance_ = id;
  next_nonce_ = gen() >> 1;
}

engine::~engine() {
  // This engine's commit marks are needed only while it runs.
  if (!opts_.read_only && conns_[0] && conns_[0]->ok() && conns_[0]->idle())
    static_cast<void>(
      conns_[0]->exec("DELETE FROM keel.commit_marks WHERE writer LIKE $1",
                      {instance_ + "-%"}));
}

caf::error engine::open() {
  auto failed = [](const caf::error& err) {
    return caf::make_error(ec::storage_open_failed,
                           "cannot open the PostgreSQL store: "
                             + error_message(err));
  };
  if (auto err = connect(0))
    return failed(err);
  if (conns_[0]->server_version() < 150000)
    return caf::make_error(ec::storage_open_failed,
                           "cannot open the PostgreSQL store: the server is "
                           "version "
                             + std::to_string(conns_[0]->server_version())
                             + ", Keel needs 15 or newer");
  if (auto err = opts_.read_only ? check_layout() : prepare_schema())
    return failed(err);
  return caf::none;
}

std::string engine::describe() const {
  return "the PostgreSQL store";
}

bool engine::read_only() const {
  return opts_.read_only;
}

uint64_t engine::reopens() const {
  return reopens_;
}

caf::error engine::connect(size_t slot) {
  auto& conn = conns_[slot];
  if (conn && conn->ok() && conn->idle())
    return caf::none;
  if (conn)
    ++reopens_;
  conn.reset();
  auto opened = connection::open(opts_.url, opts_.connect_timeout);
  if (!opened)
    return std::move(opened.error());
  // Durability is the session's, whatever the server's default: COMMIT
  // returns once the WAL is flushed (and, with synchronous standbys, on
  // them too).
  auto set
    = opened->exec("SELECT set_config('synchronous_commit', 'on', false), "
                   "set_config('statement_timeout', $1, false), "
                   "set_config('default_transaction_read_only', $2, false), "
                   "set_config('application_name', 'keel', false), "
                   "set_config('client_min_messages', 'warning', false), "
                   "pg_postmaster_start_time()::text",
                   {std::to_string(opts_.statement_timeout.count()),
                    std::string{opts_.read_only ? "on" : "off"}});
  if (!set)
    return std::move(set.error());
  server_started_[slot] = std::string{set->value(0, 5)};
  conn = std::move(*opened);
  return caf::none;
}

caf::expected<connection*> engine::usable(size_t slot) {
  if (auto err = connect(slot))
    return err;
  return &*conns_[slot];
}

caf::error engine::run_schema_steps(const std::vector<std::string>& steps) {
  auto& conn = *conns_[0];
  for (auto& sql : steps)
    if (auto res = conn.exec(sql); !res) {
      static_cast<void>(conn.exec("ROLLBACK"));
      return std::move(res.error());
    }
  return caf::none;
}

caf::error engine::prepare_schema() {
  auto& conn = *conns_[0];
  std::vector<std::string> steps{
    "BEGIN",
    std::string{"SELECT pg_advisory_xact_lock("} + schema_lock_id + ")",
  };
  auto create = create_steps();
  steps.insert(steps.end(), create.begin(), create.end());
  if (auto err = run_schema_steps(steps))
    return err;
  // Under the lock: one node upgrades, the others find it done.
  auto version = conn.exec("SELECT version FROM keel.layout");
  if (!version) {
    static_cast<void>(conn.exec("ROLLBACK"));
    return std::move(version.error());
  }
  if (version->rows() == 1 && version->value(0, 0) == "1")
    if (auto err = run_schema_steps(upgrade_steps()))
      return err;
  if (auto err = run_schema_steps({"COMMIT"}))
    return err;
  return check_layout();
}

caf::error engine::check_layout() {
  auto res = conns_[0]->exec("SELECT version FROM keel.layout");
  if (!res) {
    auto code = sqlstate_of(res.error());
    // undefined_table, invalid_schema_name
    if (code == "42P01" || code == "3F000")
      return caf::make_error(ec::storage_io,
                             "the database holds no Keel schema (schema "
                             "keel, table keel.layout)");
    return std::move(res.error());
  }
  if (res->rows() != 1)
    return caf::make_error(ec::storage_io, "keel.layout holds "
                                             + std::to_string(res->rows())
                                             + " rows, expected 1");
  auto version = std::string{res->value(0, 0)};
  if (std::stoll(version) > pg_layout_version)
    return caf::make_error(ec::storage_io,
                           "the schema keel has layout version " + version
                             + ", newer than this build's "
                             + std::to_string(pg_layout_version));
  return caf::none;
}

// -- reads --------------------------------------------------------------------

caf::error engine::ensure_readable() {
  if (auto err = connect(0))
    return caf::make_error(ec::storage_io,
                           "PostgreSQL unavailable: " + error_message(err));
  return caf::none;
}

caf::error engine::ensure_writable() {
  if (opts_.read_only)
    return caf::make_error(ec::storage_io, describe()
                                             + " is open read-only: cannot "
                                               "write");
  return caf::none;
}

caf::error engine::read_failed(size_t family, const caf::error& err) const {
  return caf::make_error(ec::storage_io, "read failed in "
                                           + column_families[family] + ": "
                                           + error_message(err));
}

caf::expected<result>
engine::query(const std::string& sql,
              const std::vector<std::string_view>& params) {
  for (int attempt = 0;; ++attempt) {
    auto conn = usable(0);
    if (!conn)
      return std::move(conn.error());
    auto res = (*conn)->exec_binary(sql, params);
    if (res || (*conn)->ok() || attempt > 0)
      return res;
  }
}

caf::expected<std::optional<std::string>> engine::get(size_t family,
                                                      std::string_view key) {
  auto res = query("SELECT value FROM " + table_of(family) + " WHERE key = $1",
                   {key});
  if (!res)
    return read_failed(family, res.error());
  if (res->rows() == 0)
    return std::optional<std::string>{};
  return std::optional<std::string>{std::string{res->value(0, 0)}};
}

caf::expected<result>
engine::scan_page(size_t family, std::string_view lower, std::string_view upper,
                  const std::optional<std::string>& after) {
  std::string sql = "SELECT key, value FROM " + table_of(family)
                    + (after ? " WHERE key > $1" : " WHERE key >= $1");
  std::vector<std::string_view> params{after ? std::string_view{*after}
                                             : lower};
  if (!upper.empty()) {
    sql += " AND key < $2";
    params.push_back(upper);
  }
  sql += " ORDER BY key LIMIT " + std::to_string(scan_page_rows);
  return query(sql, params);
}

caf::error engine::scan(size_t family, std::string_view lower,
                        std::string_view upper, const scan_fn& fn) {
  std::optional<std::string> after;
  for (;;) {
    auto page = scan_page(family, lower, upper, after);
    if (!page)
      return read_failed(family, page.error());
    for (size_t row = 0; row < page->rows(); ++row) {
      auto res = fn(page->value(row, 0), page->value(row, 1));
      if (res.err)
        return std::move(res.err);
      if (res.flag == scan_result::stop)
        return caf::none;
    }
    if (page->rows() < scan_page_rows)
      return caf::none;
    after = std::string{page->value(page->rows() - 1, 0)};
  }
}

caf::expected<std::optional<std::string>>
engine::last_key(size_t family, std::string_view lower,
                 std::string_view upper) {
  auto res = query("SELECT key FROM " + table_of(family)
                     + " WHERE key >= $1 AND key < $2 ORDER BY key DESC "
                       "LIMIT 1",
                   {lower, upper});
  if (!res)
    return read_failed(family, res.error());
  if (res->rows() == 0)
    return std::optional<std::string>{};
  return std::optional<std::string>{std::string{res->value(0, 0)}};
}

} // namespace keel::pg
