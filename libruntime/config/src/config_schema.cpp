#include "config_schema.hpp"

#include <algorithm>
#include <cctype>
#include <fstream>

namespace keel::config_detail {

bool is_valid_id(const std::string& x) {
  auto valid_char = [](char c) {
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z')
           || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
  };
  return !x.empty() && x.size() <= 64
         && std::all_of(x.begin(), x.end(), valid_char);
}

bool is_plain_name(const std::string& x) {
  auto valid_char = [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-';
  };
  return !x.empty() && x.size() <= 64
         && std::all_of(x.begin(), x.end(), valid_char);
}

bool is_valid_env_name(const std::string& x) {
  auto valid_char = [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
  };
  return !x.empty() && !std::isdigit(static_cast<unsigned char>(x.front()))
         && std::all_of(x.begin(), x.end(), valid_char);
}

bool is_readable_file(const std::string& path) {
  return static_cast<bool>(std::ifstream{path});
}

std::optional<host_port> parse_host_port(std::string_view text) {
  auto colon = text.rfind(':');
  if (colon == std::string_view::npos)
    return std::nullopt;
  auto port = parse_digits(text.substr(colon + 1));
  if (!port || *port < 1 || *port > 65535)
    return std::nullopt;
  auto host = text.substr(0, colon);
  auto name_char = [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_'
           || c == '-';
  };
  auto ipv6_char = [](char c) {
    return std::isxdigit(static_cast<unsigned char>(c)) || c == ':' || c == '.';
  };
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
    if (host.find(':') == std::string_view::npos
        || !std::all_of(host.begin(), host.end(), ipv6_char))
      return std::nullopt;
  } else if (host.empty()
             || !std::all_of(host.begin(), host.end(), name_char)) {
    return std::nullopt;
  }
  return host_port{std::string{host}, static_cast<uint16_t>(*port)};
}

std::string render_host_port(const std::string& host, uint16_t port) {
  auto bracketed = host.find(':') != std::string::npos;
  return (bracketed ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

} // namespace keel::config_detail
