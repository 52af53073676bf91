#pragma once

// Files that hold the node's secrets (token files, TLS keys, a config file
// with secrets written in it) should be readable by their owner only: a
// group- or world-readable one is warned about at start and by
// `keel-node --check-config` (`node_config::warnings`).

#include <optional>
#include <string>
#include <sys/types.h>

namespace keel {

/// The warning for a file of mode `mode` (as `stat` gives it) that `what`
/// names ("gateway.token_file /etc/keel/token"), or none when neither its
/// group nor others may read or write it.
std::optional<std::string> exposed_mode_warning(const std::string& what,
                                                mode_t mode);

/// `exposed_mode_warning` for the file at `path`, named by config key
/// `key`; none if it cannot be read (the parser reports that itself).
std::optional<std::string> exposed_file_warning(const std::string& key,
                                                const std::string& path);

} // namespace keel
