#pragma once

// Which backend the store's tests run on. Suites that hold data (the store
// and verify suites, the crash recovery process tests) run on RocksDB, or,
// with KEEL_STORE_BACKEND=postgres, on a PostgreSQL server the test process
// starts for itself on first use and stops when it exits: one suite, both
// backends.

#include <cstdlib>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "keel/pg_connection.hpp"
#include "keel/pg_store.hpp"
#include "keel/store.hpp"
#include "keel/tools/pg_server.hpp"
#include "raw_records.hpp"
#include "temp_dir.hpp"

namespace keel::test {

/// Whether the suites run on PostgreSQL (KEEL_STORE_BACKEND=postgres).
inline bool store_on_postgres() {
  auto* backend = std::getenv("KEEL_STORE_BACKEND");
  return backend != nullptr && std::string{backend} == "postgres";
}

/// This test process's own PostgreSQL server, started on first use.
inline pg_server& test_pg_server() {
  static temp_dir folder{"keel-pg"};
  static pg_server server{folder.str()};
  return server;
}

/// A connection to database `keel` of `test_pg_server()`; throws if none.
inline pg::connection test_pg_connection() {
  auto conn = pg::connection::open(test_pg_server().url());
  if (!conn)
    throw std::runtime_error(error_message(conn.error()));
  // No NOTICEs ("drop cascades to ...") in the test output.
  static_cast<void>(conn->exec("SET client_min_messages = warning"));
  return std::move(*conn);
}

/// The URL of a database of its own for the node on `data_dir`, created on
/// first use: a node restarted on the same folder finds its data again.
inline std::string test_pg_url_for(const std::string& data_dir) {
  static std::mutex mtx;
  static std::map<std::string, std::string> urls;
  std::lock_guard<std::mutex> guard{mtx};
  if (auto i = urls.find(data_dir); i != urls.end())
    return i->second;
  auto name = "node" + std::to_string(urls.size() + 1);
  auto created = test_pg_connection().exec("CREATE DATABASE " + name);
  if (!created)
    throw std::runtime_error(error_message(created.error()));
  return urls[data_dir] = test_pg_server().url(name);
}

/// Writes `value` under `key` in family `cf` of the PostgreSQL store at
/// `url` behind the store's back. Returns "OK" or why not.
inline std::string
write_pg_record(const std::string& url, const std::string& cf,
                const std::string& key, const std::string& value) {
  auto conn = pg::connection::open(url);
  if (!conn)
    return error_message(conn.error());
  auto res = conn->exec_binary("INSERT INTO keel." + cf
                                 + " (key, value) VALUES ($1, $2) ON CONFLICT "
                                   "(key) DO UPDATE SET value = "
                                   "EXCLUDED.value",
                               {key, value});
  return res ? "OK" : error_message(res.error());
}

/// Writes `value` under `key` in family `cf` of the node on `data_dir`
/// behind the store's back (a stopped node's data: RocksDB in
/// `data_dir`/db, or its PostgreSQL database). Returns "OK" or why not.
inline std::string
write_node_record(const std::string& data_dir, const std::string& cf,
                  const std::string& key, const std::string& value) {
  if (!store_on_postgres())
    return write_raw_record(data_dir + "/db", cf, key, value);
  return write_pg_record(test_pg_url_for(data_dir), cf, key, value);
}

/// The store of the stopped node on `data_dir`, read only (RocksDB in
/// `data_dir`/db, or its PostgreSQL database).
inline caf::expected<std::unique_ptr<store>>
open_node_store(const std::string& data_dir) {
  if (!store_on_postgres()) {
    store_options opts;
    opts.read_only = true;
    return store::open(data_dir + "/db", opts);
  }
  pg_store_options opts;
  opts.url = test_pg_url_for(data_dir);
  opts.read_only = true;
  return open_pg_store(opts);
}

/// The `storage:` settings of a node on `data_dir` on the suites' backend
/// (none on RocksDB), then `extra` (more `storage:` keys, indented).
inline std::string storage_yaml(const std::string& data_dir,
                                const std::string& extra = {}) {
  if (!store_on_postgres())
    return extra.empty() ? "" : "storage:\n" + extra;
  return "storage:\n  backend: postgres\n  postgres:\n    url: \""
         + test_pg_url_for(data_dir) + "\"\n" + extra;
}

/// The keelctl arguments that read the data of the node on `data_dir`.
inline std::vector<std::string> data_args(const std::string& data_dir) {
  if (!store_on_postgres())
    return {"--data-dir", data_dir};
  return {"--pg", test_pg_url_for(data_dir)};
}

} // namespace keel::test
