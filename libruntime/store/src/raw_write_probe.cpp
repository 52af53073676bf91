#include "keel/raw_write_probe.hpp"

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include <unistd.h>

#include <rocksdb/db.h>
#include <rocksdb/options.h>

#include "keel/proc.hpp"
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

// Paces `opts.writes_per_message` synced Puts per message at `opts.rate`
// messages a second on this thread until `opts.duration` has passed (a
// disk slower than the pace ends the run on time with fewer messages);
// stores the messages, the wall time and the process's CPU time in
// `result`, or why the CPU time cannot be read in `cpu_failure`. Returns
// the first failed write's status, or an empty string.
std::string write_paced(rocksdb::DB& db, const paced_write_options& opts,
                        paced_write_result& result, caf::error& cpu_failure) {
  using clock = std::chrono::steady_clock;
  rocksdb::WriteOptions wopts;
  wopts.sync = true;
  std::string value(opts.value_bytes, 'v');
  auto interval = std::chrono::duration<double>{1.0 / opts.rate};
  auto cpu_before = read_cpu_seconds();
  auto start = clock::now();
  auto end = start + opts.duration;
  std::string failure;
  uint64_t n = 0;
  for (auto due = start; due < end && clock::now() < end && failure.empty();
       due = start
             + std::chrono::duration_cast<clock::duration>(interval * n)) {
    std::this_thread::sleep_until(due);
    for (size_t w = 0; w < opts.writes_per_message && failure.empty(); ++w) {
      auto s = db.Put(wopts, std::to_string(n) + "/" + std::to_string(w),
                      value);
      if (!s.ok())
        failure = s.ToString();
    }
    ++n;
  }
  result.seconds = std::chrono::duration<double>(clock::now() - start).count();
  result.messages = n;
  auto cpu_after = read_cpu_seconds();
  if (cpu_before && cpu_after)
    result.cpu_seconds = std::max(*cpu_after - *cpu_before, 0.0);
  else
    cpu_failure = cpu_before ? cpu_after.error() : cpu_before.error();
  return failure;
}

// Runs `measure` on a fresh database in its own subfolder of `dir` (never
// touching what is already there), then removes the database, and `dir`
// too if this made it and it is empty. `measure` returns the first failed
// write's status or an empty string; `path` receives the database folder.
caf::error
with_fresh_db(const std::string& dir, std::string& path,
              const std::function<std::string(rocksdb::DB&)>& measure) {
  namespace fs = std::filesystem;
  std::error_code err;
  bool created_parent = !fs::exists(dir, err);
  fs::create_directories(dir, err);
  if (err)
    return caf::make_error(ec::storage_open_failed,
                           dir + ": cannot create: " + err.message());
  path = (fs::path{dir}
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
  auto failure = measure(*db);
  db.reset();
  rocksdb::DestroyDB(path, options);
  fs::remove_all(path, err);
  if (created_parent && fs::is_empty(dir, err))
    fs::remove(dir, err);
  if (!failure.empty())
    return caf::make_error(ec::storage_io, path + ": " + failure);
  return caf::none;
}

} // namespace

caf::expected<raw_write_result>
measure_raw_synced_writes(const raw_write_options& opts) {
  if (opts.concurrency == 0)
    return caf::make_error(ec::config_invalid,
                           "raw writes: concurrency must be at least 1");
  raw_write_result result;
  auto err = with_fresh_db(opts.dir, result.path, [&](rocksdb::DB& db) {
    writer_race race;
    run_writers(db, opts, race, result);
    return race.failed ? race.first_failure : std::string{};
  });
  if (err)
    return err;
  result.concurrency = opts.concurrency;
  result.value_bytes = opts.value_bytes;
  result.writes_per_second = result.seconds > 0 ? result.writes / result.seconds
                                                : 0;
  return result;
}

caf::expected<paced_write_result>
measure_paced_synced_writes(const paced_write_options& opts) {
  auto seconds = std::chrono::duration<double>{opts.duration}.count();
  if (!(opts.rate * seconds >= 1) || opts.writes_per_message == 0)
    return caf::make_error(ec::config_invalid,
                           "paced writes: at least one message in the "
                           "duration and one write per message needed");
  paced_write_result result;
  caf::error cpu_failure;
  auto err = with_fresh_db(opts.dir, result.path, [&](rocksdb::DB& db) {
    return write_paced(db, opts, result, cpu_failure);
  });
  if (err)
    return err;
  if (cpu_failure)
    return caf::make_error(ec::not_found,
                           "paced writes: cannot read this process's CPU "
                           "time: "
                             + readable_message(cpu_failure));
  result.rate = opts.rate;
  result.writes_per_message = opts.writes_per_message;
  result.value_bytes = opts.value_bytes;
  return result;
}

} // namespace keel
