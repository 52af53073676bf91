#include "keel/service_notify.hpp"

#include <cstdint>

#include <systemd/sd-daemon.h>

namespace keel::service_notify {

namespace {

// sd_notify does nothing (and answers 0) without NOTIFY_SOCKET; its errors
// are not ours to act on: the service manager restarts a node that never
// says it is ready or stops pinging.
void send(const std::string& state) {
  sd_notify(0, state.c_str());
}

} // namespace

void ready(const std::string& text) {
  send("READY=1\nSTATUS=" + text);
}

void stopping(const std::string& text) {
  send("STOPPING=1\nSTATUS=" + text);
}

void status(const std::string& text) {
  send("STATUS=" + text);
}

void watchdog() {
  send("WATCHDOG=1");
}

std::optional<std::chrono::microseconds> watchdog_interval() {
  uint64_t usec = 0;
  if (sd_watchdog_enabled(0, &usec) <= 0 || usec == 0)
    return std::nullopt;
  return std::chrono::microseconds{usec};
}

} // namespace keel::service_notify
