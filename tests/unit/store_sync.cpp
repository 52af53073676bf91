#define CAF_SUITE store_sync

// A group is acknowledged once `flush` returns, so by then it must be on
// stable storage, not only in the page cache. A kill -9 keeps the page
// cache (the crash tests cannot tell), so the syncs are counted here: on
// RocksDB each flushed group syncs the WAL once (RocksDB's statistics);
// on PostgreSQL every transaction of the store's sessions commits with
// synchronous_commit on, even where the server or the URL defaults it off.
// The suite runs on both backends; each test checks its own.

#include "keel/store.hpp"

#include "store_fixture.hpp"

#include <caf/test/unit_test.hpp>

#include <string>

#include <rocksdb/statistics.h>

#include "keel/pg_store.hpp"

using namespace keel;
using namespace keel::test;

namespace {

using fixture = store_fixture;

// The groups of a test: a few writers each, as persistence groups them.
constexpr int groups = 3;
constexpr int writers_per_group = 4;

} // namespace

CAF_TEST_FIXTURE_SCOPE(store_sync_tests, fixture)

CAF_TEST(on RocksDB every flushed group syncs the WAL once) {
  if (store_on_postgres()) {
    CAF_MESSAGE("the PostgreSQL store commits with synchronous_commit on");
    return;
  }
  auto stats = rocksdb::CreateDBStatistics();
  store_options opts;
  opts.statistics = stats;
  open(opts);
  auto synced = [&] { return stats->getTickerCount(rocksdb::WAL_FILE_SYNCED); };
  auto before = synced();
  for (int group = 1; group <= groups; ++group) {
    for (int w = 0; w < writers_per_group; ++w) {
      auto thread = "t" + std::to_string(w);
      accept(make_accept(thread, static_cast<seq_t>(group),
                         "c" + std::to_string(group), "hello", group == 1));
    }
    flush();
    CAF_CHECK_EQUAL(synced() - before, static_cast<uint64_t>(group));
  }
  // Nothing staged, nothing written: no sync either.
  flush();
  CAF_CHECK_EQUAL(synced() - before, static_cast<uint64_t>(groups));
}

CAF_TEST(on PostgreSQL every group commits with synchronous_commit on) {
  if (!store_on_postgres()) {
    CAF_MESSAGE("the RocksDB store syncs its WAL: see the test above");
    return;
  }
  // Sessions of this URL start with synchronous_commit off...
  auto url = test_pg_server().url() + "&options=-c%20synchronous_commit%3Doff";
  auto probe = pg::connection::open(url);
  CAF_REQUIRE_EQUAL(outcome(probe), "none");
  auto shown = probe->exec("SHOW synchronous_commit");
  CAF_REQUIRE_EQUAL(outcome(shown), "none");
  CAF_REQUIRE_EQUAL(std::string{shown->value(0, 0)}, "off");
  close();
  pg_store_options pg;
  pg.url = url;
  auto opened = open_pg_store(pg);
  CAF_REQUIRE_EQUAL(outcome(opened), "none");
  db = std::move(*opened);
  // ...and a trigger notes the setting every group's transaction ran with
  // (each one writes its commit mark).
  auto conn = test_pg_connection();
  for (const char* sql :
       {"CREATE TABLE keel.seen_sync (setting text)",
        "CREATE FUNCTION keel.note_sync() RETURNS trigger LANGUAGE plpgsql "
        "AS $$ BEGIN INSERT INTO keel.seen_sync VALUES "
        "(current_setting('synchronous_commit')); RETURN NEW; END $$",
        "CREATE TRIGGER note_sync AFTER INSERT OR UPDATE ON keel.commit_marks "
        "FOR EACH ROW EXECUTE FUNCTION keel.note_sync()"})
    CAF_REQUIRE_EQUAL(outcome(conn.exec(sql)), "none");
  for (int group = 1; group <= groups; ++group) {
    for (int w = 0; w < writers_per_group; ++w)
      accept(make_accept("t" + std::to_string(w), static_cast<seq_t>(group),
                         "c" + std::to_string(group), "hello", group == 1));
    flush();
  }
  auto seen = conn.exec("SELECT count(*)::text, (count(*) FILTER (WHERE "
                        "setting <> 'on'))::text FROM keel.seen_sync");
  CAF_REQUIRE_EQUAL(outcome(seen), "none");
  CAF_CHECK_GREATER_OR_EQUAL(std::stoi(std::string{seen->value(0, 0)}), groups);
  CAF_CHECK_EQUAL(std::string{seen->value(0, 1)}, "0");
}

CAF_TEST_FIXTURE_SCOPE_END()
