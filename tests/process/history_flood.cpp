#define CAF_SUITE history_flood

#include <caf/test/unit_test.hpp>

#include <atomic>
#include <thread>
#include <vector>

#include "node_client.hpp"
#include "temp_dir.hpp"

#include "keel/proc.hpp"
#include "keel/protocol.hpp"

using namespace keel;
using namespace keel::test;
using nlohmann::json;
using namespace std::chrono_literals;

namespace {

constexpr size_t flooders = 20;
constexpr auto flood_time = 15s;
/// History requests per flooder and second: within the default rate limit
/// of 50 frames per second.
constexpr int requests_per_second = 40;
constexpr int64_t mib = 1024 * 1024;
/// The default `gateway.max_queued_bytes`.
constexpr int64_t max_queued = 4 * mib;

// A node with a client and an admin token and the gateway's defaults
// (rate limit, queue cap, history page budget).
std::string node_yaml(const temp_dir& dir) {
  return "node:\n  name: flood-test\n  data_dir: " + dir.str()
         + "/data\n"
           "gateway:\n  port: 0\n  token: flood-client\n"
           "  admin_token: flood-admin\n"
           "providers:\n"
           "  - name: echo\n    kind: scripted\n"
           "    script:\n      - reply: \"answer to {input}\"\n"
           "pools:\n  - name: default\n    chain: [echo]\n"
           "storage:\n  sync: false\n";
}

int64_t rss_of(pid_t pid) {
  auto mem = read_memory_usage(pid);
  return mem ? static_cast<int64_t>(mem->rss_bytes) : 0;
}

// Sends one message on a fresh connection; true once it is acknowledged
// within `timeout`.
bool acked(const endpoint& ep, const std::string& thread, const std::string& id,
           const std::string& text, std::chrono::milliseconds timeout = 5s) {
  auto ws = ws_client::connect(ep, "/ws", timeout);
  if (!ws || (*ws)->send_text(protocol::send_frame(thread, id, text)))
    return false;
  auto ack = receive_until(
    **ws, [&](auto& j) { return j["type"] == "ack" && j["id"] == id; },
    timeout);
  return ack.has_value();
}

// Fills thread `ctl` with texts of control characters only: JSON writes
// each as `\u0001`, six bytes.
void fill_control_thread(const endpoint& ep) {
  auto ws = connect_client(ep);
  std::string text(60000, '\x01');
  for (int i = 0; i < 20; ++i) {
    auto id = "fill-" + std::to_string(i);
    CAF_REQUIRE(!ws->send_text(protocol::send_frame("ctl", id, text)));
    auto ack = receive_until(*ws, [&](auto& j) {
      return (j["type"] == "ack" || j["type"] == "error") && j["id"] == id;
    });
    CAF_REQUIRE(ack);
    CAF_REQUIRE_EQUAL((*ack)["type"], "ack");
  }
}

/// What the flooders saw.
struct flood_counts {
  std::atomic<uint64_t> pages{0};
  std::atomic<uint64_t> page_bytes{0};
  std::atomic<uint64_t> busy{0};
  std::atomic<uint64_t> rate_limited{0};
  std::atomic<uint64_t> reconnects{0};
};

// One attacker: asks for the first page of `ctl` `requests_per_second`
// times a second, reads whatever comes back, and reconnects when the node
// drops it.
void flood(const endpoint& ep, const std::atomic<bool>& stop,
           flood_counts& counts) {
  std::unique_ptr<ws_client> ws;
  auto next = std::chrono::steady_clock::now();
  const auto period = 1000ms / requests_per_second;
  while (!stop) {
    if (!ws) {
      auto c = ws_client::connect(ep, "/ws", 2s);
      if (!c) {
        std::this_thread::sleep_for(100ms);
        continue;
      }
      ws = std::move(*c);
      ++counts.reconnects;
    }
    auto now = std::chrono::steady_clock::now();
    if (now >= next) {
      next += period;
      if (ws->send_text(protocol::history_request_frame("ctl", "h", 0, 1000))) {
        ws.reset();
        continue;
      }
    }
    auto left
      = std::chrono::duration_cast<std::chrono::milliseconds>(next - now);
    auto msg = ws->receive(std::max(left, 1ms));
    if (!msg) {
      if (msg.error() != ec::timeout)
        ws.reset();
      continue;
    }
    auto j = json::parse(msg->payload, nullptr, false);
    if (j.is_discarded())
      continue;
    if (j["type"] == "history") {
      ++counts.pages;
      counts.page_bytes += msg->payload.size();
    } else if (j["type"] == "error" && j["code"] == "busy") {
      ++counts.busy;
    } else if (j["type"] == "error" && j["code"] == "rate_limited") {
      ++counts.rate_limited;
    }
  }
}

/// What one round of the other clients got.
struct probe_result {
  bool message = false;
  bool status = false;
  bool health = false;
};

// The node's other clients: a fresh connection's message, the admin's
// status, a health probe; each must answer within 5 s.
probe_result probe(const endpoint& client, const endpoint& admin, int n) {
  probe_result res;
  res.message = acked(client, "other", "o-" + std::to_string(n), "hello");
  res.status
    = static_cast<bool>(api_call(admin, "GET", "/api/v1/status", {}, 5s));
  auto health = http_request(client, "GET", "/healthz", {}, 5s);
  res.health = health && health->status == 200;
  return res;
}

} // namespace

CAF_TEST(a history flood keeps the node within its memory bound) {
  temp_dir dir{"keel-history-flood"};
  node_process node{dir.str(), node_yaml(dir)};
  auto client = node.address();
  auto admin = node.admin_address();
  fill_control_thread(client);
  auto baseline = rss_of(node.pid());
  // Each connection may hold its queue (`max_queued_bytes`, what is on its
  // way to it counted too) and the pages of its history requests under
  // way (`max_history_in_flight`, 2, of at most `max_history_bytes`, 1 MiB,
  // each); 64 MiB for everything else (allocator slack, the store's
  // caches).
  const int64_t bound = baseline + flooders * (max_queued + 2 * mib) + 64 * mib;
  flood_counts counts;
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  for (size_t i = 0; i < flooders; ++i)
    threads.emplace_back([&] { flood(client, stop, counts); });
  auto peak = baseline;
  size_t rounds = 0;
  size_t answered = 0;
  auto until = std::chrono::steady_clock::now() + flood_time;
  while (std::chrono::steady_clock::now() < until && peak <= bound) {
    auto res = probe(client, admin, static_cast<int>(rounds));
    ++rounds;
    if (res.message && res.status && res.health)
      ++answered;
    else
      CAF_MESSAGE("round " << rounds << " during the flood: message "
                           << res.message << ", status " << res.status
                           << ", healthz " << res.health);
    for (int i = 0; i < 5 && peak <= bound; ++i) {
      peak = std::max(peak, rss_of(node.pid()));
      std::this_thread::sleep_for(100ms);
    }
  }
  stop = true;
  for (auto& t : threads)
    t.join();
  auto after = probe(client, admin, 1000);
  auto settled = rss_of(node.pid());
  CAF_MESSAGE("RSS in MiB: "
              << baseline / mib << " before the flood, peak " << peak / mib
              << " (bound " << bound / mib << "), " << settled / mib
              << " after it; " << counts.pages << " pages ("
              << counts.page_bytes / mib << " MiB), " << counts.busy
              << " busy, " << counts.rate_limited << " rate limited, "
              << counts.reconnects << " connections; other clients answered in "
              << answered << " of " << rounds << " rounds");
  CAF_CHECK_LESS_OR_EQUAL(peak, bound);
  CAF_CHECK_EQUAL(answered, rounds);
  CAF_CHECK(after.message);
  CAF_CHECK(after.status);
  CAF_CHECK(after.health);
  // The flood was served, within its budgets, not just refused.
  CAF_CHECK_GREATER(counts.pages, 0u);
  // A node past its bound may take long to stop: it is killed.
  if (peak > bound)
    node.kill9();
  else
    CAF_CHECK_EQUAL(node.stop(), 0);
}
