#include "keel/config_secrets.hpp"

#include <algorithm>
#include <cctype>

#include "keel/redact.hpp"

namespace keel {

bool header_holds_secret(std::string_view name) {
  std::string lower{name};
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  for (auto word : {"auth", "key", "token", "secret", "cookie"})
    if (lower.find(word) != std::string::npos)
      return true;
  return false;
}

namespace {

// The password of a URI: between the user's ':' and the '@' before the
// host.
std::string uri_password(std::string_view url) {
  auto start = url.find("://");
  if (start == std::string_view::npos)
    return {};
  start += 3;
  auto at = url.find('@', start);
  auto slash = url.find('/', start);
  if (at == std::string_view::npos
      || (slash != std::string_view::npos && slash < at))
    return {};
  auto colon = url.find(':', start);
  if (colon == std::string_view::npos || colon > at)
    return {};
  return std::string{url.substr(colon + 1, at - colon - 1)};
}

// The value of `password=` in a conninfo string, quoted or not.
std::string conninfo_password(std::string_view url) {
  auto pos = url.find("password");
  if (pos == std::string_view::npos)
    return {};
  pos = url.find_first_not_of(' ', pos + 8);
  if (pos == std::string_view::npos || url[pos] != '=')
    return {};
  pos = url.find_first_not_of(' ', pos + 1);
  if (pos == std::string_view::npos)
    return {};
  if (url[pos] == '\'') {
    auto end = url.find('\'', pos + 1);
    return std::string{url.substr(pos + 1, end == std::string_view::npos
                                             ? std::string_view::npos
                                             : end - pos - 1)};
  }
  auto end = url.find(' ', pos);
  return std::string{url.substr(
    pos, end == std::string_view::npos ? std::string_view::npos : end - pos)};
}

} // namespace

std::string postgres_password(std::string_view url) {
  if (url.find("://") != std::string_view::npos)
    return uri_password(url);
  return conninfo_password(url);
}

std::vector<std::string> configured_secrets(const node_config& cfg) {
  std::vector<std::string> result{cfg.gateway.token, cfg.gateway.admin_token,
                                  cfg.cluster.token};
  for (auto& p : cfg.providers) {
    result.push_back(p.api_key);
    for (auto& [name, value] : p.headers)
      if (header_holds_secret(name)) {
        result.push_back(value);
        // "Bearer KEY": the key alone may be quoted back too.
        if (auto space = value.rfind(' '); space != std::string::npos)
          result.push_back(value.substr(space + 1));
      }
  }
  for (auto& c : cfg.delivery.channels) {
    result.push_back(c.secret);
    result.push_back(c.token);
  }
  auto& pg = cfg.storage.postgres.url;
  result.push_back(pg);
  result.push_back(postgres_password(pg));
  return secret_list(std::move(result));
}

} // namespace keel
