#define CAF_SUITE cluster

// Real keel-node processes forming a cluster on one PostgreSQL server the
// test starts for itself: any gateway serves any thread, a killed node's
// threads are answered by the others, a drained node hands its shards
// away while its gateway keeps serving, and a paused node is fenced and
// exits once it finds itself declared dead.

#include <caf/test/unit_test.hpp>

#include <csignal>
#include <filesystem>
#include <map>
#include <optional>
#include <set>

#include "node_client.hpp"
#include "temp_dir.hpp"
#include "text_checks.hpp"

#include "keel/protocol.hpp"
#include "keel/sharding.hpp"
#include "keel/tools/certificates.hpp"
#include "keel/tools/fault_proxy.hpp"
#include "keel/tools/pg_server.hpp"
#include "keel/tools/process.hpp"
#include "keel/tools/ws_client.hpp"

using namespace keel;
using namespace keel::test;
using namespace std::chrono_literals;
using nlohmann::json;

namespace {

constexpr uint32_t test_shards = 16;

// A cluster node answering "answer to {input}" after `delay`, with short
// heartbeats and leases so that failures are seen within a second or two.
std::string cluster_yaml(const std::string& name, const std::string& dir,
                         const std::string& url, uint16_t peer_port,
                         const std::string& delay,
                         const std::string& route_timeout,
                         const std::string& cluster_extra) {
  return "node:\n  name: " + name + "\n  data_dir: " + dir
         + "\ngateway:\n  port: 0\n  rate_limit:\n    per_second: 0\n"
           "logging:\n  level: info\n"
           "storage:\n  backend: postgres\n  postgres:\n    url: \""
         + url
         + "\"\n    statement_timeout: 5s\n"
           "cluster:\n  enabled: true\n  listen: 127.0.0.1:"
         + std::to_string(peer_port)
         + "\n  shards: " + std::to_string(test_shards)
         + "\n  heartbeat: 200ms\n  lease_ttl: 2s\n  route_timeout: "
         + route_timeout
         + "\n  handoff_timeout: 1s\n  rebalance_batch: 4\n"
           "  token: \"a-cluster-token-for-tests\"\n"
         + (cluster_extra.find("tls:") == std::string::npos
              ? "  insecure_plaintext: true\n"
              : "")
         + cluster_extra
         + "providers:\n  - name: script\n    kind: scripted\n"
           "    script:\n      - reply: \"answer to {input}\"\n"
           "        delay: "
         + delay + "\npools:\n  - name: default\n    chain: [script]\n";
}

struct fixture {
  temp_dir dir{"keel-cluster"};
  // A folder of its own: as root the server runs as `postgres`.
  temp_dir pg_dir{"keel-pg"};
  pg_server pg{pg_dir.str()};
  std::map<std::string, std::unique_ptr<node_process>> nodes;
  /// More `cluster:` keys for every node started (indented lines).
  std::string cluster_extra;
  /// `cluster.route_timeout` of every node started (one attempt waits a
  /// third of it).
  std::string route_timeout = "8s";

  // Starts node `name`; `url` (default: the server's socket) is how it
  // reaches the database; `peer_port` (default: a free one) is its
  // `cluster.listen` port.
  node_process& start(const std::string& name,
                      const std::string& delay = "10ms",
                      const std::string& url = {}, uint16_t peer_port = 0) {
    auto home = dir.str() + "/" + name;
    std::filesystem::create_directories(home);
    auto yaml = cluster_yaml(name, home + "/data", url.empty() ? pg.url() : url,
                             peer_port != 0 ? peer_port : free_port(), delay,
                             route_timeout, cluster_extra);
    auto& slot = nodes[name];
    slot = std::make_unique<node_process>(home, yaml);
    return *slot;
  }

  node_process& node(const std::string& name) {
    return *nodes.at(name);
  }

  // The cluster as `name` sees it; null json if it does not answer.
  json view(const std::string& name) {
    auto res = api_call(node(name).address(), "GET", "/api/v1/cluster", {}, 2s);
    return res ? *res : json{};
  }

  // Waits until `name` sees every shard owned by one of `members`, each
  // holding some, and nothing in motion.
  bool settled(const std::string& name, std::set<std::string> members,
               std::chrono::milliseconds timeout = 20s) {
    return poll_until(
      [&] {
        auto v = view(name);
        if (!v.is_object() || v["orphans"] != 0 || v["handoffs"] != 0)
          return false;
        std::map<std::string, int> held;
        for (auto& owner : v["owners"])
          ++held[owner.get<std::string>()];
        if (held.size() != members.size())
          return false;
        for (auto& m : members)
          if (held[m] == 0)
            return false;
        return true;
      },
      timeout, 100ms);
  }

  // The owner of `thread` as `name` sees it.
  std::string owner_of(const std::string& name, const std::string& thread) {
    auto v = view(name);
    return v["owners"][shard_of(thread, test_shards)].get<std::string>();
  }

  // A thread owned by `owner` (as `name` sees it), named PREFIX-N.
  std::string thread_on(const std::string& name, const std::string& owner,
                        const std::string& prefix) {
    auto owners = view(name)["owners"];
    for (int i = 0;; ++i) {
      auto thread = prefix + "-" + std::to_string(i);
      if (owners[shard_of(thread, test_shards)] == owner)
        return thread;
    }
  }

  // The oracle on the cluster's database, once every node has stopped
  // (cleanly: a running node's sessions are ACTIVE).
  std::string violations() {
    for (auto& entry : nodes)
      if (entry.second->running())
        entry.second->stop();
    auto res
      = run_command({tool_binary("keelctl"), "verify", "--pg", pg.url()});
    return res.exit_code == 0 ? std::string{} : res.out + res.err;
  }
};

// Sends and waits for the ack (or error) of `id`.
json send(ws_client& ws, const std::string& thread, const std::string& id,
          const std::string& text, std::chrono::milliseconds timeout = 15s) {
  CAF_REQUIRE(!ws.send_text(protocol::send_frame(thread, id, text)));
  auto answer = receive_until(
    ws,
    [&](auto& j) {
      return (j["type"] == "ack" || j["type"] == "error") && j["id"] == id;
    },
    timeout);
  CAF_REQUIRE(answer);
  return *answer;
}

// Waits for the reply event of `thread` whose text is `text`.
bool reply_seen(ws_client& ws, const std::string& thread,
                const std::string& text, std::chrono::milliseconds timeout) {
  return receive_until(
           ws,
           [&](auto& j) {
             return j["type"] == "reply" && j["thread"] == thread
                    && j["text"] == text;
           },
           timeout)
    .has_value();
}

// The ack of `id` and the reply `text` of `thread`, and when the ack came.
struct ack_and_reply {
  std::optional<json> ack;
  std::chrono::steady_clock::time_point acked_at;
  bool replied = false;
};

// Waits for both, in either order: a message its dying owner had stored
// before it stopped is answered by the new owner's recovery, which may
// come before the ack of the message's resend (`duplicate: true`).
ack_and_reply await_ack_and_reply(ws_client& ws, const std::string& thread,
                                  const std::string& id,
                                  const std::string& text,
                                  std::chrono::milliseconds timeout) {
  ack_and_reply result;
  receive_until(
    ws,
    [&](auto& j) {
      if ((j["type"] == "ack" || j["type"] == "error") && j["id"] == id) {
        result.ack = j;
        result.acked_at = std::chrono::steady_clock::now();
      } else if (j["type"] == "reply" && j["thread"] == thread
                 && j["text"] == text) {
        result.replied = true;
      }
      return result.ack && result.replied;
    },
    timeout);
  return result;
}

} // namespace

CAF_TEST_FIXTURE_SCOPE(cluster_tests, fixture)

CAF_TEST(two nodes share the shards and either gateway serves every thread) {
  start("n1");
  start("n2");
  CAF_REQUIRE(settled("n1", {"n1", "n2"}));
  auto local = thread_on("n1", "n1", "local");
  auto remote = thread_on("n1", "n2", "remote");
  auto ws = connect_client(node("n1").address());
  // A client of n2 follows the thread that n1 serves.
  auto watcher = connect_client(node("n2").address());
  CAF_REQUIRE(!watcher->send_text(protocol::subscribe_frame(local, "s1")));
  CAF_REQUIRE(
    receive_until(*watcher, [](auto& j) { return j["type"] == "subscribed"; }));
  for (auto& thread : {local, remote}) {
    auto ack = send(*ws, thread, "m1", "hello " + thread);
    CAF_CHECK_EQUAL(ack["type"], "ack");
    CAF_CHECK_EQUAL(ack["seq"], 1);
    CAF_CHECK(reply_seen(*ws, thread, "answer to hello " + thread, 10s));
  }
  CAF_CHECK(reply_seen(*watcher, local, "answer to hello " + local, 10s));
  // A resend after a lost ack is a duplicate, wherever it lands.
  auto again = send(*connect_client(node("n2").address()), remote, "m1",
                    "hello " + remote);
  CAF_CHECK_EQUAL(again["type"], "ack");
  CAF_CHECK_EQUAL(again["duplicate"], true);
  // Either node reads any thread's history from the shared store.
  auto history = read_history(*watcher, remote);
  CAF_REQUIRE(history);
  CAF_CHECK_EQUAL(history->size(), 2u);
  CAF_CHECK_EQUAL(view("n2")["members"].size(), 2u);
  // A child of another root would live in another shard: refused.
  CAF_REQUIRE(!ws->send_text(protocol::spawn_frame(local, "elsewhere", "sp1")));
  auto refused = receive_until(*ws, [](auto& j) { return j["id"] == "sp1"; });
  CAF_REQUIRE(refused);
  CAF_CHECK_EQUAL((*refused)["code"], "conflict");
  // The operator's view: both members up, every shard held by one of them.
  auto listed = run_command({tool_binary("keelctl"), "--node",
                             to_string(node("n2").address()), "cluster"});
  CAF_CHECK_EQUAL(listed.exit_code, 0);
  KEEL_CHECK_CONTAINS(listed.out, "0 shards without an owner");
  KEEL_CHECK_CONTAINS(listed.out, "n1");
  CAF_CHECK_EQUAL(violations(), "");
}

CAF_TEST(a killed node has its threads answered by the other within seconds) {
  start("n1");
  start("n2");
  CAF_REQUIRE(settled("n1", {"n1", "n2"}));
  auto thread = thread_on("n1", "n2", "orphan");
  auto ws = connect_client(node("n1").address());
  auto first = send(*ws, thread, "m1", "before");
  CAF_CHECK_EQUAL(first["type"], "ack");
  CAF_CHECK(reply_seen(*ws, thread, "answer to before", 10s));
  node("n2").kill9();
  auto killed = std::chrono::steady_clock::now();
  auto ack = send(*ws, thread, "m2", "after", 15s);
  CAF_CHECK_EQUAL(ack["type"], "ack");
  CAF_CHECK_EQUAL(ack["seq"], 3);
  CAF_CHECK(reply_seen(*ws, thread, "answer to after", 10s));
  auto took = std::chrono::steady_clock::now() - killed;
  CAF_MESSAGE(
    "answered again "
    << std::chrono::duration_cast<std::chrono::milliseconds>(took).count()
    << " ms after the kill");
  CAF_CHECK(took < 5s);
  CAF_CHECK(settled("n1", {"n1"}));
  CAF_CHECK_EQUAL(owner_of("n1", thread), "n1");
  // The takeover's recovery is the cluster's last one, on any node.
  auto report = api_call(node("n1").address(), "GET", "/api/v1/recovery");
  CAF_REQUIRE(report);
  CAF_CHECK_GREATER_OR_EQUAL((*report)["sessions"].get<int>(), 1);
  CAF_CHECK_EQUAL(violations(), "");
}

// The owner's peer port is behind a proxy that, once n2 is linked to n1,
// holds every chunk 300 ms, so registering a subscription of n2's client
// there takes a while. `subscribed` comes only once the owner registered
// it: the reply to a message sent right after reaches that client.
CAF_TEST(a subscription to another nodes thread is confirmed once registered) {
  auto n1_peer_port = free_port();
  fault_proxy slow_link{"127.0.0.1", n1_peer_port};
  cluster_extra = "  advertise: 127.0.0.1:" + std::to_string(slow_link.port())
                  + "\n";
  start("n1", "10ms", {}, n1_peer_port);
  cluster_extra.clear();
  start("n2");
  CAF_REQUIRE(settled("n1", {"n1", "n2"}));
  auto watcher = connect_client(node("n2").address());
  // A first message links n2 to n1 (a handshake needs a quick link).
  auto linked = send(*watcher, thread_on("n1", "n1", "first"), "m0", "link");
  CAF_REQUIRE_EQUAL(linked["type"], "ack");
  slow_link.set_mode(link_mode::delay, 300ms);
  auto thread = thread_on("n1", "n1", "watched");
  CAF_REQUIRE(!watcher->send_text(protocol::subscribe_frame(thread, "s1")));
  CAF_REQUIRE(receive_until(
    *watcher, [](auto& j) { return j["type"] == "subscribed"; }, 15s));
  auto ws = connect_client(node("n1").address());
  auto ack = send(*ws, thread, "m1", "watched");
  CAF_CHECK_EQUAL(ack["type"], "ack");
  CAF_CHECK(reply_seen(*watcher, thread, "answer to watched", 10s));
  CAF_CHECK_EQUAL(violations(), "");
}

// An attempt waits 10 s for its answer here; the owner is paused so that
// the message is in flight, unanswered, when it dies. Its link going down
// sends the message again at once, to the new owner once there is one.
CAF_TEST(a message in flight to a node that dies goes again at once) {
  route_timeout = "30s";
  start("n1");
  start("n2");
  CAF_REQUIRE(settled("n1", {"n1", "n2"}));
  auto thread = thread_on("n1", "n2", "in-flight");
  auto ws = connect_client(node("n1").address());
  auto first = send(*ws, thread, "m1", "before");
  CAF_CHECK_EQUAL(first["type"], "ack");
  ::kill(node("n2").pid(), SIGSTOP);
  CAF_REQUIRE(!ws->send_text(protocol::send_frame(thread, "m2", "in flight")));
  node("n2").kill9();
  auto killed = std::chrono::steady_clock::now();
  auto m2 = await_ack_and_reply(*ws, thread, "m2", "answer to in flight", 30s);
  CAF_REQUIRE(m2.ack);
  CAF_CHECK_EQUAL((*m2.ack)["type"], "ack");
  auto took = m2.acked_at - killed;
  CAF_MESSAGE(
    "acknowledged "
    << std::chrono::duration_cast<std::chrono::milliseconds>(took).count()
    << " ms after the kill");
  CAF_CHECK(took < 5s);
  CAF_CHECK(m2.replied);
  CAF_CHECK_EQUAL(violations(), "");
}

CAF_TEST(a drained node hands its shards away and its gateway keeps serving) {
  start("n1");
  start("n2");
  CAF_REQUIRE(settled("n1", {"n1", "n2"}));
  auto drained = api_call(node("n1").address(), "POST", "/api/v1/cluster/drain",
                          R"({"node":"n2"})");
  CAF_REQUIRE(drained);
  CAF_CHECK_EQUAL((*drained)["state"], "draining");
  CAF_CHECK(settled("n1", {"n1"}));
  auto v = view("n2");
  CAF_CHECK_EQUAL(v["held"], 0);
  CAF_CHECK_EQUAL(v["state"], "draining");
  auto ws = connect_client(node("n2").address());
  auto ack = send(*ws, "after-drain", "m1", "still served");
  CAF_CHECK_EQUAL(ack["type"], "ack");
  CAF_CHECK(reply_seen(*ws, "after-drain", "answer to still served", 10s));
  // The last up member is not drained without force.
  auto refused = api_call(node("n2").address(), "POST", "/api/v1/cluster/drain",
                          R"({"node":"n1"})");
  CAF_REQUIRE(!refused);
  CAF_CHECK_EQUAL(refused.error(), ec::conflict);
  CAF_CHECK_EQUAL(node("n2").stop(), 0);
  CAF_CHECK_EQUAL(violations(), "");
}

CAF_TEST(a paused node is fenced and exits once it finds itself dead) {
  start("n1");
  start("n2");
  CAF_REQUIRE(settled("n1", {"n1", "n2"}));
  auto thread = thread_on("n1", "n2", "paused");
  auto ws = connect_client(node("n1").address());
  auto first = send(*ws, thread, "m1", "before");
  CAF_CHECK_EQUAL(first["type"], "ack");
  ::kill(node("n2").pid(), SIGSTOP);
  // n1 declares n2 dead once its lease (2 s) runs out and takes its shards.
  CAF_REQUIRE(
    !ws->send_text(protocol::send_frame(thread, "m2", "while paused")));
  auto m2 = await_ack_and_reply(*ws, thread, "m2", "answer to while paused",
                                25s);
  CAF_REQUIRE(m2.ack);
  CAF_CHECK_EQUAL((*m2.ack)["type"], "ack");
  CAF_CHECK(m2.replied);
  ::kill(node("n2").pid(), SIGCONT);
  CAF_CHECK(poll_until([&] { return !node("n2").running(); }, 10s));
  CAF_CHECK_EQUAL(node("n2").stop(), 75);
  CAF_CHECK_EQUAL(violations(), "");
}

CAF_TEST(
  a node cut off from the database stops serving and the other takes over) {
  fault_proxy proxy{"127.0.0.1", static_cast<uint16_t>(pg.port())};
  start("n1");
  start("n2", "10ms",
        "postgresql://keel@127.0.0.1:" + std::to_string(proxy.port())
          + "/keel");
  CAF_REQUIRE(settled("n1", {"n1", "n2"}));
  auto thread = thread_on("n1", "n2", "cut");
  auto ws = connect_client(node("n1").address());
  auto first = send(*ws, thread, "m1", "before");
  CAF_CHECK_EQUAL(first["type"], "ack");
  // The link goes silent: n2 can neither renew its lease nor commit.
  proxy.set_mode(link_mode::blackhole);
  auto ack = send(*ws, thread, "m2", "while cut", 20s);
  CAF_CHECK_EQUAL(ack["type"], "ack");
  CAF_CHECK(reply_seen(*ws, thread, "answer to while cut", 10s));
  CAF_CHECK_EQUAL(owner_of("n1", thread), "n1");
  // Back on the database, n2 finds itself declared dead and exits.
  proxy.set_mode(link_mode::pass);
  CAF_CHECK(poll_until([&] { return !node("n2").running(); }, 40s));
  CAF_CHECK_EQUAL(node("n2").stop(), 75);
  CAF_CHECK_EQUAL(violations(), "");
}

CAF_TEST(a database restart declares nobody dead and loses nothing) {
  start("n1");
  start("n2");
  CAF_REQUIRE(settled("n1", {"n1", "n2"}));
  std::vector<std::string> threads{thread_on("n1", "n1", "restart"),
                                   thread_on("n1", "n2", "restart")};
  auto ws = connect_client(node("n1").address());
  // Each answer committed before the outage, so that the message after it
  // takes seq 3 (a turn caught by an outage: the pg_outage suite).
  for (auto& t : threads) {
    auto ack = send(*ws, t, "m1", "before");
    CAF_CHECK_EQUAL(ack["type"], "ack");
    CAF_CHECK(reply_seen(*ws, t, "answer to before", 10s));
  }
  // Down for longer than a lease: every lease runs out meanwhile.
  pg.stop();
  std::this_thread::sleep_for(3s);
  pg.start();
  for (auto& t : threads) {
    auto ack = send(*ws, t, "m2", "after", 20s);
    CAF_CHECK_EQUAL(ack["type"], "ack");
    CAF_CHECK_EQUAL(ack["seq"], 3);
    CAF_CHECK(reply_seen(*ws, t, "answer to after", 10s));
  }
  CAF_CHECK(settled("n1", {"n1", "n2"}));
  for (auto name : {"n1", "n2"}) {
    auto v = view(name);
    CAF_CHECK_EQUAL(v["declared_dead"], 0);
    CAF_CHECK_EQUAL(v["incarnation"], 1);
    CAF_CHECK(node(name).running());
  }
  CAF_CHECK_EQUAL(violations(), "");
}

CAF_TEST(a node with another shard count is refused without waiting) {
  start("n1");
  auto home = dir.str() + "/n2";
  std::filesystem::create_directories(home);
  auto yaml = cluster_yaml("n2", home + "/data", pg.url(), free_port(), "10ms",
                           route_timeout, cluster_extra);
  auto shards = "shards: " + std::to_string(test_shards);
  yaml.replace(yaml.find(shards), shards.size(), "shards: 8");
  std::string failure;
  try {
    node_process n2{home, yaml};
  } catch (const std::runtime_error& e) {
    failure = e.what();
  }
  KEEL_CHECK_CONTAINS(failure, "the cluster has 16 shards; this node is "
                               "configured with 8");
  // Final at once: no wait for the database to become ready.
  CAF_CHECK_EQUAL(failure.find("the database is not ready"), std::string::npos);
  CAF_CHECK(node("n1").running());
}

CAF_TEST(nodes linked over TLS serve each others threads) {
  auto certs = make_cluster_certs(dir.str() + "/certs", {"n1", "n2"}, 1);
  CAF_REQUIRE(certs);
  auto tls_of = [&](size_t i) {
    return "  tls:\n    cert: " + certs->nodes[i].first + "\n    key: "
           + certs->nodes[i].second + "\n    ca: " + certs->ca_cert + "\n";
  };
  cluster_extra = tls_of(0);
  start("n1");
  cluster_extra = tls_of(1);
  start("n2");
  CAF_REQUIRE(settled("n1", {"n1", "n2"}));
  auto remote = thread_on("n1", "n2", "tls");
  auto ws = connect_client(node("n1").address());
  auto ack = send(*ws, remote, "m1", "over tls");
  CAF_CHECK_EQUAL(ack["type"], "ack");
  CAF_CHECK(reply_seen(*ws, remote, "answer to over tls", 10s));
  CAF_CHECK_EQUAL(violations(), "");
}

CAF_TEST(a joining node takes its share by handoff while traffic flows) {
  start("n1", "300ms");
  CAF_REQUIRE(settled("n1", {"n1"}));
  auto ws = connect_client(node("n1").address());
  std::vector<std::string> threads;
  for (int i = 0; i < 12; ++i)
    threads.push_back("flow-" + std::to_string(i));
  // Turns run (300 ms each) while the shards move: a running turn either
  // commits before its shard goes, or is answered by the new owner.
  for (auto& t : threads)
    CAF_CHECK_EQUAL(send(*ws, t, "m1", "one")["type"].get<std::string>(),
                    "ack");
  start("n2", "300ms");
  int round = 2;
  while (!settled("n1", {"n1", "n2"}, 200ms) && round < 40) {
    for (auto& t : threads) {
      auto ack = send(*ws, t, "m" + std::to_string(round), "more");
      CAF_CHECK_EQUAL(ack["type"].get<std::string>(), "ack");
    }
    ++round;
  }
  CAF_REQUIRE(settled("n1", {"n1", "n2"}));
  CAF_MESSAGE(round - 2 << " rounds of messages while the shards moved");
  // Every message gets exactly one answer.
  auto reader = connect_client(node("n2").address());
  for (auto& t : threads) {
    auto done = poll_until(
      [&] {
        auto h = read_history(*reader, t);
        if (!h)
          return false;
        auto outcomes = outcomes_by_seq(*h);
        for (auto& [seq, count] : outcomes)
          if (count != 1)
            return false;
        return outcomes.size() == static_cast<size_t>(round - 1);
      },
      20s, 200ms);
    CAF_CHECK(done);
  }
  CAF_CHECK(view("n1")["handed_over"].get<int>() > 0);
  CAF_CHECK_EQUAL(violations(), "");
}

CAF_TEST_FIXTURE_SCOPE_END()
