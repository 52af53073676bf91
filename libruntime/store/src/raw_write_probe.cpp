#include "keel/raw_write_probe.hpp"

#include <atomic>
#include <filesystem>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include <unistd.h>

#include <rocksdb/db.h>
#include <rocksdb/options.h>

#include "keel/text.hpp"

namespace keel {

caf::expected<raw_write_result>
measure_raw_synced_writes(const raw_write_options& opts) {
  namespace fs = std::filesystem;
  if (opts.concurrency == 0)
    return caf::make_error(ec::config_invalid,
                           "raw writes: concurrency must be at least 1");
  std::error_code err;
  bool created_parent = !fs::exists(opts.dir, err);
  fs::create_directories(opts.dir, err);
  if (err)
    return caf::make_error(ec::storage_open_failed,
                           opts.dir + ": cannot create: " + err.message());
  // A fresh database in its own subfolder: never touch what is already there.
  auto path = (fs::path{opts.dir}
               / ("raw-" + std::to_string(::getpid()) + "-" + random_hex(8)))
                .string();
  rocksdb::Options options;
  options.create_if_missing = true;
  options.error_if_exists = true;
  rocksdb::DB* raw_db = nullptr;
  auto st = rocksdb::DB::Open(options, path, &raw_db);
  if (!st.ok())
    return caf::make_error(ec::storage_open_failed,
                           path + ": " + st.ToString());
  std::unique_ptr<rocksdb::DB> db{raw_db};
  std::atomic<bool> go{false};
  std::atomic<bool> stop{false};
  std::atomic<bool> failed{false};
  std::string first_failure;
  std::mutex failure_mtx;
  std::vector<uint64_t> counts(opts.concurrency, 0);
  std::vector<std::thread> writers;
  writers.reserve(opts.concurrency);
  for (size_t i = 0; i < opts.concurrency; ++i) {
    writers.emplace_back([&, i] {
      rocksdb::WriteOptions wopts;
      wopts.sync = true;
      std::string value(opts.value_bytes, 'v');
      auto prefix = "t" + std::to_string(i) + "/";
      while (!go.load(std::memory_order_acquire))
        std::this_thread::yield();
      uint64_t n = 0;
      while (!stop.load(std::memory_order_relaxed)) {
        auto s = db->Put(wopts, prefix + std::to_string(n), value);
        if (!s.ok()) {
          std::lock_guard<std::mutex> guard{failure_mtx};
          if (first_failure.empty())
            first_failure = s.ToString();
          failed = true;
          stop = true;
          break;
        }
        ++n;
      }
      counts[i] = n;
    });
  }
  auto start = std::chrono::steady_clock::now();
  go.store(true, std::memory_order_release);
  std::this_thread::sleep_for(opts.duration);
  stop = true;
  for (auto& t : writers)
    t.join();
  auto elapsed = std::chrono::duration<double>(
                   std::chrono::steady_clock::now() - start)
                   .count();
  db.reset();
  rocksdb::DestroyDB(path, options);
  fs::remove_all(path, err);
  if (created_parent && fs::is_empty(opts.dir, err))
    fs::remove(opts.dir, err);
  if (failed)
    return caf::make_error(ec::storage_io, path + ": " + first_failure);
  raw_write_result result;
  result.path = path;
  result.concurrency = opts.concurrency;
  result.value_bytes = opts.value_bytes;
  for (auto n : counts)
    result.writes += n;
  result.seconds = elapsed;
  result.writes_per_second = elapsed > 0 ? result.writes / elapsed : 0;
  return result;
}

} // namespace keel
