#define CAF_SUITE pg_migrate

// `keelctl migrate`: a node's RocksDB data copied into PostgreSQL, and the
// node carrying on there; keelctl's other data commands (`verify`,
// `recovery`, `tree --agents`) reading the PostgreSQL store with --pg.

#include <caf/test/unit_test.hpp>

#include "node_client.hpp"
#include "temp_dir.hpp"

#include "keel/protocol.hpp"
#include "keel/tools/pg_server.hpp"

using namespace keel;
using namespace keel::test;
using namespace std::chrono_literals;
using nlohmann::json;

namespace {

bool has(const std::string& str, const std::string& part) {
  return str.find(part) != std::string::npos;
}

// A node on `dir`/data with the store `storage` (empty: RocksDB).
std::string node_yaml(const temp_dir& dir, const std::string& storage) {
  return "node:\n  name: migrate-test\n  data_dir: " + dir.str()
         + "/data\n"
           "gateway:\n  port: 0\n"
           "logging:\n  level: warn\n"
           "providers:\n"
           "  - name: script\n    kind: scripted\n"
           "    script:\n      - reply: \"answer to {input}\"\n"
           "pools:\n  - name: default\n    chain: [script]\n"
         + storage;
}

struct fixture {
  temp_dir dir{"keel-migrate"};
  temp_dir pg_dir{"keel-pg"};
  pg_server pg{pg_dir.str()};
  std::string data = dir.str() + "/data";

  command_result keelctl(std::vector<std::string> args) {
    args.insert(args.begin(), tool_binary("keelctl"));
    return run_command(args);
  }

  // Sends `text` as `id` to `thread` and waits for its reply.
  void exchange(ws_client& ws, const std::string& thread, const std::string& id,
                const std::string& text) {
    CAF_REQUIRE(!ws.send_text(protocol::send_frame(thread, id, text)));
    auto reply = receive_until(ws, [&](auto& j) {
      return j["type"] == "reply" && j["id"] == id;
    });
    CAF_REQUIRE(reply);
  }

  json history(ws_client& ws, const std::string& thread) {
    auto entries = read_history(ws, thread);
    CAF_REQUIRE(entries);
    return *entries;
  }
};

} // namespace

CAF_TEST_FIXTURE_SCOPE(pg_migrate_tests, fixture)

CAF_TEST(a stopped node data moves to postgres and the node carries on) {
  std::vector<std::string> threads{"a", "b", "c"};
  std::map<std::string, json> before;
  {
    node_process node{dir.str(), node_yaml(dir, "")};
    auto ws = connect_client(node.address());
    for (auto& t : threads)
      for (int i = 0; i < 3; ++i)
        exchange(*ws, t, t + std::to_string(i), "message " + std::to_string(i));
    for (auto& t : threads)
      before[t] = history(*ws, t);
    // A running node holds its folder: no copy of moving data.
    auto refused = keelctl({"migrate", "--data-dir", data, "--to", pg.url()});
    CAF_CHECK_EQUAL(refused.exit_code, 2);
    CAF_CHECK(has(refused.err, "LOCK"));
    CAF_CHECK(has(refused.err, "stop it first"));
    CAF_REQUIRE_EQUAL(node.stop(), 0);
  }
  auto copied = keelctl({"migrate", "--data-dir", data, "--to", pg.url()});
  CAF_MESSAGE("migrate: " << copied.out << copied.err);
  CAF_REQUIRE_EQUAL(copied.exit_code, 0);
  CAF_CHECK(has(copied.out, "log: 18\n"));
  CAF_CHECK(has(copied.out, "read back, every one identical"));
  CAF_CHECK(has(copied.out, "every invariant holds"));
  // Never into a store that holds data.
  auto again = keelctl({"migrate", "--data-dir", data, "--to", pg.url()});
  CAF_CHECK_EQUAL(again.exit_code, 1);
  CAF_CHECK(has(again.err, "already holds data"));
  // The node on PostgreSQL sees the same threads and goes on.
  node_process node{dir.str(), node_yaml(dir, "storage:\n  backend: postgres\n"
                                              "  postgres:\n    url: \""
                                                + pg.url() + "\"\n")};
  auto ws = connect_client(node.address());
  for (auto& t : threads)
    CAF_CHECK_EQUAL(history(*ws, t), before[t]);
  exchange(*ws, "a", "a-new", "after the move");
  CAF_CHECK_EQUAL(history(*ws, "a").size(), 8u);
  CAF_REQUIRE_EQUAL(node.stop(), 0);
  // keelctl reads the store like a data folder.
  auto verified = keelctl({"verify", "--pg", pg.url()});
  CAF_CHECK_EQUAL(verified.exit_code, 0);
  CAF_CHECK(has(verified.out, "3 sessions"));
  auto agents = keelctl({"tree", "--agents", "--pg", pg.url()});
  CAF_CHECK_EQUAL(agents.exit_code, 0);
  CAF_CHECK(has(agents.out, "3 agents, 3 roots"));
  auto recovery = keelctl({"recovery", "--pg", pg.url()});
  CAF_CHECK_EQUAL(recovery.exit_code, 0);
  CAF_CHECK(has(recovery.out, "read_sessions"));
  auto both = keelctl({"verify", "--pg", pg.url(), "--data-dir", data});
  CAF_CHECK_EQUAL(both.exit_code, 2);
  CAF_CHECK(has(both.err, "excludes"));
}

CAF_TEST_FIXTURE_SCOPE_END()
