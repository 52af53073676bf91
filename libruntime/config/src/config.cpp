#include "keel/config.hpp"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <set>
#include <utility>

#include <yaml-cpp/yaml.h>

namespace keel {

// -- node_config --------------------------------------------------------------

const provider_config* node_config::find_provider(const std::string& x) const {
  auto i = std::find_if(providers.begin(), providers.end(),
                        [&](const provider_config& p) { return p.name == x; });
  return i != providers.end() ? &*i : nullptr;
}

bool is_http_kind(std::string_view kind) {
  return kind == "openai" || kind == "anthropic";
}

const pool_config* node_config::find_pool(const std::string& x) const {
  auto i = std::find_if(pools.begin(), pools.end(),
                        [&](const pool_config& p) { return p.name == x; });
  return i != pools.end() ? &*i : nullptr;
}

env_lookup process_env() {
  return [](const std::string& name) -> std::optional<std::string> {
    if (auto value = std::getenv(name.c_str()))
      return std::string{value};
    return std::nullopt;
  };
}

node_config default_config() {
  node_config result;
  provider_config echo;
  echo.name = "echo";
  echo.kind = "echo";
  result.providers.push_back(std::move(echo));
  pool_config pool;
  pool.name = "default";
  pool.chain.emplace_back("echo");
  result.pools.push_back(std::move(pool));
  return result;
}

// -- scalar formats -----------------------------------------------------------

namespace {

/// Parses a whole string of decimal digits (no sign) into `out`.
bool parse_digits(std::string_view str, uint64_t& out) {
  if (str.empty() || str.front() < '0' || str.front() > '9')
    return false;
  auto end = str.data() + str.size();
  auto [ptr, err] = std::from_chars(str.data(), end, out);
  return err == std::errc{} && ptr == end;
}

/// Splits "123unit" into the number and the unit.
std::pair<std::string_view, std::string_view>
split_number(std::string_view str) {
  size_t n = 0;
  while (n < str.size() && str[n] >= '0' && str[n] <= '9')
    ++n;
  return {str.substr(0, n), str.substr(n)};
}

/// Returns `x * factor`, or nullopt if the product exceeds `limit`.
std::optional<uint64_t> checked_mul(uint64_t x, uint64_t factor,
                                    uint64_t limit) {
  if (x > limit / factor)
    return std::nullopt;
  return x * factor;
}

} // namespace

std::optional<caf::timespan> parse_duration(std::string_view str) {
  static constexpr std::pair<std::string_view, uint64_t> units[] = {
    {"ns", 1},
    {"us", 1'000},
    {"ms", 1'000'000},
    {"s", 1'000'000'000},
    {"m", 60'000'000'000},
    {"h", 3'600'000'000'000},
  };
  auto [digits, unit] = split_number(str);
  uint64_t count = 0;
  if (!parse_digits(digits, count))
    return std::nullopt;
  for (auto& [name, factor] : units) {
    if (unit != name)
      continue;
    constexpr auto limit = static_cast<uint64_t>(
      std::numeric_limits<caf::timespan::rep>::max());
    if (auto ns = checked_mul(count, factor, limit))
      return caf::timespan{static_cast<caf::timespan::rep>(*ns)};
    return std::nullopt;
  }
  return std::nullopt;
}

std::optional<size_t> parse_size(std::string_view str) {
  static constexpr std::pair<std::string_view, uint64_t> units[] = {
    {"", 1},
    {"KiB", uint64_t{1} << 10},
    {"MiB", uint64_t{1} << 20},
    {"GiB", uint64_t{1} << 30},
  };
  auto [digits, unit] = split_number(str);
  uint64_t count = 0;
  if (!parse_digits(digits, count))
    return std::nullopt;
  for (auto& [name, factor] : units)
    if (unit == name) {
      constexpr auto limit = uint64_t{std::numeric_limits<size_t>::max()};
      if (auto bytes = checked_mul(count, factor, limit))
        return static_cast<size_t>(*bytes);
      return std::nullopt;
    }
  return std::nullopt;
}

// -- restart strategies -------------------------------------------------------

namespace {

constexpr const char* strategy_names[] = {"one_for_one", "one_for_all",
                                          "rest_for_one"};

} // namespace

std::string to_string(restart_strategy x) {
  return strategy_names[static_cast<size_t>(x)];
}

std::optional<restart_strategy> parse_restart_strategy(std::string_view str) {
  for (size_t i = 0; i < std::size(strategy_names); ++i)
    if (str == strategy_names[i])
      return static_cast<restart_strategy>(i);
  return std::nullopt;
}

// -- the parser ---------------------------------------------------------------

namespace {

constexpr const char* top_level_keys[] = {"node",    "gateway",
                                          "providers", "pools",
                                          "threads", "supervision",
                                          "logging", "storage"};

constexpr const char* provider_kinds[] = {"echo", "scripted", "openai",
                                          "anthropic"};

constexpr const char* http_provider_keys[] = {
  "base_url",   "api_key",            "headers",       "connect_timeout",
  "first_byte_timeout", "total_timeout", "max_concurrency", "ca_file",
  "stream",     "max_tokens"};

constexpr const char* retry_keys[] = {"base_delay", "multiplier",
                                      "max_delay",  "jitter",
                                      "retry_after_cap", "budget"};

constexpr const char* breaker_keys[] = {"failure_threshold", "probe_lead",
                                        "probe_timeout"};

constexpr const char* failure_classes[] = {
  "auth",           "rate_limit",       "billing",
  "timeout",        "overloaded",       "model_not_found",
  "context_overflow", "invalid_request", "format",
  "unknown"};

constexpr const char* log_levels[] = {"trace", "debug", "info",
                                      "warn",  "error", "off"};

constexpr const char* supervisor_names[] = {"root", "providers",
                                            "conversations"};

constexpr const char* supervisor_keys[] = {"strategy", "max_restarts",
                                           "period",   "shutdown_timeout",
                                           "buffer",   "backoff"};

constexpr const char* backoff_keys[] = {"initial", "max", "multiplier",
                                        "reset_after", "jitter"};

/// Upper bound of `max_restarts` and `buffer`: far beyond any sane value,
/// low enough that a typo of a few extra digits is caught.
constexpr int64_t supervision_limit = 1'000'000;

constexpr int64_t no_limit = std::numeric_limits<int64_t>::max();

/// Thrown by the parser to unwind from any depth with one message; caught in
/// `parse_config`, so it never leaves this file.
struct config_error {
  std::string message;
};

/// Renders `str` in double quotes on one line, shortened when long.
std::string quote(std::string_view str) {
  constexpr size_t max_len = 60;
  auto len = str.size();
  if (len > max_len) {
    // Cut at a character boundary, not inside a UTF-8 sequence.
    len = max_len;
    while (len > 0 && (static_cast<unsigned char>(str[len]) & 0xC0) == 0x80)
      --len;
  }
  std::string result = "\"";
  for (size_t i = 0; i < len; ++i) {
    auto c = static_cast<unsigned char>(str[i]);
    switch (c) {
      case '"': result += "\\\""; break;
      case '\\': result += "\\\\"; break;
      case '\n': result += "\\n"; break;
      case '\r': result += "\\r"; break;
      case '\t': result += "\\t"; break;
      default:
        if (c < 0x20 || c == 0x7F) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\x%02X", c);
          result += buf;
        } else {
          result += static_cast<char>(c);
        }
    }
  }
  if (len < str.size())
    result += "...";
  result += '"';
  return result;
}

/// Joins names as "a, b or c".
template <class Range>
std::string one_of(const Range& names) {
  std::vector<std::string> xs(std::begin(names), std::end(names));
  std::string result;
  for (size_t i = 0; i < xs.size(); ++i) {
    if (i > 0)
      result += i + 1 == xs.size() ? " or " : ", ";
    result += xs[i];
  }
  return result;
}

/// Renders a duration in the largest unit that keeps it whole ("10ms",
/// "2s"), as it would be written in the file.
std::string render_duration(caf::timespan x) {
  static constexpr std::pair<const char*, int64_t> units[] = {
    {"h", 3'600'000'000'000},
    {"m", 60'000'000'000},
    {"s", 1'000'000'000},
    {"ms", 1'000'000},
    {"us", 1'000},
  };
  auto ns = x.count();
  for (auto& [name, factor] : units)
    if (ns != 0 && ns % factor == 0)
      return std::to_string(ns / factor) + name;
  return std::to_string(ns) + (ns == 0 ? "s" : "ns");
}

/// Renders a bound of a floating-point range without trailing zeros.
std::string render_number(double x) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", x);
  return buf;
}

template <class Range>
bool contains(const Range& names, const std::string& x) {
  return std::any_of(std::begin(names), std::end(names),
                     [&](const auto& name) { return x == name; });
}

/// Edit distance counting a swap of neighbours as one edit (optimal string
/// alignment), so "gatway" and "dealy" find "gateway" and "delay".
size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::vector<size_t>> d(a.size() + 1,
                                     std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i)
    d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j)
    d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i)
    for (size_t j = 1; j <= b.size(); ++j) {
      auto cost = a[i - 1] == b[j - 1] ? 0u : 1u;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1,
                          d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  return d[a.size()][b.size()];
}

/// Describes what a node holds, for "got ..." in messages.
std::string describe(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Map: return "a mapping";
    case YAML::NodeType::Sequence: return "a list";
    case YAML::NodeType::Scalar: return quote(node.Scalar());
    default: return "nothing";
  }
}

/// 1-based line of a node, or 1 when yaml-cpp has none (empty document).
int line_of(const YAML::Node& node) {
  return std::max(node.Mark().line, 0) + 1;
}

class parser;

/// A mapping being read: on construction, checks that the node is a mapping
/// whose keys are known, scalar and unique; then hands out the values.
class map_reader {
public:
  map_reader(parser& p, const YAML::Node& node, std::string path, int line,
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

/// Reads a YAML document into a `node_config`, throwing `config_error` at the
/// first problem.
class parser {
public:
  parser(std::string source, const env_lookup& env)
    : source_(std::move(source)), env_(env) {
    // nop
  }

  node_config run(const YAML::Node& root);

  /// Throws a `config_error` for `path` at `line` (1-based).
  [[noreturn]] void fail(int line, const std::string& path,
                         const std::string& what) const {
    std::string msg = source_ + ":" + std::to_string(line) + ": ";
    if (!path.empty())
      msg += path + ": ";
    msg += what;
    throw config_error{std::move(msg)};
  }

  /// The text of a scalar value after `${VAR}` expansion; fails for
  /// mappings and lists with `expected`.
  std::string scalar(const YAML::Node& node, const std::string& path,
                     const std::string& expected) {
    if (!node.IsScalar())
      fail(line_of(node), path,
           "expected " + expected + ", got " + describe(node));
    auto result = expand(node.Scalar(), path, line_of(node));
    lines_[path] = line_of(node);
    return result;
  }

  /// Fails with "expected X, got VALUE", naming the unexpanded text too.
  [[noreturn]] void bad_value(const YAML::Node& node, const std::string& path,
                              const std::string& value,
                              const std::string& expected,
                              const std::string& note = {}) const {
    auto msg = "expected " + expected + ", got " + quote(value);
    if (node.IsScalar() && node.Scalar() != value)
      msg += " (from " + quote(node.Scalar()) + ")";
    msg += note;
    fail(line_of(node), path, msg);
  }

  std::string read_string(const YAML::Node& node, const std::string& path) {
    return scalar(node, path, "a string");
  }

  std::string read_name(const YAML::Node& node, const std::string& path) {
    auto result = scalar(node, path, "a non-empty name");
    if (result.empty())
      bad_value(node, path, result, "a non-empty name");
    return result;
  }

  int64_t read_int(const YAML::Node& node, const std::string& path,
                   int64_t lo, int64_t hi) {
    auto expected = hi == no_limit ? "an integer >= " + std::to_string(lo)
                                   : "an integer in " + std::to_string(lo)
                                       + ".." + std::to_string(hi);
    auto text = scalar(node, path, expected);
    std::string_view digits = text;
    bool negative = !digits.empty() && digits.front() == '-';
    if (negative)
      digits.remove_prefix(1);
    auto all_digits = !digits.empty()
                      && std::all_of(digits.begin(), digits.end(),
                                     [](char c) { return c >= '0' && c <= '9'; });
    if (!all_digits)
      bad_value(node, path, text, expected);
    uint64_t magnitude = 0;
    if (!parse_digits(digits, magnitude)
        || magnitude > uint64_t{std::numeric_limits<int64_t>::max()})
      bad_value(node, path, text, expected, " (too large)");
    auto value = static_cast<int64_t>(magnitude);
    if (negative)
      value = -value;
    if (value < lo || value > hi)
      bad_value(node, path, text, expected);
    return value;
  }

  /// Reads a finite decimal number (an integer or a fraction such as `1.5`)
  /// in `lo..hi`; `hi` infinite means no upper bound.
  double read_number(const YAML::Node& node, const std::string& path,
                     double lo, double hi) {
    auto expected = std::isinf(hi) ? "a number >= " + render_number(lo)
                                   : "a number in " + render_number(lo) + ".."
                                       + render_number(hi);
    auto text = scalar(node, path, expected);
    double value = 0;
    auto first = text.data();
    auto last = first + text.size();
    auto [ptr, err] = std::from_chars(first, last, value);
    // from_chars takes "inf" and "nan": no sensible setting is either.
    if (err != std::errc{} || ptr != last || !std::isfinite(value))
      bad_value(node, path, text, expected);
    if (value < lo || value > hi)
      bad_value(node, path, text, expected);
    return value;
  }

  size_t read_size(const YAML::Node& node, const std::string& path,
                   size_t lo) {
    auto expected = "a size in bytes >= " + std::to_string(lo)
                    + " (an integer, or a string like \"64KiB\" or \"1MiB\")";
    auto text = scalar(node, path, expected);
    auto value = parse_size(text);
    if (!value || *value < lo)
      bad_value(node, path, text, expected);
    return *value;
  }

  caf::timespan read_duration(const YAML::Node& node, const std::string& path,
                              bool positive) {
    std::string expected = positive ? "a positive duration" : "a duration";
    expected += " such as \"250ms\", \"5s\", \"2m\" or \"1h\"";
    auto text = scalar(node, path, expected);
    auto value = parse_duration(text);
    if (!value) {
      uint64_t ignored = 0;
      auto note = parse_digits(text, ignored) ? " (a unit is required)" : "";
      bad_value(node, path, text, expected, note);
    }
    if (positive && value->count() <= 0)
      bad_value(node, path, text, expected);
    return *value;
  }

  bool read_bool(const YAML::Node& node, const std::string& path) {
    auto text = scalar(node, path, "true or false");
    std::string lower = text;
    std::transform(lower.begin(), lower.end(), lower.begin(),
                   [](unsigned char c) { return std::tolower(c); });
    if (lower == "true")
      return true;
    if (lower == "false")
      return false;
    bad_value(node, path, text, "true or false");
  }

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
                                    const std::string& expected) {
    if (!node.IsSequence())
      fail(line_of(node), path,
           "expected " + expected + ", got " + describe(node));
    std::vector<YAML::Node> items;
    for (size_t i = 0; i < node.size(); ++i) {
      items.push_back(node[i]);
      lines_[path + "[" + std::to_string(i) + "]"] = line_of(node[i]);
    }
    return items;
  }

  /// Remembers the line a key path was written on (for cross-field checks).
  void remember(const std::string& path, int line) {
    lines_[path] = line;
  }

  /// The line `path` was written on, else the line of `fallback`, else 1.
  int line(const std::string& path, const std::string& fallback = {}) const {
    if (auto i = lines_.find(path); i != lines_.end())
      return i->second;
    if (auto i = lines_.find(fallback); i != lines_.end())
      return i->second;
    return 1;
  }

private:
  /// Replaces `${VAR}` and `${VAR:-default}` with values from the
  /// environment and `$$` with `$`; any other `$` stays as it is.
  std::string expand(const std::string& text, const std::string& path,
                     int line) const {
    std::string result;
    for (size_t i = 0; i < text.size(); ++i) {
      if (text[i] != '$' || i + 1 == text.size()) {
        result += text[i];
        continue;
      }
      if (text[i + 1] == '$') {
        result += '$';
        ++i;
        continue;
      }
      if (text[i + 1] != '{') {
        result += '$';
        continue;
      }
      auto close = text.find('}', i + 2);
      if (close == std::string::npos)
        fail(line, path,
             "unterminated \"${\" (expected ${VAR} or ${VAR:-default}; write "
             "$$ for a literal $)");
      auto inner = std::string_view{text}.substr(i + 2, close - i - 2);
      std::optional<std::string_view> fallback;
      if (auto sep = inner.find(":-"); sep != std::string_view::npos) {
        fallback = inner.substr(sep + 2);
        inner = inner.substr(0, sep);
      }
      auto valid_char = [](char c) {
        return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z')
               || (c >= '0' && c <= '9') || c == '_';
      };
      if (inner.empty() || (inner.front() >= '0' && inner.front() <= '9')
          || !std::all_of(inner.begin(), inner.end(), valid_char))
        fail(line, path,
             "invalid environment variable reference "
               + quote(text.substr(i, close - i + 1))
               + " (expected ${VAR} or ${VAR:-default} with VAR made of "
                 "letters, digits and _)");
      std::string name{inner};
      auto value = env_ ? env_(name) : std::nullopt;
      if (fallback) {
        // Like the shell's ${VAR:-default}: unset or empty takes the default.
        result += value && !value->empty() ? *value : std::string{*fallback};
      } else if (value) {
        result += *value;
      } else {
        fail(line, path,
             "environment variable " + name + " is not set (write ${" + name
               + ":-default} to make it optional)");
      }
      i = close;
    }
    return result;
  }

  void read_node(const map_reader& m, node_config& cfg);
  void read_gateway(const map_reader& m, gateway_config& cfg);
  provider_config read_provider(const YAML::Node& node,
                                const std::string& path);
  void read_http_provider(const map_reader& m, provider_config& cfg);
  scripted_step read_step(const YAML::Node& node, const std::string& path);
  pool_config read_pool(const YAML::Node& node, const std::string& path);
  void read_retry(const map_reader& m, pool_config& cfg);
  void read_breaker(const map_reader& m, breaker_config& cfg);
  void read_cooldowns(const map_reader& m, cooldown_table& cfg);
  void read_threads(const map_reader& m, thread_defaults& cfg);
  void read_supervision(const map_reader& m, supervision_config& cfg);
  void read_supervisor(const map_reader& m, supervisor_settings& cfg,
                       bool dynamic);
  void read_backoff(const map_reader& m, backoff_config& cfg);
  void read_logging(const map_reader& m, logging_config& cfg);
  void read_storage(const map_reader& m, storage_config& cfg);
  void validate(const node_config& cfg, bool providers_given,
                bool pools_given, bool pool_given) const;

  std::string source_;
  const env_lookup& env_;
  /// Key path -> 1-based line, for messages from cross-field checks.
  std::map<std::string, int> lines_;
};

map_reader::map_reader(parser& p, const YAML::Node& node, std::string path,
                       int line, std::vector<std::string> known)
  : path_(std::move(path)), line_(line) {
  if (!node.IsMap())
    p.fail(line_of(node), path_,
           "expected a mapping, got " + describe(node));
  for (auto kv : node) {
    auto key_line = line_of(kv.first);
    if (!kv.first.IsScalar())
      p.fail(key_line, path_,
             "expected a key name, got " + describe(kv.first));
    auto key = kv.first.Scalar();
    auto key_path = path_.empty() ? key : path_ + "." + key;
    if (!contains(known, key)) {
      std::string best;
      size_t best_distance = 3;
      for (auto& candidate : known) {
        auto d = edit_distance(key, candidate);
        if (d < best_distance && d < std::max(key.size(), candidate.size())) {
          best = candidate;
          best_distance = d;
        }
      }
      auto hint = best.empty() ? " (expected " + one_of(known) + ")"
                               : " (did you mean " + best + "?)";
      p.fail(key_line, key_path, "unknown key" + hint);
    }
    if (entries_.count(key) > 0)
      p.fail(key_line, key_path,
             "duplicate key (first given on line "
               + std::to_string(entries_.at(key).first) + ")");
    entries_.emplace(key, std::make_pair(key_line, kv.second));
    p.remember(key_path, key_line);
  }
}

std::optional<YAML::Node> map_reader::get(const std::string& key) const {
  auto i = entries_.find(key);
  if (i == entries_.end() || i->second.second.IsNull())
    return std::nullopt;
  return i->second.second;
}

node_config parser::run(const YAML::Node& root) {
  auto cfg = default_config();
  cfg.source = source_;
  // An empty document (or one holding only comments) means all defaults.
  if (root.IsNull())
    return cfg;
  if (!root.IsMap())
    fail(line_of(root), "",
         "expected a mapping of top-level keys (" + one_of(top_level_keys)
           + "), got " + describe(root));
  map_reader top{*this, root, "", line_of(root),
                 {std::begin(top_level_keys), std::end(top_level_keys)}};
  // Sections: a mapping key by key over the defaults.
  if (auto node = top.get("node"))
    read_node(map_reader{*this, *node, "node", top.line("node"),
                         {"name", "data_dir"}},
              cfg);
  if (auto node = top.get("gateway"))
    read_gateway(map_reader{*this, *node, "gateway", top.line("gateway"),
                            {"host", "port", "token", "max_frame_bytes",
                             "max_text_bytes", "max_connections",
                             "max_queued_frames", "io_threads"}},
                 cfg.gateway);
  // Lists replace the defaults as a whole.
  bool providers_given = false;
  if (auto node = top.get("providers")) {
    providers_given = true;
    cfg.providers.clear();
    auto items = read_list(*node, "providers", "a list of providers");
    for (size_t i = 0; i < items.size(); ++i)
      cfg.providers.push_back(
        read_provider(items[i], "providers[" + std::to_string(i) + "]"));
  }
  bool pools_given = false;
  if (auto node = top.get("pools")) {
    pools_given = true;
    cfg.pools.clear();
    auto items = read_list(*node, "pools", "a list of pools");
    for (size_t i = 0; i < items.size(); ++i)
      cfg.pools.push_back(
        read_pool(items[i], "pools[" + std::to_string(i) + "]"));
  } else if (providers_given) {
    // Providers without pools: the default pool chains all of them in order.
    cfg.pools.front().chain.clear();
    for (auto& p : cfg.providers)
      cfg.pools.front().chain.push_back(p.name);
  }
  bool pool_given = false;
  if (auto node = top.get("threads")) {
    map_reader m{*this, *node, "threads", top.line("threads"),
                 {"system_prompt", "idle_timeout", "pool", "max_inbox",
                  "turn_timeout"}};
    pool_given = m.get("pool").has_value();
    read_threads(m, cfg.threads);
  }
  if (auto node = top.get("supervision"))
    read_supervision(map_reader{*this, *node, "supervision",
                                top.line("supervision"),
                                {std::begin(supervisor_names),
                                 std::end(supervisor_names)}},
                     cfg.supervision);
  if (auto node = top.get("logging"))
    read_logging(map_reader{*this, *node, "logging", top.line("logging"),
                            {"level", "file"}},
                 cfg.logging);
  if (auto node = top.get("storage"))
    read_storage(map_reader{*this, *node, "storage", top.line("storage"),
                            {"sync", "fault_injection"}},
                 cfg.storage);
  validate(cfg, providers_given, pools_given, pool_given);
  return cfg;
}

void parser::read_node(const map_reader& m, node_config& cfg) {
  if (auto x = m.get("name")) {
    auto path = m.path("name");
    auto name = read_string(*x, path);
    auto valid_char = [](char c) {
      return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z')
             || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
    };
    if (name.empty() || name.size() > 64
        || !std::all_of(name.begin(), name.end(), valid_char))
      bad_value(*x, path, name,
                "1 to 64 characters from A-Z, a-z, 0-9, '.', '_' and '-'");
    cfg.name = std::move(name);
  }
  if (auto x = m.get("data_dir")) {
    auto path = m.path("data_dir");
    cfg.data_dir = read_string(*x, path);
    if (cfg.data_dir.empty())
      bad_value(*x, path, cfg.data_dir, "a non-empty folder path");
  }
}

void parser::read_gateway(const map_reader& m, gateway_config& cfg) {
  if (auto x = m.get("host")) {
    auto path = m.path("host");
    cfg.host = read_string(*x, path);
    if (cfg.host.empty())
      bad_value(*x, path, cfg.host, "a non-empty host name or address");
  }
  if (auto x = m.get("port"))
    cfg.port = static_cast<uint16_t>(read_int(*x, m.path("port"), 0, 65535));
  if (auto x = m.get("token"))
    cfg.token = read_string(*x, m.path("token"));
  if (auto x = m.get("max_frame_bytes"))
    cfg.max_frame_bytes = read_size(*x, m.path("max_frame_bytes"), 1024);
  if (auto x = m.get("max_text_bytes"))
    cfg.max_text_bytes = read_size(*x, m.path("max_text_bytes"), 1);
  if (auto x = m.get("max_connections"))
    cfg.max_connections = static_cast<size_t>(
      read_int(*x, m.path("max_connections"), 1, no_limit));
  if (auto x = m.get("max_queued_frames"))
    cfg.max_queued_frames = static_cast<size_t>(
      read_int(*x, m.path("max_queued_frames"), 1, no_limit));
  if (auto x = m.get("io_threads"))
    cfg.io_threads = static_cast<size_t>(
      read_int(*x, m.path("io_threads"), 1, 64));
}

provider_config parser::read_provider(const YAML::Node& node,
                                      const std::string& path) {
  std::vector<std::string> known{"name", "kind", "model", "script"};
  known.insert(known.end(), std::begin(http_provider_keys),
               std::end(http_provider_keys));
  map_reader m{*this, node, path, line_of(node), std::move(known)};
  provider_config result;
  auto name = m.get("name");
  if (!name)
    fail(m.line("name"), m.path("name"),
         "missing required key (expected a non-empty provider name)");
  result.name = read_name(*name, m.path("name"));
  auto kind = m.get("kind");
  if (!kind)
    fail(m.line("kind"), m.path("kind"),
         "missing required key (expected " + one_of(provider_kinds) + ")");
  result.kind = read_enum(*kind, m.path("kind"), provider_kinds);
  if (auto x = m.get("model"))
    result.model = read_string(*x, m.path("model"));
  auto script_path = m.path("script");
  if (result.kind == "echo" && m.has("script"))
    fail(m.line("script"), script_path, "echo providers take no script");
  if (auto x = m.get("script")) {
    auto items = read_list(*x, script_path, "a list of script steps");
    for (size_t i = 0; i < items.size(); ++i)
      result.script.push_back(
        read_step(items[i], script_path + "[" + std::to_string(i) + "]"));
  }
  if (result.kind == "scripted" && result.script.empty())
    fail(m.line("script"), script_path,
         "a scripted provider needs a non-empty list of script steps");
  read_http_provider(m, result);
  return result;
}

void parser::read_http_provider(const map_reader& m, provider_config& cfg) {
  auto http = is_http_kind(cfg.kind);
  if (!http) {
    for (auto key : http_provider_keys)
      if (m.has(key))
        fail(m.line(key), m.path(key),
             "only openai and anthropic providers take " + std::string{key}
               + " (this provider is " + quote(cfg.kind) + ")");
    return;
  }
  if (http && m.has("script"))
    fail(m.line("script"), m.path("script"),
         cfg.kind + " providers take no script");
  auto url = m.get("base_url");
  if (!url)
    fail(m.line("base_url"), m.path("base_url"),
         "missing required key (expected an http:// or https:// URL)");
  cfg.base_url = read_string(*url, m.path("base_url"));
  auto url_ok = [](const std::string& x) {
    for (std::string_view scheme : {"http://", "https://"})
      if (x.size() > scheme.size() && x.compare(0, scheme.size(), scheme) == 0)
        return true;
    return false;
  };
  if (!url_ok(cfg.base_url))
    bad_value(*url, m.path("base_url"), cfg.base_url,
              "an http:// or https:// URL with a host");
  if (cfg.model.empty())
    fail(m.line("model"), m.path("model"),
         "missing required key (expected the model name to request)");
  if (auto x = m.get("api_key"))
    cfg.api_key = read_string(*x, m.path("api_key"));
  if (auto x = m.get("headers")) {
    auto path = m.path("headers");
    if (!x->IsMap())
      fail(line_of(*x), path, "expected a mapping of header names to values, "
                              "got " + describe(*x));
    for (auto kv : *x) {
      auto name = read_name(kv.first, path);
      cfg.headers[name] = read_string(kv.second, path + "." + name);
    }
  }
  auto millis = [](caf::timespan x) {
    return std::chrono::duration_cast<std::chrono::milliseconds>(x);
  };
  if (auto x = m.get("connect_timeout"))
    cfg.connect_timeout = millis(
      read_duration(*x, m.path("connect_timeout"), true));
  if (auto x = m.get("first_byte_timeout"))
    cfg.first_byte_timeout = millis(
      read_duration(*x, m.path("first_byte_timeout"), true));
  if (auto x = m.get("total_timeout"))
    cfg.total_timeout = millis(read_duration(*x, m.path("total_timeout"),
                                             true));
  if (auto x = m.get("max_concurrency"))
    cfg.max_concurrency = static_cast<size_t>(
      read_int(*x, m.path("max_concurrency"), 1, 100000));
  if (auto x = m.get("ca_file")) {
    cfg.ca_file = read_string(*x, m.path("ca_file"));
    if (!cfg.ca_file.empty() && !std::ifstream{cfg.ca_file})
      bad_value(*x, m.path("ca_file"), cfg.ca_file,
                "a readable PEM file of CA certificates");
  }
  if (auto x = m.get("stream"))
    cfg.stream = read_bool(*x, m.path("stream"));
  if (auto x = m.get("max_tokens"))
    cfg.max_tokens = static_cast<uint32_t>(
      read_int(*x, m.path("max_tokens"), 1, 1'000'000));
}

scripted_step parser::read_step(const YAML::Node& node,
                                const std::string& path) {
  map_reader m{*this, node, path, line_of(node),
               {"match", "reply", "delay", "fail", "retry_after", "crash",
                "tool"}};
  scripted_step result;
  if (auto x = m.get("match"))
    result.match = read_string(*x, m.path("match"));
  bool has_reply = false;
  if (auto x = m.get("reply")) {
    has_reply = true;
    result.reply = read_string(*x, m.path("reply"));
  }
  if (auto x = m.get("delay"))
    result.delay = read_duration(*x, m.path("delay"), false);
  if (auto x = m.get("fail"))
    result.fail = read_enum(*x, m.path("fail"), failure_classes);
  if (auto x = m.get("retry_after")) {
    if (result.fail.empty())
      fail(m.line("retry_after"), m.path("retry_after"),
           "retry_after needs fail (it is part of a simulated failure)");
    result.retry_after = std::chrono::duration_cast<std::chrono::milliseconds>(
      read_duration(*x, m.path("retry_after"), false));
  }
  if (auto x = m.get("crash"))
    result.crash = read_bool(*x, m.path("crash"));
  if (auto x = m.get("tool")) {
    auto tool_path = m.path("tool");
    map_reader t{*this, *x, tool_path, line_of(*x), {"name", "arguments"}};
    if (auto name = t.get("name"))
      result.tool_name = read_string(*name, t.path("name"));
    if (result.tool_name.empty())
      fail(t.line(), tool_path, "a tool call needs a non-empty name");
    result.tool_arguments = "{}";
    if (auto args = t.get("arguments"))
      result.tool_arguments = read_string(*args, t.path("arguments"));
    has_reply = true; // A tool call is an answer, with or without text.
  }
  auto outcomes = int{has_reply} + int{!result.fail.empty()}
                  + int{result.crash};
  if (outcomes == 0)
    fail(m.line(), path,
         "a step needs one of reply, fail or crash: true");
  if (outcomes > 1)
    fail(m.line(), path,
         "a step takes only one of reply, fail and crash: true");
  return result;
}

pool_config parser::read_pool(const YAML::Node& node,
                              const std::string& path) {
  map_reader m{*this, node, path, line_of(node),
               {"name", "chain", "max_attempts", "retry", "breaker", "cooldowns",
                "timeout_max_tokens_factor"}};
  pool_config result;
  auto name = m.get("name");
  if (!name)
    fail(m.line("name"), m.path("name"),
         "missing required key (expected a non-empty pool name)");
  result.name = read_name(*name, m.path("name"));
  auto chain_path = m.path("chain");
  auto chain = m.get("chain");
  if (!chain)
    fail(m.line("chain"), chain_path,
         "missing required key (expected a non-empty list of provider "
         "names)");
  auto items = read_list(*chain, chain_path, "a list of provider names");
  for (size_t i = 0; i < items.size(); ++i)
    result.chain.push_back(
      read_name(items[i], chain_path + "[" + std::to_string(i) + "]"));
  if (result.chain.empty())
    fail(line_of(*chain), chain_path,
         "expected a non-empty list of provider names, got an empty list");
  if (auto x = m.get("max_attempts"))
    result.retry.max_attempts = static_cast<uint32_t>(
      read_int(*x, m.path("max_attempts"), 1, 100));
  if (auto x = m.get("retry"))
    read_retry(map_reader{*this, *x, m.path("retry"), m.line("retry"),
                          {std::begin(retry_keys), std::end(retry_keys)}},
               result);
  if (auto x = m.get("breaker"))
    read_breaker(map_reader{*this, *x, m.path("breaker"), m.line("breaker"),
                            {std::begin(breaker_keys),
                             std::end(breaker_keys)}},
                 result.breaker);
  if (auto x = m.get("cooldowns"))
    read_cooldowns(map_reader{*this, *x, m.path("cooldowns"),
                              m.line("cooldowns"),
                              {std::begin(failure_classes),
                               std::end(failure_classes)}},
                   result.breaker.cooldowns);
  if (auto x = m.get("timeout_max_tokens_factor"))
    result.timeout_max_tokens_factor = read_number(
      *x, m.path("timeout_max_tokens_factor"), 0.01, 1.0);
  return result;
}

void parser::read_retry(const map_reader& m, pool_config& cfg) {
  auto millis = [&](const char* key, bool positive) {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
      read_duration(*m.get(key), m.path(key), positive));
  };
  auto& r = cfg.retry;
  if (m.get("base_delay"))
    r.base_delay = millis("base_delay", false);
  if (auto x = m.get("multiplier"))
    r.multiplier = read_number(*x, m.path("multiplier"), 1.0, 100.0);
  if (m.get("max_delay"))
    r.max_delay = millis("max_delay", false);
  if (auto x = m.get("jitter"))
    r.jitter = read_number(*x, m.path("jitter"), 0.0, 1.0);
  if (m.get("retry_after_cap"))
    r.retry_after_cap = millis("retry_after_cap", false);
  if (auto x = m.get("budget"))
    cfg.budget = static_cast<uint32_t>(read_int(*x, m.path("budget"), 1,
                                                10000));
  if (r.max_delay < r.base_delay)
    fail(m.line("max_delay"), m.path("max_delay"),
         "expected at least " + m.path("base_delay") + " ("
           + render_duration(r.base_delay) + "), got "
           + render_duration(r.max_delay));
}

void parser::read_breaker(const map_reader& m, breaker_config& cfg) {
  auto millis = [&](const char* key, bool positive) {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
      read_duration(*m.get(key), m.path(key), positive));
  };
  if (auto x = m.get("failure_threshold"))
    cfg.failure_threshold = static_cast<uint32_t>(
      read_int(*x, m.path("failure_threshold"), 1, 1000));
  if (m.get("probe_lead"))
    cfg.probe_lead = millis("probe_lead", false);
  if (m.get("probe_timeout"))
    cfg.probe_timeout = millis("probe_timeout", true);
}

void parser::read_cooldowns(const map_reader& m, cooldown_table& cfg) {
  for (auto name : failure_classes)
    if (auto x = m.get(name))
      cfg.set(*parse_error_class(name),
              std::chrono::duration_cast<std::chrono::milliseconds>(
                read_duration(*x, m.path(name), false)));
}

void parser::read_threads(const map_reader& m, thread_defaults& cfg) {
  if (auto x = m.get("system_prompt"))
    cfg.system_prompt = read_string(*x, m.path("system_prompt"));
  if (auto x = m.get("idle_timeout"))
    cfg.idle_timeout = read_duration(*x, m.path("idle_timeout"), true);
  if (auto x = m.get("pool"))
    cfg.pool = read_name(*x, m.path("pool"));
  if (auto x = m.get("max_inbox"))
    cfg.max_inbox = static_cast<size_t>(
      read_int(*x, m.path("max_inbox"), 1, no_limit));
  if (auto x = m.get("turn_timeout"))
    cfg.turn_timeout = read_duration(*x, m.path("turn_timeout"), true);
}

void parser::read_supervision(const map_reader& m, supervision_config& cfg) {
  auto sub = [&](const char* name, supervisor_settings& settings,
                 bool dynamic) {
    if (auto x = m.get(name))
      read_supervisor(map_reader{*this, *x, m.path(name), m.line(name),
                                 {std::begin(supervisor_keys),
                                  std::end(supervisor_keys)}},
                      settings, dynamic);
  };
  sub("root", cfg.root, false);
  sub("providers", cfg.providers, false);
  sub("conversations", cfg.conversations, true);
}

void parser::read_supervisor(const map_reader& m, supervisor_settings& cfg,
                             bool dynamic) {
  // A dynamic supervisor's children are alike and independent; any other
  // strategy would let one thread's crash restart the others.
  if (dynamic && m.has("strategy"))
    fail(m.line("strategy"), m.path("strategy"),
         "conversations is a dynamic supervisor; its strategy is always "
         "one_for_one (remove this key)");
  if (auto x = m.get("strategy"))
    cfg.strategy = *parse_restart_strategy(
      read_enum(*x, m.path("strategy"), strategy_names));
  if (auto x = m.get("max_restarts"))
    cfg.max_restarts = static_cast<uint32_t>(
      read_int(*x, m.path("max_restarts"), 0, supervision_limit));
  if (auto x = m.get("period"))
    cfg.period = read_duration(*x, m.path("period"), true);
  if (auto x = m.get("shutdown_timeout"))
    cfg.shutdown_timeout = read_duration(*x, m.path("shutdown_timeout"), true);
  if (auto x = m.get("buffer"))
    cfg.buffer = static_cast<size_t>(
      read_int(*x, m.path("buffer"), 0, supervision_limit));
  if (auto x = m.get("backoff"))
    read_backoff(map_reader{*this, *x, m.path("backoff"), m.line("backoff"),
                            {std::begin(backoff_keys), std::end(backoff_keys)}},
                 cfg.backoff);
}

void parser::read_backoff(const map_reader& m, backoff_config& cfg) {
  if (auto x = m.get("initial"))
    cfg.initial = read_duration(*x, m.path("initial"), false);
  if (auto x = m.get("max"))
    cfg.max = read_duration(*x, m.path("max"), false);
  if (auto x = m.get("multiplier"))
    cfg.multiplier = read_number(*x, m.path("multiplier"), 1.0,
                                 std::numeric_limits<double>::infinity());
  if (auto x = m.get("reset_after"))
    cfg.reset_after = read_duration(*x, m.path("reset_after"), true);
  if (auto x = m.get("jitter"))
    cfg.jitter = read_number(*x, m.path("jitter"), 0.0, 1.0);
}

void parser::read_logging(const map_reader& m, logging_config& cfg) {
  if (auto x = m.get("level"))
    cfg.level = read_enum(*x, m.path("level"), log_levels);
  if (auto x = m.get("file"))
    cfg.file = read_string(*x, m.path("file"));
}

void parser::read_storage(const map_reader& m, storage_config& cfg) {
  if (auto x = m.get("sync"))
    cfg.sync = read_bool(*x, m.path("sync"));
  if (auto x = m.get("fault_injection"))
    cfg.fault_injection = read_bool(*x, m.path("fault_injection"));
}

void parser::validate(const node_config& cfg, bool providers_given,
                      bool pools_given, bool pool_given) const {
  // Sizes that depend on each other.
  if (cfg.gateway.max_text_bytes > cfg.gateway.max_frame_bytes)
    fail(line("gateway.max_text_bytes", "gateway.max_frame_bytes"),
         "gateway.max_text_bytes",
         "expected at most gateway.max_frame_bytes ("
           + std::to_string(cfg.gateway.max_frame_bytes) + "), got "
           + std::to_string(cfg.gateway.max_text_bytes));
  // Backoff bounds, after merging over the defaults.
  const std::pair<const char*, const supervisor_settings*> supervisors[] = {
    {"root", &cfg.supervision.root},
    {"providers", &cfg.supervision.providers},
    {"conversations", &cfg.supervision.conversations},
  };
  for (auto [name, settings] : supervisors) {
    auto& b = settings->backoff;
    if (b.max >= b.initial)
      continue;
    auto prefix = std::string{"supervision."} + name + ".backoff";
    fail(line(prefix + ".max", prefix + ".initial"), prefix + ".max",
         "expected at least " + prefix + ".initial ("
           + render_duration(b.initial) + "), got " + render_duration(b.max));
  }
  // Providers: at least one, names unique.
  if (providers_given && cfg.providers.empty())
    fail(line("providers"), "providers",
         "expected a non-empty list of providers, got an empty list");
  std::map<std::string, size_t> provider_index;
  for (size_t i = 0; i < cfg.providers.size(); ++i) {
    auto [pos, added] = provider_index.emplace(cfg.providers[i].name, i);
    if (!added) {
      auto path = "providers[" + std::to_string(i) + "].name";
      fail(line(path), path,
           "duplicate provider name " + quote(cfg.providers[i].name)
             + " (also providers[" + std::to_string(pos->second) + "])");
    }
  }
  std::vector<std::string> provider_names;
  for (auto& p : cfg.providers)
    provider_names.push_back(p.name);
  // Pools: at least one, names unique, chains name existing providers once.
  if (pools_given && cfg.pools.empty())
    fail(line("pools"), "pools",
         "expected a non-empty list of pools, got an empty list");
  std::map<std::string, size_t> pool_index;
  for (size_t i = 0; i < cfg.pools.size(); ++i) {
    auto& pool = cfg.pools[i];
    auto prefix = "pools[" + std::to_string(i) + "]";
    auto [pos, added] = pool_index.emplace(pool.name, i);
    if (!added)
      fail(line(prefix + ".name"), prefix + ".name",
           "duplicate pool name " + quote(pool.name) + " (also pools["
             + std::to_string(pos->second) + "])");
    std::set<std::string> seen;
    for (size_t j = 0; j < pool.chain.size(); ++j) {
      auto path = prefix + ".chain[" + std::to_string(j) + "]";
      auto& entry = pool.chain[j];
      // Only a defaulted pool has no lines: blame the providers instead.
      auto at = line(path, pools_given ? prefix : "providers");
      if (provider_index.count(entry) == 0)
        fail(at, path,
             "unknown provider " + quote(entry) + " (expected "
               + one_of(provider_names) + ")");
      if (!seen.insert(entry).second)
        fail(at, path, "provider " + quote(entry) + " is listed twice");
    }
  }
  // Thread defaults point at an existing pool.
  if (cfg.find_pool(cfg.threads.pool) == nullptr) {
    std::vector<std::string> pool_names;
    for (auto& p : cfg.pools)
      pool_names.push_back(p.name);
    auto msg = "unknown pool " + quote(cfg.threads.pool) + " (expected "
               + one_of(pool_names) + ")";
    if (!pool_given)
      msg += "; threads.pool defaults to \"default\", so set threads.pool "
             "or define a pool named \"default\"";
    fail(line("threads.pool", "pools"), "threads.pool", msg);
  }
}

} // namespace

// -- entry points -------------------------------------------------------------

caf::expected<node_config> parse_config(const std::string& yaml,
                                        const std::string& source,
                                        const env_lookup& env) {
  YAML::Node root;
  try {
    auto docs = YAML::LoadAll(yaml);
    // A second document would be silently ignored by Load; refuse it.
    if (docs.size() > 1)
      return caf::make_error(ec::config_invalid,
                             source + ":" + std::to_string(line_of(docs[1]))
                               + ": expected a single YAML document, got "
                               + std::to_string(docs.size()));
    if (!docs.empty())
      root = docs.front();
  } catch (const YAML::Exception& ex) {
    return caf::make_error(ec::config_invalid,
                           source + ":"
                             + std::to_string(std::max(ex.mark.line, 0) + 1)
                             + ": YAML syntax error: " + ex.msg);
  } catch (const std::exception& ex) {
    return caf::make_error(ec::config_invalid,
                           source + ": YAML syntax error: " + ex.what());
  }
  try {
    parser p{source, env};
    return p.run(root);
  } catch (const config_error& err) {
    return caf::make_error(ec::config_invalid, err.message);
  } catch (const std::exception& ex) {
    // yaml-cpp may throw while walking odd documents; still one line.
    return caf::make_error(ec::config_invalid,
                           source + ": cannot read the configuration: "
                             + ex.what());
  }
}

caf::expected<node_config> load_config_file(const std::string& path,
                                            const env_lookup& env) {
  auto unreadable = [&path] {
    return caf::make_error(ec::config_unreadable,
                           path + ": cannot read the file: "
                             + std::strerror(errno));
  };
  errno = 0;
  auto file = std::fopen(path.c_str(), "rb");
  if (file == nullptr)
    return unreadable();
  std::string text;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), file)) > 0)
    text.append(buf, n);
  auto failed = std::ferror(file) != 0;
  // Keep the read's errno (fclose of a read-only stream does not fail).
  auto saved = errno;
  std::fclose(file);
  if (failed) {
    errno = saved;
    return unreadable();
  }
  return parse_config(text, path, env);
}

} // namespace keel
