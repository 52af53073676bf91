#pragma once

// Where an HTTP endpoint's requests go: an http:// or https:// URL parsed
// into what a connection and a request need.

#include <cstdint>
#include <string>
#include <string_view>

#include <caf/expected.hpp>

namespace keel {

/// An endpoint's URL, parsed.
struct http_url {
  bool tls = false;
  /// Host name or address (IPv6 without brackets).
  std::string host;
  uint16_t port = 0;
  /// Request target: the URL's path and query as they are ("/" if none).
  std::string target;
  /// `Host` header value: host, plus ":port" unless it is the default.
  std::string host_header;
  /// "host:port" (IPv6 bracketed), for messages.
  std::string authority;
};

/// Parses "http[s]://HOST[:PORT][/PATH][?QUERY]". Fails with
/// `ec::config_invalid` saying what is wrong ("SETTING 'URL': why"): another
/// scheme, no host, user info, a fragment, a bad port.
caf::expected<http_url> parse_http_url(std::string_view url,
                                       std::string_view setting = "url");

} // namespace keel
