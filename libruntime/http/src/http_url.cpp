#include "keel/http_url.hpp"

#include "keel/endpoint.hpp"
#include "keel/error.hpp"

namespace keel {

namespace {

bool starts_with(std::string_view str, std::string_view prefix) {
  return str.size() >= prefix.size()
         && str.compare(0, prefix.size(), prefix) == 0;
}

} // namespace

caf::expected<http_url> parse_http_url(std::string_view url,
                                       std::string_view setting) {
  auto bad = [&](const std::string& why) {
    return caf::make_error(ec::config_invalid, std::string{setting} + " '"
                                                 + std::string{url}
                                                 + "': " + why);
  };
  http_url result;
  std::string_view rest;
  if (starts_with(url, "https://")) {
    result.tls = true;
    rest = url.substr(8);
  } else if (starts_with(url, "http://")) {
    rest = url.substr(7);
  } else {
    return bad("expected an http:// or https:// URL");
  }
  auto slash = rest.find_first_of("/?");
  auto authority = rest.substr(0, slash);
  auto path = slash == std::string_view::npos ? std::string_view{}
                                              : rest.substr(slash);
  if (authority.empty())
    return bad("missing host");
  if (authority.find('@') != std::string_view::npos)
    return bad("user info in the URL is not supported (use api_key)");
  if (path.find('#') != std::string_view::npos)
    return bad("a fragment is not supported");
  uint16_t default_port = result.tls ? 443 : 80;
  bool has_port = authority.back() != ']'
                  && authority.find(':') != std::string_view::npos;
  if (has_port) {
    auto ep = parse_endpoint(std::string{authority});
    if (!ep)
      return bad(error_message(ep.error()));
    if (authority.front() == ':')
      return bad("missing host");
    result.host = std::move(ep->host);
    result.port = ep->port;
  } else {
    if (authority.front() == '[')
      authority = authority.substr(1, authority.size() - 2);
    if (authority.empty())
      return bad("missing host");
    result.host = std::string{authority};
    result.port = default_port;
  }
  auto bracketed = result.host.find(':') != std::string::npos
                     ? "[" + result.host + "]"
                     : result.host;
  result.authority = bracketed + ":" + std::to_string(result.port);
  result.host_header = result.port == default_port ? bracketed
                                                   : result.authority;
  result.target = path.empty() || path.front() == '?' ? "/" + std::string{path}
                                                      : std::string{path};
  return result;
}

} // namespace keel
