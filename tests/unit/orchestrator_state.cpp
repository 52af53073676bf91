#define CAF_SUITE orchestrator_state

// The orchestrator's routing table and its index of live conversations. A
// property over random operations as the orchestrator makes them (start,
// route, evict, decline, stop, release, losing every conversation): after
// each one, `at_live_limit` and `idlest` answer what a scan of the table
// answers, and the index holds exactly the live entries.

#include <caf/test/unit_test.hpp>

#include <algorithm>
#include <random>

#include "keel/orchestrator.hpp"

using namespace keel;

namespace {

bool is_live(const thread_entry& entry) {
  return !entry.stopping && !entry.evicting;
}

size_t live_by_scan(const orchestrator_state& st) {
  return static_cast<size_t>(
    std::count_if(st.threads.begin(), st.threads.end(),
                  [](auto& x) { return is_live(x.second); }));
}

// The live thread routed to least recently (ties by name), other than
// `thread` and `skip`, found by a scan.
std::string idlest_by_scan(const orchestrator_state& st,
                           const std::string& thread,
                           const std::vector<std::string>& skip) {
  const std::pair<const std::string, thread_entry>* best = nullptr;
  for (auto& x : st.threads) {
    if (!is_live(x.second) || x.first == thread
        || std::count(skip.begin(), skip.end(), x.first) > 0)
      continue;
    if (best == nullptr
        || std::tie(x.second.routed, x.first)
             < std::tie(best->second.routed, best->first))
      best = &x;
  }
  return best != nullptr ? best->first : std::string{};
}

// One random operation on `st`, as the orchestrator makes them.
void random_operation(orchestrator_state& st, std::mt19937& gen,
                      uint64_t& seq) {
  auto thread = "t" + std::to_string(gen() % 40);
  switch (gen() % 8) {
    case 0: st.add(thread); break;
    case 1:
      st.update(thread, [&](thread_entry& e) {
        e.routed = ++seq;
        e.evicting = false;
      });
      break;
    case 2:
      st.update(thread, [](thread_entry& e) { e.evicting = true; });
      break;
    case 3:
      if (st.threads.count(thread) > 0)
        st.update(thread, [](thread_entry& e) { e.evicting = false; });
      break;
    case 4:
      st.update(thread, [](thread_entry& e) { e.stopping = true; });
      break;
    case 5:
    case 6:
      if (auto i = st.threads.find(thread); i != st.threads.end())
        st.erase(i);
      break;
    default:
      if (gen() % 10 == 0)
        st.take_all();
  }
}

} // namespace

CAF_TEST(the live index answers what a scan of the table answers) {
  std::mt19937 gen{20261127};
  for (int round = 0; round < 200; ++round) {
    orchestrator_state st;
    st.cfg.max_live = 1 + gen() % 30;
    uint64_t seq = 0;
    for (int step = 0; step < 300; ++step) {
      random_operation(st, gen, seq);
      CAF_REQUIRE_EQUAL(st.live.size(), live_by_scan(st));
      CAF_REQUIRE_EQUAL(st.at_live_limit(),
                        live_by_scan(st) >= st.cfg.max_live);
      auto thread = "t" + std::to_string(gen() % 40);
      std::vector<std::string> skip{"t" + std::to_string(gen() % 40),
                                    "t" + std::to_string(gen() % 40)};
      CAF_REQUIRE_EQUAL(st.idlest(thread, skip),
                        idlest_by_scan(st, thread, skip));
    }
  }
}

CAF_TEST(the idlest is the live one routed to least recently) {
  orchestrator_state st;
  st.update("a", [](thread_entry& e) { e.routed = 5; });
  st.update("b", [](thread_entry& e) { e.routed = 3; });
  st.update("c", [](thread_entry& e) { e.routed = 9; });
  CAF_CHECK_EQUAL(st.idlest("", {}), "b");
  CAF_CHECK_EQUAL(st.idlest("b", {}), "a");
  CAF_CHECK_EQUAL(st.idlest("", {"b", "a"}), "c");
  st.update("b", [](thread_entry& e) { e.evicting = true; });
  CAF_CHECK_EQUAL(st.idlest("", {}), "a");
  st.update("a", [](thread_entry& e) { e.stopping = true; });
  CAF_CHECK_EQUAL(st.idlest("", {}), "c");
  CAF_CHECK_EQUAL(st.idlest("c", {}), "");
  CAF_CHECK_EQUAL(st.live.size(), 1u);
}
