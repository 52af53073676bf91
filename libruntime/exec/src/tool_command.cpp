#include "keel/tool_command.hpp"

#include <algorithm>

#include <nlohmann/json.hpp>

namespace keel {

namespace {

caf::error bad_call(const std::string& what) {
  return caf::make_error(ec::provider_bad_answer, "tool call: " + what);
}

// The text an argument stands for in a command line.
std::string argument_text(const nlohmann::json& value) {
  return value.is_string() ? value.get<std::string>() : value.dump();
}

// Expands one element of the template.
caf::expected<std::string> expand_element(const std::string& element,
                                          const nlohmann::json& args) {
  std::string result;
  for (size_t i = 0; i < element.size(); ++i) {
    auto c = element[i];
    if ((c == '{' || c == '}') && i + 1 < element.size()
        && element[i + 1] == c) {
      result += c;
      ++i;
      continue;
    }
    if (c != '{') {
      result += c;
      continue;
    }
    auto close = element.find('}', i);
    if (close == std::string::npos)
      return bad_call("the command template '" + element
                      + "' has a '{' without its '}'");
    auto name = element.substr(i + 1, close - i - 1);
    auto value = args.find(name);
    if (value == args.end())
      return bad_call("missing argument '" + name + "'");
    auto text = argument_text(*value);
    if (text.find('\0') != std::string::npos)
      return bad_call("argument '" + name
                      + "' contains a NUL character, which no command-line "
                        "argument can hold");
    result += text;
    i = close;
  }
  return result;
}

// Whether `value` is of JSON schema type `type`; unknown types fit.
bool has_type(const nlohmann::json& value, const std::string& type) {
  if (type == "string")
    return value.is_string();
  if (type == "integer")
    return value.is_number_integer()
           || (value.is_number_float()
               && value.get<double>()
                    == static_cast<double>(
                      static_cast<long long>(value.get<double>())));
  if (type == "number")
    return value.is_number();
  if (type == "boolean")
    return value.is_boolean();
  if (type == "object")
    return value.is_object();
  if (type == "array")
    return value.is_array();
  if (type == "null")
    return value.is_null();
  return true;
}

// The types a property's schema declares ("type": a name or a list of
// names); none: any.
std::vector<std::string> declared_types(const nlohmann::json& schema) {
  std::vector<std::string> result;
  auto type = schema.is_object() ? schema.find("type") : schema.end();
  if (type == schema.end())
    return result;
  if (type->is_string())
    result.push_back(type->get<std::string>());
  else if (type->is_array())
    for (auto& name : *type)
      if (name.is_string())
        result.push_back(name.get<std::string>());
  return result;
}

// Checks argument `name` against its property schema.
caf::error check_argument(const std::string& name, const nlohmann::json& value,
                          const nlohmann::json& schema) {
  auto types = declared_types(schema);
  if (types.empty() || std::any_of(types.begin(), types.end(), [&](auto& t) {
        return has_type(value, t);
      }))
    return {};
  std::string expected;
  for (auto& t : types)
    expected += (expected.empty() ? "" : " or ") + t;
  auto shown = value.dump();
  if (shown.size() > 40)
    shown = shown.substr(0, 40) + "...";
  return bad_call("argument '" + name + "' must be of type " + expected
                  + " (the tool's parameters say so), got " + shown);
}

} // namespace

caf::error check_arguments(const std::string& parameters,
                           const std::string& arguments) {
  auto schema = nlohmann::json::parse(parameters, nullptr, false);
  auto args = nlohmann::json::parse(arguments.empty() ? "{}" : arguments,
                                    nullptr, false);
  if (args.is_discarded() || !args.is_object())
    return bad_call("the arguments are not a JSON object");
  if (schema.is_discarded() || !schema.is_object())
    return {};
  if (auto required = schema.find("required");
      required != schema.end() && required->is_array())
    for (auto& name : *required)
      if (name.is_string() && !args.contains(name.get<std::string>()))
        return bad_call("missing required argument '" + name.get<std::string>()
                        + "'");
  auto props = schema.find("properties");
  if (props == schema.end() || !props->is_object())
    return {};
  for (auto& [name, value] : args.items())
    if (auto prop = props->find(name); prop != props->end())
      if (auto err = check_argument(name, value, *prop))
        return err;
  return {};
}

caf::expected<std::vector<std::string>>
expand_command(const std::vector<std::string>& argv_template,
               const std::string& arguments) {
  auto args = nlohmann::json::parse(arguments.empty() ? "{}" : arguments,
                                    nullptr, false);
  if (args.is_discarded() || !args.is_object())
    return bad_call("the arguments are not a JSON object");
  std::vector<std::string> result;
  for (auto& element : argv_template) {
    auto expanded = expand_element(element, args);
    if (!expanded)
      return std::move(expanded.error());
    result.push_back(std::move(*expanded));
  }
  return result;
}

std::string tool_result_text(const std::string& tool,
                             const process_result& run) {
  std::string text = run.out;
  if (!run.err.empty())
    text += (text.empty() || text.back() == '\n' ? "" : "\n")
            + std::string{"[stderr]\n"} + run.err;
  auto line = [&text](const std::string& note) {
    text += (text.empty() || text.back() == '\n' ? "" : "\n") + note + "\n";
  };
  if (run.out_dropped + run.err_dropped > 0)
    line("[output cut: " + std::to_string(run.out_dropped + run.err_dropped)
         + " more bytes were dropped]");
  if (run.timed_out)
    line("[" + tool + " timed out after "
         + std::to_string(run.took.count() / 1000)
         + " s and was stopped, with everything it started]");
  else if (run.cancelled)
    line("[" + tool + " was cancelled and stopped]");
  else if (run.exit_code != 0)
    line("[" + tool + " exited with status " + std::to_string(run.exit_code)
         + "]");
  if (text.empty())
    line("[" + tool + " finished with no output]");
  return text;
}

} // namespace keel
