#pragma once

// What every fuzz target shares: a property check that stops the run with a
// message (libFuzzer then saves the input as a crash artifact), and a guard
// that turns an escaping exception into such a failure, naming it.

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <string_view>

namespace keel::fuzz {

/// Reports a broken property and aborts.
[[noreturn]] inline void fail(const std::string& what) {
  std::fprintf(stderr, "property violated: %s\n", what.c_str());
  std::abort();
}

/// Aborts with `what` unless `ok`.
inline void require(bool ok, const char* what) {
  if (!ok)
    fail(what);
}

/// Runs `body`; no exception may escape the code under test.
template <class F>
int guarded(F&& body) {
  try {
    body();
  } catch (const std::exception& e) {
    fail(std::string{"exception escaped: "} + e.what());
  } catch (...) {
    fail("exception of unknown type escaped");
  }
  return 0;
}

/// The input as text.
inline std::string_view as_text(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

} // namespace keel::fuzz
