#define CAF_SUITE store

#include "keel/store.hpp"

#include "temp_dir.hpp"

#include <caf/test/unit_test.hpp>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <rocksdb/db.h>

#include "keel/json_codec.hpp"

using namespace keel;

namespace {

using keel::test::temp_dir;

/// "none" for a value, else the rendered error: a readable check.
template <class T>
std::string outcome(const caf::expected<T>& x) {
  return x ? std::string{"none"} : render(x.error());
}

/// The context message of a failed result, or a marker that makes the
/// comparison fail readably.
template <class T>
std::string message_of(const caf::expected<T>& x) {
  return x ? std::string{"<no error>"} : error_message(x.error());
}

/// The value of `x`, or `fallback` on error.
template <class T, class U>
T value_or(const caf::expected<T>& x, U fallback) {
  return x ? *x : T(fallback);
}

/// The error of `x` (a copy: checks must not hold on to a temporary's).
template <class T>
caf::error error_of(const caf::expected<T>& x) {
  return x ? caf::error{} : x.error();
}

bool contains(const std::string& str, const std::string& what) {
  return str.find(what) != std::string::npos;
}

session_record make_session(const std::string& thread) {
  session_record rec;
  rec.thread = thread;
  rec.pool = "default";
  rec.state = session_state::active;
  rec.created_at = 1000;
  return rec;
}

accept_request make_accept(const std::string& thread, seq_t seq,
                           const std::string& client_id,
                           const std::string& text, bool create = false) {
  accept_request req;
  req.thread = thread;
  req.create_session = create;
  if (create)
    req.session = make_session(thread);
  req.entry.seq = seq;
  req.entry.client_id = client_id;
  req.entry.text = text;
  req.entry.accepted_at = 2000 + static_cast<millis>(seq);
  return req;
}

/// The commit answering the user message `seq` with a reply at `reply_seq`.
turn_commit make_commit(const std::string& thread, seq_t seq,
                        const std::string& client_id, seq_t reply_seq,
                        const std::string& reply) {
  turn_commit commit;
  commit.thread = thread;
  commit.inbox_seq = seq;
  commit.context.push_back(context_entry{seq, "user", "question " + reply});
  commit.context.push_back(context_entry{reply_seq, "assistant", reply});
  log_entry entry;
  entry.seq = reply_seq;
  entry.kind = log_kind::reply;
  entry.client_id = client_id;
  entry.reply_to = seq;
  entry.text = reply;
  entry.provider = "echo";
  entry.at = 3000;
  commit.log.push_back(entry);
  return commit;
}

struct fixture {
  temp_dir tmp;
  std::string dir = (tmp.path() / "db").string();
  std::unique_ptr<store> db;

  fixture() {
    open();
  }

  void open(store_options opts = {}) {
    db.reset();
    auto res = store::open(dir, opts);
    CAF_REQUIRE_EQUAL(outcome(res), "none");
    db = std::move(*res);
  }

  void close() {
    db.reset();
  }

  /// Stages an accept that must not be a duplicate.
  void accept(const accept_request& req) {
    auto res = db->stage_accept(req);
    CAF_REQUIRE_EQUAL(outcome(res), "none");
    CAF_CHECK_EQUAL(res->seq, req.entry.seq);
    CAF_CHECK(!res->duplicate);
  }

  void flush() {
    auto err = db->flush();
    CAF_REQUIRE_EQUAL(render(err), "none");
  }

  /// The number of log entries of `thread` after `after` (up to `limit`).
  size_t log_size(const std::string& thread, seq_t after, size_t limit) {
    auto res = db->history(thread, after, limit);
    CAF_REQUIRE_EQUAL(outcome(res), "none");
    return res->entries.size();
  }

  thread_snapshot load(const std::string& thread) {
    auto res = db->load_thread(thread);
    CAF_REQUIRE_EQUAL(outcome(res), "none");
    return std::move(*res);
  }

  /// Writes `value` under `key` in `cf` behind the store's back, creating
  /// `cf` if it does not exist; reopens the store unless told not to.
  void put_raw(const std::string& cf, const std::string& key,
               const std::string& value, bool reopen = true) {
    close();
    rocksdb::Options opts;
    opts.create_missing_column_families = true;
    std::vector<std::string> names;
    CAF_REQUIRE(rocksdb::DB::ListColumnFamilies(opts, dir, &names).ok());
    if (std::find(names.begin(), names.end(), cf) == names.end())
      names.push_back(cf);
    std::vector<rocksdb::ColumnFamilyDescriptor> descriptors;
    for (auto& name : names)
      descriptors.emplace_back(name, rocksdb::ColumnFamilyOptions{});
    std::vector<rocksdb::ColumnFamilyHandle*> handles;
    rocksdb::DB* raw = nullptr;
    auto status = rocksdb::DB::Open(opts, dir, descriptors, &handles, &raw);
    CAF_REQUIRE_EQUAL(status.ToString(), "OK");
    for (auto* handle : handles)
      if (handle->GetName() == cf)
        CAF_CHECK(raw->Put(rocksdb::WriteOptions{}, handle, key, value).ok());
    for (auto* handle : handles)
      raw->DestroyColumnFamilyHandle(handle);
    delete raw;
    if (reopen)
      open();
  }
};

/// The key of `seq` in `thread` (thread/8-byte big-endian seq).
std::string seq_key(const std::string& thread, seq_t seq) {
  auto key = thread + '/';
  for (int shift = 56; shift >= 0; shift -= 8)
    key += static_cast<char>((seq >> shift) & 0xFF);
  return key;
}

} // namespace

CAF_TEST_FIXTURE_SCOPE(store_tests, fixture)

CAF_TEST(opening creates the folder and records the schema version) {
  CAF_CHECK(std::filesystem::is_directory(dir));
  CAF_CHECK_EQUAL(outcome(db->meta("schema_version")), "none");
  CAF_CHECK_EQUAL(value_or(db->meta("schema_version"), ""), "1");
  CAF_CHECK_EQUAL(error_of(db->meta("node_id")), ec::not_found);
  CAF_CHECK_EQUAL(value_or(db->count_sessions(), 99), 0u);
  CAF_CHECK_EQUAL(column_families.size(), 9u);
  auto snapshot = load("t1");
  CAF_CHECK(!snapshot.exists);
  CAF_CHECK(snapshot.inbox.empty());
  CAF_CHECK(snapshot.context.empty());
  CAF_CHECK_EQUAL(snapshot.next_seq, 1u);
  CAF_CHECK_EQUAL(error_of(db->session("t1")), ec::not_found);
}

CAF_TEST(reopening keeps the data) {
  accept(make_accept("t1", 1, "c1", "hello", true));
  db->stage_meta("node_id", "n1");
  flush();
  open();
  auto snapshot = load("t1");
  CAF_CHECK(snapshot.exists);
  CAF_CHECK_EQUAL(snapshot.session.pool, "default");
  CAF_REQUIRE_EQUAL(snapshot.inbox.size(), 1u);
  CAF_CHECK_EQUAL(snapshot.inbox[0].text, "hello");
  CAF_CHECK_EQUAL(value_or(db->meta("node_id"), ""), "n1");
  CAF_CHECK_EQUAL(value_or(db->meta("schema_version"), ""), "1");
}

CAF_TEST(provider health records are replaced and survive a reopen) {
  provider_health_record rec;
  rec.pool = "default";
  rec.provider = "gpt";
  rec.status = "down";
  rec.breaker = "open";
  rec.consecutive_failures = 3;
  rec.last_error = "HTTP 503";
  rec.last_error_class = "overloaded";
  rec.cooldown_until = 1700000000000;
  db->stage_health(rec);
  auto other = rec;
  other.provider = "claude";
  other.status = "healthy";
  db->stage_health(other);
  flush();
  rec.consecutive_failures = 4;
  db->stage_health(rec);
  flush();
  open();
  auto all = db->health();
  CAF_REQUIRE(all);
  CAF_REQUIRE_EQUAL(all->size(), 2u);
  // Key order: "default/claude" before "default/gpt".
  CAF_CHECK_EQUAL((*all)[0].provider, "claude");
  CAF_CHECK_EQUAL((*all)[1].consecutive_failures, 4u);
  CAF_CHECK_EQUAL((*all)[1].last_error_class, "overloaded");
  CAF_CHECK_EQUAL((*all)[1].cooldown_until, 1700000000000);
}

CAF_TEST(a schema version newer than ours refuses to open) {
  db->stage_meta("schema_version", "2");
  flush();
  close();
  auto res = store::open(dir);
  CAF_REQUIRE(!res);
  CAF_CHECK_EQUAL(res.error(), ec::storage_open_failed);
  CAF_CHECK_EQUAL(message_of(res),
                  dir + ": schema version 2 is newer than this build's 1");
}

CAF_TEST(column families of a newer build do not hide its schema version) {
  put_raw("future", "k", "v");
  CAF_CHECK_EQUAL(value_or(db->meta("schema_version"), ""), "1");
  put_raw("meta", "schema_version", "7", false);
  auto res = store::open(dir);
  CAF_CHECK_EQUAL(message_of(res),
                  dir + ": schema version 7 is newer than this build's 1");
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

CAF_TEST(an accepted message is loaded with its thread) {
  accept(make_accept("t1", 1, "c1", "hello", true));
  accept(make_accept("t1", 2, "c2", "world"));
  CAF_CHECK_EQUAL(db->staged(), 2u);
  // Staged writes are invisible until flushed.
  CAF_CHECK(!load("t1").exists);
  CAF_CHECK(load("t1").inbox.empty());
  flush();
  CAF_CHECK_EQUAL(db->staged(), 0u);
  auto snapshot = load("t1");
  CAF_CHECK(snapshot.exists);
  CAF_CHECK_EQUAL(snapshot.session.thread, "t1");
  CAF_CHECK_EQUAL(snapshot.session.state, session_state::active);
  CAF_REQUIRE_EQUAL(snapshot.inbox.size(), 2u);
  CAF_CHECK_EQUAL(snapshot.inbox[0].seq, 1u);
  CAF_CHECK_EQUAL(snapshot.inbox[0].client_id, "c1");
  CAF_CHECK_EQUAL(snapshot.inbox[0].text, "hello");
  CAF_CHECK_EQUAL(snapshot.inbox[0].accepted_at, 2001);
  CAF_CHECK_EQUAL(snapshot.inbox[1].seq, 2u);
  CAF_CHECK_EQUAL(snapshot.inbox[1].text, "world");
  CAF_CHECK(snapshot.context.empty());
  CAF_CHECK_EQUAL(snapshot.next_seq, 3u);
  // The accept also wrote the user entries of the log.
  auto page = db->history("t1", 0, 10);
  CAF_REQUIRE_EQUAL(outcome(page), "none");
  CAF_REQUIRE_EQUAL(page->entries.size(), 2u);
  CAF_CHECK_EQUAL(page->entries[0].kind, log_kind::user);
  CAF_CHECK_EQUAL(page->entries[0].client_id, "c1");
  CAF_CHECK_EQUAL(page->entries[0].text, "hello");
  CAF_CHECK_EQUAL(page->entries[0].at, 2001);
  CAF_CHECK_EQUAL(value_or(db->count_sessions(), 0), 1u);
  auto stats = db->stats();
  CAF_CHECK_EQUAL(stats.flushes, 1u);
  CAF_CHECK_EQUAL(stats.staged_operations, 2u);
  CAF_CHECK_EQUAL(stats.failed_flushes, 0u);
}

CAF_TEST(a client id already on disk is a duplicate) {
  accept(make_accept("t1", 1, "c1", "hello", true));
  flush();
  auto res = db->stage_accept(make_accept("t1", 2, "c1", "hello again"));
  CAF_REQUIRE_EQUAL(outcome(res), "none");
  CAF_CHECK_EQUAL(res->seq, 1u);
  CAF_CHECK(res->duplicate);
  CAF_CHECK_EQUAL(db->staged(), 0u);
  // The same client id in another thread is a different message.
  accept(make_accept("t2", 1, "c1", "other thread", true));
  flush();
  CAF_CHECK_EQUAL(load("t1").inbox.size(), 1u);
  CAF_CHECK_EQUAL(load("t2").inbox.size(), 1u);
  // Still known after a restart.
  open();
  res = db->stage_accept(make_accept("t1", 5, "c1", "third time"));
  CAF_REQUIRE_EQUAL(outcome(res), "none");
  CAF_CHECK_EQUAL(res->seq, 1u);
  CAF_CHECK(res->duplicate);
}

CAF_TEST(a client id staged in the same group is a duplicate) {
  accept(make_accept("t1", 1, "c1", "hello", true));
  auto res = db->stage_accept(make_accept("t1", 2, "c1", "hello again"));
  CAF_REQUIRE_EQUAL(outcome(res), "none");
  CAF_CHECK_EQUAL(res->seq, 1u);
  CAF_CHECK(res->duplicate);
  CAF_CHECK_EQUAL(db->staged(), 1u);
  flush();
  auto snapshot = load("t1");
  CAF_REQUIRE_EQUAL(snapshot.inbox.size(), 1u);
  CAF_CHECK_EQUAL(snapshot.inbox[0].text, "hello");
  CAF_CHECK_EQUAL(snapshot.next_seq, 2u);
}

CAF_TEST(a commit removes the inbox entry and adds context and log) {
  accept(make_accept("t1", 1, "c1", "hello", true));
  accept(make_accept("t1", 2, "c2", "second"));
  flush();
  // The reply to seq 1 takes seq 3 (seq 2 is the next user message).
  auto commit = make_commit("t1", 1, "c1", 3, "hi there");
  db->stage_commit(commit);
  CAF_CHECK_EQUAL(db->staged(), 1u);
  CAF_CHECK_EQUAL(load("t1").inbox.size(), 2u);
  flush();
  auto snapshot = load("t1");
  CAF_REQUIRE_EQUAL(snapshot.inbox.size(), 1u);
  CAF_CHECK_EQUAL(snapshot.inbox[0].seq, 2u);
  CAF_REQUIRE_EQUAL(snapshot.context.size(), 2u);
  CAF_CHECK_EQUAL(snapshot.context[0].role, "user");
  CAF_CHECK_EQUAL(snapshot.context[1].role, "assistant");
  CAF_CHECK_EQUAL(snapshot.context[1].content, "hi there");
  CAF_CHECK_EQUAL(snapshot.next_seq, 4u);
  auto page = db->history("t1", 0, 10);
  CAF_REQUIRE_EQUAL(outcome(page), "none");
  CAF_REQUIRE_EQUAL(page->entries.size(), 3u);
  CAF_CHECK_EQUAL(page->entries[2].kind, log_kind::reply);
  CAF_CHECK_EQUAL(page->entries[2].reply_to, 1u);
  CAF_CHECK_EQUAL(page->entries[2].provider, "echo");
  CAF_CHECK_EQUAL(page->entries[2].text, "hi there");
  CAF_CHECK(!page->more);
}

CAF_TEST(history pages by seq) {
  accept(make_accept("t1", 1, "c1", "m1", true));
  for (seq_t seq = 2; seq <= 7; ++seq)
    accept(make_accept("t1", seq, "c" + std::to_string(seq),
                       "m" + std::to_string(seq)));
  // A neighbour whose keys sort right after t1's.
  accept(make_accept("t10", 1, "c1", "other", true));
  flush();
  auto page = db->history("t1", 0, 3);
  CAF_REQUIRE_EQUAL(outcome(page), "none");
  CAF_CHECK_EQUAL(page->thread, "t1");
  CAF_REQUIRE_EQUAL(page->entries.size(), 3u);
  CAF_CHECK_EQUAL(page->entries[0].seq, 1u);
  CAF_CHECK_EQUAL(page->entries[2].seq, 3u);
  CAF_CHECK(page->more);
  page = db->history("t1", 3, 3);
  CAF_REQUIRE_EQUAL(outcome(page), "none");
  CAF_REQUIRE_EQUAL(page->entries.size(), 3u);
  CAF_CHECK_EQUAL(page->entries[0].seq, 4u);
  CAF_CHECK_EQUAL(page->entries[2].seq, 6u);
  CAF_CHECK(page->more);
  page = db->history("t1", 6, 3);
  CAF_REQUIRE_EQUAL(outcome(page), "none");
  CAF_REQUIRE_EQUAL(page->entries.size(), 1u);
  CAF_CHECK_EQUAL(page->entries[0].text, "m7");
  CAF_CHECK(!page->more);
  // Exactly `limit` entries left: no more.
  page = db->history("t1", 4, 3);
  CAF_REQUIRE_EQUAL(outcome(page), "none");
  CAF_CHECK_EQUAL(page->entries.size(), 3u);
  CAF_CHECK(!page->more);
  page = db->history("t1", 7, 3);
  CAF_REQUIRE_EQUAL(outcome(page), "none");
  CAF_CHECK(page->entries.empty());
  CAF_CHECK(!page->more);
  page = db->history("t1", 0, 0);
  CAF_REQUIRE_EQUAL(outcome(page), "none");
  CAF_CHECK(page->entries.empty());
  CAF_CHECK(page->more);
  page = db->history("t", 0, 10);
  CAF_REQUIRE_EQUAL(outcome(page), "none");
  CAF_CHECK(page->entries.empty());
  page = db->history("t1", std::numeric_limits<seq_t>::max(), 10);
  CAF_REQUIRE_EQUAL(outcome(page), "none");
  CAF_CHECK(page->entries.empty());
}

CAF_TEST(threads with an inbox are listed once each in key order) {
  // '.' sorts before '/', '0' right after it: prefix bugs show here.
  for (auto thread : {"t10", "t1", "t1.x", "t1-", "a", "t2"}) {
    accept(make_accept(thread, 1, "c1", "one", true));
    accept(make_accept(thread, 2, "c2", "two"));
  }
  flush();
  // t2's only entries get answered: it has no inbox left.
  db->stage_commit(make_commit("t2", 1, "c1", 3, "r1"));
  db->stage_commit(make_commit("t2", 2, "c2", 4, "r2"));
  flush();
  auto threads = db->threads_with_inbox();
  CAF_REQUIRE_EQUAL(outcome(threads), "none");
  std::vector<std::string> expected{"a", "t1-", "t1.x", "t1", "t10"};
  CAF_CHECK_EQUAL(*threads, expected);
  CAF_CHECK_EQUAL(load("t1").inbox.size(), 2u);
  CAF_CHECK_EQUAL(load("t1.x").inbox.size(), 2u);
  CAF_CHECK_EQUAL(log_size("t1", 0, 100), 2u);
  CAF_CHECK_EQUAL(value_or(db->count_sessions(), 0), 6u);
}

CAF_TEST(the next seq survives a restart) {
  accept(make_accept("t1", 1, "c1", "hello", true));
  flush();
  db->stage_commit(make_commit("t1", 1, "c1", 2, "hi"));
  flush();
  open();
  // The inbox is empty; the log says where the thread is.
  auto snapshot = load("t1");
  CAF_CHECK(snapshot.inbox.empty());
  CAF_CHECK_EQUAL(snapshot.next_seq, 3u);
  accept(make_accept("t1", 3, "c3", "again"));
  flush();
  open();
  CAF_CHECK_EQUAL(load("t1").next_seq, 4u);
  CAF_CHECK_EQUAL(load("t0").next_seq, 1u);
  CAF_CHECK_EQUAL(load("t10").next_seq, 1u);
}

CAF_TEST(flushing nothing succeeds without writing) {
  CAF_CHECK_EQUAL(db->staged(), 0u);
  CAF_CHECK_EQUAL(render(db->flush()), "none");
  CAF_CHECK_EQUAL(db->stats().flushes, 0u);
  // A duplicate stages nothing either.
  accept(make_accept("t1", 1, "c1", "hello", true));
  flush();
  auto dup = db->stage_accept(make_accept("t1", 2, "c1", "x"));
  CAF_REQUIRE_EQUAL(outcome(dup), "none");
  CAF_CHECK(dup->duplicate);
  CAF_CHECK_EQUAL(render(db->flush()), "none");
  CAF_CHECK_EQUAL(db->stats().flushes, 1u);
}

CAF_TEST(sessions are written and counted) {
  db->stage_session(make_session("t1"));
  auto rec = make_session("t2");
  rec.provider_state = "{\"opaque\":true}";
  db->stage_session(rec);
  CAF_CHECK_EQUAL(db->staged(), 2u);
  flush();
  CAF_CHECK_EQUAL(value_or(db->count_sessions(), 0), 2u);
  rec.state = session_state::suspended;
  db->stage_session(rec);
  flush();
  auto loaded = db->session("t2");
  CAF_REQUIRE_EQUAL(outcome(loaded), "none");
  CAF_CHECK_EQUAL(loaded->state, session_state::suspended);
  CAF_CHECK_EQUAL(loaded->provider_state, "{\"opaque\":true}");
  CAF_CHECK_EQUAL(value_or(db->count_sessions(), 0), 2u);
  CAF_CHECK_EQUAL(message_of(db->session("t3")), "no session for thread t3");
}

CAF_TEST(a corrupt record names its column family and key) {
  accept(make_accept("t1", 1, "c1", "hello", true));
  accept(make_accept("t1", 2, "c2", "world"));
  flush();
  put_raw("inbox", seq_key("t1", 2), "garbage{");
  auto snapshot = db->load_thread("t1");
  CAF_REQUIRE(!snapshot);
  CAF_CHECK_EQUAL(snapshot.error(), ec::storage_corrupt);
  CAF_CHECK_EQUAL(message_of(snapshot),
                  "corrupt record in inbox at t1/2: record is not valid JSON");
  put_raw("log", seq_key("t1", 1), R"({"seq":1,"kind":"user"})");
  auto page = db->history("t1", 0, 10);
  CAF_REQUIRE(!page);
  CAF_CHECK_EQUAL(page.error(), ec::storage_corrupt);
  CAF_CHECK(contains(message_of(page), "corrupt record in log at t1/1: "));
  CAF_CHECK(contains(message_of(page), "client_id"));
  // A record under the wrong key.
  log_entry moved;
  moved.seq = 9;
  moved.client_id = "c9";
  put_raw("log", seq_key("t2", 1), encode(moved));
  CAF_CHECK_EQUAL(message_of(db->history("t2", 0, 10)),
                  "corrupt record in log at t2/1: record has seq 9");
  put_raw("sessions", "t3", "[]");
  CAF_CHECK_EQUAL(message_of(db->session("t3")),
                  "corrupt record in sessions at t3: session record: not a "
                  "JSON object");
  put_raw("client_ids", "t1/c7", "seven");
  auto dup = db->stage_accept(make_accept("t1", 7, "c7", "x"));
  CAF_REQUIRE(!dup);
  CAF_CHECK_EQUAL(dup.error(), ec::storage_corrupt);
  CAF_CHECK_EQUAL(message_of(dup), "corrupt record in client_ids at t1/c7: "
                                   "not a sequence number");
  CAF_CHECK_EQUAL(db->staged(), 0u);
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

CAF_TEST(a record that cannot be encoded fails its group) {
  auto bad = make_accept("t1", 1, "c1", "\xff\xfe not UTF-8", true);
  auto res = db->stage_accept(bad);
  CAF_REQUIRE(!res);
  CAF_CHECK_EQUAL(res.error(), ec::storage_io);
  CAF_CHECK_EQUAL(db->staged(), 0u);
  accept(make_accept("t1", 1, "c1", "fine", true));
  auto rec = make_session("t1");
  rec.provider_state = "\xc3";
  db->stage_session(rec);
  auto err = db->flush();
  CAF_CHECK_EQUAL(err, ec::storage_io);
  CAF_CHECK(contains(error_message(err), "cannot encode the session of t1"));
  CAF_CHECK(!load("t1").exists);
  accept(make_accept("t1", 1, "c1", "fine", true));
  flush();
  CAF_CHECK(load("t1").exists);
}

CAF_TEST_FIXTURE_SCOPE_END()
