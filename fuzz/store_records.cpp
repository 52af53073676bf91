// The stored-record decoders on arbitrary bytes: keel::decode<T> (the stored
// form of every record type: binary, or JSON as older builds stored it) and
// the store's read_record, which also
// checks that a record belongs under its key.
//
// Input: byte 0 picks the record type, byte 1 the key's length; the key
// follows, the rest is the stored value. Properties: no exception escapes;
// a decoded record re-encodes to a fixed point (decode(encode(x)) encodes
// the same); read_record accepts exactly what decodes and belongs under the
// key; every record belongs under the key the store would write it at.

#include <string>

#include "fuzz_check.hpp"
#include "keel/stored_form.hpp"
#include "keys.hpp"
#include "records.hpp"

using namespace keel;
using namespace keel::store_backend;
using keel::fuzz::require;

namespace {

// The key the store writes each kind of record at.
std::string home_key(const session_record& x) {
  return x.thread;
}
std::string home_key(const tree_link& x) {
  return tree_key(x.parent, x.child);
}
std::string home_key(const inbox_entry& x) {
  return seq_key("t", x.seq);
}
std::string home_key(const context_entry& x) {
  return seq_key("t", x.seq);
}
std::string home_key(const log_entry& x) {
  return seq_key("t", x.seq);
}
std::string home_key(const outbox_entry& x) {
  return seq_key(x.from, x.seq);
}
std::string home_key(const dead_letter& x) {
  return seq_key(x.entry.from, x.entry.seq);
}
std::string home_key(const provider_health_record& x) {
  return health_key(x.pool, x.provider);
}

/// Decodes `value`; a decoded record must re-encode to a fixed point.
template <class T>
caf::expected<T> decode_checked(std::string_view value) {
  auto x = decode<T>(value);
  if (!x) {
    require(!error_message(x.error()).empty(), "a refusal has no message");
    return x;
  }
  auto text = encode(*x);
  auto y = decode<T>(text);
  require(static_cast<bool>(y), "a re-encoded record does not decode");
  require(encode(*y) == text, "re-encoding a record changes it");
  return x;
}

template <class T>
void check_keyed(std::string_view key, std::string_view value) {
  auto x = decode_checked<T>(value);
  T out;
  auto why = read_record(key, value, out);
  require(why.has_value() == (!x || key_mismatch(key, *x).has_value()),
          "read_record disagrees with decode and key_mismatch");
  if (x)
    require(!key_mismatch(home_key(*x), *x),
            "a record does not belong under its own key");
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2 || size < 2u + data[1])
    return 0;
  return keel::fuzz::guarded([&] {
    auto key = keel::fuzz::as_text(data + 2, data[1]);
    auto value = keel::fuzz::as_text(data + 2 + data[1], size - 2 - data[1]);
    switch (data[0] % 10) {
      case 0: check_keyed<session_record>(key, value); break;
      case 1: check_keyed<tree_link>(key, value); break;
      case 2: check_keyed<inbox_entry>(key, value); break;
      case 3: check_keyed<context_entry>(key, value); break;
      case 4: check_keyed<log_entry>(key, value); break;
      case 5: check_keyed<outbox_entry>(key, value); break;
      case 6: check_keyed<dead_letter>(key, value); break;
      case 7: check_keyed<provider_health_record>(key, value); break;
      case 8: decode_checked<recovery_report>(value); break;
      default: decode_checked<recovery_step>(value); break;
    }
  });
}
