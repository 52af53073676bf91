#define CAF_SUITE request_budget

#include "keel/request_budget.hpp"

#include <caf/test/unit_test.hpp>

using namespace keel;

CAF_TEST(a connection gets at most its requests under way) {
  request_budget budget{3, 1};
  CAF_CHECK(budget.admit(1, false));
  CAF_CHECK(budget.admit(1, true));
  // One history request under way: a second waits for its answer.
  CAF_CHECK(!budget.admit(1, true));
  CAF_CHECK(budget.admit(1, false));
  CAF_CHECK(!budget.admit(1, false));
  CAF_CHECK_EQUAL(budget.in_flight(1), 3u);
  // Another connection has its own budget.
  CAF_CHECK(budget.admit(2, true));
  // An answer frees its slot.
  budget.release(1, true);
  CAF_CHECK(budget.admit(1, true));
  CAF_CHECK(budget.refusal(false).find("gateway.max_requests_in_flight")
            != std::string::npos);
}

CAF_TEST(a closed connection is forgotten and late answers release nothing) {
  request_budget budget{2, 1};
  CAF_CHECK(budget.admit(7, true));
  CAF_CHECK(budget.admit(7, false));
  budget.drop(7);
  CAF_CHECK_EQUAL(budget.in_flight(7), 0u);
  budget.release(7, true);
  budget.release(7, false);
  CAF_CHECK_EQUAL(budget.in_flight(7), 0u);
  CAF_CHECK(budget.admit(7, true));
  CAF_CHECK_EQUAL(budget.in_flight(7), 1u);
}
