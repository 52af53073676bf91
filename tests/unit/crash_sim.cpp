#define CAF_SUITE crash_sim

#include "crash_sim.hpp"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <iostream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <spdlog/spdlog.h>

// The in-process deterministic crash simulation (tests/support/crash_sim.hpp)
// over many seeds. Environment:
// - KEEL_SIM_SEEDS: how many seeds (default 2000), from KEEL_SIM_FIRST
//   (default 1); split over four tests, each under the 30 s watchdog by
//   default (a long run wants `-r`);
// - KEEL_SIM_SEED=N: seed N alone, printing its operations, results and
//   histories (KEEL_SIM_LOGS=1 keeps the node's log lines too);
// - KEEL_SIM_BATCH: seeds sharing one node (default 25);
// - KEEL_SIM_HASHES=1: prints every seed's trace hash (the same seed gives
//   the same hash, whatever batch it ran in).
// A failing seed prints its operations, their results, the broken
// invariants and the line that replays it.

using namespace keel;
using namespace keel::sim;

namespace {

uint64_t env_number(const char* name, uint64_t fallback) {
  auto str = std::getenv(name);
  if (str == nullptr || *str == '\0')
    return fallback;
  return std::strtoull(str, nullptr, 10);
}

std::string env_text(const char* name) {
  auto str = std::getenv(name);
  return str == nullptr ? std::string{} : std::string{str};
}

// The node logs every kill and failed turn; thousands of runs need quiet.
struct quiet_logs {
  quiet_logs() : level(spdlog::get_level()) {
    if (env_text("KEEL_SIM_LOGS").empty())
      spdlog::set_level(spdlog::level::off);
  }

  ~quiet_logs() {
    spdlog::set_level(level);
  }

  spdlog::level::level_enum level;
};

// What the runs covered, summed over seeds.
struct coverage {
  std::map<std::string, uint64_t> counts;

  void add(const run_report& rep) {
    for (size_t i = 0; i < rep.ops.size(); ++i) {
      auto& x = rep.ops[i];
      auto& r = rep.results[i];
      auto name = std::string{to_string(x.kind)};
      if (x.kind == op_kind::kill)
        name += " "
                + (x.arg.rfind("conversations/", 0) == 0
                     ? std::string{"conversations/THREAD"}
                     : x.arg);
      ++counts[name];
      if (r.answered)
        ++counts[name + (r.ok ? " ok" : " error " + r.error)];
    }
    counts["acks"] += rep.acks;
    counts["outcomes"] += rep.outcomes;
    counts["agent messages"] += rep.agent_messages;
    counts["threads"] += rep.sessions.size();
    counts["dead letters"] += rep.dead_letters;
    counts["passivations"] += rep.passivations;
    counts["storage timeouts"] += rep.storage_timeouts;
    counts["history resets"] += rep.history_resets;
    counts["quarantined threads"] += rep.quarantined_threads;
  }

  uint64_t operator[](const std::string& key) const {
    auto i = counts.find(key);
    return i == counts.end() ? 0 : i->second;
  }
};

// The seeds of a run: KEEL_SIM_SEEDS (default 2000) from KEEL_SIM_FIRST
// (default 1), or KEEL_SIM_SEED alone. They are split into `parts` tests,
// each under the test framework's default watchdog of 30 s.
constexpr uint64_t parts = 4;

struct seed_range {
  uint64_t first;
  uint64_t count;
  bool single;
};

seed_range part_of_run(uint64_t part) {
  if (auto one = env_text("KEEL_SIM_SEED"); !one.empty())
    return {std::strtoull(one.c_str(), nullptr, 10), part == 0 ? 1u : 0u, true};
  auto first = env_number("KEEL_SIM_FIRST", 1);
  auto count = env_number("KEEL_SIM_SEEDS", 2000);
  auto begin = count * part / parts;
  auto end = count * (part + 1) / parts;
  return {first + begin, end - begin, false};
}

// Runs one part of the seeds in batches on one node each; prints failing
// seeds (the first three in full) and a summary; checks that each part
// covered what it is for.
void run_part(uint64_t part) {
  quiet_logs quiet;
  auto [first, count, single] = part_of_run(part);
  if (count == 0)
    return;
  auto batch = std::max<uint64_t>(1, env_number("KEEL_SIM_BATCH", 25));
  auto print_hashes = !env_text("KEEL_SIM_HASHES").empty();
  coverage cov;
  std::vector<uint64_t> failed;
  auto start = std::chrono::steady_clock::now();
  for (auto seed = first; seed < first + count; seed += batch) {
    auto n = std::min(batch, first + count - seed);
    for (auto& rep : run_batch(seed, n)) {
      cov.add(rep);
      if (print_hashes)
        std::cout << "seed " << rep.seed << " trace " << rep.trace_hash << '\n';
      if (single)
        std::cout << rep.describe() << "trace hash " << rep.trace_hash << '\n';
      if (!rep.ok()) {
        if (failed.size() < 3 && !single)
          std::cout << rep.describe();
        failed.push_back(rep.seed);
      }
    }
  }
  auto secs
    = std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
        .count();
  std::ostringstream summary;
  summary << "crash_sim: seeds " << first << " to " << first + count - 1
          << " in " << secs << " s (" << (secs > 0 ? count / secs : 0.0)
          << " seeds/s); " << failed.size() << " failed";
  for (size_t i = 0; i < failed.size() && i < 20; ++i)
    summary << (i == 0 ? ": " : ", ") << failed[i];
  std::cout << summary.str() << std::endl;
  CAF_MESSAGE(summary.str());
  for (auto& [what, n] : cov.counts)
    CAF_MESSAGE("  " << what << ": " << n);
  CAF_CHECK_EQUAL(failed.size(), 0u);
  if (count < 200)
    return;
  // The runs did what they are for: messages acknowledged and answered,
  // children spawned by tool calls talking to their parents, every kind of
  // operation and kill landing, idle threads passivating, storage requests
  // timing out and landing late, corrupt threads moving to quarantine.
  CAF_CHECK_GREATER(cov["acks"], count);
  CAF_CHECK_GREATER(cov["agent messages"], count);
  for (auto what :
       {"route ok", "resend ok", "spawn ok", "cancel ok", "crash", "restart",
        "stall", "corrupt", "passivations", "storage timeouts",
        "quarantined threads", "kill orchestrator ok", "kill persistence ok",
        "kill providers/default ok", "kill providers/default/router ok",
        "kill providers/default/script ok", "kill conversations/THREAD ok"})
    if (cov[what] == 0)
      CAF_FAIL("no run covered: " << what);
}

} // namespace

CAF_TEST(every seed keeps the contract : first quarter) {
  run_part(0);
}

CAF_TEST(every seed keeps the contract : second quarter) {
  run_part(1);
}

CAF_TEST(every seed keeps the contract : third quarter) {
  run_part(2);
}

CAF_TEST(every seed keeps the contract : fourth quarter) {
  run_part(3);
}

CAF_TEST(the same seed gives the same trace alone and in a batch) {
  quiet_logs quiet;
  auto batch = run_batch(40, 8);
  for (auto& in_batch : batch) {
    auto alone = run_seed(in_batch.seed);
    CAF_CHECK_EQUAL(alone.trace_hash, in_batch.trace_hash);
    if (alone.trace_hash != in_batch.trace_hash)
      CAF_MESSAGE("alone:\n"
                  << alone.describe() << "in a batch:\n"
                  << in_batch.describe());
  }
  auto again = run_batch(40, 8);
  for (size_t i = 0; i < batch.size(); ++i)
    CAF_CHECK_EQUAL(again[i].trace_hash, batch[i].trace_hash);
}

CAF_TEST(different seeds give different traces) {
  quiet_logs quiet;
  std::set<uint64_t> hashes;
  for (auto& rep : run_batch(500, 20))
    hashes.insert(rep.trace_hash);
  CAF_CHECK_GREATER_OR_EQUAL(hashes.size(), 19u);
}

CAF_TEST(the history check catches broken histories) {
  auto entry = [](seq_t seq, log_kind kind, std::string id, seq_t reply_to) {
    log_entry e;
    e.seq = seq;
    e.kind = kind;
    e.client_id = std::move(id);
    e.reply_to = reply_to;
    return e;
  };
  using k = log_kind;
  struct example {
    const char* what;
    std::vector<log_entry> log;
    size_t violations;
  };
  std::vector<example> examples{
    {"fine",
     {entry(1, k::user, "a", 0), entry(2, k::reply, "a", 1),
      entry(3, k::user, "b", 0), entry(4, k::error, "b", 3)},
     0},
    {"answered twice (and again after it was answered)",
     {entry(1, k::user, "a", 0), entry(2, k::reply, "a", 1),
      entry(3, k::error, "a", 1)},
     2},
    {"never answered", {entry(1, k::user, "a", 0)}, 1},
    {"the same client id twice",
     {entry(1, k::user, "a", 0), entry(2, k::reply, "a", 1),
      entry(3, k::user, "a", 0), entry(4, k::reply, "a", 3)},
     1},
    {"answered out of order",
     {entry(1, k::user, "a", 0), entry(2, k::user, "b", 0),
      entry(3, k::reply, "b", 2), entry(4, k::reply, "a", 1)},
     1},
    {"an outcome of nothing", {entry(1, k::reply, "a", 7)}, 1},
  };
  for (auto& x : examples) {
    std::vector<std::string> out;
    detail::check_history("t", x.log, out);
    CAF_MESSAGE(x.what);
    CAF_CHECK_EQUAL(out.size(), x.violations);
  }
}
