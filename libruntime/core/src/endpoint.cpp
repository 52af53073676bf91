#include "keel/endpoint.hpp"

#include <string>
#include <utility>

namespace keel {

namespace {

/// Removes a leading scheme from `str`; returns whether it asks for TLS.
bool strip_scheme(std::string& str) {
  for (auto [scheme, tls] : {std::pair{"wss://", true},
                             {"https://", true},
                             {"ws://", false},
                             {"http://", false}}) {
    auto len = std::char_traits<char>::length(scheme);
    if (str.compare(0, len, scheme) == 0) {
      str.erase(0, len);
      return tls;
    }
  }
  return false;
}

} // namespace

caf::expected<endpoint> parse_endpoint(const std::string& input) {
  auto bad = [&](const std::string& why) {
    return caf::make_error(ec::config_invalid,
                           "bad address '" + input + "': " + why
                             + " (expected HOST:PORT or PORT, optionally "
                               "after ws://, wss://, http:// or https://)");
  };
  endpoint result;
  auto str = input;
  result.tls = strip_scheme(str);
  std::string host;
  std::string port;
  if (str.empty())
    return bad("empty");
  if (str.front() == '[') {
    // [IPv6]:PORT
    auto close = str.find(']');
    if (close == std::string::npos)
      return bad("missing ']'");
    host = str.substr(1, close - 1);
    if (close + 1 >= str.size() || str[close + 1] != ':')
      return bad("missing ':PORT' after ']'");
    port = str.substr(close + 2);
  } else if (auto colon = str.rfind(':'); colon == std::string::npos) {
    port = str;
  } else {
    host = str.substr(0, colon);
    port = str.substr(colon + 1);
    if (host.find(':') != std::string::npos)
      return bad("write IPv6 addresses as [ADDRESS]:PORT");
  }
  if (!host.empty())
    result.host = std::move(host);
  if (port.empty() || port.size() > 5
      || port.find_first_not_of("0123456789") != std::string::npos)
    return bad("port '" + port + "' is not a number in 1..65535");
  auto num = std::stoul(port);
  if (num < 1 || num > 65535)
    return bad("port '" + port + "' is not a number in 1..65535");
  result.port = static_cast<uint16_t>(num);
  return result;
}

std::string to_string(const endpoint& ep) {
  if (ep.host.find(':') != std::string::npos)
    return "[" + ep.host + "]:" + std::to_string(ep.port);
  return ep.host + ":" + std::to_string(ep.port);
}

} // namespace keel
