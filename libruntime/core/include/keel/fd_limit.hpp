#pragma once

// The node's file descriptor budget: every gateway connection is a
// descriptor, and so are RocksDB's table files, the log, provider
// connections and the listening socket. The node makes sure at start that
// RLIMIT_NOFILE fits `gateway.max_connections` plus
// `gateway.max_unauthenticated`, so it refuses clients with
// a 503 at its own limit instead of failing `accept` (or a RocksDB open)
// with EMFILE under load.

#include <cstddef>

#include <caf/error.hpp>

namespace keel {

/// Descriptors the node keeps besides its connections and RocksDB's table
/// files: standard streams, the log file, the listening socket, provider
/// connections (`max_concurrency` is 64 per provider by default), RocksDB's
/// WAL, manifest, info log and lock, and the I/O threads' event fds.
constexpr size_t fd_reserve = 256;

/// Descriptors needed for `connections` gateway connections (authenticated
/// and not) plus `store_files` (RocksDB's `max_open_files`) and
/// `fd_reserve`.
size_t fds_needed(size_t connections, size_t store_files);

/// Raises the soft RLIMIT_NOFILE to `fds_needed(connections, store_files)`
/// when it is lower (never lowers it). Fails with `ec::config_invalid` when
/// the hard limit is lower than that: the message names
/// `gateway.max_connections` and `gateway.max_unauthenticated`, the number
/// needed and the hard limit, and how to fix it.
caf::error ensure_fd_limit(size_t connections, size_t store_files);

} // namespace keel
