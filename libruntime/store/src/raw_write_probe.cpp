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

namespace {

// What the writer threads of one measurement share.
struct writer_race {
  std::atomic<bool> go{false};
  std::atomic<bool> stop{false};
  std::atomic<bool> failed{false};
  std::mutex failure_mtx;
  // The first failed write's status, guarded by failure_mtx.
  std::string first_failure;
};

// One writer: once the race starts, synced Puts of `value_bytes` under its
// own key prefix until the race stops (or a write fails, which stops all).
// Returns the number of writes.
uint64_t write_until_stopped(rocksdb::DB& db, writer_race& race, size_t index,
                             size_t value_bytes) {
  rocksdb::WriteOptions wopts;
  wopts.sync = true;
  std::string value(value_bytes, 'v');
  auto prefix = "t" + std::to_string(index) + "/";
  while (!race.go.load(std::memory_order_acquire))
    std::this_thread::yield();
  uint64_t n = 0;
  while (!race.stop.load(std::memory_order_relaxed)) {
    auto s = db.Put(wopts, prefix + std::to_string(n), value);
    if (!s.ok()) {
      std::lock_guard<std::mutex> guard{race.failure_mtx};
      if (race.first_failure.empty())
        race.first_failure = s.ToString();
      race.failed = true;
      race.stop = true;
      break;
    }
    ++n;
  }
  return n;
}

// Runs `opts.concurrency` writers for `opts.duration`; stores their writes
// and the wall time in `result`.
void run_writers(rocksdb::DB& db, const raw_write_options& opts,
                 writer_race& race, raw_write_result& result) {
  std::vector<uint64_t> counts(opts.concurrency, 0);
  std::vector<std::thread> writers;
  writers.reserve(opts.concurrency);
  for (size_t i = 0; i < opts.concurrency; ++i)
    writers.emplace_back([&, i] {
      counts[i] = write_until_stopped(db, race, i, opts.value_bytes);
    });
  auto start = std::chrono::steady_clock::now();
  race.go.store(true, std::memory_order_release);
  std::this_thread::sleep_for(opts.duration);
  race.stop = true;
  for (auto& t : writers)
    t.join();
  result.seconds
    = std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
        .count();
  for (auto n : counts)
    result.writes += n;
}

} // namespace

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
  raw_write_result result;
  writer_race race;
  run_writers(*db, opts, race, result);
  db.reset();
  rocksdb::DestroyDB(path, options);
  fs::remove_all(path, err);
  if (created_parent && fs::is_empty(opts.dir, err))
    fs::remove(opts.dir, err);
  if (race.failed)
    return caf::make_error(ec::storage_io, path + ": " + race.first_failure);
  result.path = path;
  result.concurrency = opts.concurrency;
  result.value_bytes = opts.value_bytes;
  result.writes_per_second = result.seconds > 0 ? result.writes / result.seconds
                                                : 0;
  return result;
}

} // namespace keel
