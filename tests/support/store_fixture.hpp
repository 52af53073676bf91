#pragma once

// A fresh store and the records the store and verify suites build their
// data from. The store is RocksDB in a fresh folder, or, with
// KEEL_STORE_BACKEND=postgres, a fresh schema on the test process's own
// PostgreSQL server (test_store.hpp).

#include <memory>
#include <string>
#include <vector>

#include <caf/test/unit_test.hpp>

#include "keel/pg_store.hpp"
#include "keel/store.hpp"
#include "raw_records.hpp"
#include "temp_dir.hpp"
#include "test_store.hpp"

namespace keel::test {

/// The value of `x`, or `fallback` on error.
template <class T, class U>
T value_or(const caf::expected<T>& x, U fallback) {
  return x ? *x : T(fallback);
}

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

/// The error of `x` (a copy: checks must not hold on to a temporary's).
template <class T>
caf::error error_of(const caf::expected<T>& x) {
  return x ? caf::error{} : x.error();
}

inline bool contains(const std::string& str, const std::string& what) {
  return str.find(what) != std::string::npos;
}

/// An ACTIVE root session in pool "default".
inline session_record make_session(const std::string& thread,
                                   const std::string& parent = {}) {
  session_record rec;
  rec.thread = thread;
  rec.parent = parent;
  rec.pool = "default";
  rec.state = session_state::active;
  rec.created_at = 1000;
  return rec;
}

inline accept_request
make_accept(const std::string& thread, seq_t seq, const std::string& client_id,
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
inline turn_commit make_commit(const std::string& thread, seq_t seq,
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

/// Spawning `child` under `parent` (a SUSPENDED child session and its link).
inline spawn_request make_spawn(const std::string& parent,
                                const std::string& child) {
  spawn_request req;
  req.child = make_session(child, parent);
  req.child.state = session_state::suspended;
  req.link = tree_link{parent, child, 1500};
  return req;
}

/// The message thread `from` sends `to` from its log entry `seq`.
inline outbox_entry make_outbox(const std::string& from, seq_t seq,
                                const std::string& to,
                                const std::string& text) {
  return outbox_entry{from, seq, to, agent_client_id(from, seq), text, 4000};
}

/// Delivering `x` into its target's inbox at `seq`.
inline accept_request make_delivery(const outbox_entry& x, seq_t seq) {
  auto req = make_accept(x.to, seq, x.client_id, x.text);
  req.outbox_from = x.from;
  req.outbox_seq = x.seq;
  return req;
}

/// Writes `value` under `key` in column family `cf` of the closed database
/// in `dir`, behind the store's back (see `write_raw_record`).
inline void put_raw_record(const std::string& dir, const std::string& cf,
                           const std::string& key, const std::string& value) {
  CAF_REQUIRE_EQUAL(write_raw_record(dir, cf, key, value), "OK");
}

struct store_fixture {
  temp_dir tmp;
  std::string dir = (tmp.path() / "db").string();
  std::unique_ptr<store> db;
  /// RocksDB's file system faults (see `fail_writes`).
  std::shared_ptr<fault_injection> faults = std::make_shared<fault_injection>();

  store_fixture() {
    if (store_on_postgres()) {
      // A fresh schema: the store creates it again on open.
      auto conn = test_pg_connection();
      CAF_REQUIRE(conn.exec("DROP SCHEMA IF EXISTS keel CASCADE").engaged());
    }
    open();
  }

  /// Opens a store on the suite's backend (beside `db`, if it is open).
  caf::expected<std::unique_ptr<store>> try_open(store_options opts = {}) {
    if (!store_on_postgres()) {
      if (!opts.faults)
        opts.faults = faults;
      return store::open(dir, opts);
    }
    pg_store_options pg;
    pg.url = test_pg_server().url();
    pg.read_only = opts.read_only;
    return open_pg_store(pg);
  }

  /// How the backend's messages name the store.
  std::string where() const {
    return store_on_postgres() ? "the PostgreSQL store"
                               : "the database in " + dir;
  }

  void open(store_options opts = {}) {
    db.reset();
    auto res = try_open(opts);
    CAF_REQUIRE_EQUAL(outcome(res), "none");
    db = std::move(*res);
  }

  void close() {
    db.reset();
  }

  /// Makes every write of the store fail (or work again): on RocksDB with an
  /// I/O error from its file system, on PostgreSQL with a trigger that
  /// refuses the transaction.
  void fail_writes(bool on) {
    if (!store_on_postgres()) {
      faults->fail_writes = on;
      return;
    }
    auto conn = test_pg_connection();
    std::vector<std::string> steps{"DROP TRIGGER IF EXISTS refuse ON "
                                   "keel.commit_marks"};
    if (on)
      steps = {"CREATE OR REPLACE FUNCTION keel.refuse() RETURNS trigger "
               "LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'injected "
               "fault'; END $$",
               "CREATE OR REPLACE TRIGGER refuse BEFORE INSERT OR UPDATE ON "
               "keel.commit_marks FOR EACH ROW EXECUTE FUNCTION "
               "keel.refuse()"};
    for (auto& sql : steps) {
      auto res = conn.exec(sql);
      CAF_REQUIRE_EQUAL(outcome(res), "none");
    }
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

  /// Stages an accept that must not be a duplicate.
  void accept(const accept_request& req) {
    auto res = db->stage_accept(req);
    CAF_REQUIRE_EQUAL(outcome(res), "none");
    CAF_CHECK_EQUAL(res->seq, req.entry.seq);
    CAF_CHECK(!res->duplicate);
  }

  /// Stages a spawn that must create the child.
  void spawn(const std::string& parent, const std::string& child) {
    auto res = db->stage_spawn(make_spawn(parent, child));
    CAF_REQUIRE_EQUAL(outcome(res), "none");
    CAF_CHECK(res->created);
  }

  void flush() {
    auto err = db->flush();
    CAF_REQUIRE_EQUAL(render(err), "none");
  }

  /// Writes `value` under `key` in `cf` behind the store's back (see
  /// `put_raw_record`); reopens the store unless told not to.
  void put_raw(const std::string& cf, const std::string& key,
               const std::string& value, bool reopen = true) {
    close();
    if (store_on_postgres())
      CAF_REQUIRE_EQUAL(write_pg_record(test_pg_server().url(), cf, key, value),
                        "OK");
    else
      put_raw_record(dir, cf, key, value);
    if (reopen)
      open();
  }
};

} // namespace keel::test
