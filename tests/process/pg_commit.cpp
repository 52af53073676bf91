#define CAF_SUITE pg_commit

// The PostgreSQL store when the session ends during COMMIT: the outcome is
// unknown to the client, and the store must learn it by reading back, never
// guess. A TCP proxy sits between the store and the server; a deferred
// trigger holds the COMMIT on the server for a moment, during which the
// test cuts the link. The COMMIT then takes effect (the store must report
// success) or fails on the server (the store must report failure, having
// read back that nothing committed). A write held past the statement
// timeout fails like any refused write.

#include <caf/test/unit_test.hpp>

#include <atomic>
#include <thread>

#include "store_fixture.hpp"
#include "temp_dir.hpp"

#include "keel/pg_connection.hpp"
#include "keel/pg_store.hpp"
#include "keel/tools/fault_proxy.hpp"
#include "keel/tools/pg_server.hpp"

using namespace keel;
using namespace keel::test;
using namespace std::chrono_literals;

namespace {

struct fixture {
  temp_dir pg_dir{"keel-pg"};
  pg_server pg{pg_dir.str()};
  fault_proxy proxy{"127.0.0.1", static_cast<uint16_t>(pg.port())};
  // The test's own connection, straight to the server.
  pg::connection admin = open_admin();
  std::unique_ptr<store> db;

  fixture() {
    open({});
  }

  // (Re)opens the store through the proxy, one connection.
  void open(std::chrono::milliseconds statement_timeout) {
    pg_store_options opts;
    opts.url = "postgresql://keel@127.0.0.1:" + std::to_string(proxy.port())
               + "/keel?connect_timeout=2";
    opts.connections = 1;
    if (statement_timeout.count() > 0)
      opts.statement_timeout = statement_timeout;
    db.reset();
    auto opened = open_pg_store(opts);
    CAF_REQUIRE_EQUAL(outcome(opened), "none");
    db = std::move(*opened);
  }

  pg::connection open_admin() {
    auto conn = pg::connection::open(pg.url());
    CAF_REQUIRE(conn);
    return std::move(*conn);
  }

  void run(const std::string& sql) {
    auto res = admin.exec(sql);
    CAF_REQUIRE_EQUAL(outcome(res), "none");
  }

  // Makes every COMMIT of a transaction that writes a commit mark wait 1 s
  // on the server, then run `then` ("" or a RAISE). With `at_commit` false,
  // the statement writing the mark waits instead.
  void hold_commits(const std::string& then, bool at_commit = true) {
    run("CREATE FUNCTION keel.hold() RETURNS trigger LANGUAGE plpgsql AS $$ "
        "BEGIN PERFORM pg_sleep(1); "
        + then + " RETURN NEW; END $$");
    run(at_commit ? "CREATE CONSTRAINT TRIGGER hold AFTER INSERT OR UPDATE ON "
                    "keel.commit_marks DEFERRABLE INITIALLY DEFERRED FOR EACH "
                    "ROW EXECUTE FUNCTION keel.hold()"
                  : "CREATE TRIGGER hold BEFORE INSERT OR UPDATE ON "
                    "keel.commit_marks FOR EACH ROW EXECUTE FUNCTION "
                    "keel.hold()");
  }

  // Waits until the store's COMMIT runs on the server, then cuts the link:
  // nothing more reaches either side, then the connection is reset.
  std::thread cut_during_commit() {
    return std::thread{[this] {
      auto watcher = open_admin();
      for (int i = 0; i < 500; ++i) {
        auto res = watcher.exec("SELECT 1 FROM pg_stat_activity WHERE "
                                "application_name = 'keel' AND state = "
                                "'active' AND query = 'COMMIT'");
        if (res && res->rows() > 0)
          break;
        std::this_thread::sleep_for(10ms);
      }
      proxy.set_mode(link_mode::blackhole);
      proxy.set_mode(link_mode::reset);
      proxy.set_mode(link_mode::pass);
    }};
  }

  // With the server holding nothing back, the message not stored before is
  // new (not a duplicate) and lands.
  void retry_lands() {
    run("DROP TRIGGER hold ON keel.commit_marks");
    auto retried = db->stage_accept(make_accept("t", 1, "m1", "hello", true));
    CAF_REQUIRE_EQUAL(outcome(retried), "none");
    CAF_CHECK(!retried->duplicate);
    CAF_CHECK_EQUAL(render(db->flush()), "none");
    CAF_CHECK(stored("m1"));
  }

  // Whether the store holds the message `client_id` of thread `t`.
  bool stored(const std::string& client_id) {
    auto snapshot = db->load_thread("t");
    CAF_REQUIRE_EQUAL(outcome(snapshot), "none");
    for (auto& entry : snapshot->inbox)
      if (entry.client_id == client_id)
        return true;
    return false;
  }
};

} // namespace

CAF_TEST_FIXTURE_SCOPE(pg_commit_tests, fixture)

CAF_TEST(a commit that took effect is reported durable after reading back) {
  hold_commits("");
  auto accepted = db->stage_accept(make_accept("t", 1, "m1", "hello", true));
  CAF_REQUIRE_EQUAL(outcome(accepted), "none");
  auto cutter = cut_during_commit();
  auto err = db->flush();
  cutter.join();
  CAF_CHECK_EQUAL(render(err), "none");
  CAF_CHECK_GREATER_OR_EQUAL(proxy.counters().resets, 1u);
  CAF_CHECK_GREATER_OR_EQUAL(db->stats().reopens, 1u);
  CAF_CHECK(stored("m1"));
  // A resend knows it: the message is there once.
  auto again = db->stage_accept(make_accept("t", 2, "m1", "hello"));
  CAF_REQUIRE_EQUAL(outcome(again), "none");
  CAF_CHECK(again->duplicate);
}

CAF_TEST(a commit that failed on the server is reported failed) {
  hold_commits("RAISE EXCEPTION 'refused at commit';");
  auto accepted = db->stage_accept(make_accept("t", 1, "m1", "hello", true));
  CAF_REQUIRE_EQUAL(outcome(accepted), "none");
  auto cutter = cut_during_commit();
  auto err = db->flush();
  cutter.join();
  // Read back as not committed, the share went once more on a fresh
  // connection (the link works again), where the server refused it openly.
  CAF_CHECK_EQUAL(err, ec::storage_io);
  CAF_CHECK(contains(error_message(err), "refused at commit"));
  CAF_CHECK_GREATER_OR_EQUAL(proxy.counters().resets, 1u);
  CAF_CHECK_GREATER_OR_EQUAL(db->stats().reopens, 1u);
  CAF_MESSAGE("error: " << error_message(err));
  CAF_CHECK(!stored("m1"));
  retry_lands();
}

CAF_TEST(a statement timeout fails the write and the next one works) {
  open(std::chrono::milliseconds{300});
  hold_commits("", false);
  auto accepted = db->stage_accept(make_accept("t", 1, "m1", "hello", true));
  CAF_REQUIRE_EQUAL(outcome(accepted), "none");
  auto err = db->flush();
  CAF_CHECK_EQUAL(err, ec::storage_io);
  CAF_CHECK(contains(error_message(err), "SQLSTATE 57014"));
  CAF_MESSAGE("error: " << error_message(err));
  CAF_CHECK(!stored("m1"));
  retry_lands();
}

CAF_TEST_FIXTURE_SCOPE_END()
