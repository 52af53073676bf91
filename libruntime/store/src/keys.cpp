#include "keys.hpp"

#include <string_view>

namespace keel::store_backend {

std::string range_begin(const std::string& thread) {
  return thread + '/';
}

std::string range_end(const std::string& thread) {
  return thread + '0';
}

std::string seq_key(const std::string& thread, seq_t seq) {
  auto key = range_begin(thread);
  for (int shift = 56; shift >= 0; shift -= 8)
    key += static_cast<char>((seq >> shift) & 0xFF);
  return key;
}

std::string client_id_key(const std::string& thread,
                          const std::string& client_id) {
  return range_begin(thread) + client_id;
}

std::optional<seq_t> key_seq(std::string_view key, size_t prefix_len) {
  if (key.size() != prefix_len + 8)
    return std::nullopt;
  seq_t result = 0;
  for (size_t i = prefix_len; i < key.size(); ++i)
    result = (result << 8) | static_cast<unsigned char>(key[i]);
  return result;
}

std::string tree_key(const std::string& parent, const std::string& child) {
  return parent + '/' + child;
}

std::string quarantine_key(const std::string& thread, size_t cf,
                           std::string_view key) {
  return thread + '/' + cf_names[cf] + '/' + std::string{key};
}

std::string health_key(const std::string& pool, const std::string& provider) {
  return pool + '/' + provider;
}

namespace {

bool has_seq_keys(size_t cf) {
  return cf == cf_inbox || cf == cf_context || cf == cf_log || cf == cf_outbox
         || cf == cf_dead_letters || cf == cf_deliveries;
}

} // namespace

std::string printable_key(size_t cf, std::string_view key) {
  std::string_view str{key.data(), key.size()};
  if (has_seq_keys(cf)) {
    auto slash = str.find('/');
    if (slash != std::string_view::npos) {
      if (auto seq = key_seq(key, slash + 1))
        return std::string{str.substr(0, slash + 1)} + std::to_string(*seq);
    }
  }
  std::string result;
  for (auto c : str) {
    if (c >= 0x20 && c < 0x7F) {
      result += c;
    } else {
      static constexpr const char* hex = "0123456789abcdef";
      auto u = static_cast<unsigned char>(c);
      result += "\\x";
      result += hex[u >> 4];
      result += hex[u & 0x0F];
    }
  }
  return result;
}

caf::error corrupt(size_t cf, std::string_view key, const std::string& what) {
  return caf::make_error(ec::storage_corrupt,
                         std::string{"corrupt record in "} + cf_names[cf]
                           + " at " + printable_key(cf, key) + ": " + what);
}

std::optional<uint64_t> parse_decimal(const std::string& str) {
  if (str.empty() || str.size() > 19)
    return std::nullopt;
  uint64_t result = 0;
  for (auto c : str) {
    if (c < '0' || c > '9')
      return std::nullopt;
    result = result * 10 + static_cast<uint64_t>(c - '0');
  }
  return result;
}

} // namespace keel::store_backend
