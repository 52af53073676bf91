#pragma once

// The table of keys of one mapping of the node configuration: each key's
// name, type and bounds, the field of keel::node_config it fills and one
// line of text. The parser reads a mapping's keys from its table (a new key
// is one entry), its unknown-key check takes the table's names, and
// `config_keys()` describes the tables for the docs and their tests.

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <iterator>
#include <limits>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <caf/timespan.hpp>
#include <yaml-cpp/yaml.h>

#include "keel/config_keys.hpp"
#include "keel/strict_yaml.hpp"
#include "keel/units.hpp"

namespace keel::config_detail {

using strict_yaml::map_reader;
using strict_yaml::reader;

/// Renders a size as a file writes it: in the largest binary unit that
/// keeps it whole ("1MiB", "64KiB", "100").
std::string render_size(uint64_t x);

/// Renders a size bound as the docs write it: in bytes below 1 MiB
/// ("1024"), else as `render_size` does ("1MiB").
std::string render_bound(size_t x);

/// Renders a number bound as the docs write it: whole numbers in digits
/// ("1000000"), others as `render_number` does ("0.01").
std::string render_bound(double x);

/// Renders a default as docs/configuration.md writes it: in backticks, an
/// empty string as `""`.
std::string code(const std::string& x);

/// Renders a list of names as a file writes it: "[a, b]".
std::string render_names(const std::vector<std::string>& xs);

/// The bounds of a duration key.
struct duration_bounds {
  /// Zero is refused ("a positive duration").
  bool positive = false;
  /// Smallest value ("expected at least 1ms").
  caf::timespan at_least{0};
  /// Largest value ("expected at most 1h"); zero means none.
  caf::timespan at_most{0};
};

/// Renders duration bounds as the docs write them ("duration > 0").
std::string describe_bounds(const duration_bounds& x);

/// Checks a duration read for the key at `path` (written on `line`) against
/// `bounds`, failing with "expected at least/at most ...".
void check_duration(const reader& r, int line, const std::string& path,
                    const duration_bounds& bounds, caf::timespan value);

/// One key of a mapping whose values fill an `Owner`.
template <class Owner>
struct key {
  /// The key's name in its mapping.
  std::string name;
  /// The type and bounds, as the docs write them.
  std::string type;
  /// What the key does, in one line.
  std::string text;
  /// Reads the key's value (set, not null) into the owner; empty for a key
  /// its section's own reader reads.
  std::function<void(reader&, const map_reader&, const std::string& key,
                     const YAML::Node&, Owner&)>
    read;
  /// Renders the default the owner holds; empty when `fixed_default` says
  /// what the default is.
  std::function<std::string(const Owner&)> render;
  /// The default as the docs write it, for defaults no field holds alone.
  std::string fixed_default;
  /// A mapping whose keys have a table of their own.
  bool container = false;
};

/// The keys of one mapping, in the order they are read and listed in
/// "unknown key (expected ...)" messages. Built with one call per key, each
/// naming the field it fills by a member pointer or a function of the owner
/// returning a reference.
template <class Owner>
class key_table {
public:
  using self = key_table&;

  template <class Get>
  self string(const char* name, Get get, const char* text) {
    return add(name, "string", text, scalar_reader(get, &reader::read_string),
               string_renderer(get));
  }

  /// A string that `valid` must accept; else "expected EXPECTED, got ...".
  template <class Get, class Valid>
  self checked_string(const char* name, const char* type, Get get, Valid valid,
                      const char* expected, const char* text) {
    auto read = [get, valid, expected](reader& r, const map_reader& m,
                                       const std::string& k,
                                       const YAML::Node& x, Owner& out) {
      auto& field = std::invoke(get, out);
      field = r.read_string(x, m.path(k));
      if (!valid(field))
        r.bad_value(x, m.path(k), field, expected);
    };
    return add(name, type, text, read, string_renderer(get));
  }

  template <class Get>
  self name(const char* name, Get get, const char* text) {
    return add(name, "name", text, scalar_reader(get, &reader::read_name),
               string_renderer(get));
  }

  /// An integer in `lo..hi` (`strict_yaml::no_limit`: no upper bound).
  template <class Get>
  self
  integer(const char* name, int64_t lo, int64_t hi, Get get, const char* text) {
    auto type = hi == strict_yaml::no_limit
                  ? "integer >= " + std::to_string(lo)
                  : "integer " + std::to_string(lo) + ".." + std::to_string(hi);
    auto read = [get, lo, hi](reader& r, const map_reader& m,
                              const std::string& k, const YAML::Node& x,
                              Owner& out) {
      auto& field = std::invoke(get, out);
      using T = std::remove_reference_t<decltype(field)>;
      field = static_cast<T>(r.read_int(x, m.path(k), lo, hi));
    };
    auto render = [get](const Owner& x) {
      return std::to_string(std::invoke(get, x));
    };
    return add(name, type, text, read, render);
  }

  /// A byte size of at least `lo`.
  template <class Get>
  self size(const char* name, size_t lo, Get get, const char* text) {
    auto type = lo == 0 ? std::string{"size"} : "size >= " + render_bound(lo);
    auto read = [get, lo](reader& r, const map_reader& m, const std::string& k,
                          const YAML::Node& x, Owner& out) {
      auto& field = std::invoke(get, out);
      using T = std::remove_reference_t<decltype(field)>;
      field = static_cast<T>(r.read_size(x, m.path(k), lo));
    };
    auto render = [get](const Owner& x) {
      return render_size(std::invoke(get, x));
    };
    return add(name, type, text, read, render);
  }

  /// A number in `lo..hi` (`hi` infinite: no upper bound).
  template <class Get>
  self
  number(const char* name, double lo, double hi, Get get, const char* text) {
    auto type = std::isinf(hi)
                  ? "number >= " + render_bound(lo)
                  : "number " + render_bound(lo) + ".." + render_bound(hi);
    auto read = [get, lo, hi](reader& r, const map_reader& m,
                              const std::string& k, const YAML::Node& x,
                              Owner& out) {
      std::invoke(get, out) = r.read_number(x, m.path(k), lo, hi);
    };
    return add(name, type, text, read, number_renderer(get));
  }

  /// A share of a whole: a number above 0 and at most 1.
  template <class Get>
  self share(const char* name, Get get, const char* text) {
    auto read = [get](reader& r, const map_reader& m, const std::string& k,
                      const YAML::Node& x, Owner& out) {
      auto& field = std::invoke(get, out);
      field = r.read_number(x, m.path(k), 0.0, 1.0);
      if (field <= 0.0)
        r.bad_value(x, m.path(k), r.read_string(x, m.path(k)),
                    "a number above 0 and at most 1");
    };
    return add(name, "number above 0, at most 1", text, read,
               number_renderer(get));
  }

  /// A duration within `bounds`, into any std::chrono::duration field.
  template <class Get>
  self duration(const char* name, duration_bounds bounds, Get get,
                const char* text) {
    auto read = [get, bounds](reader& r, const map_reader& m,
                              const std::string& k, const YAML::Node& x,
                              Owner& out) {
      auto value = r.read_duration(x, m.path(k), bounds.positive);
      check_duration(r, m.line(k), m.path(k), bounds, value);
      auto& field = std::invoke(get, out);
      using T = std::remove_reference_t<decltype(field)>;
      field = std::chrono::duration_cast<T>(value);
    };
    auto render = [get](const Owner& x) {
      return render_duration(
        std::chrono::duration_cast<caf::timespan>(std::invoke(get, x)));
    };
    return add(name, describe_bounds(bounds), text, read, render);
  }

  template <class Get>
  self boolean(const char* name, Get get, const char* text) {
    auto read = [get](reader& r, const map_reader& m, const std::string& k,
                      const YAML::Node& x, Owner& out) {
      std::invoke(get, out) = r.read_bool(x, m.path(k));
    };
    auto render = [get](const Owner& x) -> std::string {
      return std::invoke(get, x) ? "true" : "false";
    };
    return add(name, "boolean", text, read, render);
  }

  /// One of `names`, into a string or into an enum whose values are the
  /// names' indices.
  template <class Get, size_t N>
  self choice(const char* name, const char* const (&names)[N], Get get,
              const char* text) {
    std::vector<std::string> xs{std::begin(names), std::end(names)};
    std::string type;
    for (size_t i = 0; i < N; ++i) {
      if (i > 0)
        type += i + 1 == N ? " or " : ", ";
      type += code(xs[i]);
    }
    auto read = [get, xs](reader& r, const map_reader& m, const std::string& k,
                          const YAML::Node& x, Owner& out) {
      auto value = r.read_enum(x, m.path(k), xs);
      auto& field = std::invoke(get, out);
      using T = std::remove_reference_t<decltype(field)>;
      if constexpr (std::is_same_v<T, std::string>)
        field = value;
      else
        field = static_cast<T>(
          std::distance(xs.begin(), std::find(xs.begin(), xs.end(), value)));
    };
    auto render = [get, xs](const Owner& x) -> std::string {
      auto& field = std::invoke(get, x);
      using T = std::remove_cv_t<std::remove_reference_t<decltype(field)>>;
      if constexpr (std::is_same_v<T, std::string>)
        return field;
      else
        return xs[static_cast<size_t>(field)];
    };
    return add(name, type, text, read, render);
  }

  /// A list of names (`expected` in errors, as "a list of tool names").
  template <class Get>
  self
  names(const char* name, Get get, const char* expected, const char* text) {
    std::string type = expected;
    type.erase(0, 2); // "a list of ..." -> "list of ..."
    auto read = [get, expected](reader& r, const map_reader& m,
                                const std::string& k, const YAML::Node& x,
                                Owner& out) {
      auto path = m.path(k);
      auto& field = std::invoke(get, out);
      field.clear();
      auto items = r.read_list(x, path, expected);
      for (size_t i = 0; i < items.size(); ++i)
        field.push_back(r.read_name(items[i], strict_yaml::indexed(path, i)));
    };
    auto render = [get](const Owner& x) {
      return render_names(std::invoke(get, x));
    };
    return add(name, type, text, read, render);
  }

  /// A key its section's own reader reads (lists of items, secrets, maps,
  /// keys checked against each other); `fixed_default` as the docs write it.
  self dedicated(const char* name, const char* type, const char* fixed_default,
                 const char* text) {
    add(name, type, text, {}, {});
    keys_.back().fixed_default = fixed_default;
    return *this;
  }

  /// A key read by `read` (a function of the reader, the mapping, the key
  /// name, the value and the owner). `fallback` renders the default from
  /// the owner or, as a string, says what it is.
  template <class Read, class Fallback>
  self custom(const char* name, const char* type, Read read, Fallback fallback,
              const char* text) {
    if constexpr (std::is_invocable_v<Fallback, const Owner&>) {
      add(name, type, text, read, fallback);
    } else {
      add(name, type, text, read, {});
      keys_.back().fixed_default = fallback;
    }
    return *this;
  }

  /// Replaces the type of the last key by `type`, as the docs write it
  /// ("path to a PEM file" for a string).
  self typed(const char* type) {
    keys_.back().type = type;
    return *this;
  }

  /// A mapping whose keys have a table of their own.
  self container(const char* name, const char* text) {
    add(name, "mapping", text, {}, {});
    keys_.back().container = true;
    return *this;
  }

  /// Replaces the rendered default of the last key by `text`, for a default
  /// that depends on other keys (as the docs write it).
  self derived(const char* text) {
    keys_.back().render = nullptr;
    keys_.back().fixed_default = text;
    return *this;
  }

  /// `derived(text)` for the key `name`.
  self derived(const char* name, const char* text) {
    for (auto& k : keys_)
      if (k.name == name) {
        k.render = nullptr;
        k.fixed_default = text;
      }
    return *this;
  }

  /// The names of the keys, for the unknown-key check.
  std::vector<std::string> known() const {
    std::vector<std::string> result;
    for (auto& k : keys_)
      result.push_back(k.name);
    return result;
  }

  const std::vector<key<Owner>>& keys() const {
    return keys_;
  }

  /// Reads every key of `m` that has a reader into `out`, in table order.
  void read(reader& r, const map_reader& m, Owner& out) const {
    for (auto& k : keys_)
      if (k.read)
        if (auto x = m.get(k.name))
          k.read(r, m, k.name, *x, out);
  }

  /// Appends the keys, under `prefix`, with the defaults `defaults` holds.
  void describe(std::vector<config_key>& out, const std::string& prefix,
                const Owner& defaults) const {
    for (auto& k : keys_)
      out.push_back({prefix + "." + k.name, k.type,
                     k.render ? code(k.render(defaults)) : k.fixed_default,
                     k.text, k.container});
  }

private:
  using read_fn = std::function<void(
    reader&, const map_reader&, const std::string&, const YAML::Node&, Owner&)>;
  using render_fn = std::function<std::string(const Owner&)>;

  self add(const char* name, std::string type, const char* text, read_fn read,
           render_fn render) {
    key<Owner> k;
    k.name = name;
    k.type = std::move(type);
    k.text = text;
    k.read = std::move(read);
    k.render = std::move(render);
    keys_.push_back(std::move(k));
    return *this;
  }

  template <class Get, class Fn>
  static auto scalar_reader(Get get, Fn fn) {
    return [get, fn](reader& r, const map_reader& m, const std::string& k,
                     const YAML::Node& x, Owner& out) {
      std::invoke(get, out) = (r.*fn)(x, m.path(k));
    };
  }

  template <class Get>
  static auto string_renderer(Get get) {
    return [get](const Owner& x) -> std::string { return std::invoke(get, x); };
  }

  template <class Get>
  static auto number_renderer(Get get) {
    return [get](const Owner& x) {
      return strict_yaml::render_number(std::invoke(get, x));
    };
  }

  std::vector<key<Owner>> keys_;
};

} // namespace keel::config_detail
