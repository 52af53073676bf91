#include "keel/kill_point.hpp"

#include <array>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <random>
#include <unistd.h>

namespace keel {

namespace {

constexpr size_t point_count = 10;

constexpr std::array<const char*, point_count> point_names{
  "session_created",       "session_written",     "provider_call",
  "call_completed",        "message_enqueued",    "tree_link_written",
  "batch_written",         "tool_call_committed", "tool_finished",
  "compaction_summarized",
};

std::array<std::atomic<uint64_t>, point_count> hits{};

// The armed point, or point_count when none is. Checked without the lock;
// the draw takes it (a generator is not thread-safe).
std::atomic<size_t> armed_point{point_count};
std::mutex draw_mtx;
double armed_probability = 1.0;
std::mt19937_64 draw_engine;

[[noreturn]] void die(kill_point point, uint64_t hit) {
  // write(2) only: no allocation, no stdio buffers, exactly like a crash.
  char line[128];
  auto n = std::snprintf(line, sizeof(line),
                         "keel: kill point %s fired (hit %llu)\n",
                         to_string(point),
                         static_cast<unsigned long long>(hit));
  if (n > 0) [[maybe_unused]]
    auto written = ::write(STDERR_FILENO, line, static_cast<size_t>(n));
  ::raise(SIGKILL);
  std::_Exit(137); // Unreachable: SIGKILL cannot be caught.
}

} // namespace

const std::vector<kill_point>& all_kill_points() {
  static const std::vector<kill_point> points = [] {
    std::vector<kill_point> result;
    for (size_t i = 0; i < point_count; ++i)
      result.push_back(static_cast<kill_point>(i));
    return result;
  }();
  return points;
}

const char* to_string(kill_point x) {
  auto i = static_cast<size_t>(x);
  return i < point_count ? point_names[i] : "invalid";
}

caf::expected<kill_point> parse_kill_point(std::string_view name) {
  for (size_t i = 0; i < point_count; ++i)
    if (name == point_names[i])
      return static_cast<kill_point>(i);
  std::string known;
  for (auto n : point_names)
    known += (known.empty() ? "" : ", ") + std::string{n};
  return caf::make_error(ec::config_invalid, "unknown kill point '"
                                               + std::string{name}
                                               + "' (known: " + known + ")");
}

caf::expected<kill_point_arming>
parse_kill_point_arming(std::string_view spec) {
  kill_point_arming result;
  std::vector<std::string> parts;
  for (size_t begin = 0;;) {
    auto colon = spec.find(':', begin);
    parts.emplace_back(spec.substr(begin, colon - begin));
    if (colon == std::string_view::npos)
      break;
    begin = colon + 1;
  }
  if (parts.size() > 3)
    return caf::make_error(ec::config_invalid,
                           "kill point arming '" + std::string{spec}
                             + "' is not point[:probability[:seed]]");
  auto point = parse_kill_point(parts[0]);
  if (!point)
    return point.error();
  result.point = *point;
  if (parts.size() > 1) {
    char* end = nullptr;
    auto p = std::strtod(parts[1].c_str(), &end);
    if (parts[1].empty() || *end != '\0' || !(p > 0.0 && p <= 1.0))
      return caf::make_error(ec::config_invalid,
                             "kill point probability '" + parts[1]
                               + "' is not a number in (0, 1]");
    result.probability = p;
  }
  if (parts.size() > 2) {
    char* end = nullptr;
    auto seed = std::strtoull(parts[2].c_str(), &end, 10);
    if (parts[2].empty() || *end != '\0')
      return caf::make_error(ec::config_invalid,
                             "kill point seed '" + parts[2]
                               + "' is not a non-negative integer");
    result.seed = seed;
  }
  return result;
}

void arm_kill_point(const kill_point_arming& arming) {
  std::lock_guard<std::mutex> guard{draw_mtx};
  armed_probability = arming.probability;
  auto seed = arming.seed != 0
                ? arming.seed
                : static_cast<uint64_t>(
                  std::chrono::steady_clock::now().time_since_epoch().count());
  draw_engine.seed(seed);
  armed_point = static_cast<size_t>(arming.point);
}

caf::error arm_kill_point_from_env() {
  auto value = std::getenv("KEEL_KILL_AT");
  if (value == nullptr || *value == '\0')
    return {};
  auto arming = parse_kill_point_arming(value);
  if (!arming)
    return caf::make_error(ec::config_invalid,
                           "KEEL_KILL_AT: " + error_message(arming.error()));
  arm_kill_point(*arming);
  return {};
}

void disarm_kill_point() {
  armed_point = point_count;
}

void reach(kill_point point) {
  auto i = static_cast<size_t>(point);
  auto hit = hits[i].fetch_add(1, std::memory_order_relaxed) + 1;
  if (armed_point.load(std::memory_order_relaxed) != i)
    return;
  std::lock_guard<std::mutex> guard{draw_mtx};
  std::uniform_real_distribution<double> draw{0.0, 1.0};
  if (armed_probability >= 1.0 || draw(draw_engine) < armed_probability)
    die(point, hit);
}

uint64_t kill_point_hits(kill_point point) {
  return hits[static_cast<size_t>(point)].load(std::memory_order_relaxed);
}

} // namespace keel
