#define CAF_SUITE crash_fuzz

#include <caf/test/unit_test.hpp>

#include <set>
#include <string>
#include <vector>

#include "keel/tools/crash_fuzz.hpp"

// The crash fuzzer's generator (keel/tools/crash_fuzz.hpp): a seed alone
// decides every plan, so a failing seed replays the same operations.

using namespace keel;
using namespace keel::fuzz;

namespace {

// Every plan of `iterations` iterations, one line per op and kill plan.
std::vector<std::string> plans(uint64_t seed, uint64_t iterations,
                               features feats = {}) {
  generator gen{seed, feats};
  std::vector<std::string> result;
  for (uint64_t i = 0; i < iterations; ++i) {
    auto plan = gen.next();
    result.push_back("iteration " + std::to_string(plan.index) + ": "
                     + to_string(plan.kill) + " (storage timeout "
                     + plan.storage_timeout + ")");
    for (auto& x : plan.ops)
      result.push_back(to_string(x));
  }
  return result;
}

} // namespace

CAF_TEST(the same seed gives the same plans) {
  CAF_CHECK(plans(42, 30) == plans(42, 30));
  CAF_CHECK(plans(7, 30, features{false, false})
            == plans(7, 30, features{false, false}));
}

CAF_TEST(different seeds give different plans) {
  CAF_CHECK(plans(1, 5) != plans(2, 5));
  CAF_CHECK(plans(3, 5) != plans(4, 5));
}

CAF_TEST(the first round visits every kill mode once) {
  generator gen{9, features{}};
  std::set<std::string> modes;
  auto rounds = all_kill_points().size() + 1;
  for (size_t i = 0; i < rounds; ++i) {
    auto plan = gen.next();
    modes.insert(plan.kill.at_point ? to_string(plan.kill.point) : "instant");
    if (plan.kill.at_point)
      CAF_CHECK_EQUAL(plan.kill.probability, 1.0);
  }
  CAF_CHECK_EQUAL(modes.size(), rounds);
}

CAF_TEST(on postgres the first round also kills the database server) {
  // One more mode in the first round: kill -9 of the PostgreSQL server after
  // an acknowledgement, with a planned outage and nothing that needs a
  // restart of the node (no recovery crash, no corrupted record).
  features on_postgres;
  on_postgres.database_server = true;
  generator gen{9, on_postgres};
  std::set<std::string> modes;
  auto rounds = all_kill_points().size() + 2;
  for (size_t i = 0; i < rounds; ++i) {
    auto plan = gen.next();
    if (plan.kill.database_kill) {
      modes.insert("database");
      CAF_CHECK(!plan.kill.at_point);
      CAF_CHECK_GREATER_OR_EQUAL(plan.kill.after_acks, 1u);
      CAF_CHECK(!plan.kill.recovery_crash);
      CAF_CHECK(!plan.kill.corrupt_context);
    } else {
      modes.insert(plan.kill.at_point ? to_string(plan.kill.point) : "instant");
    }
  }
  CAF_CHECK_EQUAL(modes.size(), rounds);
  CAF_CHECK_EQUAL(modes.count("database"), 1u);
}

CAF_TEST(without a database server no plan kills one) {
  generator gen{20251, features{}};
  for (int i = 0; i < 300; ++i)
    CAF_CHECK(!gen.next().kill.database_kill);
}

CAF_TEST(plans follow the model) {
  // Sends go to open threads, refused sends to closed ones, spawns under
  // open parents, resends repeat an earlier id of their thread; a kill -9
  // comes after an acknowledgement the plan has.
  generator gen{123, features{}};
  generator_options shape;
  std::map<std::string, bool> closed;
  std::map<std::string, std::set<std::string>> sent;
  uint64_t generation = 0;
  for (int i = 0; i < 200; ++i) {
    auto plan = gen.next();
    if (plan.generation != generation) {
      generation = plan.generation;
      closed.clear();
      sent.clear();
    }
    size_t acks = 0;
    for (auto& x : plan.ops) {
      switch (x.kind) {
        case op_kind::send:
          CAF_CHECK(!closed[x.thread]);
          CAF_CHECK(sent[x.thread].insert(x.id).second);
          ++acks;
          break;
        case op_kind::resend:
          CAF_CHECK(!closed[x.thread]);
          CAF_CHECK(sent[x.thread].count(x.id) == 1);
          ++acks;
          break;
        case op_kind::send_closed: CAF_CHECK(closed[x.thread]); break;
        case op_kind::spawn:
          CAF_CHECK(!closed[x.thread]);
          CAF_CHECK(closed.count(x.child) == 0);
          closed[x.child] = false;
          break;
        case op_kind::cancel: {
          CAF_CHECK(!closed[x.thread]);
          std::vector<std::string> todo{x.thread};
          while (!todo.empty()) {
            auto t = todo.back();
            todo.pop_back();
            closed[t] = true;
            for (auto& c : gen.threads().at(t).children)
              todo.push_back(c);
          }
          break;
        }
      }
    }
    CAF_CHECK(plan.ops.size() >= shape.min_ops);
    if (!plan.kill.at_point) {
      CAF_CHECK(plan.kill.after_acks >= 1);
      CAF_CHECK(plan.kill.after_acks <= acks);
    }
  }
}

CAF_TEST(some generations time storage out and some iterations corrupt) {
  // A generation's storage timeout is the default or a short one, the same
  // for all its iterations; both kinds of generation come up, and so do
  // iterations that corrupt a context record before a restart.
  generator gen{20251, features{}};
  std::set<std::string> timeouts;
  size_t corrupting = 0;
  std::string current;
  for (int i = 0; i < 200; ++i) {
    auto plan = gen.next();
    if (plan.first_of_generation)
      current = plan.storage_timeout;
    CAF_CHECK_EQUAL(plan.storage_timeout, current);
    timeouts.insert(plan.storage_timeout);
    corrupting += plan.kill.corrupt_context ? 1 : 0;
  }
  CAF_CHECK_EQUAL(timeouts.count(""), 1u);
  CAF_CHECK_GREATER(timeouts.size(), 1u);
  CAF_CHECK_GREATER(corrupting, 0u);
}
