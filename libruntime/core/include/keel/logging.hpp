#pragma once

// Process-wide logging (spdlog): Debian's CAF is built without its logger,
// so Keel logs through spdlog. Configured once from `logging:`.

#include <string>

#include <spdlog/spdlog.h>

#include "keel/error.hpp"

namespace keel {

/// Sets the level (trace, debug, info, warn, error or off) and sink (stderr,
/// or `file` when it is not empty) of the default logger. Fails with
/// `ec::config_invalid` naming `logging.level` or `logging.file` if the
/// level is unknown or the file cannot be opened.
caf::error init_logging(const std::string& level, const std::string& file);

} // namespace keel
