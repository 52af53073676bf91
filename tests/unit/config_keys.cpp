#define CAF_SUITE config_keys

// The key table of the node configuration against docs/configuration.md and
// config/example.yaml: every key is documented with the table's type and
// default, every documented key is in the table, and the example shows
// every key (some in comments) and parses.

#include "keel/config_keys.hpp"

#include "keel/config.hpp"

#include "source_dir.hpp"

#include <caf/test/unit_test.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include <yaml-cpp/yaml.h>

using namespace keel;

namespace {

/// The repository's root (see `keel::test::keel_source_dir`).
std::filesystem::path source_dir() {
  return keel::test::keel_source_dir();
}

std::string read_text(const std::filesystem::path& path) {
  std::ifstream in{path};
  std::stringstream out;
  out << in.rdbuf();
  return out.str();
}

/// The cells of a Markdown table row ("| a | b |"), trimmed; `\|` stays in
/// its cell.
std::vector<std::string> cells_of(const std::string& row) {
  std::vector<std::string> result;
  std::string cell;
  for (size_t i = 1; i < row.size(); ++i) {
    if (row[i] == '\\' && i + 1 < row.size() && row[i + 1] == '|') {
      cell += "\\|";
      ++i;
    } else if (row[i] == '|') {
      auto first = cell.find_first_not_of(' ');
      auto last = cell.find_last_not_of(' ');
      result.push_back(first == std::string::npos
                         ? std::string{}
                         : cell.substr(first, last - first + 1));
      cell.clear();
    } else {
      cell += row[i];
    }
  }
  return result;
}

/// One key row of the docs: its type and default cells and its line.
struct doc_row {
  std::string type;
  std::string default_value;
  int line = 0;
};

/// The key rows of docs/configuration.md by key path. A table of keys
/// follows a line `<!-- keys: PREFIX -->`; its first column names the key
/// relative to PREFIX.
std::map<std::string, std::vector<doc_row>> documented_keys() {
  std::istringstream in{read_text(source_dir() / "docs" / "configuration.md")};
  std::map<std::string, std::vector<doc_row>> result;
  std::regex marker{R"(^<!-- keys: (\S+) -->$)"};
  std::string prefix;
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    std::smatch m;
    if (std::regex_match(line, m, marker))
      prefix = m[1];
    else if (line.rfind("#", 0) == 0)
      prefix.clear();
    if (prefix.empty() || line.rfind("| `", 0) != 0)
      continue;
    auto cells = cells_of(line);
    if (cells.size() < 4)
      continue;
    auto name = cells[0].substr(1, cells[0].size() - 2);
    result[prefix + "." + name].push_back({cells[1], cells[2], n});
  }
  return result;
}

/// A regular expression matching the paths of `key_path`: its placeholders
/// (NAME, KIND) stand for any name.
std::regex path_pattern(const std::string& key_path) {
  std::string pattern;
  for (char c : key_path)
    pattern += std::string{"[]().*+?"}.find(c) != std::string::npos
                 ? std::string{"\\"} + c
                 : std::string{c};
  return std::regex{
    std::regex_replace(pattern, std::regex{"[A-Z]+"}, "[a-z_]+")};
}

/// config/example.yaml with its commented-out keys uncommented: a comment
/// whose text is `key: ...` (or `- key: ...`) is a key left out.
std::string uncommented_example() {
  std::istringstream in{read_text(source_dir() / "config" / "example.yaml")};
  std::regex commented_key{R"(^(\s*)# (\s*(- )?[a-z_]+:(\s.*)?)$)"};
  std::string result;
  std::string line;
  while (std::getline(in, line))
    result += std::regex_replace(line, commented_key, "$1$2") + "\n";
  return result;
}

/// Collects the key paths under `node` (lists as `[]`) into `out`.
void collect_paths(const YAML::Node& node, const std::string& path,
                   std::set<std::string>& out) {
  if (node.IsMap()) {
    for (auto kv : node) {
      auto key = kv.first.Scalar();
      auto key_path = path.empty() ? key : path + "." + key;
      out.insert(key_path);
      collect_paths(kv.second, key_path, out);
    }
  } else if (node.IsSequence()) {
    for (auto item : node)
      collect_paths(item, path + "[]", out);
  }
}

/// Whether a path of `paths` matches `key_path`.
bool shown(const std::set<std::string>& paths, const std::string& key_path) {
  auto pattern = path_pattern(key_path);
  return std::any_of(paths.begin(), paths.end(),
                     [&](auto& x) { return std::regex_match(x, pattern); });
}

/// Decides whether a path of the example is a key of the table (or a
/// mapping holding one, such as `supervision.root`) or lies inside a
/// mapping whose keys the file chooses (headers, a JSON schema, per-tool
/// caps).
class declared_keys {
public:
  explicit declared_keys(const std::vector<config_key>& keys) {
    for (auto& k : keys) {
      for (auto end = k.path.find('.'); end != std::string::npos;
           end = k.path.find('.', end + 1))
        patterns_.push_back(path_pattern(k.path.substr(0, end)));
      patterns_.push_back(path_pattern(k.path));
      if (k.type.rfind("mapping", 0) == 0 && !k.container)
        free_form_.push_back(k.path + ".");
    }
  }

  bool operator()(const std::string& path) const {
    auto inside = [&](auto& prefix) { return path.rfind(prefix, 0) == 0; };
    auto matches = [&](auto& re) { return std::regex_match(path, re); };
    return std::any_of(free_form_.begin(), free_form_.end(), inside)
           || std::any_of(patterns_.begin(), patterns_.end(), matches);
  }

private:
  std::vector<std::regex> patterns_;
  std::vector<std::string> free_form_;
};

} // namespace

CAF_TEST(every key of the table is documented with its type and default) {
  auto docs = documented_keys();
  for (auto& key : config_keys()) {
    auto i = docs.find(key.path);
    if (i == docs.end()) {
      if (!key.container)
        CAF_ERROR("docs/configuration.md does not document " << key.path);
      continue;
    }
    auto& rows = i->second;
    CAF_CHECK_EQUAL(rows.size(), 1u);
    auto& row = rows.front();
    if (row.type.rfind(key.type, 0) != 0)
      CAF_ERROR("docs/configuration.md:"
                << row.line << ": " << key.path << ": type \"" << row.type
                << "\" does not start with \"" << key.type << "\"");
    if (!key.container && row.default_value != key.default_value)
      CAF_ERROR("docs/configuration.md:" << row.line << ": " << key.path
                                         << ": default \"" << row.default_value
                                         << "\", the code's is \""
                                         << key.default_value << "\"");
  }
}

CAF_TEST(every documented key is in the table) {
  std::set<std::string> table;
  for (auto& key : config_keys())
    table.insert(key.path);
  auto docs = documented_keys();
  CAF_CHECK_GREATER(docs.size(), 150u);
  for (auto& [path, rows] : docs)
    if (table.count(path) == 0)
      CAF_ERROR("docs/configuration.md:" << rows.front().line << ": " << path
                                         << " is not a key of the table");
}

CAF_TEST(the example shows every key and only keys) {
  auto root = YAML::Load(uncommented_example());
  std::set<std::string> paths;
  collect_paths(root, "", paths);
  auto keys = config_keys();
  for (auto& key : keys)
    if (!shown(paths, key.path))
      CAF_ERROR("config/example.yaml does not show " << key.path);
  declared_keys declared{keys};
  for (auto& path : paths)
    if (path.find('.') != std::string::npos && !declared(path))
      CAF_ERROR("config/example.yaml shows " << path << ", which is not a key");
}

CAF_TEST(the example parses within the bounds of every key) {
  auto path = (source_dir() / "config" / "example.yaml").string();
  auto cfg = load_config_file(path, [](const std::string&) {
    return std::optional<std::string>{};
  });
  CAF_REQUIRE(cfg);
  CAF_CHECK_EQUAL(cfg->name, "keel-example");
}

CAF_TEST(key paths are unique) {
  std::set<std::string> seen;
  for (auto& key : config_keys())
    CAF_CHECK(seen.insert(key.path).second);
}

namespace {

/// A document setting the key at `path` (dots only, a NAME placeholder as
/// `root`) to `value`.
std::string document_setting(const std::string& path,
                             const std::string& value) {
  std::string result;
  std::string indent;
  size_t begin = 0;
  for (auto end = path.find('.');; end = path.find('.', begin)) {
    auto part = path.substr(begin, end - begin);
    if (part == "NAME")
      part = "root";
    if (end == std::string::npos)
      return result + indent + part + ": " + value + "\n";
    result += indent + part + ":\n";
    indent += "  ";
    begin = end + 1;
  }
}

/// Values just outside the bounds the type `type` (as the table writes it)
/// states, e.g. "-1" and "65536" for "integer 0..65535".
std::vector<std::string> out_of_bounds(const std::string& type) {
  std::smatch m;
  auto bytes = [](const std::string& x) {
    return x.size() > 3 && x.compare(x.size() - 3, 3, "MiB") == 0
             ? std::stoll(x.substr(0, x.size() - 3)) << 20
             : std::stoll(x);
  };
  if (std::regex_match(type, m, std::regex{R"(integer (-?\d+)\.\.(\d+))"}))
    return {std::to_string(std::stoll(m[1]) - 1),
            std::to_string(std::stoll(m[2]) + 1)};
  if (std::regex_match(type, m, std::regex{R"(integer >= (-?\d+))"}))
    return {std::to_string(std::stoll(m[1]) - 1)};
  if (std::regex_match(type, m, std::regex{R"(size >= (\w+))"}))
    return {std::to_string(bytes(m[1]) - 1)};
  if (std::regex_match(type, m, std::regex{R"(number ([\d.]+)\.\.(\d+))"}))
    return {"-0.5", std::to_string(std::stoll(m[2]) + 1)};
  if (std::regex_match(type, m, std::regex{R"(number >= (\d+))"}))
    return {std::to_string(std::stoll(m[1]) - 1)};
  if (type == "number above 0, at most 1")
    return {"0", "1.5"};
  if (type == "duration > 0")
    return {"0s", "5"};
  if (std::regex_match(type, m, std::regex{R"(duration >= (\d+)ms)"}))
    return {std::to_string(std::stoll(m[1]) - 1) + "us"};
  if (type == "duration 0..1h")
    return {"61m"};
  if (type == "boolean")
    return {"maybe"};
  if (!type.empty() && type.front() == '`')
    return {"nonsense"};
  return {};
}

} // namespace

CAF_TEST(the parser refuses values outside the bounds the table states) {
  size_t checked = 0;
  for (auto& key : config_keys()) {
    if (key.path.find("[]") != std::string::npos)
      continue; // Items of lists need their required keys too.
    for (auto& value : out_of_bounds(key.type)) {
      auto doc = document_setting(key.path, value);
      auto path = std::regex_replace(key.path, std::regex{"NAME"}, "root");
      auto result = parse_config(doc, "node.yaml", [](const std::string&) {
        return std::optional<std::string>{};
      });
      if (result) {
        CAF_ERROR(key.path << ": " << value << " accepted (type " << key.type
                           << ")");
        continue;
      }
      auto msg = error_message(result.error());
      if (msg.find(": " + path + ": ") == std::string::npos)
        CAF_ERROR(key.path << ": " << value << " refused as: " << msg);
      ++checked;
    }
  }
  CAF_CHECK_GREATER(checked, 100u);
}
