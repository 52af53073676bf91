// keelctl agents and usage: the node's agent definitions (their statuses,
// live and stored threads), status changes, and the tokens their turns
// took.

#include <cstdio>
#include <iostream>
#include <memory>

#include <CLI/CLI.hpp>

#include "keelctl.hpp"

namespace keelctl {

namespace {

struct agents_args {
  std::string name;
  std::string status;
  bool as_json = false;
};

std::string tokens_of(const json& usage) {
  return std::to_string(json_number(usage, {"input_tokens"})) + " in, "
         + std::to_string(json_number(usage, {"output_tokens"})) + " out, "
         + std::to_string(json_number(usage, {"model_calls"})) + " calls"
         + (json_number(usage, {"estimated_calls"}) > 0
              ? " (" + std::to_string(json_number(usage, {"estimated_calls"}))
                  + " estimated)"
              : std::string{});
}

int print_definitions(const json& body) {
  std::printf("%-24s %-9s %6s %8s  %s\n", "AGENT", "STATUS", "LIVE", "STORED",
              "USAGE");
  for (auto& x : body.value("agents", json::array())) {
    auto name = json_string(x, "name");
    if (x.value("default", false))
      name += " (default)";
    if (x.value("system", false))
      name += " (system)";
    std::printf(
      "%-24s %-9s %6llu %8llu  %s\n", name.c_str(),
      json_string(x, "status").c_str(),
      static_cast<unsigned long long>(json_number(x, {"live_threads"})),
      static_cast<unsigned long long>(json_number(x, {"stored_threads"})),
      tokens_of(x.value("usage", json::object())).c_str());
  }
  return exit_ok;
}

int run_agents(const keel::endpoint& ep, const agents_args& args) {
  if (!args.status.empty()) {
    json body{{"status", args.status}};
    auto res = keel::api_call(
      ep, "POST", "/api/v1/agent-definitions/" + args.name + "/status",
      body.dump());
    if (!res)
      return fail(ep, res.error());
    std::cout << json_string(*res, "agent") << " is "
              << json_string(*res, "status") << '\n';
    return exit_ok;
  }
  auto res = keel::api_call(ep, "GET", "/api/v1/agent-definitions");
  if (!res)
    return fail(ep, res.error());
  if (args.as_json) {
    std::cout << res->dump(2) << '\n';
    return exit_ok;
  }
  return print_definitions(*res);
}

struct usage_args {
  std::string thread;
  std::string agent;
  bool as_json = false;
};

int run_usage(const keel::endpoint& ep, const usage_args& args) {
  auto query = !args.thread.empty()  ? "?thread=" + args.thread
               : !args.agent.empty() ? "?agent=" + args.agent
                                     : std::string{};
  auto res = keel::api_call(ep, "GET", "/api/v1/usage" + query);
  if (!res)
    return fail(ep, res.error());
  if (args.as_json) {
    std::cout << res->dump(2) << '\n';
    return exit_ok;
  }
  for (auto& x : res->value("threads", json::array()))
    std::cout << "thread " << json_string(x, "thread") << " (agent "
              << json_string(x, "agent")
              << "): " << tokens_of(x.value("usage", json::object())) << '\n';
  if (!args.thread.empty())
    return exit_ok;
  for (auto& [name, x] : res->value("agents", json::object()).items())
    std::cout << "agent " << name << ": "
              << tokens_of(x.value("usage", json::object())) << " in "
              << json_number(x, {"threads"}) << " threads\n";
  if (args.agent.empty())
    std::cout << "node: " << tokens_of(res->value("node", json::object()))
              << '\n';
  return exit_ok;
}

} // namespace

command add_agents_command(CLI::App& app, const node_args& node) {
  auto args = std::make_shared<agents_args>();
  auto cmd = add_node_command(
    app, "agents",
    "Lists the agents with their status, live and stored threads and token "
    "usage; with NAME STATUS sets an agent's status (active, paused or "
    "archived), stored and in effect at once");
  cmd->add_option("NAME", args->name, "The agent whose status to set")
    ->type_name("");
  cmd->add_option("STATUS", args->status, "active, paused or archived")
    ->type_name("")
    ->check(CLI::IsMember({"active", "paused", "archived"}))
    ->needs(cmd->get_option("NAME"));
  cmd->add_flag("--json", args->as_json, "Print the raw JSON");
  return node_command(
    cmd, node,
    [args](const keel::endpoint& ep) { return run_agents(ep, *args); }, true);
}

command add_usage_command(CLI::App& app, const node_args& node) {
  auto args = std::make_shared<usage_args>();
  auto cmd = add_node_command(
    app, "usage",
    "The tokens of the stored turns: of THREAD, of one --agent, or of every "
    "agent and the node");
  cmd->add_option("THREAD", args->thread, "One thread")->type_name("");
  cmd->add_option("--agent", args->agent, "One agent");
  cmd->add_flag("--json", args->as_json, "Print the raw JSON");
  return node_command(
    cmd, node,
    [args](const keel::endpoint& ep) { return run_usage(ep, *args); }, true);
}

} // namespace keelctl
