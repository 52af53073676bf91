#define CAF_SUITE ws_conformance

#include <caf/test/unit_test.hpp>

#include "npm_server.hpp"
#include "temp_dir.hpp"

#include "keel/tools/node_process.hpp"

using namespace keel;
using namespace keel::test;

namespace {

constexpr size_t max_frame_bytes = 4096;

} // namespace

// tests/conformance/ws-conformance.mjs, run by node with the `ws` client of
// tests/npm, against a real node: every case must pass (informational cases
// only print what the server did).
CAF_TEST(the gateway passes the WebSocket conformance cases) {
  temp_dir dir{"keel-ws-conformance"};
  node_process node{dir.str(),
                    "node:\n  data_dir: " + dir.str()
                      + "/data\ngateway:\n  port: 0\n  max_frame_bytes: "
                      + std::to_string(max_frame_bytes)
                      + "\n  max_text_bytes: 2048\nlogging:\n  level: warn\n"};
  auto nodejs = find_in_path("node");
  if (!nodejs)
    CAF_FAIL("node is not in PATH: run scripts/setup");
  auto url = "ws://127.0.0.1:" + std::to_string(node.address().port) + "/ws";
  auto result = run_command(
    {*nodejs, keel_source_dir() + "/tests/conformance/ws-conformance.mjs",
     "--url", url, "--max-frame-bytes", std::to_string(max_frame_bytes)},
    std::chrono::seconds{240});
  CAF_MESSAGE("\n" << result.out << result.err);
  CAF_CHECK_EQUAL(result.exit_code, 0);
  CAF_CHECK(result.out.find(" passed, 0 failed\n") != std::string::npos);
  // No case may take the node down; it is stopped when `node` goes away.
  CAF_CHECK(node.running());
}
