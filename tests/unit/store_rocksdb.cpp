#define CAF_SUITE store_rocksdb

// What only the RocksDB backend has: a database folder, its lock, column
// families, its file system's faults. Everything else of the store runs in
// the `store` suite on both backends.

#include "keel/store.hpp"

#include "store_fixture.hpp"

#include <caf/test/unit_test.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include <rocksdb/db.h>

#include "keel/stored_form.hpp"

using namespace keel;

namespace {

using namespace keel::test;

using fixture = store_fixture;

} // namespace

CAF_TEST_FIXTURE_SCOPE(store_rocksdb_tests, fixture)

CAF_TEST(column families of a newer build do not hide its schema version) {
  put_raw("future", "k", "v");
  CAF_CHECK_EQUAL(value_or(db->meta("schema_version"), ""), "2");
  put_raw("meta", "schema_version", "7", false);
  auto res = store::open(dir);
  CAF_CHECK_EQUAL(message_of(res),
                  "the database in " + dir
                    + ": schema version 7 is newer than this build's 2");
}

CAF_TEST(opening a regular file fails with a clear error) {
  auto file = (tmp.path() / "plain-file").string();
  std::ofstream{file} << "not a database";
  auto res = store::open(file);
  CAF_REQUIRE(!res);
  CAF_CHECK_EQUAL(res.error(), ec::storage_open_failed);
  CAF_CHECK(contains(message_of(res), file));
  CAF_MESSAGE("error: " << message_of(res));
  // Below it, too: the parent is not a directory.
  auto nested = store::open(file + "/db");
  CAF_REQUIRE(!nested);
  CAF_CHECK_EQUAL(nested.error(), ec::storage_open_failed);
  CAF_CHECK(contains(message_of(nested), file + "/db"));
}

CAF_TEST(a missing database is not created when told not to) {
  store_options opts;
  opts.create_if_missing = false;
  auto missing = (tmp.path() / "missing").string();
  auto res = store::open(missing, opts);
  CAF_REQUIRE(!res);
  CAF_CHECK_EQUAL(res.error(), ec::storage_open_failed);
  CAF_CHECK(contains(message_of(res), "cannot open database in " + missing));
  CAF_CHECK(!std::filesystem::exists(missing));
}

CAF_TEST(a database open elsewhere is locked) {
  auto res = store::open(dir);
  CAF_REQUIRE(!res);
  CAF_CHECK_EQUAL(res.error(), ec::storage_open_failed);
  CAF_CHECK(contains(message_of(res), "cannot open database in " + dir));
  CAF_CHECK(contains(message_of(res), "LOCK"));
  CAF_MESSAGE("error: " << message_of(res));
  // The first instance still works.
  accept(make_accept("t1", 1, "c1", "still here"));
  flush();
}

CAF_TEST(a failed flush drops the whole group and the store recovers) {
  auto faults = std::make_shared<fault_injection>();
  store_options opts;
  opts.faults = faults;
  open(opts);
  accept(make_accept("t1", 1, "c1", "durable", true));
  flush();
  // A group: an accept, a commit of the first message, a session update.
  accept(make_accept("t1", 2, "c2", "lost"));
  db->stage_commit(make_commit("t1", 1, "c1", 3, "lost reply"));
  auto rec = make_session("t1");
  rec.state = session_state::suspended;
  db->stage_session(rec);
  CAF_CHECK_EQUAL(db->staged(), 3u);
  faults->fail_writes = true;
  auto err = db->flush();
  CAF_CHECK_EQUAL(err, ec::storage_io);
  CAF_CHECK(contains(error_message(err), "write failed: "));
  CAF_CHECK(contains(error_message(err), "injected fault"));
  CAF_MESSAGE("error: " << error_message(err));
  CAF_CHECK(faults->failed_writes > 0);
  CAF_CHECK_EQUAL(db->staged(), 0u);
  CAF_CHECK_EQUAL(db->stats().failed_flushes, 1u);
  // Reads still work (the store could not reopen for writing) and show
  // nothing of the group.
  auto check_unchanged = [&] {
    auto snapshot = load("t1");
    CAF_REQUIRE_EQUAL(snapshot.inbox.size(), 1u);
    CAF_CHECK_EQUAL(snapshot.inbox[0].text, "durable");
    CAF_CHECK(snapshot.context.empty());
    CAF_CHECK_EQUAL(snapshot.session.state, session_state::active);
    CAF_CHECK_EQUAL(snapshot.next_seq, 2u);
    CAF_CHECK_EQUAL(log_size("t1", 0, 10), 1u);
  };
  check_unchanged();
  // The dropped accept's client id is not known: a retry is not a duplicate.
  faults->fail_writes = false;
  accept(make_accept("t1", 2, "c2", "retried"));
  flush();
  auto snapshot = load("t1");
  CAF_REQUIRE_EQUAL(snapshot.inbox.size(), 2u);
  CAF_CHECK_EQUAL(snapshot.inbox[1].text, "retried");
  CAF_CHECK(db->stats().reopens >= 1u);
  // While the fault lasts, every flush fails and reads go on.
  faults->fail_writes = true;
  db->stage_commit(make_commit("t1", 1, "c1", 3, "lost reply"));
  CAF_CHECK_EQUAL(db->flush(), ec::storage_io);
  db->stage_meta("k", "v");
  CAF_CHECK_EQUAL(db->flush(), ec::storage_io);
  CAF_CHECK_EQUAL(db->stats().failed_flushes, 3u);
  CAF_CHECK_EQUAL(load("t1").inbox.size(), 2u);
  CAF_CHECK_EQUAL(error_of(db->meta("k")), ec::not_found);
  // Disk full works alike.
  faults->no_space = true;
  db->stage_meta("k", "v");
  err = db->flush();
  CAF_CHECK_EQUAL(err, ec::storage_io);
  CAF_CHECK(contains(error_message(err), "No space left on device"));
  faults->fail_writes = false;
  faults->no_space = false;
  db->stage_commit(make_commit("t1", 1, "c1", 3, "reply"));
  flush();
  snapshot = load("t1");
  CAF_REQUIRE_EQUAL(snapshot.inbox.size(), 1u);
  CAF_CHECK_EQUAL(snapshot.inbox[0].text, "retried");
  CAF_CHECK_EQUAL(snapshot.context.size(), 2u);
  // Nothing of the failed groups reappears after a restart either.
  open();
  snapshot = load("t1");
  CAF_CHECK_EQUAL(snapshot.inbox.size(), 1u);
  CAF_CHECK_EQUAL(snapshot.session.state, session_state::active);
  CAF_CHECK_EQUAL(log_size("t1", 0, 10), 3u);
  CAF_CHECK_EQUAL(error_of(db->meta("k")), ec::not_found);
}

CAF_TEST(an older database without the outbox opens read-only and for writing) {
  close();
  // The column families of a build before the outbox existed.
  std::vector<std::string> old_families{"default",   "sessions",     "tree",
                                        "inbox",     "context",      "log",
                                        "health",    "dead_letters", "meta",
                                        "client_ids"};
  auto old_dir = (tmp.path() / "old").string();
  {
    rocksdb::Options opts;
    opts.create_if_missing = true;
    opts.create_missing_column_families = true;
    std::vector<rocksdb::ColumnFamilyDescriptor> descriptors;
    for (auto& name : old_families)
      descriptors.emplace_back(name, rocksdb::ColumnFamilyOptions{});
    std::vector<rocksdb::ColumnFamilyHandle*> handles;
    rocksdb::DB* raw = nullptr;
    auto status = rocksdb::DB::Open(opts, old_dir, descriptors, &handles, &raw);
    CAF_REQUIRE_EQUAL(status.ToString(), "OK");
    CAF_CHECK(raw
                ->Put(rocksdb::WriteOptions{}, handles[1], "t1",
                      encode(make_session("t1")))
                .ok());
    for (auto* handle : handles)
      raw->DestroyColumnFamilyHandle(handle);
    delete raw;
  }
  store_options opts;
  opts.read_only = true;
  auto reader = store::open(old_dir, opts);
  CAF_REQUIRE_EQUAL(outcome(reader), "none");
  CAF_CHECK_EQUAL(value_or((*reader)->count_sessions(), 0), 1u);
  CAF_CHECK((*reader)->outbox()->empty());
  auto snapshot = (*reader)->load_thread("t1");
  CAF_REQUIRE_EQUAL(outcome(snapshot), "none");
  CAF_CHECK(snapshot->exists);
  CAF_CHECK(snapshot->outbox.empty());
  reader->reset();
  std::vector<std::string> names;
  CAF_REQUIRE(
    rocksdb::DB::ListColumnFamilies(rocksdb::Options{}, old_dir, &names).ok());
  CAF_CHECK(std::find(names.begin(), names.end(), "outbox") == names.end());
  // Opening for writing adds the new family.
  auto writer = store::open(old_dir);
  CAF_REQUIRE_EQUAL(outcome(writer), "none");
  (*writer)->stage_commit([] {
    turn_commit commit;
    commit.thread = "t1";
    commit.inbox_seq = 1;
    commit.outbox.push_back(make_outbox("t1", 1, "t1", "note to self"));
    return commit;
  }());
  CAF_CHECK_EQUAL(render((*writer)->flush()), "none");
  CAF_CHECK_EQUAL(
    value_or((*writer)->outbox(), std::vector<outbox_entry>{}).size(), 1u);
}

CAF_TEST(opening read - only creates nothing) {
  store_options opts;
  opts.read_only = true;
  auto missing = (tmp.path() / "missing").string();
  auto none = store::open(missing, opts);
  CAF_CHECK_EQUAL(error_of(none), ec::storage_open_failed);
  CAF_CHECK(!std::filesystem::exists(missing));
}

CAF_TEST_FIXTURE_SCOPE_END()
