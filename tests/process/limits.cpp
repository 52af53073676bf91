#define CAF_SUITE limits

#include <caf/test/unit_test.hpp>

#include <filesystem>
#include <fstream>

#include "node_client.hpp"
#include "temp_dir.hpp"

#include "keel/protocol.hpp"
#include "keel/tools/process.hpp"

using namespace keel;
using namespace keel::test;
using nlohmann::json;

namespace {

bool contains(const std::string& str, const std::string& part) {
  return str.find(part) != std::string::npos;
}

// A node answering "answer to {input}" at once; `gateway` and `extra` are
// appended to its `gateway:` section and to the file.
std::string node_yaml(const temp_dir& dir, const std::string& gateway,
                      const std::string& extra = {}) {
  return "node:\n  name: limits-test\n  data_dir: " + dir.str()
         + "/data\n"
           "gateway:\n  port: 0\n"
         + gateway
         + "providers:\n"
           "  - name: echo\n    kind: scripted\n"
           "    script:\n      - reply: \"answer to {input}\"\n"
           "pools:\n  - name: default\n    chain: [echo]\n"
         + extra;
}

// A script that runs keel-node with at most 512 open files (hard limit)
// and a soft limit of 256, as a tight `ulimit` would.
std::string low_nofile_wrapper(const temp_dir& dir) {
  auto path = dir.str() + "/keel-node-512";
  {
    std::ofstream out{path};
    out << "#!/bin/sh\n"
           "ulimit -S -n 256 && ulimit -H -n 512 || exit 99\n"
           "exec '"
        << node_binary() << "' \"$@\"\n";
  }
  std::filesystem::permissions(path, std::filesystem::perms::owner_all);
  return path;
}

// The "Max open files" line of process `pid` in /proc.
std::string nofile_limits(pid_t pid) {
  auto text = read_text_file("/proc/" + std::to_string(pid) + "/limits");
  auto pos = text.find("Max open files");
  if (pos == std::string::npos)
    return {};
  return text.substr(pos, text.find('\n', pos) - pos);
}

// Sends and returns the ack or error frame for `id`.
json send(ws_client& ws, const std::string& thread, const std::string& id) {
  CAF_REQUIRE(!ws.send_text(protocol::send_frame(thread, id, "hello")));
  auto answer = receive_until(ws, [&](auto& j) {
    return (j["type"] == "ack" || j["type"] == "error") && j["id"] == id;
  });
  CAF_REQUIRE(answer);
  return *answer;
}

} // namespace

CAF_TEST(a hard open files limit below max_connections refuses the start) {
  temp_dir dir{"keel-limits"};
  auto cfg_path = dir.str() + "/node.yaml";
  std::ofstream{cfg_path} << node_yaml(dir, "");
  // The default gateway.max_connections (10000) needs 10000 + 384 files.
  auto res = run_command({low_nofile_wrapper(dir), "--config", cfg_path});
  CAF_CHECK_EQUAL(res.exit_code, 2);
  auto err = res.err + res.out;
  CAF_CHECK(contains(err, "gateway.max_connections is 10000"));
  CAF_CHECK(contains(err, "needs 10384 open files"));
  CAF_CHECK(contains(err, "hard limit of open files is 512"));
  CAF_CHECK(contains(err, "ulimit -Hn"));
  CAF_CHECK(contains(err, "at most 128"));
  CAF_CHECK(!contains(err, "listening on"));
}

CAF_TEST(max_connections within the hard limit starts with a raised soft one) {
  temp_dir dir{"keel-limits"};
  node_process node{dir.str(), node_yaml(dir, "  max_connections: 100\n"),
                    low_nofile_wrapper(dir)};
  // Soft 256 raised to what 100 connections need (100 + 384), hard kept.
  auto limits = nofile_limits(node.pid());
  CAF_CHECK(contains(limits, "484"));
  CAF_CHECK(contains(limits, "512"));
  auto ws = connect_client(node.address());
  auto ack = send(*ws, "t", "m1");
  CAF_CHECK_EQUAL(ack["type"], "ack");
  CAF_CHECK_EQUAL(node.stop(), 0);
}

CAF_TEST(a new thread beyond max_stored_threads is refused) {
  temp_dir dir{"keel-limits"};
  node_process node{dir.str(),
                    node_yaml(dir, "", "threads:\n  max_stored_threads: 2\n")};
  auto ws = connect_client(node.address());
  auto a = send(*ws, "a", "m1");
  CAF_CHECK_EQUAL(a["type"], "ack");
  auto b = send(*ws, "b", "m1");
  CAF_CHECK_EQUAL(b["type"], "ack");
  auto c = send(*ws, "c", "m1");
  CAF_CHECK_EQUAL(c["type"], "error");
  CAF_CHECK_EQUAL(c["code"], "thread_limit");
  CAF_CHECK(
    contains(c["message"].get<std::string>(), "threads.max_stored_threads 2"));
  // Existing threads keep working, also after a restart (counted from the
  // store again).
  node.stop();
  node.start();
  ws = connect_client(node.address());
  auto again = send(*ws, "a", "m2");
  CAF_CHECK_EQUAL(again["type"], "ack");
  auto still = send(*ws, "c", "m2");
  CAF_CHECK_EQUAL(still["code"], "thread_limit");
}

CAF_TEST(risky settings are logged as warnings at start) {
  temp_dir dir{"keel-limits"};
  node_process node{dir.str(), node_yaml(dir, "",
                                         "storage:\n  sync: false\n"
                                         "chaos:\n  kill: true\n")};
  auto log = node.stderr_text();
  CAF_CHECK(contains(log, "storage.sync is false"));
  CAF_CHECK(contains(log, "chaos.kill is true"));
  CAF_CHECK(contains(log, "warn"));
}
