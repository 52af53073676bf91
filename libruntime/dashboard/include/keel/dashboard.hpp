#pragma once

#include "keel/ws_server.hpp"

namespace keel {

/// The dashboard's files as built into the node: `/` is its index.html,
/// every other file is served under its own name (`/app.js`).
static_files dashboard_files();

} // namespace keel
