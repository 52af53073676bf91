#define CAF_SUITE connection_budget
#include <caf/test/unit_test.hpp>

#include "keel/connection_budget.hpp"

using namespace keel;

CAF_TEST(a full budget makes room by closing the oldest) {
  connection_budget budget{3, 2};
  CAF_CHECK(!budget.admit(1, "a"));
  CAF_CHECK(!budget.admit(2, "b"));
  CAF_CHECK(!budget.admit(3, "c"));
  CAF_CHECK_EQUAL(budget.admit(4, "d"), std::optional<uint64_t>{1});
  CAF_CHECK_EQUAL(budget.size(), 3u);
  CAF_CHECK_EQUAL(budget.count("a"), 0u);
  // The one that left is gone: removing it again says so.
  CAF_CHECK(!budget.remove(1));
  CAF_CHECK(budget.remove(3));
  CAF_CHECK(!budget.admit(5, "e"));
}

CAF_TEST(an address at its cap gives up its own oldest) {
  connection_budget budget{10, 2};
  CAF_CHECK(!budget.admit(1, "x"));
  CAF_CHECK(!budget.admit(2, "y"));
  CAF_CHECK(!budget.admit(3, "x"));
  CAF_CHECK_EQUAL(budget.admit(4, "x"), std::optional<uint64_t>{1});
  CAF_CHECK_EQUAL(budget.count("x"), 2u);
  CAF_CHECK_EQUAL(budget.count("y"), 1u);
  CAF_CHECK_EQUAL(budget.admit(5, "x"), std::optional<uint64_t>{3});
  CAF_CHECK(budget.remove(2));
  CAF_CHECK_EQUAL(budget.count("y"), 0u);
  CAF_CHECK_EQUAL(budget.size(), 2u);
}
