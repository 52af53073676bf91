#include "records.hpp"

#include <string_view>

namespace keel::store_backend {

// Records under `thread/seq`: the seq must agree.
namespace {

std::optional<std::string> seq_mismatch(std::string_view key, seq_t seq) {
  std::string_view str{key.data(), key.size()};
  auto slash = str.find('/');
  auto key_seq_value
    = slash == std::string_view::npos ? std::nullopt : key_seq(key, slash + 1);
  if (!key_seq_value)
    return "key is not thread/seq";
  if (*key_seq_value != seq)
    return "record has seq " + std::to_string(seq);
  return std::nullopt;
}

} // namespace

std::optional<std::string> key_mismatch(std::string_view key,
                                        const inbox_entry& x) {
  return seq_mismatch(key, x.seq);
}

std::optional<std::string> key_mismatch(std::string_view key,
                                        const context_entry& x) {
  return seq_mismatch(key, x.seq);
}

std::optional<std::string> key_mismatch(std::string_view key,
                                        const log_entry& x) {
  return seq_mismatch(key, x.seq);
}

std::optional<std::string> key_mismatch(std::string_view key,
                                        const session_record& x) {
  if (key != std::string_view{x.thread})
    return "record has thread " + x.thread;
  return std::nullopt;
}

std::optional<std::string> key_mismatch(std::string_view key,
                                        const tree_link& x) {
  if (key != std::string_view{tree_key(x.parent, x.child)})
    return "record links " + x.parent + " -> " + x.child;
  return std::nullopt;
}

std::optional<std::string> key_mismatch(std::string_view key,
                                        const outbox_entry& x) {
  if (key != std::string_view{seq_key(x.from, x.seq)})
    return "record is from " + x.from + "/" + std::to_string(x.seq);
  return std::nullopt;
}

std::optional<std::string> key_mismatch(std::string_view key,
                                        const dead_letter& x) {
  return key_mismatch(key, x.entry);
}

std::optional<std::string> key_mismatch(std::string_view key,
                                        const reply_delivery& x) {
  if (key != std::string_view{seq_key(x.thread, x.seq)})
    return "record is reply " + x.thread + "/" + std::to_string(x.seq);
  return std::nullopt;
}

std::optional<std::string> key_mismatch(std::string_view key,
                                        const provider_health_record& x) {
  if (key != std::string_view{health_key(x.pool, x.provider)})
    return "record is for " + x.pool + "/" + x.provider;
  return std::nullopt;
}

std::optional<std::string> key_mismatch(std::string_view key,
                                        const owner_notice& x) {
  if (key != std::string_view{notice_key(x)})
    return "record is notice " + notice_key(x);
  return std::nullopt;
}

} // namespace keel::store_backend
