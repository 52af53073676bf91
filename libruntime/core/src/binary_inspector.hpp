#pragma once

// Inspectors that derive a record's binary stored form from its `inspect`
// overload, the same list of `field` annotations its JSON form comes from.
//
// A record is the number of its fields (a varint), then each field's value
// in `inspect` order: integers as varints (signed ones zigzag-encoded), enums
// by name, strings and vectors as a varint length and their contents, nested
// and embedded records as records. Fields are positional, so an `inspect`
// list only ever grows at its end: a record written before a field existed
// has fewer fields and reads that field's default if it is not required; a
// record with more fields than this build knows was written by a newer one
// and does not decode. Text is stored as well-formed UTF-8 (ill-formed bytes
// become U+FFFD, as in the JSON form), and a stored text that is not
// well-formed does not decode.

#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <type_traits>

#include "json_inspector.hpp"
#include "keel/text.hpp"

namespace keel::detail {

/// Counts the fields of an `inspect` list.
class field_counter {
public:
  using result_type = void;

  template <class... Ts>
  void operator()(Ts&&... xs) {
    (take(xs), ...);
  }

  size_t count = 0;

private:
  void take(const field_t&) {
    ++count;
  }

  template <class T>
  void take(const T&) {
    // nop
  }
};

/// The number of fields of record type `T`.
template <class T>
size_t field_count() {
  static const size_t result = [] {
    T x;
    field_counter counter;
    inspect(counter, x);
    return counter.count;
  }();
  return result;
}

/// Appends the binary form of records to a string.
class binary_writer : public field_walker<binary_writer, void> {
public:
  explicit binary_writer(std::string& out) : out_(out) {
    // nop
  }

  template <class T>
  void write_record(const T& x) {
    put_varint(field_count<T>());
    inspect(*this, const_cast<T&>(x));
  }

  /// Writes one field.
  template <class T>
  void visit(const field_t&, T& x) {
    write_value(x);
  }

private:
  template <class T>
  void write_value(const T& x) {
    if constexpr (std::is_enum_v<T>) {
      write_text(to_string(x));
    } else if constexpr (std::is_same_v<T, bool>) {
      put_varint(x ? 1 : 0);
    } else if constexpr (std::is_integral_v<T> && std::is_signed_v<T>) {
      auto value = static_cast<int64_t>(x);
      put_varint((static_cast<uint64_t>(value) << 1)
                 ^ static_cast<uint64_t>(value >> 63));
    } else if constexpr (std::is_integral_v<T>) {
      put_varint(x);
    } else if constexpr (std::is_same_v<T, std::string>) {
      write_text(x);
    } else if constexpr (vector_of<T>::is_vector) {
      put_varint(x.size());
      for (auto& element : x)
        write_value(element);
    } else if constexpr (is_record<T>) {
      write_record(x);
    } else {
      static_assert(dependent_false<T>, "no binary form for this field type");
    }
  }

  void write_text(std::string_view str) {
    if (valid_utf8(str)) {
      put_varint(str.size());
      out_.append(str);
    } else {
      auto clean = sanitize_utf8(str);
      put_varint(clean.size());
      out_ += clean;
    }
  }

  void put_varint(uint64_t x) {
    while (x >= 0x80) {
      out_.push_back(static_cast<char>((x & 0x7f) | 0x80));
      x >>= 7;
    }
    out_.push_back(static_cast<char>(x));
  }

  std::string& out_;
};

caf::error record_cut_short();

caf::error cut_short(const char* name);

caf::error not_utf8(const char* name);

caf::error out_of_range(const char* name);

/// Reads records from their binary form; every read is bounds-checked.
class binary_reader : public field_walker<binary_reader, caf::error> {
public:
  explicit binary_reader(std::string_view in) : in_(in) {
    // nop
  }

  template <class T>
  caf::error read_record(T& x) {
    uint64_t fields = 0;
    if (!get_varint(fields))
      return record_cut_short();
    if (fields > field_count<T>())
      return caf::make_error(
        ec::storage_corrupt,
        "record has " + std::to_string(fields) + " fields, this build reads "
          + std::to_string(field_count<T>()) + " (written by a newer build?)");
    auto outer = left_;
    left_ = fields;
    auto err = inspect(*this, x);
    left_ = outer;
    return err;
  }

  /// The bytes not read yet.
  size_t remaining() const {
    return in_.size();
  }

  /// Reads one field, or keeps its default if the record ended before it.
  template <class T>
  caf::error visit(const field_t& name, T& x) {
    if (left_ == 0)
      return name.form == field_form::required ? missing_field(name.name)
                                               : caf::none;
    --left_;
    return read_value(name.name, x);
  }

private:
  template <class T>
  caf::error read_value(const char* name, T& x) {
    if constexpr (std::is_enum_v<T>) {
      return read_enum(name, x);
    } else if constexpr (std::is_integral_v<T>) {
      return read_integer(name, x);
    } else if constexpr (std::is_same_v<T, std::string>) {
      return read_text(name, x);
    } else if constexpr (vector_of<T>::is_vector) {
      return read_vector(name, x);
    } else if constexpr (is_record<T>) {
      if (auto err = read_record(x))
        return in_context(name, err);
      return caf::none;
    } else {
      static_assert(dependent_false<T>, "no binary form for this field type");
    }
  }

  template <class T>
  caf::error read_enum(const char* name, T& x) {
    std::string str;
    if (auto err = read_text(name, str))
      return err;
    auto parsed = parse_name(str, T{});
    if (!parsed)
      return unknown_value(name, str);
    x = *parsed;
    return caf::none;
  }

  template <class T>
  caf::error read_integer(const char* name, T& x) {
    uint64_t raw = 0;
    if (!get_varint(raw))
      return cut_short(name);
    if constexpr (std::is_same_v<T, bool>) {
      if (raw > 1)
        return out_of_range(name);
      x = raw == 1;
    } else if constexpr (std::is_signed_v<T>) {
      auto value = static_cast<int64_t>(raw >> 1)
                   ^ -static_cast<int64_t>(raw & 1);
      if (value < std::numeric_limits<T>::min()
          || value > std::numeric_limits<T>::max())
        return out_of_range(name);
      x = static_cast<T>(value);
    } else {
      if (raw > std::numeric_limits<T>::max())
        return out_of_range(name);
      x = static_cast<T>(raw);
    }
    return caf::none;
  }

  caf::error read_text(const char* name, std::string& x) {
    uint64_t size = 0;
    if (!get_varint(size) || size > in_.size())
      return cut_short(name);
    auto text = in_.substr(0, size);
    if (!valid_utf8(text))
      return not_utf8(name);
    x.assign(text.data(), text.size());
    in_.remove_prefix(size);
    return caf::none;
  }

  template <class T>
  caf::error read_vector(const char* name, T& x) {
    uint64_t size = 0;
    // Every element takes at least one byte.
    if (!get_varint(size) || size > in_.size())
      return cut_short(name);
    T result;
    result.reserve(size);
    for (uint64_t i = 0; i < size; ++i) {
      result.emplace_back();
      if constexpr (is_record<typename T::value_type>) {
        if (auto err = read_record(result.back()))
          return in_context(std::string{name} + "[" + std::to_string(i) + "]",
                            err);
      } else if (auto err = read_value(name, result.back())) {
        return err;
      }
    }
    x = std::move(result);
    return caf::none;
  }

  bool get_varint(uint64_t& x) {
    x = 0;
    for (unsigned shift = 0; shift < 64 && !in_.empty(); shift += 7) {
      auto byte = static_cast<uint8_t>(in_.front());
      in_.remove_prefix(1);
      x |= static_cast<uint64_t>(byte & 0x7f) << shift;
      if ((byte & 0x80) == 0)
        return shift < 63 || byte <= 1;
    }
    return false;
  }

  std::string_view in_;
  /// Fields of the record being read that are still to come.
  uint64_t left_ = 0;
};

} // namespace keel::detail
