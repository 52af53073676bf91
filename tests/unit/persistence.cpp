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

CAF_TEST_FIXTURE_SCOPE_END()
