#include "keel/agent_tools.hpp"

#include <nlohmann/json.hpp>

#include "keel/types.hpp"

namespace keel {

namespace {

// Names are short and plain: they become part of a thread id.
bool valid_child_name(const std::string& name) {
  if (name.empty() || name.size() > 32)
    return false;
  for (auto c : name)
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
          || (c >= '0' && c <= '9') || c == '_' || c == '-'))
      return false;
  return true;
}

caf::error bad_call(const tool_call& call, const std::string& what) {
  return caf::make_error(ec::bad_frame, "tool call " + call.name + ": " + what);
}

} // namespace

const std::vector<agent_tool_spec>& agent_tool_specs() {
  static const std::vector<agent_tool_spec> specs{
    {spawn_agent_tool,
     "Create a child agent with its own conversation and send it a task. "
     "Its answer comes back to you as a message from [agent ID].",
     R"({"type":"object","properties":{)"
     R"("name":{"type":"string","pattern":"^[A-Za-z0-9_-]{1,32}$",)"
     R"("description":"the child's name, unique among your children"},)"
     R"("task":{"type":"string","description":"what the child should do"},)"
     R"("agent":{"type":"string","description":"the kind of agent to )"
     R"(start, one this node defines; default: your own kind"}},)"
     R"("required":["name","task"]})"},
    {message_agent_tool,
     "Send a message to a child agent you spawned earlier. Its answer comes "
     "back to you as a message from [agent ID].",
     R"({"type":"object","properties":{)"
     R"("name":{"type":"string","description":"the child's name"},)"
     R"("text":{"type":"string","description":"the message"}},)"
     R"("required":["name","text"]})"},
  };
  return specs;
}

std::string child_thread_id(const std::string& parent,
                            const std::string& name) {
  return parent + "." + name;
}

std::optional<caf::expected<agent_action>>
parse_agent_tool_call(const tool_call& call, const std::string& parent) {
  agent_action action;
  const char* text_field = nullptr;
  if (call.name == spawn_agent_tool) {
    action.spawn = true;
    text_field = "task";
  } else if (call.name == message_agent_tool) {
    text_field = "text";
  } else {
    return std::nullopt;
  }
  auto args = nlohmann::json::parse(call.arguments, nullptr, false);
  if (args.is_discarded() || !args.is_object())
    return bad_call(call, "arguments are not a JSON object");
  auto name = args.find("name");
  if (name == args.end() || !name->is_string())
    return bad_call(call, "missing string field 'name'");
  auto name_str = name->get<std::string>();
  if (!valid_child_name(name_str))
    return bad_call(call,
                    "name '" + name_str + "' must be 1 to 32 of [A-Za-z0-9_-]");
  action.child = child_thread_id(parent, name_str);
  if (!valid_thread_id(action.child))
    return bad_call(call, "the child id '" + action.child
                            + "' is too long (the tree is too deep)");
  auto text = args.find(text_field);
  if (text == args.end() || !text->is_string()
      || text->get_ref<const std::string&>().empty())
    return bad_call(call, "missing non-empty string field '"
                            + std::string{text_field} + "'");
  action.text = text->get<std::string>();
  if (auto agent = args.find("agent");
      action.spawn && agent != args.end() && !agent->is_null()) {
    if (!agent->is_string() || !valid_agent_name(agent->get<std::string>()))
      return bad_call(call, std::string{"agent must be "} + agent_rule);
    action.agent = agent->get<std::string>();
  }
  return action;
}

} // namespace keel
