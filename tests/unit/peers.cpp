#define CAF_SUITE peers

// The peers actor's routing of requests for threads this node does not
// serve, on CAF's test coordinator: retries while nobody serves the thread,
// resends of refusals a resend may fix, one request per thread at a time
// and in order, and the route timeout. A stand-in orchestrator answers
// each request with the next scripted refusal, or accepts it; the test
// moves the shard table as the cluster actor would.

#include <caf/test/dsl.hpp>

#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "keel/actors.hpp"
#include "keel/error.hpp"
#include "keel/peers.hpp"
#include "keel/shard_table.hpp"
#include "keel/system_config.hpp"

using namespace keel;
using namespace std::chrono_literals;

namespace {

struct orchestrator_double_state {
  static inline const char* name = "keel.test.orchestrator";
  /// Client ids of the routes received, in order.
  std::vector<std::string> got;
  /// Answers for the next routes, before they are accepted.
  std::deque<caf::error> refusals;
  seq_t next_seq = 1;
};

caf::behavior
orchestrator_double(caf::stateful_actor<orchestrator_double_state>* self) {
  return {
    [self](atom::route, const std::string&, const std::string& id,
           const std::string&,
           const std::string&) -> caf::result<accept_result> {
      auto& st = self->state;
      st.got.push_back(id);
      if (!st.refusals.empty()) {
        auto err = std::move(st.refusals.front());
        st.refusals.pop_front();
        return err;
      }
      return accept_result{st.next_seq++, false};
    },
  };
}

// Asks `peers` to forward a client message and writes the answer ("ack
// SEQ" or the error's text) to `answer`.
caf::behavior asker(caf::event_based_actor* self, caf::actor peers,
                    std::string thread, std::string id,
                    std::shared_ptr<std::string> answer) {
  self
    ->request(peers, caf::infinite, atom::forward_v, thread,
              caf::make_message(atom::route_v, thread, id, "text",
                                std::string{}))
    .then(
      [self, answer](const accept_result& res) {
        *answer = "ack " + std::to_string(res.seq);
        self->quit();
      },
      [self, answer](const caf::error& err) {
        *answer = error_message(err);
        self->quit();
      });
  return {[](caf::ok_atom) {}};
}

struct fixture : test_coordinator_fixture<system_config> {
  std::shared_ptr<shard_table> table = std::make_shared<shard_table>("n1", 4);
  caf::actor orch = sys.spawn(orchestrator_double);
  caf::actor peers_actor;

  fixture() {
    components_of(sys).put(names::orchestrator,
                           caf::actor_cast<caf::strong_actor_ptr>(orch));
    peers_config cfg;
    cfg.shards = table;
    cfg.token = "a-cluster-token-for-tests";
    cfg.route_timeout = 1s;
    cfg.attempt_timeout = 300ms;
    cfg.retry_pause = 100ms;
    peers_actor = sys.spawn(peers, cfg);
    consume_messages();
  }

  ~fixture() override {
    components_of(sys).erase(names::orchestrator);
    anon_send_exit(peers_actor, caf::exit_reason::user_shutdown);
    anon_send_exit(orch, caf::exit_reason::user_shutdown);
    consume_messages();
  }

  orchestrator_double_state& orchestrator() {
    return deref<caf::stateful_actor<orchestrator_double_state>>(orch).state;
  }

  // Forwards a client message for `thread`; the answer lands in `answer`.
  void forward(const std::string& thread, const std::string& id,
               std::shared_ptr<std::string> answer) {
    sys.spawn(asker, peers_actor, thread, id, std::move(answer));
  }

  // Moves the test clock by `d` and runs what became due.
  void advance(caf::timespan d) {
    advance_time(d);
    consume_messages();
  }

  void settle() {
    consume_messages();
  }
};

} // namespace

CAF_TEST_FIXTURE_SCOPE(peers_tests, fixture)

CAF_TEST(a request waits while nobody serves its thread) {
  auto answer = std::make_shared<std::string>();
  forward("t", "m1", answer);
  settle();
  advance(100ms);
  advance(100ms);
  CAF_CHECK(orchestrator().got.empty());
  CAF_CHECK_EQUAL(*answer, "");
  table->hold(table->shard_of("t"), 1);
  advance(100ms);
  CAF_CHECK_EQUAL(orchestrator().got, std::vector<std::string>{"m1"});
  CAF_CHECK_EQUAL(*answer, "ack 1");
}

CAF_TEST(refusals a resend may fix are resent and others are answered) {
  table->hold(table->shard_of("t"), 1);
  orchestrator().refusals
    = {caf::make_error(ec::not_owner, "moved"),
       caf::make_error(ec::unavailable, "restarting"),
       caf::make_error(ec::thread_closed, "thread 't' was cancelled")};
  auto answer = std::make_shared<std::string>();
  forward("t", "m1", answer);
  settle();
  CAF_CHECK_EQUAL(orchestrator().got.size(), 1u);
  advance(100ms);
  advance(100ms);
  CAF_CHECK_EQUAL(orchestrator().got,
                  (std::vector<std::string>{"m1", "m1", "m1"}));
  CAF_CHECK_EQUAL(*answer, "thread 't' was cancelled");
}

CAF_TEST(requests of one thread go one at a time and in order) {
  table->hold(table->shard_of("t"), 1);
  orchestrator().refusals = {caf::make_error(ec::unavailable, "restarting")};
  auto first = std::make_shared<std::string>();
  auto second = std::make_shared<std::string>();
  forward("t", "m1", first);
  forward("t", "m2", second);
  settle();
  // m2 waits behind m1, which waits for its resend.
  CAF_CHECK_EQUAL(orchestrator().got, std::vector<std::string>{"m1"});
  advance(100ms);
  CAF_CHECK_EQUAL(orchestrator().got,
                  (std::vector<std::string>{"m1", "m1", "m2"}));
  CAF_CHECK_EQUAL(*first, "ack 1");
  CAF_CHECK_EQUAL(*second, "ack 2");
}

CAF_TEST(a request nobody serves within route_timeout is unavailable) {
  auto answer = std::make_shared<std::string>();
  forward("t", "m1", answer);
  settle();
  for (int i = 0; i < 9; ++i)
    advance(100ms);
  CAF_CHECK_EQUAL(*answer, "");
  advance(100ms);
  advance(100ms);
  CAF_CHECK_EQUAL(*answer, "no node served thread t within "
                           "cluster.route_timeout; resend with the same id");
  CAF_CHECK(orchestrator().got.empty());
}

CAF_TEST(a peers request needs the token and gets the relayed answer) {
  table->hold(table->shard_of("t"), 1);
  auto route = [&](const std::string& token) {
    auto inner = caf::make_message(atom::route_v, std::string{"t"},
                                   std::string{"m1"}, std::string{"text"},
                                   std::string{});
    auto rh = self->request(peers_actor, caf::infinite, atom::route_v, token,
                            std::string{"t"}, inner);
    consume_messages();
    std::string answer;
    rh.receive(
      [&](const accept_result& res) {
        answer = "ack " + std::to_string(res.seq);
        if (caf::actor_cast<caf::actor>(self->current_sender()) != peers_actor)
          answer += " from another actor than the peers actor";
      },
      [&](const caf::error& err) { answer = error_message(err); });
    return answer;
  };
  CAF_CHECK_EQUAL(route("a-cluster-token-for-test"),
                  "a peer sent a message with a wrong cluster token");
  CAF_CHECK(orchestrator().got.empty());
  // The answer comes from the peers actor, not the orchestrator: no other
  // actor of a node ever sends to another node.
  CAF_CHECK_EQUAL(route("a-cluster-token-for-tests"), "ack 1");
  CAF_CHECK_EQUAL(orchestrator().got, std::vector<std::string>{"m1"});
}

CAF_TEST_FIXTURE_SCOPE_END()
