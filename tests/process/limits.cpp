#define CAF_SUITE limits

#include <caf/test/unit_test.hpp>

#include <filesystem>
#include <fstream>
#include <thread>

#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/buffers_to_string.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/websocket.hpp>

#include "node_client.hpp"
#include "temp_dir.hpp"

#include "keel/protocol.hpp"
#include "keel/tools/process.hpp"

using namespace keel;
using namespace keel::test;
using nlohmann::json;

namespace net = boost::asio;
namespace websocket = boost::beast::websocket;
using tcp = net::ip::tcp;

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
json send(ws_client& ws, const std::string& thread, const std::string& id,
          const std::string& text = "hello") {
  CAF_REQUIRE(!ws.send_text(protocol::send_frame(thread, id, text)));
  auto answer = receive_until(ws, [&](auto& j) {
    return (j["type"] == "ack" || j["type"] == "error") && j["id"] == id;
  });
  CAF_REQUIRE(answer);
  return *answer;
}

// VmRSS and VmHWM (peak) of process `pid` in KiB.
struct memory_kib {
  int64_t resident = 0;
  int64_t peak = 0;
};

memory_kib memory_of(pid_t pid) {
  auto text = read_text_file("/proc/" + std::to_string(pid) + "/status");
  auto field = [&](const std::string& name) -> int64_t {
    auto pos = text.find(name + ":");
    return pos == std::string::npos
             ? 0
             : std::stoll(text.substr(pos + name.size() + 1));
  };
  return {field("VmRSS"), field("VmHWM")};
}

using raw_ws = websocket::stream<tcp::socket>;

// A client with a 4 KiB receive buffer that subscribes to `thread`, reads
// up to the `subscribed` answer and from then on never reads again.
std::unique_ptr<raw_ws> stalled_subscriber(net::io_context& ioc,
                                           const endpoint& ep,
                                           const std::string& thread) {
  auto ws = std::make_unique<raw_ws>(ioc);
  auto& sock = ws->next_layer();
  sock.open(tcp::v4());
  sock.set_option(net::socket_base::receive_buffer_size(4096));
  sock.connect({net::ip::make_address(ep.host), ep.port});
  ws->handshake(ep.host + ":" + std::to_string(ep.port), "/ws");
  ws->text(true);
  ws->write(net::buffer(protocol::subscribe_frame(thread, "sub")));
  for (;;) {
    boost::beast::flat_buffer buf;
    ws->read(buf);
    if (json::parse(boost::beast::buffers_to_string(buf.data()))["type"]
        == "subscribed")
      return ws;
  }
}

// The gateway section of the node's status.
json gateway_status(const endpoint& ep) {
  auto status = api_call(ep, "GET", "/api/v1/status");
  CAF_REQUIRE(status);
  return (*status)["gateway"];
}

} // namespace

CAF_TEST(a hard open files limit below max_connections refuses the start) {
  temp_dir dir{"keel-limits"};
  auto cfg_path = dir.str() + "/node.yaml";
  std::ofstream{cfg_path} << node_yaml(dir, "");
  // The default gateway.max_connections (10000) and max_unauthenticated
  // (1000) need 11000 + 384 files.
  auto res = run_command({low_nofile_wrapper(dir), "--config", cfg_path});
  CAF_CHECK_EQUAL(res.exit_code, 2);
  auto err = res.err + res.out;
  CAF_CHECK(contains(err, "gateway.max_connections plus "
                          "gateway.max_unauthenticated is 11000"));
  CAF_CHECK(contains(err, "needs 11384 open files"));
  CAF_CHECK(contains(err, "hard limit of open files is 512"));
  CAF_CHECK(contains(err, "ulimit -Hn"));
  CAF_CHECK(contains(err, "at most 128"));
  CAF_CHECK(!contains(err, "listening on"));
}

CAF_TEST(max_connections within the hard limit starts with a raised soft one) {
  temp_dir dir{"keel-limits"};
  node_process node{dir.str(),
                    node_yaml(dir, "  max_connections: 100\n"
                                   "  max_unauthenticated: 16\n"),
                    low_nofile_wrapper(dir)};
  // Soft 256 raised to what 100 + 16 connections need (116 + 384), hard
  // kept.
  auto limits = nofile_limits(node.pid());
  CAF_CHECK(contains(limits, "500"));
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

// Requests that find no thread (a send refused by max_stored_threads, a
// cancel of a thread that does not exist) leave no live conversation
// behind: before, each kept one for `threads.idle_timeout` (5 min). A new
// thread's first message, sent right after a cancel of the same thread
// found nothing, still gets its ack and its reply.
CAF_TEST(refused sends and cancels of unknown threads leave no conversation) {
  temp_dir dir{"keel-limits"};
  node_process node{dir.str(),
                    node_yaml(dir, "", "threads:\n  max_stored_threads: 2\n")};
  auto ws = connect_client(node.address());
  auto first = send(*ws, "a", "m1");
  CAF_CHECK_EQUAL(first["type"], "ack");
  // The first message right after the cancel's answer: the conversation
  // the cancel started stops, but not under the accept.
  CAF_REQUIRE(!ws->send_text(protocol::cancel_frame("c", "x-c")));
  auto none = receive_until(*ws, [](auto& j) { return j["id"] == "x-c"; });
  CAF_REQUIRE(none);
  CAF_CHECK_EQUAL((*none)["code"], "not_found");
  CAF_REQUIRE(!ws->send_text(protocol::send_frame("c", "m-c", "first")));
  auto reply = receive_until(*ws, [](auto& j) {
    return j["type"] == "reply" && j["thread"] == "c";
  });
  CAF_REQUIRE(reply);
  CAF_CHECK_EQUAL((*reply)["text"], "answer to first");
  constexpr int n = 20;
  for (int i = 0; i < n; ++i) {
    auto id = std::to_string(i);
    auto refused = send(*ws, "r" + id, "m" + id);
    CAF_CHECK_EQUAL(refused["code"], "thread_limit");
    CAF_REQUIRE(!ws->send_text(protocol::cancel_frame("u" + id, "x" + id)));
    auto answer = receive_until(*ws, [&](auto& j) {
      return j["type"] == "error" && j["id"] == "x" + id;
    });
    CAF_REQUIRE(answer);
    CAF_CHECK_EQUAL((*answer)["code"], "not_found");
  }
  uint64_t active = 0;
  auto settled = poll_until(
    [&] {
      auto status = api_call(node.address(), "GET", "/api/v1/status");
      active = status ? (*status)["threads"]["active"].get<uint64_t>() : 0;
      return active <= 2;
    },
    std::chrono::seconds{10}, std::chrono::milliseconds{50});
  CAF_MESSAGE("live conversations after "
              << 2 * n << " requests for no thread: " << active);
  CAF_CHECK(settled);
  // The two real threads still answer.
  auto c2 = send(*ws, "c", "m-c2");
  CAF_CHECK_EQUAL(c2["type"], "ack");
  auto a2 = send(*ws, "a", "m2");
  CAF_CHECK_EQUAL(a2["type"], "ack");
  CAF_CHECK_EQUAL(node.stop(), 0);
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

CAF_TEST(stalled readers are disconnected and their memory is freed) {
  constexpr size_t readers = 8;
  constexpr int messages = 100;
  temp_dir dir{"keel-limits"};
  // A queue cap far above the flood: the write timeout is what ends the
  // stalled readers, and their queues hold everything until then.
  node_process node{dir.str(), node_yaml(dir,
                                         "  max_queued_bytes: 1GiB\n"
                                         "  write_timeout: 3s\n"
                                         "  socket_send_buffer: 8KiB\n"
                                         "  rate_limit:\n    per_second: 0\n",
                                         "storage:\n  sync: false\n")};
  auto flooder = connect_client(node.address());
  std::string text(48 * 1024, 'x');
  auto flood = [&](const std::string& thread) {
    for (int i = 0; i < messages; ++i) {
      auto ack = send(*flooder, thread, thread + std::to_string(i), text);
      CAF_REQUIRE_EQUAL(ack["type"], "ack");
    }
  };
  // What storing a flood costs the node by itself, without readers.
  auto start = memory_of(node.pid());
  flood("quiet");
  auto stored = memory_of(node.pid());
  net::io_context ioc;
  std::vector<std::unique_ptr<raw_ws>> stalled;
  for (size_t i = 0; i < readers; ++i)
    stalled.push_back(stalled_subscriber(ioc, node.address(), "loud"));
  auto before = memory_of(node.pid());
  flood("loud");
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds{30};
  while (gateway_status(node.address())["slow_client_disconnects"] < readers) {
    CAF_REQUIRE(std::chrono::steady_clock::now() < deadline);
    std::this_thread::sleep_for(std::chrono::milliseconds{100});
  }
  auto after = memory_of(node.pid());
  CAF_MESSAGE("RSS in MiB: "
              << start.resident / 1024 << " at start, "
              << stored.resident / 1024 << " after a flood nobody reads, "
              << before.resident / 1024 << " with " << readers
              << " stalled readers, " << after.peak / 1024
              << " at the peak of a second flood, " << after.resident / 1024
              << " once they were dropped");
  auto gw = gateway_status(node.address());
  CAF_CHECK_EQUAL(gw["connections_open"], 1u);
  CAF_CHECK_EQUAL(gw["slow_client_disconnects"], readers);
  // The queues held the flood for every reader (RSS counts it short: the
  // second flood reuses memory the node freed after the first, such as the
  // context a compaction gave back, so half of it is the bound) ...
  auto queued = after.peak - before.resident;
  CAF_CHECK_GREATER(queued, int64_t{readers} * 48 * messages / 2);
  // ... and were given back: the node keeps less than a quarter of it
  // (without returning freed memory to the system it keeps over half).
  CAF_CHECK_LESS(after.resident - before.resident, queued / 4);
  // The flooder was never held up.
  auto last = send(*flooder, "loud", "after");
  CAF_CHECK_EQUAL(last["type"], "ack");
}
