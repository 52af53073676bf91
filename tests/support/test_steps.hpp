#pragma once

// Steps a test cannot go on without, for suites that must report rather
// than abort. CAF's CAF_REQUIRE aborts the whole run, and an exception out
// of a test ends it in std::terminate: one broken step (a node or a store
// that does not open on a broken build) would hide every later test behind
// a crash. Inside `run_steps`, a failed KEEL_REQUIRE is a failed check
// naming the expression and its values that ends only this test, and so
// is any exception (with its text); the suite goes on with the next test.

#include <exception>

#include <caf/test/unit_test.hpp>

namespace keel::test {

/// CAF_CHECK_FAILED names caf::term unqualified.
using caf::term;

/// Thrown by a failed KEEL_REQUIRE (after its failed check); caught by
/// `run_steps`.
struct test_stopped {};

/// Runs the steps of a test (see the top of this file).
template <class Steps>
void run_steps(Steps&& steps) {
  try {
    steps();
  } catch (const test_stopped&) {
    // The failed check is made.
  } catch (const std::exception& e) {
    CAF_CHECK_FAILED("the test stopped on an exception: " << e.what());
  }
}

} // namespace keel::test

/// CAF_REQUIRE that ends only the test (inside `run_steps`).
#define KEEL_REQUIRE(...)                                                      \
  do {                                                                         \
    auto keel_ok_ = ::caf::test::detail::check(                                \
      ::caf::test::engine::current_test(), __FILE__, __LINE__, #__VA_ARGS__,   \
      false, static_cast<bool>(__VA_ARGS__));                                  \
    ::caf::test::engine::last_check_file(__FILE__);                            \
    ::caf::test::engine::last_check_line(__LINE__);                            \
    if (!keel_ok_)                                                             \
      throw ::keel::test::test_stopped{};                                      \
  } while (false)

/// CAF_REQUIRE_EQUAL that ends only the test (inside `run_steps`).
#define KEEL_REQUIRE_EQUAL(x, y)                                               \
  do {                                                                         \
    auto&& keel_x_ = x;                                                        \
    auto&& keel_y_ = y;                                                        \
    auto keel_ok_ = ::caf::test::detail::check(                                \
      ::caf::test::engine::current_test(), __FILE__, __LINE__,                 \
      CAF_FUNC_EXPR(::caf::test::equal_to, x, y), false,                       \
      ::caf::test::equal_to{}(keel_x_, keel_y_), keel_x_, keel_y_);            \
    ::caf::test::engine::last_check_file(__FILE__);                            \
    ::caf::test::engine::last_check_line(__LINE__);                            \
    if (!keel_ok_)                                                             \
      throw ::keel::test::test_stopped{};                                      \
  } while (false)

/// CAF_FAIL that ends only the test (inside `run_steps`).
#define KEEL_FAIL(msg)                                                         \
  do {                                                                         \
    CAF_CHECK_FAILED(msg);                                                     \
    throw ::keel::test::test_stopped{};                                        \
  } while (false)
