#pragma once

// Network addresses as operators write them: "HOST:PORT", "PORT", or
// "[IPv6]:PORT", optionally after a scheme ("wss://HOST:PORT" for a node
// serving TLS). Used by the tools to name a node and by the provider client
// to read the authority of a base URL.

#include <cstdint>
#include <string>

#include "keel/error.hpp"

namespace keel {

/// Where a node listens, and how to authenticate.
struct endpoint {
  std::string host = "127.0.0.1";
  uint16_t port = 8080;
  /// Bearer token; empty for none.
  std::string token;
  /// Speak TLS (wss://, https://).
  bool tls = false;
  /// With `tls`: PEM certificates to trust; empty for the system's store.
  std::string ca_file;
};

/// Parses "HOST:PORT", "[IPv6]:PORT" or just "PORT" (host 127.0.0.1), each
/// optionally after "ws://" or "http://" (plain) or "wss://" or "https://"
/// (TLS); fails with `ec::config_invalid` naming the bad part.
caf::expected<endpoint> parse_endpoint(const std::string& str);

/// Renders `ep` as "HOST:PORT" ("[HOST]:PORT" for IPv6 hosts).
std::string to_string(const endpoint& ep);

} // namespace keel
