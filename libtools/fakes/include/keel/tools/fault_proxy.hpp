#pragma once

// A TCP proxy that can break the link it carries, for the chaos runner and
// the tests (Toxiproxy's job, in-process): it listens on 127.0.0.1 and
// forwards every connection it accepts to one target, and on request
// delays, silences (blackhole) or resets the traffic of every connection,
// open and new. It runs its own I/O thread; every member is thread-safe.

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

namespace keel {

/// What a fault_proxy does to the connections it carries.
enum class link_mode {
  /// Forward both ways as fast as possible.
  pass,
  /// Forward both ways, each chunk held for a set delay (order kept).
  delay,
  /// Keep connections open but forward nothing either way: the bytes read
  /// are dropped, so both peers see a link that went silent.
  blackhole,
  /// Reset (RST) every open connection and every new one at once.
  reset,
};

/// "pass", "delay", "blackhole" or "reset".
const char* to_string(link_mode mode);

/// A TCP proxy from 127.0.0.1:port() to one target with a switchable fault.
class fault_proxy {
public:
  /// What the proxy has done so far.
  struct stats {
    /// Connections accepted (including the ones reset at once).
    uint64_t accepted;
    /// Connections the proxy reset (SO_LINGER 0 and close).
    uint64_t resets;
    /// Bytes written on to a peer, both ways.
    uint64_t bytes_forwarded;
    /// Bytes read and thrown away by a blackhole, both ways.
    uint64_t bytes_dropped;
  };

  /// Listens on 127.0.0.1:listen_port (0: the system picks) and forwards
  /// every accepted connection to target_host:target_port (resolved per
  /// connection; a connection whose target cannot be reached is closed).
  /// Starts in link_mode::pass. Throws std::runtime_error naming the
  /// address when it cannot listen.
  fault_proxy(std::string target_host, uint16_t target_port,
              uint16_t listen_port = 0);

  /// Stops the I/O thread after closing the listener and every connection.
  ~fault_proxy();

  fault_proxy(const fault_proxy&) = delete;
  fault_proxy& operator=(const fault_proxy&) = delete;

  /// The port the proxy listens on.
  uint16_t port() const;

  /// Changes the fault for the open connections and the new ones; `delay`
  /// counts for link_mode::delay only. When it returns, the I/O thread has
  /// taken the change: with link_mode::reset every connection that was open
  /// has been reset. Switching back to pass (or delay) resumes forwarding on
  /// the connections that survived; what a blackhole dropped stays gone.
  void set_mode(link_mode mode,
                std::chrono::milliseconds delay = std::chrono::milliseconds{});

  /// The mode set last.
  link_mode mode() const;

  /// A snapshot of the counters.
  stats counters() const;

private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

} // namespace keel
