#include "keel/tool_command.hpp"

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
    result += argument_text(*value);
    i = close;
  }
  return result;
}

} // namespace

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
