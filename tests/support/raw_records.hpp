#pragma once

// Writes to a closed node database behind the store's back, as a bad disk,
// a bad restore or an old format would leave it: the store's record keys
// and a raw put. Free of test-framework macros, so that test tools (the
// crash fuzzer) use it as well as the test suites (store_fixture.hpp).

#include <algorithm>
#include <string>
#include <vector>

#include <rocksdb/db.h>

#include "keel/types.hpp"

namespace keel::test {

/// The key of `seq` in `thread` (thread/8-byte big-endian seq).
inline std::string seq_key(const std::string& thread, seq_t seq) {
  auto key = thread + '/';
  for (int shift = 56; shift >= 0; shift -= 8)
    key += static_cast<char>((seq >> shift) & 0xFF);
  return key;
}

/// Writes `value` under `key` in column family `cf` of the closed database
/// in `dir`, creating `cf` if it does not exist. Returns "OK", or what
/// RocksDB said went wrong.
inline std::string
write_raw_record(const std::string& dir, const std::string& cf,
                 const std::string& key, const std::string& value) {
  rocksdb::Options opts;
  opts.create_missing_column_families = true;
  std::vector<std::string> names;
  auto status = rocksdb::DB::ListColumnFamilies(opts, dir, &names);
  if (!status.ok())
    return status.ToString();
  if (std::find(names.begin(), names.end(), cf) == names.end())
    names.push_back(cf);
  std::vector<rocksdb::ColumnFamilyDescriptor> descriptors;
  for (auto& name : names)
    descriptors.emplace_back(name, rocksdb::ColumnFamilyOptions{});
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  rocksdb::DB* raw = nullptr;
  status = rocksdb::DB::Open(opts, dir, descriptors, &handles, &raw);
  if (!status.ok())
    return status.ToString();
  for (auto* handle : handles)
    if (handle->GetName() == cf)
      status = raw->Put(rocksdb::WriteOptions{}, handle, key, value);
  for (auto* handle : handles)
    raw->DestroyColumnFamilyHandle(handle);
  delete raw;
  return status.ToString();
}

} // namespace keel::test
