#pragma once

// Inspectors that derive a record's JSON form from its `inspect` overload,
// in which a `field` annotation names every value (keel/record_field.hpp).
//
// Writing puts each field under its name (nlohmann's objects keep keys in
// name order, so the field order does not matter). Reading checks the fields
// in three passes over the `inspect` list, so the first error reported is
// the same whatever the order of the fields: the required fields (presence
// and type), then the optional ones, then the values inside fields (enum
// names, nested records).

#include <cmath>
#include <limits>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include <caf/meta/load_callback.hpp>
#include <caf/meta/type_name.hpp>
#include <nlohmann/json.hpp>

#include "keel/error.hpp"
#include "keel/types.hpp"

namespace keel::detail {

using json = nlohmann::json;

// -- field kinds --------------------------------------------------------------

template <class T>
struct vector_of {
  static constexpr bool is_vector = false;
  using element = void;
};

template <class T>
struct vector_of<std::vector<T>> {
  static constexpr bool is_vector = true;
  using element = T;
};

/// True for values stored as a JSON object of their own: the records with an
/// `inspect` overload (every class but strings and vectors).
template <class T>
constexpr bool is_record
  = std::is_class_v<
      T> && !std::is_same_v<T, std::string> && !vector_of<T>::is_vector;

/// True for vectors of records (stored as arrays of objects).
template <class T>
constexpr bool is_record_vector
  = vector_of<T>::is_vector&& is_record<typename vector_of<T>::element>;

/// Parses the stored name of an enum value (the inverse of its `to_string`).
inline std::optional<session_state> parse_name(const std::string& str,
                                               session_state) {
  return parse_session_state(str);
}

inline std::optional<log_kind> parse_name(const std::string& str, log_kind) {
  return parse_log_kind(str);
}

inline std::optional<dead_letter_status> parse_name(const std::string& str,
                                                    dead_letter_status) {
  return parse_dead_letter_status(str);
}

inline std::optional<task_state> parse_name(const std::string& str,
                                            task_state) {
  return parse_task_state(str);
}

inline std::optional<notice_kind> parse_name(const std::string& str,
                                             notice_kind) {
  return parse_notice_kind(str);
}

inline std::optional<notice_status> parse_name(const std::string& str,
                                               notice_status) {
  return parse_notice_status(str);
}

template <class T>
constexpr bool dependent_false = false;

/// Walks an `inspect` list for the record forms: calls `Derived::visit` for
/// each value a `field` names, skips other annotations, and (for readers,
/// whose `Result` is `caf::error`) runs load callbacks where they stand and
/// stops at the first error.
template <class Derived, class Result>
class field_walker {
public:
  using result_type = Result;

  template <class... Ts>
  Result operator()(Ts&&... xs) {
    return walk(xs...);
  }

private:
  Result walk() {
    return Result();
  }

  template <class T, class... Ts>
  Result walk(const field_t& name, T& x, Ts&... xs) {
    if constexpr (std::is_void_v<Result>) {
      static_cast<Derived&>(*this).visit(name, x);
    } else {
      if (auto err = static_cast<Derived&>(*this).visit(name, x))
        return err;
    }
    return walk(xs...);
  }

  template <class F, class... Ts>
  Result walk(caf::meta::load_callback_t<F>& callback, Ts&... xs) {
    if constexpr (!std::is_void_v<Result>) {
      if (auto err = callback.fun())
        return err;
    }
    return walk(xs...);
  }

  template <class T, class... Ts>
  std::enable_if_t<caf::meta::is_annotation<T>::value, Result>
  walk(const T&, Ts&... xs) {
    return walk(xs...);
  }

  template <class T, class... Ts>
  std::enable_if_t<!caf::meta::is_annotation<T>::value, Result>
  walk(const T&, Ts&...) {
    static_assert(dependent_false<T>,
                  "each value of a stored record needs a field()");
  }
};

// -- writing ------------------------------------------------------------------

template <class T>
json write_record(const T& x);

/// Writes the fields of an `inspect` list into a JSON object.
class json_writer : public field_walker<json_writer, void> {
public:
  explicit json_writer(json& out) : out_(out) {
    // nop
  }

  /// Writes one field.
  template <class T>
  void visit(const field_t& name, T& x) {
    if constexpr (is_record<T>) {
      if (name.form == field_form::embedded)
        inspect(*this, x);
      else
        out_[name.name] = write_record(x);
    } else {
      if constexpr (is_record_vector<T>) {
        if (name.form == field_form::omit_default && x.empty())
          return;
      } else {
        if (name.form == field_form::omit_default && x == T{})
          return;
      }
      out_[name.name] = value(x);
    }
  }

private:
  template <class T>
  static json value(const T& x) {
    if constexpr (std::is_enum_v<T>) {
      return to_string(x);
    } else if constexpr (is_record_vector<T>) {
      auto result = json::array();
      for (auto& element : x)
        result.push_back(write_record(element));
      return result;
    } else {
      return x;
    }
  }

  json& out_;
};

/// Returns the JSON object of a record.
template <class T>
json write_record(const T& x) {
  auto result = json::object();
  json_writer writer{result};
  inspect(writer, const_cast<T&>(x));
  return result;
}

// -- reading ------------------------------------------------------------------

/// A corrupt stored record's error: "field 'NAME' PROBLEM".
caf::error field_error(const char* name, std::string_view problem);

caf::error missing_field(const char* name);

caf::error wrong_type(const char* name);

caf::error unknown_value(const char* name, const std::string& value);

/// Prefixes the message of `err` with `what + ": "`.
caf::error in_context(const std::string& what, const caf::error& err);

/// Finds the name a record goes by in decode errors.
class record_name_reader {
public:
  using result_type = caf::error;

  template <class... Ts>
  caf::error operator()(Ts&&... xs) {
    (take(xs), ...);
    return caf::none;
  }

  std::string name;

private:
  void take(const caf::meta::type_name_t& x);

  void take(const record_name_t& x);

  template <class T>
  void take(const T&) {
    // nop
  }
};

/// Returns the name of record type `T` in decode errors: its `record_name`
/// annotation, else its type name without namespace, `_` read as a space.
template <class T>
const std::string& name_of_record() {
  static const std::string result = [] {
    T x;
    record_name_reader reader;
    inspect(reader, x);
    return reader.name;
  }();
  return result;
}

template <class T>
caf::expected<T> read_record(const json& in, const std::string& what);

/// Reads the fields of an `inspect` list from a JSON object, one pass at a
/// time.
class json_reader : public field_walker<json_reader, caf::error> {
public:
  enum pass {
    /// Required fields: present and of the right JSON type.
    required_fields,
    /// Optional fields, if present: of the right JSON type.
    optional_fields,
    /// The values inside fields: enum names and nested records.
    nested_values,
  };

  json_reader(const json& in, pass current) : in_(in), pass_(current) {
    // nop
  }

  /// Reads one field, as far as the current pass goes.
  template <class T>
  caf::error visit(const field_t& name, T& x) {
    if constexpr (is_record<T>) {
      if (name.form == field_form::embedded)
        return inspect(*this, x);
    }
    auto i = in_.find(name.name);
    if (pass_ == nested_values)
      return i == in_.end() ? caf::none : read_nested(name.name, *i, x);
    auto required = name.form == field_form::required;
    if (required != (pass_ == required_fields))
      return caf::none;
    if (i == in_.end())
      return required ? missing_field(name.name) : caf::none;
    return read_plain(name.name, *i, x);
  }

private:
  // Checks the JSON type of a field and reads plain values (numbers,
  // strings, vectors of them); the rest waits for `read_nested`.
  template <class T>
  static caf::error read_plain(const char* name, const json& in, T& x) {
    if constexpr (is_record<T> || is_record_vector<T>) {
      return caf::none;
    } else {
      try {
        if constexpr (std::is_enum_v<T>)
          static_cast<void>(in.get<std::string>());
        else if (!converts_to<T>(in))
          return wrong_type(name);
        else
          x = in.get<T>();
      } catch (const json::exception&) {
        return wrong_type(name);
      }
      return caf::none;
    }
  }

  // False for a JSON float that an integer field cannot hold once truncated
  // (an integer beyond 64 bits parses as one): converting it would be
  // undefined behaviour.
  template <class T>
  static bool converts_to(const json& in) {
    if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
      if (!in.is_number_float())
        return true;
      auto value = in.get<double>();
      auto limit = std::ldexp(1.0, std::numeric_limits<T>::digits);
      return value < limit
             && (std::is_signed_v<T> ? value >= -limit : value > -1.0);
    } else {
      return true;
    }
  }

  template <class T>
  static caf::error read_nested(const char* name, const json& in, T& x) {
    if constexpr (std::is_enum_v<T>) {
      auto str = in.get<std::string>();
      auto parsed = parse_name(str, T{});
      if (!parsed)
        return unknown_value(name, str);
      x = *parsed;
    } else if constexpr (is_record<T>) {
      return assign(read_record<T>(in, name), x);
    } else if constexpr (is_record_vector<T>) {
      if (!in.is_array())
        return wrong_type(name);
      T result;
      for (size_t i = 0; i < in.size(); ++i) {
        auto what = std::string{name} + "[" + std::to_string(i) + "]";
        result.emplace_back();
        if (auto err = assign(read_record<typename T::value_type>(in[i], what),
                              result.back()))
          return err;
      }
      x = std::move(result);
    }
    return caf::none;
  }

  template <class T>
  static caf::error assign(caf::expected<T>&& from, T& to) {
    if (!from)
      return std::move(from.error());
    to = std::move(*from);
    return caf::none;
  }

  const json& in_;
  pass pass_;
};

/// Reads a record from a JSON object; errors start with `what`.
template <class T>
caf::expected<T> read_record(const json& in, const std::string& what) {
  if (!in.is_object())
    return caf::make_error(ec::storage_corrupt, what + ": not a JSON object");
  T result;
  for (auto current :
       {json_reader::required_fields, json_reader::optional_fields,
        json_reader::nested_values}) {
    json_reader reader{in, current};
    if (auto err = inspect(reader, result))
      return in_context(what, err);
  }
  return result;
}

/// Reads a record from a JSON object; errors start with the record's name.
template <class T>
caf::expected<T> read_record(const json& in) {
  return read_record<T>(in, name_of_record<T>());
}

} // namespace keel::detail
