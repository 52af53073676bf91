#pragma once

// An error of code `internal` is a bug of the node: every failure a fault
// brings about has a code of its own (`unavailable`, `storage_io`, ...; see
// `error_code_name`). So each one the gateway sends, whatever made it, is
// logged whole (its text names the cause: the failed request's error, or
// the exception), with the connection it went to, to be found afterwards.

#include <cstdint>
#include <string_view>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

namespace keel::gateway {

/// Logs `frame`, sent over connection `conn` (`what`: "WebSocket" or
/// "HTTP"), if it is an error frame of code `internal`. Costs a prefix
/// comparison for any other frame.
inline void log_if_internal(std::string_view what, uint64_t conn,
                            std::string_view frame) {
  constexpr std::string_view error_frame = R"({"type":"error")";
  if (frame.substr(0, error_frame.size()) != error_frame)
    return;
  auto j = nlohmann::json::parse(frame, nullptr, false);
  auto code = j.is_object() ? j.find("code") : j.end();
  if (code == j.end() || *code != "internal")
    return;
  spdlog::error("sent an internal error (a bug of the node) over {} "
                "connection {}: {}",
                what, conn, frame);
}

} // namespace keel::gateway
