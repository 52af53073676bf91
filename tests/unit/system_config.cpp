#define CAF_SUITE system_config

// What a node's configuration asks of the actor system before it starts:
// the scheduler's policy and its number of worker threads.

#include <caf/test/unit_test.hpp>

#include <thread>

#include <caf/all.hpp>

#include "keel/config.hpp"
#include "keel/system_config.hpp"

using namespace keel;

namespace {

size_t configured_workers(const system_config& cfg) {
  return caf::get_or(cfg, "scheduler.max-threads", size_t{0});
}

caf::atom_value configured_policy(const system_config& cfg) {
  return caf::get_or(cfg, "scheduler.policy", caf::atom(""));
}

} // namespace

CAF_TEST(the scheduler has one worker per core and at least two by default) {
  auto cores = static_cast<size_t>(std::thread::hardware_concurrency());
  size_t expected = cores > 2 ? cores : 2;
  CAF_CHECK_EQUAL(scheduler_workers(0), expected);
  node_config node;
  system_config cfg;
  cfg.configure_node(node);
  CAF_CHECK_EQUAL(configured_workers(cfg), expected);
  CAF_CHECK_EQUAL(configured_policy(cfg), caf::atom("sharing"));
}

CAF_TEST(node workers and scheduler set the scheduler as configured) {
  node_config node;
  node.workers = 7;
  node.scheduler = scheduler_policy::stealing;
  system_config cfg;
  cfg.configure_node(node);
  CAF_CHECK_EQUAL(scheduler_workers(1), 1u);
  CAF_CHECK_EQUAL(configured_workers(cfg), 7u);
  CAF_CHECK_EQUAL(configured_policy(cfg), caf::atom("stealing"));
}
