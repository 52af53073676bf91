#define CAF_SUITE quarantine

#include <caf/test/unit_test.hpp>

#include "node_client.hpp"
#include "store_fixture.hpp"
#include "temp_dir.hpp"
#include "text_checks.hpp"

#include "keel/protocol.hpp"
#include "keel/tools/ws_load.hpp"

using namespace keel;
using namespace keel::test;
using namespace std::chrono_literals;

namespace {

// Flat-out load on 32 threads named `prefix-0`, `prefix-1`, ...
bench::load_options flat_out(const endpoint& node, const std::string& prefix,
                             std::chrono::milliseconds duration) {
  bench::load_options opts;
  opts.node = node;
  opts.connections = 8;
  opts.threads = 32;
  opts.window = 4;
  opts.thread_prefix = prefix;
  opts.warmup = 0ms;
  opts.duration = duration;
  return opts;
}

} // namespace

CAF_TEST(a thread with corrupt records answers fresh while the others run) {
  temp_dir dir{"keel-quarantine"};
  auto data = dir.str() + "/data";
  node_process node{dir.str(), slow_echo_yaml("quarantine", data, "0s")};
  // Every thread gets a history.
  auto first = bench::run_load(flat_out(node.address(), "q", 500ms));
  CAF_REQUIRE(first);
  CAF_REQUIRE(first->clean());
  CAF_REQUIRE_EQUAL(node.stop(), 0);
  // Thread q-0's first reply in the model's context is now garbage, as a
  // bad disk or a bad restore would leave it.
  put_raw_record(data + "/db", "context", seq_key("q-0", 2), "garbage{");
  node.start();
  auto watcher = connect_client(node.address());
  CAF_REQUIRE(!watcher->send_text(protocol::subscribe_frame("q-0", "s")));
  CAF_REQUIRE(
    receive_until(*watcher, [](auto& j) { return j["type"] == "subscribed"; }));
  auto again = flat_out(node.address(), "q", 3s);
  again.message_prefix = "again";
  auto second = bench::run_load(again);
  CAF_REQUIRE(second);
  CAF_MESSAGE("flat out with one corrupt thread: "
              << second->answered << " answered, " << second->errors
              << " errors, " << second->missing_replies << " unanswered");
  // Every thread answered every message, the corrupt one included.
  CAF_CHECK(second->clean());
  CAF_CHECK_EQUAL(second->errors, 0u);
  CAF_CHECK_GREATER(second->answered, 100u);
  auto reset = receive_until(*watcher, [](auto& j) {
    return j["type"] == "status" && j["state"] == "history_reset";
  });
  CAF_REQUIRE(reset);
  CAF_CHECK_EQUAL((*reset)["detail"],
                  "I had trouble loading our conversation history. Starting "
                  "fresh for this thread.");
  // The operator sees the quarantine in the status and in verify.
  auto status = api_call(node.address(), "GET", "/api/v1/status");
  CAF_REQUIRE(status);
  CAF_CHECK_EQUAL((*status)["threads"]["quarantined"],
                  nlohmann::json::array({"q-0"}));
  CAF_REQUIRE_EQUAL(node.stop(), 0);
  CAF_CHECK_EQUAL(data_violations(data), "");
  auto verify
    = run_command({tool_binary("keelctl"), "verify", "--data-dir", data});
  CAF_CHECK_EQUAL(verify.exit_code, 0);
  KEEL_CHECK_CONTAINS(verify.out, "in quarantine");
  KEEL_CHECK_CONTAINS(verify.out, "context q-0/2");
}
