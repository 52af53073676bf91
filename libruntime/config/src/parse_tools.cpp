// The reader of `tools`: names, JSON schemas of the arguments, commands and
// their placeholders, accounts.

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>

#include "config_parser.hpp"
#include "keel/accounts.hpp"

namespace keel::config_detail {

using strict_yaml::contains;
using strict_yaml::describe;
using strict_yaml::one_of;

namespace {

// The argument names `parameters` declares (its `properties`), in order.
std::vector<std::string>
property_names(const nlohmann::ordered_json& parameters) {
  std::vector<std::string> result;
  if (auto props = parameters.find("properties");
      props != parameters.end() && props->is_object())
    for (auto& [name, schema] : props->items())
      result.push_back(name);
  return result;
}

} // namespace

void parser::read_tools(const map_reader& top, node_config& cfg) {
  if (auto node = top.get("tools"))
    cfg.tools = read_each(*node, "tools", "a list of tools",
                          &parser::read_tool_entry);
}

tool_config parser::read_tool_entry(const YAML::Node& node,
                                    const std::string& path) {
  map_reader m{*this, node, path, line_of(node), tool_keys().known()};
  tool_config result;
  read_tool_name(m, result);
  auto parameters = read_parameters(m);
  result.parameters = parameters.dump();
  read_tool_command(m, result, parameters);
  tool_keys().read(*this, m, result);
  read_loop_key(m, result, parameters);
  result.env = read_checked_strings(m, "env",
                                    "a list of environment variable names",
                                    "an environment variable name (letters, "
                                    "digits and _, not starting with a digit)",
                                    is_valid_env_name);
  read_section(m, "limits", tool_limit_keys(), result.limits);
  read_tool_account(m, result);
  return result;
}

void parser::read_loop_key(const map_reader& m, tool_config& cfg,
                           const nlohmann::ordered_json& parameters) {
  auto key = m.get("loop_key");
  if (!key)
    return;
  cfg.loop_key = read_string(*key, m.path("loop_key"));
  auto names = property_names(parameters);
  if (!contains(names, cfg.loop_key)) {
    fail(line_of(*key), m.path("loop_key"),
         "unknown parameter " + quote(cfg.loop_key) + " (expected "
           + (names.empty() ? std::string{"a property of parameters"}
                            : one_of(names))
           + ")");
  }
}

void parser::read_tool_name(const map_reader& m, tool_config& cfg) {
  auto name = required(m, "name", "a tool name");
  cfg.name = read_string(name, m.path("name"));
  if (!is_plain_name(cfg.name))
    bad_value(name, m.path("name"), cfg.name, tool_name_expected);
  if (contains(builtin_tools, cfg.name))
    fail(line_of(name), m.path("name"),
         quote(cfg.name)
           + " is the name of a built-in tool (spawn_agent and "
             "message_agent are reserved)");
  auto what = "a non-empty description of what the tool does";
  auto description = required(m, "description", what);
  cfg.description = read_string(description, m.path("description"));
  if (cfg.description.empty())
    bad_value(description, m.path("description"), cfg.description, what);
}

nlohmann::ordered_json parser::read_parameters(const map_reader& m) {
  auto x = m.get("parameters");
  if (!x)
    return nlohmann::ordered_json::parse(tool_config{}.parameters);
  auto path = m.path("parameters");
  if (!x->IsMap())
    fail(line_of(*x), path,
         "expected a JSON schema of the arguments written as a mapping (with "
         "type: object), got "
           + describe(*x));
  auto result = to_json(*x, path);
  auto type = result.find("type");
  if (type == result.end())
    fail(line_of(*x), path + ".type",
         "missing required key (expected \"object\": the arguments of a "
         "tool call are an object)");
  if (*type != "object")
    fail(line(path + ".type", path), path + ".type",
         "expected \"object\" (the arguments of a tool call are an object), "
         "got "
           + quote(type->is_string() ? type->get<std::string>()
                                     : type->dump()));
  auto props = result.find("properties");
  if (props != result.end() && !props->is_object())
    fail(line(path + ".properties", path), path + ".properties",
         "expected a mapping of argument names to their schemas, got "
           + quote(props->dump()));
  return result;
}

nlohmann::ordered_json parser::to_json(const YAML::Node& node,
                                       const std::string& path) {
  switch (node.Type()) {
    case YAML::NodeType::Sequence: {
      auto result = nlohmann::ordered_json::array();
      for (auto& item : read_list(node, path, "a list"))
        result.push_back(to_json(item, indexed(path, result.size())));
      return result;
    }
    case YAML::NodeType::Map: return json_object(node, path);
    case YAML::NodeType::Scalar: return scalar_to_json(node, path);
    default: return nullptr;
  }
}

nlohmann::ordered_json parser::json_object(const YAML::Node& node,
                                           const std::string& path) {
  auto result = nlohmann::ordered_json::object();
  for (auto kv : node) {
    if (!kv.first.IsScalar())
      fail(line_of(kv.first), path,
           "expected a key name, got " + describe(kv.first));
    auto key = kv.first.Scalar();
    auto key_path = path + "." + key;
    if (result.contains(key))
      fail(line_of(kv.first), key_path,
           "duplicate key (first given on line "
             + std::to_string(line(key_path)) + ")");
    remember(key_path, line_of(kv.first));
    result[key] = to_json(kv.second, key_path);
  }
  return result;
}

nlohmann::ordered_json parser::scalar_to_json(const YAML::Node& node,
                                              const std::string& path) {
  auto text = scalar(node, path, "a value");
  // Quoted scalars ("1", 'true') are strings, as in YAML.
  if (node.Tag() == "!")
    return text;
  std::string lower = text;
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  if (lower == "true" || lower == "false")
    return lower == "true";
  if (lower == "null" || lower == "~")
    return nullptr;
  auto first = text.data();
  auto last = first + text.size();
  int64_t integer = 0;
  if (auto [ptr, err] = std::from_chars(first, last, integer);
      err == std::errc{} && ptr == last)
    return integer;
  double number = 0;
  auto numeric = text.find_first_of(".eE") != std::string::npos;
  if (auto [ptr, err] = std::from_chars(first, last, number);
      numeric && err == std::errc{} && ptr == last && std::isfinite(number))
    return number;
  return text;
}

void parser::read_tool_command(const map_reader& m, tool_config& cfg,
                               const nlohmann::ordered_json& parameters) {
  auto expected = "a non-empty list of strings (the program and its "
                  "arguments)";
  auto path = m.path("command");
  auto command = required(m, "command", expected);
  auto items = read_list(command, path, expected);
  if (items.empty())
    fail(line_of(command), path,
         std::string{"expected "} + expected + ", got an empty list");
  for (size_t i = 0; i < items.size(); ++i) {
    auto item_path = indexed(path, i);
    cfg.command.push_back(read_string(items[i], item_path));
    check_placeholders(items[i], item_path, cfg.command.back(), parameters);
  }
  if (cfg.command.front().empty())
    bad_value(items.front(), indexed(path, 0), cfg.command.front(),
              "a program name or path");
}

void parser::check_placeholders(
  const YAML::Node& node, const std::string& path, const std::string& element,
  const nlohmann::ordered_json& parameters) const {
  auto declared = property_names(parameters);
  for (size_t i = 0; i < element.size(); ++i) {
    auto c = element[i];
    if ((c == '{' || c == '}') && i + 1 < element.size()
        && element[i + 1] == c) {
      ++i; // `{{` and `}}`: a literal brace.
      continue;
    }
    if (c != '{')
      continue;
    auto close = element.find('}', i);
    if (close == std::string::npos)
      fail(line_of(node), path,
           quote(element)
             + " has a '{' without its '}' (write {{ for a literal '{')");
    auto name = element.substr(i + 1, close - i - 1);
    if (std::find(declared.begin(), declared.end(), name) == declared.end())
      fail(line_of(node), path,
           "the placeholder {" + name
             + "} names no property of parameters (expected "
             + (declared.empty() ? std::string{"none: parameters declares no "
                                               "properties"}
                                 : one_of(declared))
             + "; write {{ and }} for literal braces)");
    i = close;
  }
}

void parser::read_tool_account(const map_reader& m, tool_config& cfg) {
  auto user = m.get("user");
  auto group = m.get("group");
  if (group && !user)
    fail(line_of(*group), m.path("group"),
         "a group needs a user (set user: as well)");
  if (!user)
    return;
  cfg.user = read_string(*user, m.path("user"));
  if (group)
    cfg.group = read_string(*group, m.path("group"));
  auto account = resolve_account(cfg.user, cfg.group);
  if (!account.error.empty()) {
    auto& at = account.group_error ? *group : *user;
    fail(line_of(at), m.path(account.group_error ? "group" : "user"),
         account.error);
  }
  cfg.uid = account.uid;
  cfg.gid = account.gid;
}

} // namespace keel::config_detail
