#pragma once

// File-system faults a store injects on demand (a test hook; see
// `store_options::faults`).

#include <atomic>
#include <cstdint>

namespace keel {

/// A test hook: file-system faults the store injects on demand. The store
/// routes every file it writes through a wrapper that reads these flags on
/// each write, so a test may flip them at any time, from any thread. Meant
/// for tests and chaos runs only; grows with the fault scenarios we test.
struct fault_injection {
  /// While true, every append to a database file (WAL, SST, MANIFEST,
  /// CURRENT) fails before any byte reaches the file.
  std::atomic<bool> fail_writes{false};
  /// While true, injected failures report "no space left on device" rather
  /// than a generic I/O error.
  std::atomic<bool> no_space{false};
  /// Number of writes failed so far.
  std::atomic<uint64_t> failed_writes{0};
};

} // namespace keel
