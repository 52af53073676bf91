#pragma once

// Strict reading of a YAML document into typed values, for node configs
// (config_parser.cpp) and every other file Keel reads with the same rules
// (keel-chaos scenarios). Every problem throws `strict_yaml::error` with one
// message "SOURCE:LINE: KEY.PATH: what was expected, got what", so schema
// code reads like a list of keys and their rules.

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <caf/timespan.hpp>
#include <yaml-cpp/yaml.h>

#include "keel/config.hpp"

namespace keel::strict_yaml {

/// Thrown by the reader to unwind from any depth with one message; each
/// parser catches it at its entry point (`parse_config`, ...), so it never
/// leaves one.
struct error {
  std::string message;
};

/// Parses `yaml` as one document (null when empty). Fails with
/// `ec::config_invalid` and "SOURCE:LINE: YAML syntax error: ..." or, for a
/// second document, "expected a single YAML document".
caf::expected<YAML::Node> load_document(const std::string& yaml,
                                        const std::string& source);

/// The contents of the file at `path`; fails with `ec::config_unreadable`
/// and "PATH: cannot read the file: REASON".
caf::expected<std::string> read_file(const std::string& path);

/// Upper bound for `reader::read_int` that means "none".
constexpr int64_t no_limit = std::numeric_limits<int64_t>::max();

/// Renders `str` in double quotes on one line, shortened when long.
std::string quote(std::string_view str);

/// Renders a bound of a floating-point range without trailing zeros.
std::string render_number(double x);

/// Describes what a node holds, for "got ..." in messages.
std::string describe(const YAML::Node& node);

/// 1-based line of a node, or 1 when yaml-cpp has none (empty document).
int line_of(const YAML::Node& node);

/// The key path of item `index` of the list at `path`: "path[index]".
std::string indexed(const std::string& path, size_t index);

/// Copies a table of names into a list of strings.
template <class Range>
std::vector<std::string> strings(const Range& names) {
  return {std::begin(names), std::end(names)};
}

/// Joins names as "a, b or c".
template <class Range>
std::string one_of(const Range& names) {
  auto xs = strings(names);
  std::string result;
  for (size_t i = 0; i < xs.size(); ++i) {
    if (i > 0)
      result += i + 1 == xs.size() ? " or " : ", ";
    result += xs[i];
  }
  return result;
}

/// Whether `x` is one of `names`.
template <class Range>
bool contains(const Range& names, const std::string& x) {
  return std::any_of(std::begin(names), std::end(names),
                     [&](const auto& name) { return x == name; });
}

class reader;

/// A mapping being read: on construction, checks that the node is a mapping
/// whose keys are known, scalar and unique; then hands out the values.
class map_reader {
public:
  map_reader(reader& r, const YAML::Node& node, std::string path, int line,
             std::vector<std::string> known);

  /// The value of `key`, or nullopt when absent or null (`key:` / `key: ~`),
  /// which both mean "not set".
  std::optional<YAML::Node> get(const std::string& key) const;

  /// Whether `key` was written at all (even with a null value).
  bool has(const std::string& key) const {
    return entries_.count(key) > 0;
  }

  /// The key path of `key` inside this mapping.
  std::string path(const std::string& key) const {
    return path_.empty() ? key : path_ + "." + key;
  }

  /// The line of `key`, or of the mapping itself when absent.
  int line(const std::string& key) const {
    auto i = entries_.find(key);
    return i != entries_.end() ? i->second.first : line_;
  }

  /// The line of the mapping.
  int line() const {
    return line_;
  }

private:
  /// Key name -> (line of the key, value).
  std::map<std::string, std::pair<int, YAML::Node>> entries_;
  std::string path_;
  int line_;
};

/// Reads scalars, lists and mappings of one document, expanding `${VAR}`
/// from `env` and remembering the line of every key path it saw, so checks
/// across fields can still name a line.
class reader {
public:
  reader(std::string source, const env_lookup& env)
    : source_(std::move(source)), env_(env) {
    // nop
  }

  /// The name of the document in messages (a file path).
  const std::string& source() const {
    return source_;
  }

  /// Throws an `error` for `path` at `line` (1-based).
  [[noreturn]] void fail(int line, const std::string& path,
                         const std::string& what) const;

  /// Fails with "expected X, got VALUE", naming the unexpanded text too.
  [[noreturn]] void bad_value(const YAML::Node& node, const std::string& path,
                              const std::string& value,
                              const std::string& expected,
                              const std::string& note = {}) const;

  /// The text of a scalar value after `${VAR}` expansion; fails for
  /// mappings and lists with `expected`.
  std::string scalar(const YAML::Node& node, const std::string& path,
                     const std::string& expected);

  std::string read_string(const YAML::Node& node, const std::string& path);

  std::string read_name(const YAML::Node& node, const std::string& path);

  /// Reads an integer in `lo..hi`; `hi == no_limit` means no upper bound.
  int64_t read_int(const YAML::Node& node, const std::string& path, int64_t lo,
                   int64_t hi);

  /// Reads a finite decimal number (an integer or a fraction such as `1.5`)
  /// in `lo..hi`; `hi` infinite means no upper bound.
  double read_number(const YAML::Node& node, const std::string& path, double lo,
                     double hi);

  /// Reads a byte size (see `parse_size`) of at least `lo`.
  size_t read_size(const YAML::Node& node, const std::string& path, size_t lo);

  /// Reads a duration (see `parse_duration`), above zero if `positive`.
  caf::timespan read_duration(const YAML::Node& node, const std::string& path,
                              bool positive);

  /// `read_duration` in whole milliseconds.
  std::chrono::milliseconds read_millis(const YAML::Node& node,
                                        const std::string& path, bool positive);

  bool read_bool(const YAML::Node& node, const std::string& path);

  /// Reads one of `names`; the message lists them.
  template <class Range>
  std::string read_enum(const YAML::Node& node, const std::string& path,
                        const Range& names) {
    auto text = scalar(node, path, "one of " + one_of(names));
    if (!contains(names, text)) {
      auto msg = "unknown value " + quote(text);
      if (node.Scalar() != text)
        msg += " (from " + quote(node.Scalar()) + ")";
      fail(line_of(node), path, msg + " (expected " + one_of(names) + ")");
    }
    return text;
  }

  /// Checks that `node` is a list and returns its items.
  std::vector<YAML::Node> read_list(const YAML::Node& node,
                                    const std::string& path,
                                    const std::string& expected);

  /// The value of `key` of `m`; fails with "missing required key" naming
  /// `expected` when it is not set.
  YAML::Node required(const map_reader& m, const std::string& key,
                      const std::string& expected) const;

  /// The mapping under `key` of `m`, checked against `known` keys; nullopt
  /// when `key` is not set.
  std::optional<map_reader> section(const map_reader& m, const std::string& key,
                                    std::vector<std::string> known);

  /// Remembers the line a key path was written on (for cross-field checks).
  void remember(const std::string& path, int line) {
    lines_[path] = line;
  }

  /// The line `path` was written on, else the line of `fallback`, else 1.
  int line(const std::string& path, const std::string& fallback = {}) const;

private:
  /// Replaces `${VAR}` and `${VAR:-default}` with values from the
  /// environment and `$$` with `$`; any other `$` stays as it is.
  std::string expand(const std::string& text, const std::string& path,
                     int line) const;

  /// The value of the reference `${inner}` (`inner` is "VAR" or
  /// "VAR:-default"), written as `ref` in the text.
  std::string lookup(std::string_view inner, std::string_view ref,
                     const std::string& path, int line) const;

  std::string source_;
  const env_lookup& env_;
  /// Key path -> 1-based line, for messages from cross-field checks.
  std::map<std::string, int> lines_;
};

} // namespace keel::strict_yaml
