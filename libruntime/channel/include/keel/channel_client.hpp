#pragma once

// Sends messages to one configured outbound channel (see
// `keel/channel_format.hpp` for what goes out and what answers mean) over
// the node's HTTP client (`keel/http_client.hpp`).
// One attempt per call: the retry schedule is the caller's
// (`after_failed_send`), so it runs on the caller's clock.

#include <cstddef>
#include <functional>
#include <memory>

#include <caf/expected.hpp>

#include "keel/channel_format.hpp"
#include "keel/http_client.hpp"

namespace keel {

/// Receives the result of a send, exactly once, on an I/O thread: only
/// hand it on (e.g. `caf::anon_send`).
using send_handler = std::function<void(send_result)>;

class channel_client {
public:
  /// Sends the HTTP client makes at once; a caller with more under way
  /// keeps them waiting itself: a send waiting at the client counts its
  /// wait against the channel's timeout.
  static constexpr size_t max_in_flight = 16;

  /// Fails with `ec::config_invalid` naming the channel's URL or CA file.
  static caf::expected<std::unique_ptr<channel_client>>
  make(http_io& io, const channel_config& cfg);

  /// Sends `msg` once; `plain_text`: without markup (see `build_send`).
  void send(const outbound_message& msg, bool plain_text, send_handler on_done);

  const channel_config& config() const {
    return cfg_;
  }

private:
  channel_client(channel_config cfg, std::shared_ptr<http_endpoint> endpoint);

  channel_config cfg_;
  std::shared_ptr<http_endpoint> endpoint_;
};

} // namespace keel
