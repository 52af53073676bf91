#pragma once

// The stored form of every record (the store's values, in RocksDB and in
// PostgreSQL): a compact binary form derived from each record's `inspect`
// overload, as its JSON form is (keel/json_codec.hpp). Records stored as
// JSON, by builds before the binary form, still decode. Either way a record
// that does not decode gives an error that names the record and the field.

#include <string>
#include <string_view>

#include "keel/error.hpp"
#include "keel/types.hpp"

namespace keel {

/// The first byte of a record's binary form. A record stored as JSON starts
/// with '{'.
constexpr char binary_record_marker = '\x01';

/// Serializes a record to its stored form (any record with a JSON form, see
/// keel/json_codec.hpp, or `recovery_step`). Never throws: ill-formed UTF-8
/// in a text field is stored as U+FFFD, so one bad record cannot fail the
/// group commit it shares with other writes.
template <class T>
std::string encode(const T& x);

/// Parses the stored form of a record of type `T`: binary, or JSON as
/// builds before the binary form stored it.
template <class T>
caf::expected<T> decode(std::string_view bytes);

} // namespace keel
