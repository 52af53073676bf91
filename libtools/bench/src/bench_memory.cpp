// keel-bench's idle-threads run, and what both memory runs share.

#include <algorithm>
#include <thread>

#include "keel/text.hpp"
#include "keel/tools/bench_memory.hpp"
#include "keel/tools/json_fields.hpp"
#include "keel/tools/ws_client.hpp"
#include "memory_probe.hpp"

namespace keel::bench {

namespace detail {

settled_rss settle_node_rss(const endpoint& node, const wait_fn& wait,
                            nlohmann::json& status,
                            std::vector<std::string>& problems) {
  constexpr uint64_t slack = 256 * 1024;
  constexpr auto interval = std::chrono::milliseconds{500};
  settled_rss result;
  auto start = std::chrono::steady_clock::now();
  uint64_t previous = 0;
  for (bool first = true;; first = false) {
    auto read = api_call(node, "GET", "/api/v1/status");
    if (!read) {
      problems.push_back("reading the node's status: "
                         + keel::render(read.error()));
      break;
    }
    status = std::move(*read);
    result.rss_bytes = json_number(status, {"rss_bytes"});
    if (!first && result.rss_bytes <= previous + slack) {
      result.settled = true;
      break;
    }
    previous = result.rss_bytes;
    if (std::chrono::steady_clock::now() - start >= rss_settle_timeout)
      break;
    wait(interval);
  }
  result.seconds
    = std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
        .count();
  return result;
}

double bytes_per(uint64_t before, uint64_t after, size_t count) {
  if (count == 0)
    return 0;
  return (static_cast<double>(after) - static_cast<double>(before))
         / static_cast<double>(count);
}

} // namespace detail

double idle_threads_result::bytes_per_thread() const noexcept {
  return detail::bytes_per(rss_before, after.rss_bytes, threads);
}

bool idle_threads_result::clean() const noexcept {
  return load.clean() && problems.empty();
}

namespace {

void sleep_wait(std::chrono::milliseconds x) {
  std::this_thread::sleep_for(x);
}

/// The load of an idle-threads run: one message to each thread, flat out,
/// no warmup.
load_options idle_threads_load(const idle_threads_options& opts) {
  auto load = opts.load;
  load.messages = load.threads;
  load.one_message_per_thread = true;
  load.warmup = std::chrono::milliseconds{0};
  load.rate = 0;
  load.connections = std::min(load.connections, load.threads);
  if (load.thread_prefix.empty())
    load.thread_prefix = "idle-" + random_hex(6);
  return load;
}

/// After `passivate_wait`: the live threads, the passivations during the
/// wait and the RSS (`status` is the status read after the measurement).
void check_passivation(const idle_threads_options& opts,
                       const nlohmann::json& status,
                       idle_threads_result& result) {
  result.passivation_checked = true;
  result.passivate_wait = opts.passivate_wait;
  std::this_thread::sleep_for(opts.passivate_wait);
  auto later = api_call(opts.load.node, "GET", "/api/v1/status");
  if (!later) {
    result.problems.push_back("reading the node's status after the wait: "
                              + keel::render(later.error()));
    return;
  }
  result.live_after_wait = json_number(*later, {"threads", "active"});
  auto before = json_number(status, {"threads", "passivations"});
  auto after = json_number(*later, {"threads", "passivations"});
  result.passivations_during_wait = after >= before ? after - before : 0;
  result.rss_after_wait = json_number(*later, {"rss_bytes"});
}

} // namespace

caf::expected<idle_threads_result>
run_idle_threads(const idle_threads_options& opts) {
  auto say = [&](const std::string& line) {
    if (opts.progress)
      opts.progress(line);
  };
  auto load = idle_threads_load(opts);
  idle_threads_result result;
  result.threads = load.threads;
  auto before = api_call(load.node, "GET", "/api/v1/status");
  if (!before)
    return before.error();
  result.rss_before = json_number(*before, {"rss_bytes"});
  result.live_before = json_number(*before, {"threads", "active"});
  say("sending one message to each of " + std::to_string(load.threads)
      + " fresh threads over " + std::to_string(load.connections)
      + " connections");
  auto res = run_load(load);
  if (!res)
    return res.error();
  result.load = std::move(*res);
  say("waiting for the node's RSS to settle");
  nlohmann::json status;
  result.after = detail::settle_node_rss(load.node, sleep_wait, status,
                                         result.problems);
  result.live_after = json_number(status, {"threads", "active"});
  auto gained = result.live_after > result.live_before
                  ? result.live_after - result.live_before
                  : 0;
  if (gained < result.threads)
    result.problems.push_back(
      "only " + std::to_string(gained)
      + " more threads were live after the answers, not "
      + std::to_string(result.threads)
      + " (threads.max_live, or a threads.idle_timeout shorter than the run)");
  if (opts.passivate_wait.count() > 0) {
    say("waiting " + human_duration(opts.passivate_wait)
        + " for the threads to passivate");
    check_passivation(opts, status, result);
  }
  return result;
}

} // namespace keel::bench
