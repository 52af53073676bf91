#include "keel/fd_limit.hpp"

#include <cerrno>
#include <cstring>
#include <string>

#include <spdlog/spdlog.h>
#include <sys/resource.h>

#include "keel/error.hpp"

namespace keel {

size_t fds_needed(size_t connections, size_t store_files) {
  return connections + store_files + fd_reserve;
}

caf::error ensure_fd_limit(size_t connections, size_t store_files) {
  auto needed = fds_needed(connections, store_files);
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
    return caf::make_error(ec::config_invalid,
                           std::string{"cannot read RLIMIT_NOFILE: "}
                             + std::strerror(errno));
  if (rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur >= needed)
    return caf::none;
  if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < needed) {
    auto reserved = store_files + fd_reserve;
    auto fits = rl.rlim_max > reserved ? rl.rlim_max - reserved : 0;
    return caf::make_error(
      ec::config_invalid,
      "gateway.max_connections plus gateway.max_unauthenticated is "
        + std::to_string(connections) + ", which needs "
        + std::to_string(needed) + " open files (the connections plus "
        + std::to_string(reserved)
        + " for the store, logs and providers), but the hard limit of open "
          "files is "
        + std::to_string(rl.rlim_max)
        + ": raise it (ulimit -Hn, LimitNOFILE= in a systemd unit) or lower "
          "the two to at most "
        + std::to_string(fits) + " together");
  }
  auto before = rl.rlim_cur;
  rl.rlim_cur = needed;
  if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
    return caf::make_error(
      ec::config_invalid,
      "cannot raise the open files limit to " + std::to_string(needed)
        + " for the gateway's connections: " + std::strerror(errno));
  spdlog::info("raised the open files limit from {} to {} for {} "
               "gateway connections (max_connections plus "
               "max_unauthenticated)",
               before, needed, connections);
  return caf::none;
}

} // namespace keel
