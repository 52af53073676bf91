#define CAF_SUITE pg_cluster

// The cluster store on a real PostgreSQL server: membership with leases by
// the database's clock, liveness locks that free when a session ends,
// shards moved only by compare-and-set with their epoch bumped and
// recorded, and the store's write fence refusing every write of a shard
// this node does not own at the epoch it holds it at. Each test has a
// database of its own on the test process's server.

#include <caf/test/unit_test.hpp>

#include <chrono>
#include <thread>

#include "store_fixture.hpp"
#include "test_store.hpp"

#include "keel/pg_cluster_store.hpp"
#include "keel/pg_connection.hpp"
#include "keel/pg_store.hpp"
#include "keel/shard_table.hpp"
#include "keel/sharding.hpp"

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

struct fixture {
  std::string url = fresh_database();
  pg::connection admin = connect_admin();

  static std::string fresh_database() {
    static int databases = 0;
    return test_pg_url_for("pg_cluster-" + std::to_string(++databases));
  }

  pg::connection connect_admin() {
    auto conn = pg::connection::open(url);
    CAF_REQUIRE_EQUAL(outcome(conn), "none");
    return std::move(*conn);
  }

  std::unique_ptr<cluster_store> open_cluster() {
    pg_cluster_options opts;
    opts.url = url;
    auto opened = open_pg_cluster_store(opts);
    CAF_REQUIRE_EQUAL(outcome(opened), "none");
    return std::move(*opened);
  }

  // A cluster store of a prepared cluster of `shard_count` shards.
  std::unique_ptr<cluster_store> prepared() {
    auto result = open_cluster();
    CAF_REQUIRE_EQUAL(render(result->prepare(shard_count)), "none");
    return result;
  }

  uint64_t join(cluster_store& cs, const std::string& node,
                caf::timespan ttl = long_lease) {
    auto inc = cs.join(node, node + ":4000", ttl);
    CAF_REQUIRE_EQUAL(outcome(inc), "none");
    return *inc;
  }

  // The first value of `sql`'s first row (by the admin connection), or
  // "<no row>", or the error.
  std::string sql_value(const std::string& sql) {
    auto res = admin.exec(sql);
    if (!res)
      return render(res.error());
    return res->rows() == 0 ? "<no row>" : std::string{res->value(0, 0)};
  }

  cluster_view read_view(cluster_store& cs) {
    auto view = cs.view();
    CAF_REQUIRE_EQUAL(outcome(view), "none");
    return std::move(*view);
  }

  shard_row shard_in(cluster_store& cs, shard_id shard) {
    auto view = read_view(cs);
    CAF_REQUIRE_EQUAL(view.shards.size(), shard_count);
    return view.shards[shard];
  }

  member member_in(cluster_store& cs, const std::string& node) {
    for (auto& x : read_view(cs).members)
      if (x.node_id == node)
        return x;
    CAF_FAIL("no member " << node);
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
    auto res = admin.exec("SELECT epoch, owner, owner_incarnation, reason "
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
    CAF_REQUIRE_EQUAL(outcome(opened), "none");
    return std::move(*opened);
  }

  // Moves `shard` from `from` (`from_inc`, at `epoch`) to `to`, as a
  // rebalance does; returns the new epoch.
  uint64_t hand_over(cluster_store& cs, shard_id shard, uint64_t epoch,
                     const std::string& from, uint64_t from_inc,
                     const std::string& to) {
    CAF_REQUIRE_EQUAL(value_or(cs.request_handoff(shard, epoch, to), false),
                      true);
    auto moved = cs.transfer(shard, epoch, from, from_inc);
    CAF_REQUIRE_EQUAL(optional_text(moved), std::to_string(epoch + 1));
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
  // The store's engine made the schema keel first; the cluster joins it.
  pg_store_options opts;
  opts.url = url;
  auto db = open_pg_store(opts);
  CAF_REQUIRE_EQUAL(outcome(db), "none");
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
}

CAF_TEST(errors name what failed and never the URL) {
  pg_cluster_options opts;
  opts.url = "postgresql://keel:secret@127.0.0.1:1/nosuchdb?connect_timeout=1";
  opts.connect_timeout = 1s;
  auto opened = open_pg_cluster_store(opts);
  CAF_REQUIRE(!opened);
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
}

// -- membership ---------------------------------------------------------------

CAF_TEST(each join is a new incarnation and the old one renews to dead) {
  auto cs = prepared();
  CAF_CHECK_EQUAL(join(*cs, "n1"), 1u);
  CAF_CHECK_EQUAL(value_or(cs->renew("n1", 1, long_lease), member_state::dead),
                  member_state::up);
  CAF_CHECK_EQUAL(join(*cs, "n1"), 2u);
  CAF_CHECK_EQUAL(value_or(cs->renew("n1", 1, long_lease), member_state::up),
                  member_state::dead);
  CAF_CHECK_EQUAL(value_or(cs->renew("n1", 2, long_lease), member_state::dead),
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
}

CAF_TEST(a second process with the same node id is refused) {
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
}

CAF_TEST(set_state drains and leave needs no shards) {
  auto cs = prepared();
  auto inc = join(*cs, "n1");
  CAF_CHECK_EQUAL(value_or(cs->set_state("n1", member_state::draining), false),
                  true);
  CAF_CHECK_EQUAL(value_or(cs->renew("n1", inc, long_lease), member_state::up),
                  member_state::draining);
  CAF_CHECK_EQUAL(error_of(cs->set_state("n1", member_state::dead)),
                  ec::config_invalid);
  CAF_CHECK_EQUAL(value_or(cs->set_state("n1", member_state::up), false), true);
  CAF_CHECK_EQUAL(optional_text(cs->claim(1, 0, "n1", inc)), "1");
  CAF_CHECK_EQUAL(value_or(cs->leave("n1", inc), true), false);
  CAF_CHECK_EQUAL(member_in(*cs, "n1").state, member_state::up);
  auto other = open_cluster();
  auto inc2 = join(*other, "n2");
  hand_over(*cs, 1, 1, "n1", inc, "n2");
  CAF_CHECK_EQUAL(value_or(cs->leave("n1", inc), false), true);
  CAF_CHECK_EQUAL(member_in(*cs, "n1").state, member_state::left);
  CAF_CHECK_EQUAL(value_or(cs->renew("n1", inc, long_lease), member_state::up),
                  member_state::dead);
  CAF_CHECK_EQUAL(value_or(cs->set_state("n1", member_state::up), true), false);
  CAF_CHECK_EQUAL(value_or(cs->leave("n1", inc), true), false);
  CAF_CHECK_EQUAL(shard_text(*cs, 1), "n2/" + std::to_string(inc2) + "@2>");
}

CAF_TEST(a lease runs out by the database clock and is declared dead once) {
  auto cs = prepared();
  auto inc = join(*cs, "n1", std::chrono::milliseconds{300});
  auto observer = open_cluster();
  join(*observer, "n2");
  CAF_CHECK(!member_in(*observer, "n1").lease_expired);
  CAF_CHECK(
    eventually([&] { return member_in(*observer, "n1").lease_expired; }, 10s));
  auto row = member_in(*observer, "n1");
  CAF_CHECK_GREATER_OR_EQUAL(row.since_renewal, std::chrono::milliseconds{300});
  CAF_CHECK_EQUAL(row.state, member_state::up);
  CAF_CHECK(!member_in(*observer, "n2").lease_expired);
  CAF_CHECK_EQUAL(value_or(observer->declare_dead("n1", inc), false), true);
  CAF_CHECK_EQUAL(value_or(observer->declare_dead("n1", inc), true), false);
  CAF_CHECK_EQUAL(member_in(*observer, "n1").state, member_state::dead);
  // Too late for the node itself: it must exit.
  CAF_CHECK_EQUAL(value_or(cs->renew("n1", inc, long_lease), member_state::up),
                  member_state::dead);
  CAF_CHECK_EQUAL(member_in(*observer, "n1").state, member_state::dead);
}

CAF_TEST(the store is recent while it started less than a lease ago) {
  auto cs = prepared();
  auto inc = join(*cs, "n1", std::chrono::hours{24 * 365});
  CAF_CHECK(read_view(*cs).store_recent);
  CAF_CHECK_EQUAL(value_or(cs->renew("n1", inc, std::chrono::milliseconds{300}),
                           member_state::dead),
                  member_state::up);
  CAF_CHECK(eventually([&] { return !read_view(*cs).store_recent; }, 10s));
}

// -- liveness locks -----------------------------------------------------------

CAF_TEST(vanished reports a node whose session ended and never a live one) {
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
}

CAF_TEST(a reconnect takes the liveness lock again) {
  auto cs = prepared();
  auto inc = join(*cs, "n1");
  // The server ends the node's session (as a restart or a network cut
  // would).
  CAF_CHECK_EQUAL(sql_value("SELECT count(pg_terminate_backend(pid)) FROM "
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
}

// -- shards -------------------------------------------------------------------

CAF_TEST(claim takes an orphan bumps its epoch and records it) {
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
}

CAF_TEST(a claim of an older incarnation is an orphan for the new one) {
  auto a = prepared();
  auto inc1 = join(*a, "n1");
  CAF_CHECK_EQUAL(optional_text(a->claim(2, 0, "n1", inc1)), "1");
  // The node restarts: its old incarnation's shards are orphans.
  auto inc2 = join(*a, "n1");
  CAF_CHECK_EQUAL(optional_text(a->claim(2, 1, "n1", inc2)), "2");
  CAF_CHECK_EQUAL(shard_text(*a, 2), "n1/2@2>");
}

CAF_TEST(request_handoff and transfer move a shard to the node that asked) {
  auto a = prepared();
  auto b = open_cluster();
  auto inc1 = join(*a, "n1");
  auto inc2 = join(*b, "n2");
  CAF_REQUIRE_EQUAL(optional_text(a->claim(5, 0, "n1", inc1)), "1");
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
}

// -- the write fence ----------------------------------------------------------

CAF_TEST(the fence lets the owner write and refuses it once the shard moved) {
  auto a = prepared();
  auto b = open_cluster();
  auto inc1 = join(*a, "n1");
  join(*b, "n2");
  auto table = std::make_shared<shard_table>("n1", shard_count);
  auto db = fenced_store(table);
  CAF_REQUIRE_EQUAL(optional_text(a->claim(2, 0, "n1", inc1)), "1");
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
  CAF_REQUIRE_EQUAL(outcome(rec), "none");
  CAF_CHECK_EQUAL(rec->state, session_state::active);
  // Writes of no thread are not fenced.
  db->stage_meta("fence-test", "written");
  CAF_CHECK_EQUAL(render(db->flush()), "none");
  CAF_CHECK_EQUAL(value_or(db->meta("fence-test"), std::string{}), "written");
}

CAF_TEST(a shard the table does not hold fails before reaching the server) {
  auto a = prepared();
  auto inc1 = join(*a, "n1");
  CAF_REQUIRE_EQUAL(optional_text(a->claim(6, 0, "n1", inc1)), "1");
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
}

// A group spans connections (shard % 2): each share is its own
// transaction. A share fenced off commits nothing (the writes of every
// shard in it go with it) while another share of the group commits, and
// the flush reports `not_owner`: the group failed as a whole for its
// callers, though part of it is stored.
CAF_TEST(a group mixing a fenced off and a fine share commits the fine one) {
  auto a = prepared();
  auto b = open_cluster();
  auto inc1 = join(*a, "n1");
  join(*b, "n2");
  auto table = std::make_shared<shard_table>("n1", shard_count);
  auto db = fenced_store(table);
  for (shard_id shard : {2u, 3u, 4u}) {
    CAF_REQUIRE_EQUAL(optional_text(a->claim(shard, 0, "n1", inc1)), "1");
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
}

CAF_TEST_FIXTURE_SCOPE_END()
