#define CAF_SUITE persistence

// The persistence actor on its own, on CAF's test coordinator: its replies
// against what its store holds when writes fail, in the order the mailbox
// gives them.

#include <caf/test/dsl.hpp>

#include "store_fixture.hpp"

#include "keel/persistence.hpp"
#include "keel/system_config.hpp"

using namespace keel;
using namespace keel::test;

namespace {

// The store fixture first: its folder outlives the actor system.
struct fixture : store_fixture, test_coordinator_fixture<system_config> {
  static constexpr uint32_t shard_count = 4;

  /// A cluster node's table holding every shard.
  std::shared_ptr<shard_table> shards
    = std::make_shared<shard_table>("node-a", shard_count);

  persistence_actor persistence;

  fixture() {
    close(); // The actor opens the store itself.
    for (shard_id shard = 0; shard < shard_count; ++shard)
      shards->hold(shard, 1);
    persistence_config cfg;
    cfg.open_store = [this] { return try_open(); };
    cfg.shards = shards;
    persistence = sys.spawn(keel::persistence, std::move(cfg));
    run();
  }

  ~fixture() override {
    anon_send_exit(persistence, caf::exit_reason::kill);
    run();
  }

  /// What `thread` holds on disk, read by a store of our own once the
  /// actor is gone and writes work again.
  thread_snapshot stored(const std::string& thread) {
    anon_send_exit(persistence, caf::exit_reason::kill);
    run();
    fail_writes(false);
    open();
    return load(thread);
  }

  /// Sends `req` to the actor and returns the error it answers with, or
  /// "none" once the write is synced.
  template <class Request>
  std::string answer_to(atom::accept, Request req) {
    return outcome_of<accept_result>(
      self->request(persistence, caf::infinite, atom::accept_v, req));
  }

  std::string answer_to(atom::commit, const turn_commit& commit) {
    return outcome_of<caf::ok_atom>(
      self->request(persistence, caf::infinite, atom::commit_v, commit));
  }

  /// Runs the system and names what `handle` was answered: "none" for a
  /// `Result`, else the error's code.
  template <class Result, class Handle>
  std::string outcome_of(Handle handle) {
    run();
    std::string result = "no answer";
    handle.receive([&](Result&) { result = "none"; },
                   [&](caf::error& err) { result = error_code_name(err); });
    return result;
  }
};

} // namespace

CAF_TEST_FIXTURE_SCOPE(persistence_tests, fixture)

// A recovery of gained shards suspends their ACTIVE sessions in one synced
// batch; it must not drop writes that others staged and still wait on, and
// its failure is the store's like any write's.
CAF_TEST(a failed recovery of gained shards answers the writes staged before) {
  auto accept = self->request(persistence, caf::infinite, atom::accept_v,
                              make_accept("t1", 1, "c1", "hello", true));
  auto recover = self->request(persistence, caf::infinite, atom::recover_v,
                               std::vector<uint32_t>{0, 1, 2, 3});
  fail_writes(true);
  run();
  bool accepted = false;
  accept.receive([&](accept_result&) { accepted = true; }, [](caf::error&) {});
  bool recovered = false;
  recover.receive([&](recovery_plan&) { recovered = true; },
                  [](caf::error&) {});
  CAF_CHECK(!accepted);
  CAF_CHECK(!recovered);
  // The failure counts as the store's: the node is not ready.
  auto writable = self->request(persistence, caf::infinite, atom::writable_v);
  run();
  writable.receive([](bool ok) { CAF_CHECK(!ok); },
                   [](caf::error& err) { CAF_FAIL(render(err)); });
  // The invariant: an accepted message is on disk.
  CAF_CHECK_EQUAL(stored("t1").inbox.size(), accepted ? 1u : 0u);
}

// The store fences nothing on RocksDB (nor on PostgreSQL without the
// cluster's fence): persistence's own check is all that keeps a
// conversation that loaded its thread under an older tenure of the shard
// from writing over what the shard's owner meanwhile wrote.
CAF_TEST(a write of a stale tenure is refused and nothing of it is stored) {
  auto first = make_accept("t1", 1, "c1", "hello", true);
  first.tenure = 1;
  CAF_CHECK_EQUAL(answer_to(atom::accept_v, first), "none");
  // The shard left and came back: the node holds it at epoch 2 now.
  shards->hold(shards->shard_of("t1"), 2);
  auto stale = make_accept("t1", 2, "c2", "stale");
  stale.tenure = 1;
  CAF_CHECK_EQUAL(answer_to(atom::accept_v, stale), "not_owner");
  auto commit = make_commit("t1", 1, "c1", 2, "stale answer");
  commit.tenure = 1;
  CAF_CHECK_EQUAL(answer_to(atom::commit_v, commit), "not_owner");
  // A writer of the current tenure still writes.
  auto current = make_accept("t1", 2, "c3", "current");
  current.tenure = 2;
  CAF_CHECK_EQUAL(answer_to(atom::accept_v, current), "none");
  auto snapshot = stored("t1");
  CAF_REQUIRE_EQUAL(snapshot.inbox.size(), 2u);
  CAF_CHECK_EQUAL(snapshot.inbox[0].client_id, "c1");
  CAF_CHECK_EQUAL(snapshot.inbox[1].client_id, "c3");
  for (auto& entry : snapshot.context)
    CAF_CHECK_NOT_EQUAL(entry.content, "stale answer");
}

// Killed with a request still in its mailbox, persistence never answers
// it: CAF does, with `request_receiver_down`. The client must hear a code
// it may resend on, not `internal`.
CAF_TEST(a write in the mailbox of a killed persistence is unavailable) {
  self->send_exit(persistence, caf::make_error(ec::killed, "by the test"));
  auto pending = self->request(persistence, caf::infinite, atom::accept_v,
                               make_accept("t1", 1, "c1", "hello", true));
  CAF_CHECK_EQUAL(outcome_of<accept_result>(pending), "unavailable");
  CAF_CHECK(stored("t1").inbox.empty());
}

CAF_TEST_FIXTURE_SCOPE_END()
