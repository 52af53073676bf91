#define CAF_SUITE pg_cluster

// The cluster store on a real PostgreSQL server: membership with leases by
// the database's clock, liveness locks that free when a session ends,
// shards moved only by compare-and-set with their epoch bumped and
// recorded, and the store's write fence refusing every write of a shard
// this node does not own at the epoch it holds it at. Each test has a
// database of its own on the test process's server.

#include <caf/test/unit_test.hpp>

#include <algorithm>
#include <chrono>
#include <optional>
#include <thread>

#include <nlohmann/json.hpp>

#include "store_fixture.hpp"
#include "test_steps.hpp"
#include "test_store.hpp"

#include "keel/json_codec.hpp"
#include "keel/pg_cluster_store.hpp"
#include "keel/pg_connection.hpp"
#include "keel/pg_store.hpp"
#include "keel/shard_table.hpp"
#include "keel/sharding.hpp"
#include "keel/stored_form.hpp"
#include "keel/tools/node_process.hpp"
#include "keel/tools/process.hpp"
#include "keel/tools/verify.hpp"

using namespace keel;
using namespace keel::test;
using namespace std::chrono_literals;

namespace {

constexpr uint32_t shard_count = 8;

constexpr caf::timespan long_lease = std::chrono::seconds{60};

// Waits (bounded) until `pred` holds; false if it never did.
template <class Pred>
bool eventually(Pred pred, std::chrono::milliseconds limit = 15s) {
  auto deadline = std::chrono::steady_clock::now() + limit;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > deadline)
      return false;
    std::this_thread::sleep_for(20ms);
  }
  return true;
}

// A thread id (with `prefix`) that lives in `shard`.
std::string thread_in(shard_id shard, const std::string& prefix = "t") {
  for (int i = 0;; ++i) {
    auto thread = prefix + std::to_string(i);
    if (shard_of(thread, shard_count) == shard)
      return thread;
  }
}

std::string optional_text(const caf::expected<std::optional<uint64_t>>& x) {
  if (!x)
    return render(x.error());
  return *x ? std::to_string(**x) : std::string{"none"};
}

std::string list_text(const caf::expected<std::vector<std::string>>& x) {
  if (!x)
    return render(x.error());
  std::string result;
  for (auto& item : *x)
    result += (result.empty() ? "" : ",") + item;
  return "[" + result + "]";
}

// Each test runs its steps through `steps` (see test_steps.hpp): a broken
// build fails named checks and the suite goes on, instead of aborting.
struct fixture {
  /// Why the tests cannot run (no server, database or connection), or "".
  std::string setup_error;
  std::string url = fresh_database();
  std::optional<pg::connection> admin = connect_admin();

  std::string fresh_database() {
    static int databases = 0;
    try {
      return test_pg_url_for("pg_cluster-" + std::to_string(++databases));
    } catch (const std::exception& e) {
      setup_error = std::string{"no test database: "} + e.what();
      return {};
    }
  }

  std::optional<pg::connection> connect_admin() {
    if (!setup_error.empty())
      return std::nullopt;
    auto conn = pg::connection::open(url);
    if (!conn) {
      setup_error = "cannot connect to the test database: "
                    + render(conn.error());
      return std::nullopt;
    }
    return std::move(*conn);
  }

  /// Runs the test's steps, or, if the fixture could not be made, fails a
  /// check saying why.
  template <class Steps>
  void steps(Steps&& body) {
    if (!setup_error.empty()) {
      CAF_CHECK_FAILED(setup_error);
      return;
    }
    run_steps(body);
  }

  std::unique_ptr<cluster_store> open_cluster() {
    pg_cluster_options opts;
    opts.url = url;
    auto opened = open_pg_cluster_store(opts);
    KEEL_REQUIRE_EQUAL(outcome(opened), "none");
    return std::move(*opened);
  }

  // A cluster store of a prepared cluster of `shard_count` shards.
  std::unique_ptr<cluster_store> prepared() {
    auto result = open_cluster();
    KEEL_REQUIRE_EQUAL(render(result->prepare(shard_count)), "none");
    return result;
  }

  uint64_t join(cluster_store& cs, const std::string& node,
                caf::timespan ttl = long_lease) {
    auto inc = cs.join(node, node + ":4000", ttl);
    KEEL_REQUIRE_EQUAL(outcome(inc), "none");
    return *inc;
  }

  // The first value of `sql`'s first row (by the admin connection), or
  // "<no row>", or the error.
  std::string sql_value(const std::string& sql) {
    auto res = admin->exec(sql);
    if (!res)
      return render(res.error());
    return res->rows() == 0 ? "<no row>" : std::string{res->value(0, 0)};
  }

  cluster_view read_view(cluster_store& cs) {
    auto view = cs.view();
    KEEL_REQUIRE_EQUAL(outcome(view), "none");
    return std::move(*view);
  }

  shard_row shard_in(cluster_store& cs, shard_id shard) {
    auto view = read_view(cs);
    KEEL_REQUIRE_EQUAL(view.shards.size(), shard_count);
    return view.shards[shard];
  }

  member member_in(cluster_store& cs, const std::string& node) {
    for (auto& x : read_view(cs).members)
      if (x.node_id == node)
        return x;
    KEEL_FAIL("no member " << node);
    return {};
  }

  // "owner/incarnation@epoch>handoff_to" of `shard`.
  std::string shard_text(cluster_store& cs, shard_id shard) {
    auto row = shard_in(cs, shard);
    return row.owner + "/" + std::to_string(row.owner_incarnation) + "@"
           + std::to_string(row.epoch) + ">" + row.handoff_to;
  }

  // The history of `shard`: "epoch:owner/incarnation:reason;..." by epoch.
  std::string history_of(shard_id shard) {
    auto res = admin->exec("SELECT epoch, owner, owner_incarnation, reason "
                           "FROM keel.shard_history WHERE shard = $1::int "
                           "ORDER BY epoch",
                           {std::to_string(shard)});
    if (!res)
      return render(res.error());
    std::string result;
    for (size_t row = 0; row < res->rows(); ++row)
      result += std::string{res->value(row, 0)} + ":"
                + std::string{res->value(row, 1)} + "/"
                + std::string{res->value(row, 2)} + ":"
                + std::string{res->value(row, 3)} + ";";
    return result;
  }

  // A store with the write fence of `table`, its writes over two
  // connections (shard % 2 picks the connection).
  std::unique_ptr<store> fenced_store(std::shared_ptr<shard_table> table) {
    pg_store_options opts;
    opts.url = url;
    opts.connections = 2;
    opts.fence = std::move(table);
    auto opened = open_pg_store(opts);
    KEEL_REQUIRE_EQUAL(outcome(opened), "none");
    return std::move(*opened);
  }

  // Moves `shard` from `from` (`from_inc`, at `epoch`) to `to`, as a
  // rebalance does; returns the new epoch.
  uint64_t hand_over(cluster_store& cs, shard_id shard, uint64_t epoch,
                     const std::string& from, uint64_t from_inc,
                     const std::string& to) {
    KEEL_REQUIRE_EQUAL(value_or(cs.request_handoff(shard, epoch, to), false),
                       true);
    auto moved = cs.transfer(shard, epoch, from, from_inc);
    KEEL_REQUIRE_EQUAL(optional_text(moved), std::to_string(epoch + 1));
    return epoch + 1;
  }
};

bool stored_session(store& db, const std::string& thread) {
  auto rec = db.session(thread);
  CAF_CHECK(rec || rec.error() == ec::not_found);
  return static_cast<bool>(rec);
}

} // namespace

CAF_TEST_FIXTURE_SCOPE(pg_cluster_tests, fixture)

// -- schema -------------------------------------------------------------------

CAF_TEST(prepare creates the cluster and checks the shard count) {
  steps([&] {
    // The store's engine made the schema keel first; the cluster joins it.
    pg_store_options opts;
    opts.url = url;
    auto db = open_pg_store(opts);
    KEEL_REQUIRE_EQUAL(outcome(db), "none");
    auto cs = open_cluster();
    CAF_CHECK_EQUAL(render(cs->prepare(shard_count)), "none");
    CAF_CHECK_EQUAL(sql_value("SELECT shards FROM keel.cluster"), "8");
    CAF_CHECK_EQUAL(sql_value("SELECT count(*) FROM keel.shards WHERE owner IS "
                              "NULL AND epoch = 0 AND handoff_to IS NULL"),
                    "8");
    CAF_CHECK_EQUAL(sql_value("SELECT max(shard) FROM keel.shards"), "7");
    // Again: nothing changes.
    CAF_CHECK_EQUAL(render(cs->prepare(shard_count)), "none");
    CAF_CHECK_EQUAL(sql_value("SELECT count(*) FROM keel.shards"), "8");
    auto other = open_cluster();
    auto err = other->prepare(4);
    CAF_CHECK_EQUAL(err, ec::config_invalid);
    CAF_CHECK_EQUAL(error_message(err),
                    "the cluster has 8 shards; this node is configured with 4 "
                    "(cluster.shards is fixed when the cluster is created)");
    CAF_CHECK_EQUAL(sql_value("SELECT count(*) FROM keel.shards"), "8");
  });
}

CAF_TEST(errors name what failed and never the URL) {
  steps([&] {
    pg_cluster_options opts;
    opts.url
      = "postgresql://keel:secret@127.0.0.1:1/nosuchdb?connect_timeout=1";
    opts.connect_timeout = 1s;
    auto opened = open_pg_cluster_store(opts);
    KEEL_REQUIRE(!opened);
    CAF_CHECK_EQUAL(opened.error(), ec::connection_failed);
    auto msg = error_message(opened.error());
    CAF_MESSAGE("error: " << msg);
    CAF_CHECK(contains(msg, "cannot open the cluster store: cannot connect to "
                            "PostgreSQL"));
    CAF_CHECK(!contains(msg, "secret"));
    CAF_CHECK(!contains(msg, "nosuchdb"));
    // A statement refused: no tables yet.
    auto cs = open_cluster();
    auto renewed = cs->renew("n1", 1, long_lease);
    CAF_CHECK_EQUAL(error_of(renewed), ec::storage_io);
    CAF_CHECK(contains(message_of(renewed),
                       "cannot renew the lease of n1: SQLSTATE 42P01"));
  });
}

// -- membership ---------------------------------------------------------------

CAF_TEST(each join is a new incarnation and the old one renews to dead) {
  steps([&] {
    auto cs = prepared();
    CAF_CHECK_EQUAL(join(*cs, "n1"), 1u);
    CAF_CHECK_EQUAL(value_or(cs->renew("n1", 1, long_lease),
                             member_state::dead),
                    member_state::up);
    CAF_CHECK_EQUAL(join(*cs, "n1"), 2u);
    CAF_CHECK_EQUAL(value_or(cs->renew("n1", 1, long_lease), member_state::up),
                    member_state::dead);
    CAF_CHECK_EQUAL(value_or(cs->renew("n1", 2, long_lease),
                             member_state::dead),
                    member_state::up);
    auto row = member_in(*cs, "n1");
    CAF_CHECK_EQUAL(row.incarnation, 2u);
    CAF_CHECK_EQUAL(row.address, "n1:4000");
    CAF_CHECK_EQUAL(row.state, member_state::up);
    CAF_CHECK(!row.lease_expired);
    // A restart: the old process's session ends, the new one joins.
    cs.reset();
    auto restarted = open_cluster();
    caf::expected<uint64_t> inc{caf::make_error(ec::timeout)};
    CAF_CHECK(eventually([&] {
      inc = restarted->join("n1", "n1:4001", long_lease);
      return static_cast<bool>(inc);
    }));
    CAF_CHECK_EQUAL(value_or(inc, 0u), 3u);
    CAF_CHECK_EQUAL(member_in(*restarted, "n1").address, "n1:4001");
  });
}

CAF_TEST(a second process with the same node id is refused) {
  steps([&] {
    auto first = prepared();
    CAF_CHECK_EQUAL(join(*first, "n1"), 1u);
    auto second = open_cluster();
    auto refused = second->join("n1", "elsewhere:4000", long_lease);
    CAF_CHECK_EQUAL(error_of(refused), ec::conflict);
    CAF_CHECK(contains(message_of(refused), "node n1 is running already"));
    // The first keeps its incarnation.
    CAF_CHECK_EQUAL(value_or(first->renew("n1", 1, long_lease),
                             member_state::dead),
                    member_state::up);
    CAF_CHECK_EQUAL(member_in(*first, "n1").address, "n1:4000");
  });
}

CAF_TEST(set_state drains and leave needs no shards) {
  steps([&] {
    auto cs = prepared();
    auto inc = join(*cs, "n1");
    CAF_CHECK_EQUAL(
      value_or(cs->set_state("n1", member_state::draining), false), true);
    CAF_CHECK_EQUAL(value_or(cs->renew("n1", inc, long_lease),
                             member_state::up),
                    member_state::draining);
    CAF_CHECK_EQUAL(error_of(cs->set_state("n1", member_state::dead)),
                    ec::config_invalid);
    CAF_CHECK_EQUAL(value_or(cs->set_state("n1", member_state::up), false),
                    true);
    CAF_CHECK_EQUAL(optional_text(cs->claim(1, 0, "n1", inc)), "1");
    CAF_CHECK_EQUAL(value_or(cs->leave("n1", inc), true), false);
    CAF_CHECK_EQUAL(member_in(*cs, "n1").state, member_state::up);
    auto other = open_cluster();
    auto inc2 = join(*other, "n2");
    hand_over(*cs, 1, 1, "n1", inc, "n2");
    CAF_CHECK_EQUAL(value_or(cs->leave("n1", inc), false), true);
    CAF_CHECK_EQUAL(member_in(*cs, "n1").state, member_state::left);
    CAF_CHECK_EQUAL(value_or(cs->renew("n1", inc, long_lease),
                             member_state::up),
                    member_state::dead);
    CAF_CHECK_EQUAL(value_or(cs->set_state("n1", member_state::up), true),
                    false);
    CAF_CHECK_EQUAL(value_or(cs->leave("n1", inc), true), false);
    CAF_CHECK_EQUAL(shard_text(*cs, 1), "n2/" + std::to_string(inc2) + "@2>");
  });
}

CAF_TEST(a lease runs out by the database clock and is declared dead once) {
  steps([&] {
    auto cs = prepared();
    auto inc = join(*cs, "n1", std::chrono::milliseconds{300});
    auto observer = open_cluster();
    join(*observer, "n2");
    CAF_CHECK(!member_in(*observer, "n1").lease_expired);
    CAF_CHECK(eventually(
      [&] { return member_in(*observer, "n1").lease_expired; }, 10s));
    auto row = member_in(*observer, "n1");
    CAF_CHECK_GREATER_OR_EQUAL(row.since_renewal,
                               std::chrono::milliseconds{300});
    CAF_CHECK_EQUAL(row.state, member_state::up);
    CAF_CHECK(!member_in(*observer, "n2").lease_expired);
    CAF_CHECK_EQUAL(value_or(observer->declare_dead("n1", inc), false), true);
    CAF_CHECK_EQUAL(value_or(observer->declare_dead("n1", inc), true), false);
    CAF_CHECK_EQUAL(member_in(*observer, "n1").state, member_state::dead);
    // Too late for the node itself: it must exit.
    CAF_CHECK_EQUAL(value_or(cs->renew("n1", inc, long_lease),
                             member_state::up),
                    member_state::dead);
    CAF_CHECK_EQUAL(member_in(*observer, "n1").state, member_state::dead);
  });
}

CAF_TEST(the store is recent while it started less than a lease ago) {
  steps([&] {
    auto cs = prepared();
    auto inc = join(*cs, "n1", std::chrono::hours{24 * 365});
    CAF_CHECK(read_view(*cs).store_recent);
    CAF_CHECK_EQUAL(
      value_or(cs->renew("n1", inc, std::chrono::milliseconds{300}),
               member_state::dead),
      member_state::up);
    CAF_CHECK(eventually([&] { return !read_view(*cs).store_recent; }, 10s));
  });
}

// -- liveness locks -----------------------------------------------------------

CAF_TEST(vanished reports a node whose session ended and never a live one) {
  steps([&] {
    auto first = prepared();
    auto second = open_cluster();
    join(*first, "n1");
    join(*second, "n2");
    CAF_CHECK_EQUAL(list_text(second->vanished({"n1", "n2"})), "[]");
    CAF_CHECK_EQUAL(list_text(first->vanished({"n1", "n2"})), "[]");
    // One that never joined holds no lock.
    CAF_CHECK_EQUAL(list_text(second->vanished({"n1", "n9"})), "[n9]");
    first.reset();
    CAF_CHECK(eventually([&] {
      return list_text(second->vanished({"n1", "n2"})) == "[n1]";
    }));
    // Probing released what it took: asking again says the same, and the
    // node may join again.
    CAF_CHECK_EQUAL(list_text(second->vanished({"n1"})), "[n1]");
    auto restarted = open_cluster();
    CAF_CHECK_EQUAL(join(*restarted, "n1"), 2u);
    CAF_CHECK_EQUAL(list_text(second->vanished({"n1", "n2"})), "[]");
  });
}

CAF_TEST(a reconnect takes the liveness lock again) {
  steps([&] {
    auto cs = prepared();
    auto inc = join(*cs, "n1");
    // The server ends the node's session (as a restart or a network cut
    // would).
    CAF_CHECK_EQUAL(sql_value(
                      "SELECT count(pg_terminate_backend(pid)) FROM "
                      "pg_stat_activity WHERE application_name = "
                      "'keel-cluster' AND datname = current_database()"),
                    "1");
    auto observer = open_cluster();
    join(*observer, "n2");
    CAF_CHECK(eventually(
      [&] { return list_text(observer->vanished({"n1"})) == "[n1]"; }));
    // The next renew finds the connection broken, reconnects, takes the
    // lock again and renews.
    CAF_CHECK_EQUAL(value_or(cs->renew("n1", inc, long_lease),
                             member_state::dead),
                    member_state::up);
    CAF_CHECK_EQUAL(list_text(observer->vanished({"n1"})), "[]");
  });
}

// -- shards -------------------------------------------------------------------

CAF_TEST(claim takes an orphan bumps its epoch and records it) {
  steps([&] {
    auto a = prepared();
    auto b = open_cluster();
    auto inc1 = join(*a, "n1");
    auto inc2 = join(*b, "n2");
    CAF_CHECK_EQUAL(optional_text(a->claim(3, 0, "n1", inc1)), "1");
    CAF_CHECK_EQUAL(shard_text(*a, 3), "n1/1@1>");
    CAF_CHECK_EQUAL(history_of(3), "1:n1/1:claim;");
    // A live owner is never stolen from; a stale epoch matches nothing.
    CAF_CHECK_EQUAL(optional_text(b->claim(3, 1, "n2", inc2)), "none");
    CAF_CHECK_EQUAL(optional_text(b->claim(3, 0, "n2", inc2)), "none");
    // A draining owner lives too.
    CAF_CHECK_EQUAL(value_or(a->set_state("n1", member_state::draining), false),
                    true);
    CAF_CHECK_EQUAL(optional_text(b->claim(3, 1, "n2", inc2)), "none");
    // Its owner dead, the shard is an orphan.
    CAF_CHECK_EQUAL(value_or(b->declare_dead("n1", inc1), false), true);
    CAF_CHECK_EQUAL(optional_text(b->claim(3, 1, "n2", inc2)), "2");
    CAF_CHECK_EQUAL(shard_text(*b, 3), "n2/" + std::to_string(inc2) + "@2>");
    CAF_CHECK_EQUAL(history_of(3), "1:n1/1:claim;2:n2/1:claim;");
    // A dead incarnation claims nothing.
    CAF_CHECK_EQUAL(optional_text(a->claim(4, 0, "n1", inc1)), "none");
    CAF_CHECK_EQUAL(shard_text(*a, 4), "/0@0>");
    // Nor does an incarnation that never joined.
    CAF_CHECK_EQUAL(optional_text(b->claim(4, 0, "n2", inc2 + 1)), "none");
  });
}

CAF_TEST(a claim of an older incarnation is an orphan for the new one) {
  steps([&] {
    auto a = prepared();
    auto inc1 = join(*a, "n1");
    CAF_CHECK_EQUAL(optional_text(a->claim(2, 0, "n1", inc1)), "1");
    // The node restarts: its old incarnation's shards are orphans.
    auto inc2 = join(*a, "n1");
    CAF_CHECK_EQUAL(optional_text(a->claim(2, 1, "n1", inc2)), "2");
    CAF_CHECK_EQUAL(shard_text(*a, 2), "n1/2@2>");
  });
}

CAF_TEST(request_handoff and transfer move a shard to the node that asked) {
  steps([&] {
    auto a = prepared();
    auto b = open_cluster();
    auto inc1 = join(*a, "n1");
    auto inc2 = join(*b, "n2");
    KEEL_REQUIRE_EQUAL(optional_text(a->claim(5, 0, "n1", inc1)), "1");
    // Nobody asked: nothing to transfer.
    CAF_CHECK_EQUAL(optional_text(a->transfer(5, 1, "n1", inc1)), "none");
    CAF_CHECK_EQUAL(value_or(b->request_handoff(5, 0, "n2"), true), false);
    CAF_CHECK_EQUAL(value_or(b->request_handoff(5, 1, "n1"), true), false);
    CAF_CHECK_EQUAL(value_or(b->request_handoff(5, 1, "n2"), false), true);
    CAF_CHECK_EQUAL(value_or(b->request_handoff(5, 1, "n2"), true), false);
    CAF_CHECK_EQUAL(shard_text(*a, 5), "n1/1@1>n2");
    // Only the owner's incarnation at the shard's epoch hands it over.
    CAF_CHECK_EQUAL(optional_text(b->transfer(5, 1, "n2", inc2)), "none");
    CAF_CHECK_EQUAL(optional_text(a->transfer(5, 0, "n1", inc1)), "none");
    CAF_CHECK_EQUAL(optional_text(a->transfer(5, 1, "n1", inc1 + 1)), "none");
    CAF_CHECK_EQUAL(shard_text(*a, 5), "n1/1@1>n2");
    CAF_CHECK_EQUAL(optional_text(a->transfer(5, 1, "n1", inc1)), "2");
    CAF_CHECK_EQUAL(shard_text(*a, 5), "n2/" + std::to_string(inc2) + "@2>");
    CAF_CHECK_EQUAL(history_of(5), "1:n1/1:claim;2:n2/1:transfer;");
    // A handoff to a node no longer up does not happen; it can be cancelled.
    CAF_CHECK_EQUAL(value_or(a->request_handoff(5, 2, "n1"), false), true);
    CAF_CHECK_EQUAL(value_or(a->set_state("n1", member_state::draining), false),
                    true);
    CAF_CHECK_EQUAL(optional_text(b->transfer(5, 2, "n2", inc2)), "none");
    CAF_CHECK_EQUAL(value_or(b->cancel_handoff(5, 1), true), false);
    CAF_CHECK_EQUAL(value_or(b->cancel_handoff(5, 2), false), true);
    CAF_CHECK_EQUAL(value_or(b->cancel_handoff(5, 2), true), false);
    CAF_CHECK_EQUAL(shard_text(*a, 5), "n2/" + std::to_string(inc2) + "@2>");
  });
}

// -- the write fence ----------------------------------------------------------

CAF_TEST(the fence lets the owner write and refuses it once the shard moved) {
  steps([&] {
    auto a = prepared();
    auto b = open_cluster();
    auto inc1 = join(*a, "n1");
    join(*b, "n2");
    auto table = std::make_shared<shard_table>("n1", shard_count);
    auto db = fenced_store(table);
    KEEL_REQUIRE_EQUAL(optional_text(a->claim(2, 0, "n1", inc1)), "1");
    table->hold(2, 1);
    auto t = thread_in(2);
    db->stage_session(make_session(t));
    CAF_CHECK_EQUAL(render(db->flush()), "none");
    CAF_CHECK(stored_session(*db, t));
    // The shard moves to n2 (epoch 2); n1's table still holds it at epoch 1.
    hand_over(*a, 2, 1, "n1", inc1, "n2");
    auto late = thread_in(2, "late");
    db->stage_session(make_session(late));
    auto changed = make_session(t);
    changed.state = session_state::suspended;
    db->stage_session(changed);
    auto err = db->flush();
    CAF_CHECK_EQUAL(err, ec::not_owner);
    CAF_CHECK_EQUAL(error_message(err),
                    "write fenced off: shard 2 is not owned by n1 at epoch 1 "
                    "(owner n2, epoch 2)");
    CAF_CHECK(!stored_session(*db, late));
    auto rec = db->session(t);
    KEEL_REQUIRE_EQUAL(outcome(rec), "none");
    CAF_CHECK_EQUAL(rec->state, session_state::active);
    // Writes of no thread are not fenced.
    db->stage_meta("fence-test", "written");
    CAF_CHECK_EQUAL(render(db->flush()), "none");
    CAF_CHECK_EQUAL(value_or(db->meta("fence-test"), std::string{}), "written");
  });
}

CAF_TEST(a shard the table does not hold fails before reaching the server) {
  steps([&] {
    auto a = prepared();
    auto inc1 = join(*a, "n1");
    KEEL_REQUIRE_EQUAL(optional_text(a->claim(6, 0, "n1", inc1)), "1");
    auto table = std::make_shared<shard_table>("n1", shard_count);
    auto db = fenced_store(table);
    // The database would let n1 write shard 6 at epoch 1; its table says it
    // may not (being handed over, or fenced itself): refused locally.
    auto t = thread_in(6);
    db->stage_session(make_session(t));
    auto err = db->flush();
    CAF_CHECK_EQUAL(err, ec::not_owner);
    CAF_CHECK_EQUAL(error_message(err),
                    "write fenced off: this node does not hold shard 6 (thread "
                      + t + ")");
    CAF_CHECK(!stored_session(*db, t));
    table->hold(6, 1);
    db->stage_session(make_session(t));
    CAF_CHECK_EQUAL(render(db->flush()), "none");
    CAF_CHECK(stored_session(*db, t));
  });
}

CAF_TEST(owner notices and provider health are written whatever it holds) {
  steps([&] {
    auto a = prepared();
    join(*a, "n1");
    // The node holds no shard: records that belong to no thread still go.
    auto db = fenced_store(std::make_shared<shard_table>("n1", shard_count));
    owner_notice notice;
    notice.kind = notice_kind::all_models_failed;
    notice.subject = "pool default";
    notice.at = 42;
    db->stage_notice(notice);
    provider_health_record health;
    health.pool = "default";
    health.provider = "gpt";
    db->stage_health(health);
    CAF_CHECK_EQUAL(render(db->flush()), "none");
    auto notices = db->notices();
    KEEL_REQUIRE(notices);
    KEEL_REQUIRE_EQUAL(notices->size(), 1u);
    CAF_CHECK_EQUAL((*notices)[0].subject, "pool default");
  });
}

// A write carries the tenure its writer loaded the thread under: after the
// shard left and came back (epoch 1, to n2 at 2, back at 3) a write made
// from a view of epoch 1 is refused, though the node holds the shard and
// the database would take its epoch-3 writes; one of epoch 3 commits. Two
// tenures of one shard in one group cannot both be current: refused.
CAF_TEST(a write of a tenure the node no longer holds is refused) {
  steps([&] {
    auto a = prepared();
    auto b = open_cluster();
    auto inc1 = join(*a, "n1");
    auto inc2 = join(*b, "n2");
    auto table = std::make_shared<shard_table>("n1", shard_count);
    auto db = fenced_store(table);
    KEEL_REQUIRE_EQUAL(optional_text(a->claim(2, 0, "n1", inc1)), "1");
    table->hold(2, 1);
    auto t = thread_in(2);
    db->stage_session(make_session(t), 1);
    CAF_CHECK_EQUAL(render(db->flush()), "none");
    hand_over(*a, 2, 1, "n1", inc1, "n2");
    hand_over(*b, 2, 2, "n2", inc2, "n1");
    table->hold(2, 3);
    auto changed = make_session(t);
    changed.state = session_state::closed;
    db->stage_session(changed, 1);
    auto err = db->flush();
    CAF_CHECK_EQUAL(err, ec::not_owner);
    CAF_CHECK_EQUAL(error_message(err),
                    "write fenced off: thread " + t
                      + " was loaded under epoch 1 of shard 2, and this node "
                        "now holds it at epoch 3");
    db->stage_session(changed, 3);
    db->stage_session(make_session(thread_in(2, "other")), 1);
    err = db->flush();
    CAF_CHECK_EQUAL(err, ec::not_owner);
    CAF_CHECK_EQUAL(error_message(err), "write fenced off: writes of shard 2 "
                                        "loaded under different epochs in one "
                                        "group");
    auto kept = db->session(t);
    KEEL_REQUIRE_EQUAL(outcome(kept), "none");
    CAF_CHECK_EQUAL(kept->state, session_state::active);
    db->stage_session(changed, 3);
    CAF_CHECK_EQUAL(render(db->flush()), "none");
    auto closed = db->session(t);
    KEEL_REQUIRE_EQUAL(outcome(closed), "none");
    CAF_CHECK_EQUAL(closed->state, session_state::closed);
  });
}

// A group spans connections (shard % 2): each share is its own
// transaction. A share fenced off commits nothing (the writes of every
// shard in it go with it) while another share of the group commits, and
// the flush reports `not_owner`: the group failed as a whole for its
// callers, though part of it is stored.
CAF_TEST(a group mixing a fenced off and a fine share commits the fine one) {
  steps([&] {
    auto a = prepared();
    auto b = open_cluster();
    auto inc1 = join(*a, "n1");
    join(*b, "n2");
    auto table = std::make_shared<shard_table>("n1", shard_count);
    auto db = fenced_store(table);
    for (shard_id shard : {2u, 3u, 4u}) {
      KEEL_REQUIRE_EQUAL(optional_text(a->claim(shard, 0, "n1", inc1)), "1");
      table->hold(shard, 1);
    }
    hand_over(*a, 2, 1, "n1", inc1, "n2");
    // Shard 2 (moved) and 4 (held) share connection 0; shard 3 (held) is on
    // connection 1.
    auto t2 = thread_in(2);
    auto t3 = thread_in(3);
    auto t4 = thread_in(4);
    for (auto& t : {t2, t3, t4})
      db->stage_session(make_session(t));
    auto err = db->flush();
    CAF_CHECK_EQUAL(err, ec::not_owner);
    CAF_CHECK(contains(error_message(err), "shard 2 is not owned by n1"));
    CAF_CHECK(!stored_session(*db, t2));
    CAF_CHECK(stored_session(*db, t3));
    CAF_CHECK(!stored_session(*db, t4));
    // Without the moved shard, the next group commits.
    table->release(2);
    db->stage_session(make_session(t4));
    CAF_CHECK_EQUAL(render(db->flush()), "none");
    CAF_CHECK(stored_session(*db, t4));
  });
}

// -- the epoch audit ----------------------------------------------------------

namespace {

// The epoch audit of the database at `url`: its violations, one line each
// ("RULE WHERE: WHAT"), and its summary.
struct audit_result {
  std::string violations;
  epoch_audit_summary summary;
};

audit_result audit(const std::string& url) {
  verify_report report;
  KEEL_REQUIRE_EQUAL(render(audit_epochs(url, report)), "none");
  KEEL_REQUIRE(report.epoch_audit);
  audit_result result{{}, *report.epoch_audit};
  for (auto& x : report.violations)
    result.violations += x.rule + " " + x.where + ": " + x.what + "\n";
  return result;
}

// Stores a whole exchange of `thread` (its message and the answer, the
// session SUSPENDED after), so that every invariant of `keelctl verify`
// holds.
void write_exchange(store& db, const std::string& thread) {
  KEEL_REQUIRE_EQUAL(
    outcome(db.stage_accept(make_accept(thread, 1, "c1", "hello", true))),
    "none");
  KEEL_REQUIRE_EQUAL(render(db.flush()), "none");
  db.stage_commit(make_commit(thread, 1, "c1", 2, "answer"));
  auto rec = make_session(thread);
  rec.state = session_state::suspended;
  db.stage_session(rec);
  KEEL_REQUIRE_EQUAL(render(db.flush()), "none");
}

command_result keelctl_verify(const std::string& url, bool as_json = false) {
  std::vector<std::string> argv{tool_binary("keelctl"), "verify", "--pg", url};
  if (as_json)
    argv.emplace_back("--json");
  return run_command(argv);
}

// The `epoch_audit` object of `keelctl verify --pg URL --json`.
nlohmann::json audit_json(const std::string& url) {
  auto res = keelctl_verify(url, true);
  auto parsed = nlohmann::json::parse(res.out, nullptr, false);
  return parsed.is_object() ? parsed["epoch_audit"] : nlohmann::json{};
}

// The layout 1 schema as the previous build created it.
constexpr const char* layout_1_steps[] = {
  "CREATE SCHEMA keel",
  "CREATE TABLE keel.layout (version integer NOT NULL)",
  "INSERT INTO keel.layout VALUES (1)",
  "CREATE TABLE keel.commit_marks (writer text PRIMARY KEY, nonce bigint "
  "NOT NULL)",
};

} // namespace

CAF_TEST(the epoch audit passes rows written by the owner under the fence) {
  steps([&] {
    auto a = prepared();
    auto b = open_cluster();
    auto inc1 = join(*a, "n1");
    join(*b, "n2");
    auto table1 = std::make_shared<shard_table>("n1", shard_count);
    for (shard_id shard : {2u, 3u}) {
      KEEL_REQUIRE_EQUAL(optional_text(a->claim(shard, 0, "n1", inc1)), "1");
      table1->hold(shard, 1);
    }
    auto db1 = fenced_store(table1);
    auto first = thread_in(2, "a");
    write_exchange(*db1, first);
    write_exchange(*db1, thread_in(3, "b"));
    db1->stage_meta("audit-test", "unfenced");
    KEEL_REQUIRE_EQUAL(render(db1->flush()), "none");
    auto stamp = [&](const std::string& table, const std::string& key) {
      return sql_value("SELECT coalesce(writer, 'none') || '@' || "
                       "coalesce(writer_epoch::text, 'none') || '/' || "
                       "(written_at IS NOT NULL)::text FROM keel."
                       + table + " WHERE key = convert_to('" + key
                       + "', 'UTF8')");
    };
    CAF_CHECK_EQUAL(stamp("sessions", first), "n1@1/true");
    CAF_CHECK_EQUAL(stamp("meta", "audit-test"), "none@none/false");
    // Shard 2 moves to n2, which writes it at epoch 2; n1's rows of epoch 1
    // were written before the move.
    hand_over(*a, 2, 1, "n1", inc1, "n2");
    table1->release(2);
    auto table2 = std::make_shared<shard_table>("n2", shard_count);
    table2->hold(2, 2);
    auto db2 = fenced_store(table2);
    auto second = thread_in(2, "c");
    write_exchange(*db2, second);
    CAF_CHECK_EQUAL(stamp("sessions", second), "n2@2/true");
    auto result = audit(url);
    CAF_CHECK_EQUAL(result.violations, "");
    CAF_CHECK_EQUAL(result.summary.skipped, "");
    // Per exchange: the session, two log entries, two context entries, the
    // client id.
    CAF_CHECK_EQUAL(result.summary.rows, 18u);
    CAF_CHECK_EQUAL(result.summary.shards, 2u);
    CAF_CHECK_EQUAL(result.summary.epochs, 3u);
    CAF_CHECK_EQUAL(result.summary.history, 3u);
    CAF_CHECK_EQUAL(result.summary.cluster_shards, shard_count);
    CAF_CHECK_GREATER_OR_EQUAL(result.summary.unstamped, 2u);
    db1.reset();
    db2.reset();
    auto verified = keelctl_verify(url);
    CAF_CHECK_EQUAL(verified.exit_code, 0);
    CAF_MESSAGE("keelctl verify:\n" << verified.out << verified.err);
    CAF_CHECK(contains(verified.out, "epoch audit: 18 rows with a writer (2 "
                                     "shards, 3 epochs) checked against 3 "
                                     "epochs of 8 shards"));
    CAF_CHECK(contains(verified.out, "every invariant holds"));
    auto as_json = audit_json(url);
    CAF_CHECK_EQUAL(as_json.value("rows", 0), 18);
    CAF_CHECK_EQUAL(as_json.value("history", 0), 3);
  });
}

CAF_TEST(the epoch audit names rows forged to look written by a stale owner) {
  steps([&] {
    auto a = prepared();
    auto b = open_cluster();
    auto inc1 = join(*a, "n1");
    join(*b, "n2");
    auto table = std::make_shared<shard_table>("n1", shard_count);
    for (shard_id shard : {2u, 3u}) {
      KEEL_REQUIRE_EQUAL(optional_text(a->claim(shard, 0, "n1", inc1)), "1");
      table->hold(shard, 1);
    }
    auto db = fenced_store(table);
    auto stale = thread_in(2, "s");
    auto stolen = thread_in(3, "o");
    auto unknown = thread_in(3, "u");
    for (auto& t : {stale, stolen, unknown})
      db->stage_session(make_session(t));
    KEEL_REQUIRE_EQUAL(render(db->flush()), "none");
    hand_over(*a, 2, 1, "n1", inc1, "n2");
    CAF_CHECK_EQUAL(audit(url).violations, "");
    // n1's row of shard 2 at epoch 1 claims to be written a second after
    // n2's epoch 2 began; the others name a writer that is not the epoch's
    // owner, and an epoch that never was.
    auto forge = [&](const std::string& set, const std::string& thread) {
      auto res = admin->exec("UPDATE keel.sessions SET " + set
                               + " WHERE key = convert_to($1, 'UTF8')",
                             {thread});
      KEEL_REQUIRE_EQUAL(outcome(res), "none");
      KEEL_REQUIRE_EQUAL(res->affected(), 1u);
    };
    forge("written_at = (SELECT at + interval '1 second' FROM "
          "keel.shard_history WHERE shard = 2 AND epoch = 2)",
          stale);
    forge("writer = 'n2'", stolen);
    forge("writer_epoch = 7", unknown);
    auto result = audit(url);
    CAF_MESSAGE("audit:\n" << result.violations);
    CAF_CHECK(contains(result.violations,
                       "epoch_audit sessions/" + stale
                         + ": row written by n1 at epoch 1 of shard 2, but "
                           "epoch 2 (n2) began before it ("));
    CAF_CHECK(contains(result.violations,
                       "epoch_audit sessions/" + stolen
                         + ": row written by n2 at epoch 1 of shard 3, but "
                           "epoch 1 is n1's\n"));
    CAF_CHECK(contains(result.violations,
                       "epoch_audit sessions/" + unknown
                         + ": row written by n1 at epoch 7 of shard 3, but "
                           "keel.shard_history has no such epoch\n"));
    CAF_CHECK_EQUAL(
      std::count(result.violations.begin(), result.violations.end(), '\n'), 3);
    CAF_CHECK_EQUAL(result.summary.rows, 3u);
    db.reset();
    auto verified = keelctl_verify(url);
    CAF_CHECK_EQUAL(verified.exit_code, 1);
    CAF_CHECK(contains(verified.out, "epoch_audit sessions/" + stale
                                       + ": row written by n1 at epoch 1"));
  });
}

CAF_TEST(the epoch audit reports a row of a shard its write was not fenced on) {
  steps([&] {
    auto a = prepared();
    auto inc1 = join(*a, "n1");
    KEEL_REQUIRE_EQUAL(optional_text(a->claim(2, 0, "n1", inc1)), "1");
    auto table = std::make_shared<shard_table>("n1", shard_count);
    table->hold(2, 1);
    auto db = fenced_store(table);
    auto parent = thread_in(2, "p");
    db->stage_session(make_session(parent));
    KEEL_REQUIRE_EQUAL(render(db->flush()), "none");
    // A child named outside the parent's tree lives in another shard: the
    // spawn is fenced on the parent's shard alone.
    auto child = thread_in(5, "c");
    KEEL_REQUIRE_EQUAL(outcome(db->stage_spawn(make_spawn(parent, child))),
                       "none");
    KEEL_REQUIRE_EQUAL(render(db->flush()), "none");
    CAF_CHECK_EQUAL(audit(url).violations,
                    "epoch_audit sessions/" + child + ": row written by n1 in "
                      + "a transaction not fenced on its shard 5\n");
  });
}

CAF_TEST(a layout 1 database is upgraded on open and audits clean) {
  steps([&] {
    for (auto* sql : layout_1_steps)
      KEEL_REQUIRE_EQUAL(outcome(admin->exec(sql)), "none");
    for (auto& family : column_families)
      KEEL_REQUIRE_EQUAL(outcome(admin->exec("CREATE TABLE keel." + family
                                             + " (key bytea PRIMARY KEY, value "
                                               "bytea NOT NULL)")),
                         "none");
    auto a = prepared();
    // The history's clock as layout 1 had it.
    KEEL_REQUIRE_EQUAL(
      outcome(admin->exec("ALTER TABLE keel.shard_history ALTER "
                          "COLUMN at SET DEFAULT now()")),
      "none");
    auto old = make_session("old");
    old.state = session_state::suspended;
    KEEL_REQUIRE_EQUAL(write_pg_record(url, "sessions", "old", encode(old)),
                       "OK");
    // Read only (keelctl verify): read as it is, the audit skipped.
    auto verified = keelctl_verify(url);
    CAF_CHECK_EQUAL(verified.exit_code, 0);
    CAF_MESSAGE("keelctl verify:\n" << verified.out << verified.err);
    CAF_CHECK(contains(verified.out,
                       "epoch audit skipped: the database has layout 1: its "
                       "rows carry no writer"));
    CAF_CHECK_EQUAL(sql_value("SELECT version FROM keel.layout"), "1");
    // A writable open upgrades it; then fenced writes are stamped.
    auto inc1 = join(*a, "n1");
    KEEL_REQUIRE_EQUAL(optional_text(a->claim(2, 0, "n1", inc1)), "1");
    auto table = std::make_shared<shard_table>("n1", shard_count);
    table->hold(2, 1);
    auto db = fenced_store(table);
    CAF_CHECK_EQUAL(sql_value("SELECT version FROM keel.layout"), "2");
    CAF_CHECK_EQUAL(sql_value("SELECT count(*) FROM information_schema.columns "
                              "WHERE table_schema = 'keel' AND table_name <> "
                              "'commit_marks' AND column_name IN ('writer', "
                              "'writer_epoch', 'written_at')"),
                    std::to_string(3 * column_families.size()));
    CAF_CHECK_EQUAL(sql_value(
                      "SELECT pg_get_expr(d.adbin, d.adrelid) FROM "
                      "pg_attrdef d JOIN pg_attribute c ON c.attrelid = "
                      "d.adrelid AND c.attnum = d.adnum WHERE "
                      "d.adrelid = 'keel.shard_history'::regclass AND "
                      "c.attname = 'at'"),
                    "clock_timestamp()");
    auto t = thread_in(2, "new");
    write_exchange(*db, t);
    auto result = audit(url);
    CAF_CHECK_EQUAL(result.violations, "");
    CAF_CHECK_EQUAL(result.summary.rows, 6u);
    CAF_CHECK_GREATER_OR_EQUAL(result.summary.unstamped, 2u);
    CAF_CHECK_EQUAL(stored_session(*db, "old"), true);
    db.reset();
    // Opened again: nothing to upgrade.
    db = fenced_store(table);
    db.reset();
    verified = keelctl_verify(url);
    CAF_CHECK_EQUAL(verified.exit_code, 0);
    CAF_CHECK(contains(verified.out, "epoch audit: 6 rows with a writer"));
    // A newer layout than this build's still refuses to open.
    KEEL_REQUIRE_EQUAL(
      outcome(admin->exec("UPDATE keel.layout SET version = 3")), "none");
    pg_store_options opts;
    opts.url = url;
    auto newer = open_pg_store(opts);
    CAF_CHECK(contains(message_of(newer), "the schema keel has layout version "
                                          "3, newer than this build's 2"));
  });
}

CAF_TEST(verify skips the epoch audit on a database without cluster tables) {
  steps([&] {
    pg_store_options opts;
    opts.url = url;
    auto db = open_pg_store(opts);
    KEEL_REQUIRE_EQUAL(outcome(db), "none");
    write_exchange(**db, "solo");
    CAF_CHECK_EQUAL(sql_value("SELECT count(*) FROM keel.sessions WHERE writer "
                              "IS NULL AND writer_epoch IS NULL AND written_at "
                              "IS NULL"),
                    "1");
    db->reset();
    auto result = audit(url);
    CAF_CHECK_EQUAL(result.violations, "");
    CAF_CHECK_EQUAL(result.summary.skipped,
                    "the database has no cluster tables (one node: no write is "
                    "fenced)");
    auto verified = keelctl_verify(url);
    CAF_CHECK_EQUAL(verified.exit_code, 0);
    CAF_MESSAGE("keelctl verify:\n" << verified.out << verified.err);
    CAF_CHECK(contains(verified.out, "epoch audit skipped: the database has no "
                                     "cluster tables"));
    CAF_CHECK(contains(audit_json(url).value("skipped", std::string{}),
                       "no cluster tables"));
  });
}

CAF_TEST_FIXTURE_SCOPE_END()
