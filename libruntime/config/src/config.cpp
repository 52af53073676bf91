#include "keel/config.hpp"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <iterator>
#include <utility>

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

const tool_config* node_config::find_tool(const std::string& x) const {
  auto i = std::find_if(tools.begin(), tools.end(),
                        [&](const tool_config& t) { return t.name == x; });
  return i != tools.end() ? &*i : nullptr;
}

const agent_config* node_config::find_agent(const std::string& x) const {
  auto i = std::find_if(agents.begin(), agents.end(),
                        [&](const agent_config& a) { return a.name == x; });
  return i != agents.end() ? &*i : nullptr;
}

agent_config threads_agent(const node_config& node) {
  auto& threads = node.threads;
  agent_config result;
  result.name = default_agent_name;
  result.system_prompt = threads.system_prompt;
  result.pool = threads.pool;
  result.tools = threads.tools;
  result.agent_tools = threads.agent_tools;
  result.guard = threads.guard;
  result.agents = threads.agents;
  result.turn_timeout = threads.turn_timeout;
  return result;
}

std::vector<agent_config> agents_of(const node_config& node) {
  auto result = node.agents;
  if (node.find_agent(default_agent_name) == nullptr)
    result.push_back(threads_agent(node));
  return result;
}

std::optional<agent_status> parse_agent_status(std::string_view str) {
  for (size_t i = 0; i < std::size(agent_status_names); ++i)
    if (str == agent_status_names[i])
      return static_cast<agent_status>(i);
  return std::nullopt;
}

bool channel_binds(const std::string& pattern, const std::string& thread) {
  if (!pattern.empty() && pattern.back() == '*')
    return thread.compare(0, pattern.size() - 1, pattern, 0, pattern.size() - 1)
           == 0;
  return pattern == thread;
}

std::vector<std::string>
delivery_config::channels_of(const std::string& thread) const {
  std::vector<std::string> result;
  for (auto& channel : channels)
    if (std::any_of(channel.threads.begin(), channel.threads.end(),
                    [&](auto& x) { return channel_binds(x, thread); }))
      result.push_back(channel.name);
  return result;
}

const channel_config*
delivery_config::find_channel(const std::string& x) const {
  auto i = std::find_if(channels.begin(), channels.end(),
                        [&](const channel_config& c) { return c.name == x; });
  return i != channels.end() ? &*i : nullptr;
}

bool is_loopback_host(std::string_view host) {
  // Host names are case-insensitive (RFC 4343).
  constexpr std::string_view local = "localhost";
  auto is_local
    = host.size() == local.size()
      && std::equal(host.begin(), host.end(), local.begin(),
                    [](char x, char y) {
                      return std::tolower(static_cast<unsigned char>(x)) == y;
                    });
  if (is_local || host == "::1" || host == "[::1]")
    return true;
  // 127.0.0.0/8 written as a dotted quad.
  if (host.substr(0, 4) != "127.")
    return false;
  int dots = 0;
  for (auto c : host) {
    if (c == '.')
      ++dots;
    else if (c < '0' || c > '9')
      return false;
  }
  return dots == 3;
}

bool is_wildcard_host(std::string_view host) {
  return host == "0.0.0.0" || host == "::" || host == "[::]";
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
  // What the parser derives when a file leaves them out (the listen host is
  // IPv4, so no brackets).
  result.cluster.node_id = result.name;
  result.cluster.advertise = result.cluster.listen_host + ":"
                             + std::to_string(result.cluster.listen_port);
  return result;
}

// -- restart strategies -------------------------------------------------------

std::string to_string(restart_strategy x) {
  return restart_strategy_names[static_cast<size_t>(x)];
}

std::optional<restart_strategy> parse_restart_strategy(std::string_view str) {
  for (size_t i = 0; i < std::size(restart_strategy_names); ++i)
    if (str == restart_strategy_names[i])
      return static_cast<restart_strategy>(i);
  return std::nullopt;
}

} // namespace keel
