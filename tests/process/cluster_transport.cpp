#define CAF_SUITE cluster_transport

// The cluster port as someone who can reach it but is no node sees it: a
// raw BASP client of the tests' own (support/basp_client.hpp) against a
// real keel-node on a PostgreSQL server the test starts. On plaintext
// loopback (cluster.insecure_plaintext) such a client reaches only the
// peers actor, which refuses it without the cluster token; with
// cluster.tls no byte of a client without a certificate of the cluster's
// CA reaches BASP.

#include <caf/test/unit_test.hpp>

#include <csignal>
#include <filesystem>
#include <string>

#include "basp_client.hpp"
#include "node_client.hpp"
#include "temp_dir.hpp"
#include "text_checks.hpp"

#include "keel/actors.hpp"
#include "keel/proc.hpp"
#include "keel/system_config.hpp"
#include "keel/tools/certificates.hpp"
#include "keel/tools/pg_server.hpp"
#include "keel/tools/process.hpp"

using namespace keel;
using namespace keel::test;
using namespace std::chrono_literals;

namespace {

struct fixture {
  temp_dir dir{"keel-cluster-transport"};
  temp_dir pg_dir{"keel-pg"};
  pg_server pg{pg_dir.str()};
  uint16_t peer_port = free_port();
  std::unique_ptr<node_process> node;
  // Only for CAF's serializer, which needs Keel's message types.
  system_config cfg;
  caf::actor_system sys{cfg};

  fixture() {
    std::signal(SIGPIPE, SIG_IGN);
  }

  // Starts a one-node cluster; `transport` is the rest of its `cluster:`.
  void start(const std::string& transport) {
    auto home = dir.str() + "/n1";
    std::filesystem::create_directories(home);
    node = std::make_unique<node_process>(
      home, "node:\n  name: n1\n  data_dir: " + home
              + "/data\ngateway:\n  port: 0\nstorage:\n  backend: postgres\n"
                "  postgres:\n    url: \""
              + pg.url() + "\"\ncluster:\n  enabled: true\n  listen: 127.0.0.1:"
              + std::to_string(peer_port)
              + "\n  shards: 4\n  token: \"a-cluster-token-for-tests\"\n"
              + transport);
  }

  uint64_t node_rss() {
    auto usage = read_memory_usage(node->pid());
    CAF_REQUIRE(usage);
    return usage->rss_bytes;
  }

  // The 32-byte header of a client handshake announcing a 1 GiB payload,
  // sent before any handshake: BASP would size its read buffer to it.
  std::vector<char> huge_header(basp_client& c) {
    return c.encode(
      basp_client::header(basp_client::message_type::client_handshake, 0,
                          uint32_t{1} << 30, 0, 0, 0));
  }
};

// Whether `answer` is a refusal: an error, which CAF's network layer sends
// back for a request to an unknown receiver too.
bool refused(const std::optional<caf::message>& answer) {
  return answer && answer->match_elements<caf::error>();
}

std::string describe(const std::optional<caf::message>& answer) {
  return answer ? caf::to_string(*answer) : std::string{"no answer"};
}

// Restarts in a supervision tree (GET /api/v1/tree), all levels.
int64_t restarts_in(const nlohmann::json& child) {
  int64_t n = child.value("restarts", int64_t{0});
  for (auto& c : child.value("children", nlohmann::json::array()))
    n += restarts_in(c);
  return n;
}

} // namespace

CAF_TEST_FIXTURE_SCOPE(cluster_transport_tests, fixture)

CAF_TEST(a stranger on a plaintext cluster port reaches no component) {
  start("  insecure_plaintext: true\n");
  basp_client c{sys, peer_port};
  auto peers_id = c.handshake();
  CAF_REQUIRE_NOT_EQUAL(peers_id, 0u);
  CAF_MESSAGE("the peers actor is actor " << peers_id);
  // Every component by name, CAF's own utility actors too.
  std::vector<caf::atom_value> names(std::begin(names::all),
                                     std::end(names::all));
  names.push_back(caf::atom("SpawnServ"));
  names.push_back(caf::atom("ConfigServ"));
  for (auto name : names) {
    auto answer = c.request(basp_client::named(name),
                            caf::make_message(atom::stats_v), 2s);
    CAF_MESSAGE(caf::to_string(name) << ": " << describe(answer));
    CAF_CHECK(refused(answer));
  }
  // A message the orchestrator would store and answer.
  auto route = caf::make_message(atom::route_v, std::string{"stranger"},
                                 std::string{"s1"},
                                 std::string{"stored by a stranger"},
                                 std::string{});
  CAF_CHECK(
    refused(c.request(basp_client::named(names::orchestrator), route, 2s)));
  // The root supervisor's kill, four times (its restart intensity).
  for (int i = 0; i < 4; ++i)
    CAF_CHECK(refused(c.request(
      basp_client::named(names::root),
      caf::make_message(atom::kill_child_v, std::string{"persistence"},
                        caf::make_error(caf::exit_reason::kill)),
      2s)));
  // The peers actor itself, without the cluster token.
  auto wrong = c.request(basp_client::by_id(peers_id),
                         caf::make_message(atom::route_v, std::string{"guess"},
                                           std::string{"stranger"}, route),
                         2s);
  CAF_REQUIRE(refused(wrong));
  KEEL_CHECK_CONTAINS(caf::to_string(*wrong), "wrong cluster token");
  // Any other actor id: refused at once as an unknown receiver, but for
  // one actor of CAF's own: the helper its network layer spawns for each
  // new peer to ask that peer's SpawnServ, which skips (keeps) every other
  // message until the peer answers, as this client never does.
  int unanswered = 0;
  for (caf::actor_id id = 1; id < 200; ++id) {
    auto answer = c.request(basp_client::by_id(id),
                            caf::make_message(atom::stats_v), 500ms);
    if (!answer) {
      ++unanswered;
      continue;
    }
    if (!refused(answer))
      CAF_MESSAGE("actor " << id << ": " << describe(answer));
    CAF_CHECK(refused(answer));
  }
  CAF_CHECK_LESS_OR_EQUAL(unanswered, 1);
  // Nothing was stored, nothing restarted, and the node still serves.
  CAF_REQUIRE(node->running());
  auto ws = connect_client(node->address());
  auto history = read_history(*ws, "stranger");
  CAF_REQUIRE(history);
  CAF_CHECK_EQUAL(history->size(), 0u);
  auto tree = api_call(node->admin_address(), "GET", "/api/v1/tree");
  CAF_REQUIRE(tree);
  CAF_CHECK_EQUAL(restarts_in((*tree)["tree"]), 0);
}

CAF_TEST(a TLS cluster port takes no byte from a client without its CA) {
  // The operator's way: keelctl makes the CA and the node certificates.
  auto certs = dir.str() + "/certs";
  auto made = run_command({tool_binary("keelctl"), "cluster", "certs", certs,
                           "--nodes", "n1,member", "--days", "1"});
  CAF_REQUIRE_EQUAL(made.exit_code, 0);
  auto again = run_command({tool_binary("keelctl"), "cluster", "certs", certs});
  CAF_CHECK_EQUAL(again.exit_code, 1);
  KEEL_CHECK_CONTAINS(again.err, "ca.key exists");
  start("  tls:\n    cert: " + certs + "/n1.crt\n    key: " + certs
        + "/n1.key\n    ca: " + certs + "/ca.crt\n");
  auto before = node_rss();
  // Plain BASP bytes on the TLS port: not a TLS handshake.
  {
    basp_client plain{sys, peer_port};
    plain.send_raw(huge_header(plain));
    CAF_CHECK(plain.closed_by_node(5s));
  }
  // TLS without a client certificate, and with one of another CA.
  auto other = make_cluster_certs(dir.str() + "/other", {"n1"}, 1);
  CAF_REQUIRE(other);
  basp_client::tls_options none;
  basp_client::tls_options foreign{other->nodes[0].first,
                                   other->nodes[0].second};
  for (auto* tls : {&none, &foreign}) {
    basp_client c{sys, peer_port, tls};
    if (c.tls_error().empty())
      try {
        c.send_raw(huge_header(c));
      } catch (const std::runtime_error&) {
        // Refused while writing: as good as refused at the handshake.
      }
    CAF_CHECK(c.closed_by_node(5s));
    CAF_MESSAGE("refused: " << c.tls_error());
    CAF_CHECK(!c.tls_error().empty());
  }
  auto after = node_rss();
  CAF_MESSAGE("RSS " << before / 1024 << " KiB before, " << after / 1024
                     << " KiB after");
  CAF_CHECK_LESS(after, before + 64 * 1024 * 1024);
  // A certificate of the cluster's CA is a node's: its BASP handshake
  // comes.
  basp_client::tls_options member{certs + "/member.crt", certs + "/member.key"};
  basp_client peer{sys, peer_port, &member};
  CAF_REQUIRE_EQUAL(peer.tls_error(), "");
  CAF_CHECK_NOT_EQUAL(peer.handshake(), 0u);
  CAF_CHECK(node->running());
}

CAF_TEST_FIXTURE_SCOPE_END()
