#define CAF_SUITE pg_connection

// The libpq wrapper against a real PostgreSQL server started for the test
// (keel::pg_server: initdb and pg_ctl in a temporary folder, unix socket
// only): statements with parameters and NULLs, errors naming their
// SQLSTATE, and a server that goes away.

#include <caf/test/unit_test.hpp>

#include "temp_dir.hpp"

#include "keel/pg_connection.hpp"
#include "keel/tools/pg_server.hpp"

using namespace keel;
using namespace keel::test;

namespace {

bool has(const std::string& str, const std::string& part) {
  return str.find(part) != std::string::npos;
}

} // namespace

CAF_TEST(statements take parameters and answer rows) {
  temp_dir dir{"keel-pg"};
  pg_server server{dir.str()};
  auto conn = pg::connection::open(server.url());
  CAF_REQUIRE(conn);
  CAF_CHECK_GREATER_OR_EQUAL(conn->server_version(), 150000);
  CAF_REQUIRE(conn->exec("CREATE TABLE t (k text PRIMARY KEY, v text)"));
  auto ins = conn->exec("INSERT INTO t VALUES ($1, $2), ($3, $4)",
                        {"a", "x'y\"z", "b", std::nullopt});
  CAF_REQUIRE(ins);
  CAF_CHECK_EQUAL(ins->affected(), 2u);
  auto rows = conn->exec("SELECT k, v FROM t ORDER BY k");
  CAF_REQUIRE(rows);
  CAF_REQUIRE_EQUAL(rows->rows(), 2u);
  CAF_CHECK_EQUAL(rows->columns(), 2u);
  CAF_CHECK_EQUAL(rows->value(0, 0), "a");
  CAF_CHECK_EQUAL(rows->value(0, 1), "x'y\"z");
  CAF_CHECK(!rows->is_null(0, 1));
  CAF_CHECK(rows->is_null(1, 1));
  CAF_CHECK_EQUAL(rows->value(1, 1), "");
}

CAF_TEST(refused statements name their sqlstate) {
  temp_dir dir{"keel-pg"};
  pg_server server{dir.str()};
  auto conn = pg::connection::open(server.url());
  CAF_REQUIRE(conn);
  CAF_REQUIRE(conn->exec("CREATE TABLE t (k text PRIMARY KEY)"));
  CAF_REQUIRE(conn->exec("INSERT INTO t VALUES ($1)", {"a"}));
  auto dup = conn->exec("INSERT INTO t VALUES ($1)", {"a"});
  CAF_REQUIRE(!dup);
  CAF_CHECK(dup.error() == ec::storage_io);
  CAF_MESSAGE(error_message(dup.error()));
  CAF_CHECK_EQUAL(pg::sqlstate_of(dup.error()), "23505");
  CAF_CHECK(has(error_message(dup.error()), "duplicate key"));
  auto bad = conn->exec("SELEKT 1");
  CAF_REQUIRE(!bad);
  CAF_CHECK_EQUAL(pg::sqlstate_of(bad.error()), "42601");
  // The connection stays usable after a refused statement.
  CAF_CHECK(conn->ok());
  CAF_CHECK(conn->exec("SELECT 1"));
}

CAF_TEST(a server that goes away fails statements and connects) {
  temp_dir dir{"keel-pg"};
  pg_server server{dir.str()};
  auto conn = pg::connection::open(server.url());
  CAF_REQUIRE(conn);
  server.kill9();
  auto lost = conn->exec("SELECT 1");
  CAF_REQUIRE(!lost);
  CAF_MESSAGE(error_message(lost.error()));
  CAF_CHECK(lost.error() == ec::storage_io);
  CAF_CHECK_EQUAL(pg::sqlstate_of(lost.error()), "");
  CAF_CHECK(!conn->ok());
  auto refused = pg::connection::open(server.url(), std::chrono::seconds{2});
  CAF_REQUIRE(!refused);
  CAF_MESSAGE(error_message(refused.error()));
  CAF_CHECK(
    has(error_message(refused.error()), "cannot connect to PostgreSQL"));
  // After a restart (crash recovery from the WAL) a new connection works.
  server.start();
  auto again = pg::connection::open(server.url());
  CAF_REQUIRE(again);
  CAF_CHECK(again->exec("SELECT 1"));
}
