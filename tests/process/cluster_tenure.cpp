#define CAF_SUITE cluster_tenure

// A cluster node's conversations write only under the tenure of their
// shard they loaded in. A shard can leave a node and come back (epoch 1 to
// another node at 2, back at 3) before the node stopped the conversation
// it ran under epoch 1: that conversation's view misses what the other node
// stored meanwhile, so nothing it writes may commit, and the thread's next
// message must reach a conversation that loaded under epoch 3.
//
// The node's tree runs on CAF's test coordinator over a real PostgreSQL
// database with the write fence; the test moves the shard in the database
// and in the node's shard table as the cluster actors of two nodes would.

#include <algorithm>
#include <map>

#include "node_fixture.hpp"
#include "store_fixture.hpp"
#include "test_store.hpp"

#include "keel/pg_cluster_store.hpp"
#include "keel/pg_store.hpp"
#include "keel/shard_table.hpp"

using namespace keel;
using namespace keel::test;

namespace {

constexpr uint32_t shard_count = 8;

constexpr caf::timespan long_lease = std::chrono::seconds{60};

// A prepared cluster database with members n1 and n2, made before the
// node's tree opens it.
struct cluster_database {
  std::string url = test_pg_url_for(node_fixture::fresh_data_dir());
  std::unique_ptr<cluster_store> n1 = open_member();
  std::unique_ptr<cluster_store> n2 = open_member();
  uint64_t inc1 = join(*n1, "n1");
  uint64_t inc2 = join(*n2, "n2");

  std::unique_ptr<cluster_store> open_member() {
    pg_cluster_options opts;
    opts.url = url;
    auto opened = open_pg_cluster_store(opts);
    CAF_REQUIRE_EQUAL(outcome(opened), "none");
    CAF_REQUIRE_EQUAL(render((*opened)->prepare(shard_count)), "none");
    return std::move(*opened);
  }

  static uint64_t join(cluster_store& cs, const std::string& node) {
    auto inc = cs.join(node, node + ":4000", long_lease);
    CAF_REQUIRE_EQUAL(outcome(inc), "none");
    return *inc;
  }

  // Moves `shard` at `epoch` from `from` to `to` by handoff; the new epoch.
  uint64_t move(shard_id shard, uint64_t epoch, cluster_store& from,
                const std::string& from_node, uint64_t from_inc,
                const std::string& to) {
    CAF_REQUIRE_EQUAL(value_or(from.request_handoff(shard, epoch, to), false),
                      true);
    auto moved = from.transfer(shard, epoch, from_node, from_inc);
    CAF_REQUIRE(moved && *moved);
    return **moved;
  }
};

// "slow ..." is answered after 10 s of the test clock, the rest at once.
node_config tenure_config(const std::string& url) {
  scripted_step slow{"slow", "late: {input}", std::chrono::seconds{10}, "",
                     false};
  auto cfg
    = scripted_config(node_fixture::fresh_data_dir(),
                      {slow, scripted_step{"", "re: {input}", {}, "", false}});
  cfg.storage.backend = storage_backend::postgres;
  cfg.storage.postgres.url = url;
  return cfg;
}

struct fixture : cluster_database, node_fixture {
  fixture()
    : node_fixture(tenure_config(url),
                   std::make_shared<shard_table>("n1", shard_count)) {
    // nop
  }

  // The store of node n2, fenced by `table`.
  std::unique_ptr<store> n2_store(std::shared_ptr<shard_table> table) {
    pg_store_options opts;
    opts.url = url;
    opts.fence = std::move(table);
    auto opened = open_pg_store(opts);
    CAF_REQUIRE_EQUAL(outcome(opened), "none");
    return std::move(*opened);
  }

  // n1 holds `thread`'s shard at its first epoch; returns that epoch.
  uint64_t claim_for_n1(const std::string& thread) {
    auto claimed = n1->claim(shards->shard_of(thread), 0, "n1", inc1);
    CAF_REQUIRE(claimed && *claimed);
    shards->hold(shards->shard_of(thread), **claimed);
    return **claimed;
  }

  // The shard of `thread` leaves n1 at `epoch` (its table lets go of it at
  // once, as the cluster actor does; its conversations still run), n2
  // stores `text` under `client_id` at `seq`, acknowledged to its client,
  // and the shard comes back to n1 before n1 stopped the conversation.
  void bounce(const std::string& thread, uint64_t epoch, seq_t seq,
              const std::string& client_id, const std::string& text) {
    auto shard = shards->shard_of(thread);
    shards->release(shard);
    auto at_n2 = move(shard, epoch, *n1, "n1", inc1, "n2");
    auto n2_table = std::make_shared<shard_table>("n2", shard_count);
    n2_table->hold(shard, at_n2);
    auto n2_db = n2_store(n2_table);
    auto acked = n2_db->stage_accept(make_accept(thread, seq, client_id, text));
    CAF_REQUIRE_EQUAL(outcome(acked), "none");
    CAF_REQUIRE_EQUAL(render(n2_db->flush()), "none");
    n2_table->release(shard);
    shards->hold(shard, move(shard, at_n2, *n2, "n2", inc2, "n1"));
  }

  // Everything stored about `thread`.
  thread_dump dump(const std::string& thread) {
    pg_store_options opts;
    opts.url = url;
    opts.read_only = true;
    auto db = open_pg_store(opts);
    CAF_REQUIRE_EQUAL(outcome(db), "none");
    auto result = (*db)->dump_thread(thread);
    CAF_REQUIRE_EQUAL(outcome(result), "none");
    return std::move(*result);
  }
};

// The text of each user message in `log`, by its seq.
std::map<seq_t, std::string> user_texts(const std::vector<log_entry>& log) {
  std::map<seq_t, std::string> result;
  for (auto& entry : log)
    if (entry.kind == log_kind::user)
      result.emplace(entry.seq, entry.text);
  return result;
}

} // namespace

CAF_TEST_FIXTURE_SCOPE(cluster_tenure_tests, fixture)

CAF_TEST(a conversation from before its shard came back stores nothing) {
  const std::string thread = "tenure";
  auto epoch = claim_for_n1(thread);
  auto first = send(thread, "m1", "hello");
  CAF_REQUIRE_EQUAL(outcome(first), "none");
  CAF_CHECK_EQUAL(first->seq, 1u);
  CAF_CHECK_EQUAL(active_conversations(), 1u);
  bounce(thread, epoch, 3, "n2-msg", "via n2");
  auto again = send(thread, "m3", "again");
  CAF_REQUIRE_EQUAL(outcome(again), "none");
  CAF_CHECK_NOT_EQUAL(again->seq, 3u);
  auto stored = dump(thread);
  std::map<std::string, seq_t> ids(stored.client_ids.begin(),
                                   stored.client_ids.end());
  CAF_CHECK_EQUAL(ids["n2-msg"], 3u);
  CAF_CHECK_EQUAL(ids["m3"], again->seq);
  auto texts = user_texts(stored.log);
  CAF_CHECK_EQUAL(texts[1], "hello");
  CAF_CHECK_EQUAL(texts[3], "via n2");
  CAF_CHECK_EQUAL(texts[again->seq], "again");
  // Every message was answered, the one n2 took included.
  CAF_CHECK(stored.inbox.empty());
}

// The conversation's own writes carry its tenure: a turn that was running
// when the shard left and came back cannot store its answer (at the seq of
// the message n2 took), and the conversation that replaces it when the
// shard's recovery runs answers both messages.
CAF_TEST(a turn from before its shard came back cannot store its answer) {
  const std::string thread = "tenure-turn";
  auto epoch = claim_for_n1(thread);
  auto first = send(thread, "m1", "slow one");
  CAF_REQUIRE_EQUAL(outcome(first), "none");
  bounce(thread, epoch, 2, "n2-msg", "via n2");
  advance(std::chrono::seconds{11}); // The stale turn's answer comes.
  auto stored = dump(thread);
  CAF_REQUIRE_EQUAL(stored.log.size(), 2u);
  CAF_CHECK_EQUAL(stored.log[1].seq, 2u);
  CAF_CHECK_EQUAL(stored.log[1].text, "via n2");
  CAF_CHECK_EQUAL(stored.inbox.size(), 2u);
  // The node's cluster actor recovers the shard it gained.
  self->send(orchestrator(), atom::recover_v,
             std::vector<uint32_t>{shards->shard_of(thread)});
  consume_messages();
  for (int i = 0; i < 3; ++i)
    advance(std::chrono::seconds{11});
  stored = dump(thread);
  CAF_CHECK(stored.inbox.empty());
  std::map<seq_t, std::string> replies;
  for (auto& entry : stored.log)
    if (entry.kind != log_kind::user)
      replies.emplace(entry.reply_to, entry.text);
  CAF_CHECK_EQUAL(replies[1], "late: slow one");
  CAF_CHECK_EQUAL(replies[2], "re: via n2");
  CAF_CHECK_EQUAL(user_texts(stored.log)[2], "via n2");
}

// The shard leaves for good before the node stopped the conversation: its
// passivation cannot write the session (the next owner's recovery did), and
// it stops all the same instead of living on.
CAF_TEST(a conversation of a shard that left stops when idle) {
  const std::string thread = "tenure-idle";
  auto epoch = claim_for_n1(thread);
  auto first = send(thread, "m1", "hello");
  CAF_REQUIRE_EQUAL(outcome(first), "none");
  CAF_REQUIRE_EQUAL(active_conversations(), 1u);
  auto shard = shards->shard_of(thread);
  shards->release(shard);
  move(shard, epoch, *n1, "n1", inc1, "n2");
  advance(config.threads.idle_timeout + std::chrono::seconds{1});
  CAF_CHECK_EQUAL(active_conversations(), 0u);
}

CAF_TEST_FIXTURE_SCOPE_END()
