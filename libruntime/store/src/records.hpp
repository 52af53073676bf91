#pragma once

// Reading stored records: a value decodes (keel/stored_form.hpp) and must
// belong under its key.

#include <optional>
#include <string>
#include <string_view>

#include <string_view>

#include "keel/stored_form.hpp"
#include "keys.hpp"

namespace keel::store_backend {

/// What is wrong when a decoded record does not belong under `key` (its
/// seq, thread, link or provider differs from the key's), or nothing.
std::optional<std::string> key_mismatch(std::string_view key,
                                        const session_record& x);
std::optional<std::string> key_mismatch(std::string_view key,
                                        const tree_link& x);
std::optional<std::string> key_mismatch(std::string_view key,
                                        const inbox_entry& x);
std::optional<std::string> key_mismatch(std::string_view key,
                                        const context_entry& x);
std::optional<std::string> key_mismatch(std::string_view key,
                                        const log_entry& x);
std::optional<std::string> key_mismatch(std::string_view key,
                                        const outbox_entry& x);
std::optional<std::string> key_mismatch(std::string_view key,
                                        const dead_letter& x);
std::optional<std::string> key_mismatch(std::string_view key,
                                        const reply_delivery& x);
std::optional<std::string> key_mismatch(std::string_view key,
                                        const provider_health_record& x);
std::optional<std::string> key_mismatch(std::string_view key,
                                        const owner_notice& x);

/// Decodes the value stored under `key` into `out`; returns what is wrong
/// instead if it cannot be decoded or does not belong under its key.
template <class T>
std::optional<std::string>
read_record(std::string_view key, std::string_view value, T& out) {
  auto result = decode<T>(std::string_view{value.data(), value.size()});
  if (!result)
    return error_message(result.error());
  if (auto why = key_mismatch(key, *result))
    return why;
  out = std::move(*result);
  return std::nullopt;
}

/// Decodes the value stored under `key` in `cf`; errors name both.
template <class T>
caf::expected<T>
decode_at(size_t cf, std::string_view key, std::string_view value) {
  T result;
  if (auto why = read_record(key, value, result))
    return corrupt(cf, key, *why);
  return result;
}

} // namespace keel::store_backend
