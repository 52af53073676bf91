#pragma once

// Process-wide logging (spdlog): Debian's CAF is built without its logger,
// so Keel logs through spdlog. Configured once from `logging:`.

#include <spdlog/spdlog.h>

#include "keel/config.hpp"
#include "keel/error.hpp"

namespace keel {

/// Sets the level and sink (stderr or `cfg.file`) of the default logger.
/// Fails with `ec::config_invalid` if the level is unknown or the file
/// cannot be opened.
caf::error init_logging(const logging_config& cfg);

} // namespace keel
