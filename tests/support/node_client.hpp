#pragma once

// What process tests do with a running node: a scripted node config, a
// greeted WebSocket client, waiting for a frame, reading a thread's history,
// and running the oracle on a stopped node's data.

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "keel/protocol.hpp"
#include "keel/tools/node_process.hpp"
#include "keel/tools/ws_client.hpp"
#include "test_store.hpp"

namespace keel::test {

/// A node config on 127.0.0.1 (free port) with data in `data_dir`, whose
/// default pool is a scripted provider answering "answer to {input}" after
/// `delay` (so kills land mid-turn too); `extra` is appended as is. The
/// gateway's per-connection rate limit is off: the load tools send many
/// threads' traffic over few connections as fast as the node answers. The
/// store is the suites' backend (`storage_yaml`); `storage` holds more
/// `storage:` keys, indented.
inline std::string
slow_echo_yaml(const std::string& name, const std::string& data_dir,
               const std::string& delay, const std::string& extra = {},
               const std::string& storage = {}) {
  return "node:\n  name: " + name + "\n  data_dir: " + data_dir
         + "\ngateway:\n  port: 0\n  rate_limit:\n    per_second: 0\n"
           "providers:\n"
           "  - name: slow-echo\n    kind: scripted\n"
           "    script:\n      - reply: \"answer to {input}\"\n"
           "        delay: "
         + delay
         + "\n"
           "pools:\n  - name: default\n    chain: [slow-echo]\n"
         + storage_yaml(data_dir, storage) + extra;
}

/// The outcomes (replies and errors) per user message seq in a thread's
/// history entries.
inline std::map<uint64_t, int> outcomes_by_seq(const nlohmann::json& entries) {
  std::map<uint64_t, int> result;
  for (auto& e : entries)
    if (e["kind"] != "user")
      ++result[e["reply_to"].get<uint64_t>()];
  return result;
}

/// The entries of `kind` in a thread's history entries whose text contains
/// `needle`.
inline size_t count_text(const nlohmann::json& entries, const std::string& kind,
                         const std::string& needle) {
  size_t n = 0;
  for (auto& e : entries)
    if (e["kind"] == kind
        && e["text"].get<std::string>().find(needle) != std::string::npos)
      ++n;
  return n;
}

/// Runs `keelctl verify` (the oracle) on the data of a stopped node on
/// `data_dir` (its folder, or its PostgreSQL database): returns an empty
/// string when every invariant holds, else the exit code and the
/// violations it printed.
inline std::string data_violations(const std::string& data_dir) {
  std::vector<std::string> argv{tool_binary("keelctl"), "verify"};
  for (auto& arg : data_args(data_dir))
    argv.push_back(arg);
  auto res = run_command(argv);
  if (res.exit_code == 0)
    return {};
  return "keelctl verify exited with " + std::to_string(res.exit_code) + ":\n"
         + res.out + res.err;
}

/// Runs `keelctl --node 127.0.0.1:PORT ARGS...` against the node at `ep`.
inline command_result keelctl_at(const endpoint& ep,
                                 const std::vector<std::string>& args) {
  std::vector<std::string> argv{tool_binary("keelctl"), "--node",
                                "127.0.0.1:" + std::to_string(ep.port)};
  argv.insert(argv.end(), args.begin(), args.end());
  return run_command(argv);
}

/// The node's dead letters as `keelctl dlq list --json` prints them; throws
/// std::runtime_error with keelctl's output if it fails.
inline nlohmann::json dead_letters_at(const endpoint& ep) {
  auto res = keelctl_at(ep, {"dlq", "list", "--json"});
  if (res.exit_code != 0)
    throw std::runtime_error("keelctl dlq list failed: " + res.out + res.err);
  return nlohmann::json::parse(res.out)["dead_letters"];
}

/// Opens a WebSocket client to the node and consumes its hello frame.
inline std::unique_ptr<ws_client> connect_client(const endpoint& ep) {
  auto client = ws_client::connect(ep);
  if (!client)
    throw std::runtime_error("cannot connect: " + render(client.error()));
  auto hello = (*client)->receive();
  if (!hello)
    throw std::runtime_error("no hello: " + render(hello.error()));
  return std::move(*client);
}

/// Receives frames until one satisfies `pred` (parsed JSON) or the
/// deadline passes; returns it or std::nullopt.
template <class Pred>
std::optional<nlohmann::json>
receive_until(ws_client& client, Pred pred,
              std::chrono::milliseconds timeout = std::chrono::seconds{10}) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0)
      return std::nullopt;
    auto msg = client.receive(left);
    if (!msg)
      return std::nullopt;
    auto json = nlohmann::json::parse(msg->payload, nullptr, false);
    if (!json.is_discarded() && pred(json))
      return json;
  }
}

/// Asks for the first 1,000 entries of `thread`'s history after seq `after`
/// (the history frame); returns the frame, or std::nullopt if none came in
/// time. A request the node drops under its per-connection rate limit (an
/// error frame `rate_limited`) is asked again once the limit has had time
/// to refill, so callers may poll a history in a loop.
inline std::optional<nlohmann::json>
read_history_page(ws_client& client, const std::string& thread, uint64_t after,
                  std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0
        || client.send_text(
          protocol::history_request_frame(thread, "h-" + thread, after, 1000)))
      return std::nullopt;
    auto page = receive_until(
      client,
      [&](auto& j) {
        return (j["type"] == "history" && j["thread"] == thread)
               || (j["type"] == "error" && j["code"] == "rate_limited");
      },
      left);
    if (!page)
      return std::nullopt;
    if ((*page)["type"] == "history")
      return page;
    // No event announces a refilled bucket: the default limit refills one
    // frame every 20 ms.
    std::this_thread::sleep_for(std::chrono::milliseconds{100});
  }
}

/// The first 1,000 entries of `thread`'s history (see `read_history_page`).
inline std::optional<nlohmann::json>
read_history(ws_client& client, const std::string& thread,
             std::chrono::milliseconds timeout = std::chrono::seconds{10}) {
  auto page = read_history_page(client, thread, 0, timeout);
  if (!page)
    return std::nullopt;
  return std::move((*page)["entries"]);
}

/// All of `thread`'s history, page by page, each within `timeout`.
inline std::optional<nlohmann::json>
read_whole_history(ws_client& client, const std::string& thread,
                   std::chrono::milliseconds timeout
                   = std::chrono::seconds{10}) {
  auto all = nlohmann::json::array();
  uint64_t after = 0;
  for (;;) {
    auto page = read_history_page(client, thread, after, timeout);
    if (!page)
      return std::nullopt;
    for (auto& entry : (*page)["entries"]) {
      after = entry["seq"].get<uint64_t>();
      all.push_back(std::move(entry));
    }
    if (!(*page).value("more", false) || (*page)["entries"].empty())
      return all;
  }
}

} // namespace keel::test
