#pragma once

// Annotations that let a record's `inspect` overload describe its JSON form
// and its stored form too (keel/json_codec.hpp, keel/stored_form.hpp), so
// each record lists its fields once. CAF's inspectors (binary serialization,
// deep_to_string) skip annotations they do not know, so these change nothing
// in how records travel in messages.
//
// The stored form is positional: a stored record's field list only grows at
// its end. Add new fields last (not `required`, so older records read their
// default); never remove, reorder or retype one.

#include <cstdint>

#include <caf/meta/annotation.hpp>

namespace keel {

/// How a field appears in its record's JSON form.
enum class field_form : uint8_t {
  /// Always written; a record without it does not decode.
  required,
  /// Always written; may be missing on read (records written before the
  /// field existed), which keeps the field's default.
  optional,
  /// Written only when it differs from its default (0, empty); may be
  /// missing on read.
  omit_default,
  /// A nested record whose fields are written into the enclosing object.
  embedded,
};

/// Names the value that follows it in an `inspect` argument list: the key of
/// that value in the record's JSON form. Enums are stored by their name
/// (`to_string`), nested records as objects, vectors as arrays.
struct field_t : caf::meta::annotation {
  constexpr field_t(const char* name, field_form form)
    : name(name), form(form) {
    // nop
  }

  const char* name;
  field_form form;
};

/// Returns the annotation naming the next value of an `inspect` list.
constexpr field_t field(const char* name,
                        field_form form = field_form::required) {
  return {name, form};
}

/// Overrides the name a record goes by in JSON decode errors, which is
/// otherwise its `type_name` without namespace and with `_` read as a space
/// ("keel::log_entry" -> "log entry").
struct record_name_t : caf::meta::annotation {
  constexpr explicit record_name_t(const char* name) : name(name) {
    // nop
  }

  const char* name;
};

/// Returns the annotation naming a record in JSON decode errors.
constexpr record_name_t record_name(const char* name) {
  return record_name_t{name};
}

} // namespace keel
