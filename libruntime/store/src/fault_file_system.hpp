#pragma once

// A RocksDB file system that injects the faults of a `fault_injection`.

#include <memory>

#include <rocksdb/file_system.h>

#include "keel/fault_injection.hpp"

namespace keel::store_backend {

/// Returns the default file system with every writable file wrapped so that
/// its appends fail (before any byte reaches the file) while
/// `faults->fail_writes` is set, counting them in `faults->failed_writes`.
std::shared_ptr<rocksdb::FileSystem>
make_faulty_file_system(std::shared_ptr<fault_injection> faults);

} // namespace keel::store_backend
