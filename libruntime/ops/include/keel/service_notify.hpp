#pragma once

// Notifications to the service manager (systemd's sd_notify protocol, on
// the datagram socket `NOTIFY_SOCKET` names). Without that variable every
// call does nothing, so a node started by hand behaves the same.

#include <chrono>
#include <optional>
#include <string>

namespace keel::service_notify {

/// `READY=1`: recovery is done and the node serves.
void ready(const std::string& status);

/// `STOPPING=1`: the drain started.
void stopping(const std::string& status);

/// `STATUS=...`: one line for `systemctl status`.
void status(const std::string& text);

/// `WATCHDOG=1`: the actor tree answered.
void watchdog();

/// The watchdog interval the service manager expects pings within
/// (`WATCHDOG_USEC` for this process), if it asks for any.
std::optional<std::chrono::microseconds> watchdog_interval();

} // namespace keel::service_notify
