#include "keel/strict_yaml.hpp"

#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <sstream>
#include <utility>

#include <yaml-cpp/eventhandler.h>

#include "keel/units.hpp"

namespace keel::strict_yaml {

namespace {

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
      d[i][j]
        = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  return d[a.size()][b.size()];
}

/// The hint for an unknown `key`: the closest of `known` (at most two edits
/// away), else the list of all of them.
std::string unknown_key_hint(const std::string& key,
                             const std::vector<std::string>& known) {
  std::string best;
  size_t best_distance = 3;
  for (auto& candidate : known) {
    auto d = edit_distance(key, candidate);
    if (d < best_distance && d < std::max(key.size(), candidate.size())) {
      best = candidate;
      best_distance = d;
    }
  }
  return best.empty() ? " (expected " + one_of(known) + ")"
                      : " (did you mean " + best + "?)";
}

/// Whether `c` may appear in an environment variable's name.
bool env_name_char(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z')
         || (c >= '0' && c <= '9') || c == '_';
}

} // namespace

// -- free functions -----------------------------------------------------------

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

std::string render_number(double x) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", x);
  return buf;
}

std::string describe(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Map: return "a mapping";
    case YAML::NodeType::Sequence: return "a list";
    case YAML::NodeType::Scalar: return quote(node.Scalar());
    default: return "nothing";
  }
}

int line_of(const YAML::Node& node) {
  return std::max(node.Mark().line, 0) + 1;
}

std::string indexed(const std::string& path, size_t index) {
  return path + "[" + std::to_string(index) + "]";
}

// -- map_reader ---------------------------------------------------------------

map_reader::map_reader(reader& r, const YAML::Node& node, std::string path,
                       int line, std::vector<std::string> known)
  : path_(std::move(path)), line_(line) {
  if (!node.IsMap())
    r.fail(line_of(node), path_, "expected a mapping, got " + describe(node));
  for (auto kv : node) {
    auto key_line = line_of(kv.first);
    if (!kv.first.IsScalar())
      r.fail(key_line, path_, "expected a key name, got " + describe(kv.first));
    auto key = kv.first.Scalar();
    auto key_path = this->path(key);
    if (!contains(known, key))
      r.fail(key_line, key_path, "unknown key" + unknown_key_hint(key, known));
    if (entries_.count(key) > 0)
      r.fail(key_line, key_path,
             "duplicate key (first given on line "
               + std::to_string(entries_.at(key).first) + ")");
    entries_.emplace(key, std::make_pair(key_line, kv.second));
    r.remember(key_path, key_line);
  }
}

std::optional<YAML::Node> map_reader::get(const std::string& key) const {
  auto i = entries_.find(key);
  if (i == entries_.end() || i->second.second.IsNull())
    return std::nullopt;
  return i->second.second;
}

// -- reader: messages ---------------------------------------------------------

void reader::fail(int line, const std::string& path,
                  const std::string& what) const {
  std::string msg = source_ + ":" + std::to_string(line) + ": ";
  if (!path.empty())
    msg += path + ": ";
  msg += what;
  throw error{std::move(msg)};
}

void reader::bad_value(const YAML::Node& node, const std::string& path,
                       const std::string& value, const std::string& expected,
                       const std::string& note) const {
  auto msg = "expected " + expected + ", got " + quote(value);
  if (node.IsScalar() && node.Scalar() != value)
    msg += " (from " + quote(node.Scalar()) + ")";
  msg += note;
  fail(line_of(node), path, msg);
}

int reader::line(const std::string& path, const std::string& fallback) const {
  if (auto i = lines_.find(path); i != lines_.end())
    return i->second;
  if (auto i = lines_.find(fallback); i != lines_.end())
    return i->second;
  return 1;
}

// -- reader: values -----------------------------------------------------------

std::string reader::scalar(const YAML::Node& node, const std::string& path,
                           const std::string& expected) {
  if (!node.IsScalar())
    fail(line_of(node), path,
         "expected " + expected + ", got " + describe(node));
  auto result = expand(node.Scalar(), path, line_of(node));
  lines_[path] = line_of(node);
  return result;
}

std::string reader::read_string(const YAML::Node& node,
                                const std::string& path) {
  return scalar(node, path, "a string");
}

std::string reader::read_name(const YAML::Node& node, const std::string& path) {
  auto result = scalar(node, path, "a non-empty name");
  if (result.empty())
    bad_value(node, path, result, "a non-empty name");
  return result;
}

int64_t reader::read_int(const YAML::Node& node, const std::string& path,
                         int64_t lo, int64_t hi) {
  auto expected = hi == no_limit ? "an integer >= " + std::to_string(lo)
                                 : "an integer in " + std::to_string(lo) + ".."
                                     + std::to_string(hi);
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
  auto magnitude = parse_digits(digits);
  if (!magnitude || *magnitude > uint64_t{std::numeric_limits<int64_t>::max()})
    bad_value(node, path, text, expected, " (too large)");
  auto value = static_cast<int64_t>(*magnitude);
  if (negative)
    value = -value;
  if (value < lo || value > hi)
    bad_value(node, path, text, expected);
  return value;
}

double reader::read_number(const YAML::Node& node, const std::string& path,
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

size_t reader::read_size(const YAML::Node& node, const std::string& path,
                         size_t lo) {
  auto expected = "a size in bytes >= " + std::to_string(lo)
                  + " (an integer, or a string like \"64KiB\" or \"1MiB\")";
  auto text = scalar(node, path, expected);
  auto value = parse_size(text);
  if (!value || *value < lo)
    bad_value(node, path, text, expected);
  return *value;
}

caf::timespan reader::read_duration(const YAML::Node& node,
                                    const std::string& path, bool positive) {
  std::string expected = positive ? "a positive duration" : "a duration";
  expected += " such as \"250ms\", \"5s\", \"2m\" or \"1h\"";
  auto text = scalar(node, path, expected);
  auto value = parse_duration(text);
  if (!value) {
    auto note = parse_digits(text) ? " (a unit is required)" : "";
    bad_value(node, path, text, expected, note);
  }
  if (positive && value->count() <= 0)
    bad_value(node, path, text, expected);
  return *value;
}

std::chrono::milliseconds reader::read_millis(const YAML::Node& node,
                                              const std::string& path,
                                              bool positive) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
    read_duration(node, path, positive));
}

bool reader::read_bool(const YAML::Node& node, const std::string& path) {
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

std::vector<YAML::Node> reader::read_list(const YAML::Node& node,
                                          const std::string& path,
                                          const std::string& expected) {
  if (!node.IsSequence())
    fail(line_of(node), path,
         "expected " + expected + ", got " + describe(node));
  std::vector<YAML::Node> items;
  for (size_t i = 0; i < node.size(); ++i) {
    items.push_back(node[i]);
    lines_[indexed(path, i)] = line_of(node[i]);
  }
  return items;
}

YAML::Node reader::required(const map_reader& m, const std::string& key,
                            const std::string& expected) const {
  auto node = m.get(key);
  if (!node)
    fail(m.line(key), m.path(key),
         "missing required key (expected " + expected + ")");
  return *node;
}

std::optional<map_reader> reader::section(const map_reader& m,
                                          const std::string& key,
                                          std::vector<std::string> known) {
  auto node = m.get(key);
  if (!node)
    return std::nullopt;
  return map_reader{*this, *node, m.path(key), m.line(key), std::move(known)};
}

// -- reader: environment variables --------------------------------------------

std::string reader::expand(const std::string& text, const std::string& path,
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
    auto ref = std::string_view{text}.substr(i, close - i + 1);
    result += lookup(ref.substr(2, ref.size() - 3), ref, path, line);
    i = close;
  }
  return result;
}

std::string reader::lookup(std::string_view inner, std::string_view ref,
                           const std::string& path, int line) const {
  std::optional<std::string_view> fallback;
  if (auto sep = inner.find(":-"); sep != std::string_view::npos) {
    fallback = inner.substr(sep + 2);
    inner = inner.substr(0, sep);
  }
  if (inner.empty() || (inner.front() >= '0' && inner.front() <= '9')
      || !std::all_of(inner.begin(), inner.end(), env_name_char))
    fail(line, path,
         "invalid environment variable reference " + quote(ref)
           + " (expected ${VAR} or ${VAR:-default} with VAR made of "
             "letters, digits and _)");
  std::string name{inner};
  auto value = env_ ? env_(name) : std::nullopt;
  // Like the shell's ${VAR:-default}: unset or empty takes the default.
  if (fallback)
    return value && !value->empty() ? *value : std::string{*fallback};
  if (!value)
    fail(line, path,
         "environment variable " + name + " is not set (write ${" + name
           + ":-default} to make it optional)");
  return *value;
}

namespace {

/// Receives yaml-cpp's parse events and keeps, per document, where it starts
/// and where its first node is.
class document_marks : public YAML::EventHandler {
public:
  struct document {
    YAML::Mark start;
    YAML::Mark first_node;
  };

  std::vector<document> documents;

  void OnDocumentStart(const YAML::Mark& mark) override {
    documents.push_back({mark, mark});
    first_ = true;
  }
  void OnDocumentEnd() override {
    // nop
  }
  void OnNull(const YAML::Mark& mark, YAML::anchor_t) override {
    node(mark);
  }
  void OnAlias(const YAML::Mark& mark, YAML::anchor_t) override {
    node(mark);
  }
  void OnScalar(const YAML::Mark& mark, const std::string&, YAML::anchor_t,
                const std::string&) override {
    node(mark);
  }
  void OnSequenceStart(const YAML::Mark& mark, const std::string&,
                       YAML::anchor_t, YAML::EmitterStyle::value) override {
    node(mark);
  }
  void OnSequenceEnd() override {
    // nop
  }
  void OnMapStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {
    node(mark);
  }
  void OnMapEnd() override {
    // nop
  }

private:
  void node(const YAML::Mark& mark) {
    if (first_ && !documents.empty())
      documents.back().first_node = mark;
    first_ = false;
  }

  bool first_ = false;
};

/// The documents of `yaml`. Each must start past the one before: where the
/// parser stops advancing (yaml-cpp's LoadAll then yields empty documents
/// forever, e.g. for a lone ','), this throws a syntax error at that place.
std::vector<document_marks::document> scan_documents(const std::string& yaml) {
  std::istringstream in{yaml};
  YAML::Parser parser{in};
  document_marks marks;
  auto& docs = marks.documents;
  for (size_t n = 0; parser.HandleNextDocument(marks); n = docs.size()) {
    if (docs.size() == n
        || (n > 0 && docs[n].start.pos <= docs[n - 1].start.pos)) {
      auto at = docs.size() == n ? docs.back().start : docs[n].start;
      auto pos = static_cast<size_t>(std::max(at.pos, 0));
      throw YAML::ParserException(at,
                                  "unexpected '" + yaml.substr(pos, 1) + "'");
    }
  }
  return docs;
}

} // namespace

caf::expected<YAML::Node> load_document(const std::string& yaml,
                                        const std::string& source) {
  YAML::Node root;
  try {
    auto docs = scan_documents(yaml);
    // A second document would be silently ignored by Load; refuse it.
    if (docs.size() > 1)
      return caf::make_error(
        ec::config_invalid,
        source + ":" + std::to_string(std::max(docs[1].first_node.line, 0) + 1)
          + ": expected a single YAML document, got "
          + std::to_string(docs.size()));
    if (!docs.empty())
      root = YAML::Load(yaml);
  } catch (const YAML::Exception& ex) {
    return caf::make_error(ec::config_invalid,
                           source + ":"
                             + std::to_string(std::max(ex.mark.line, 0) + 1)
                             + ": YAML syntax error: " + ex.msg);
  } catch (const std::exception& ex) {
    return caf::make_error(ec::config_invalid,
                           source + ": YAML syntax error: " + ex.what());
  }
  return root;
}

caf::expected<std::string> read_file(const std::string& path) {
  auto unreadable = [&path] {
    return caf::make_error(ec::config_unreadable, path
                                                    + ": cannot read the file: "
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
  return text;
}

} // namespace keel::strict_yaml
