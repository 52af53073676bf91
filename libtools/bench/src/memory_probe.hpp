#pragma once

// What keel-bench's memory runs share: reading the node's status and
// waiting for its RSS to settle. Private to libtools.

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "keel/endpoint.hpp"
#include "keel/tools/bench_memory.hpp"

namespace keel::bench::detail {

/// Waits this long (the caller decides how: sleeping, or running its I/O).
using wait_fn = std::function<void(std::chrono::milliseconds)>;

/// Polls the node's status every 500 ms until its `rss_bytes` grew by at
/// most 256 KiB since the previous poll, for at most `rss_settle_timeout`,
/// calling `wait` between polls. Stores the last status read in `status`.
/// A failed read is added to `problems` and ends the polling.
settled_rss settle_node_rss(const endpoint& node, const wait_fn& wait,
                            nlohmann::json& status,
                            std::vector<std::string>& problems);

/// (after - before) / count as a signed figure; 0 when `count` is 0.
double bytes_per(uint64_t before, uint64_t after, size_t count);

} // namespace keel::bench::detail
