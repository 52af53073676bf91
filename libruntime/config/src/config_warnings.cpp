// The warnings of a valid but risky configuration, logged at start and
// printed by --check-config.

#include "config_parser.hpp"
#include "keel/file_modes.hpp"

namespace keel::config_detail {

void parser::collect_warnings(node_config& cfg) const {
  collect_gateway_warnings(cfg);
  collect_exposure_warnings(cfg);
  collect_tool_warnings(cfg);
}

void parser::collect_gateway_warnings(node_config& cfg) const {
  auto& out = cfg.warnings;
  auto& gw = cfg.gateway;
  if (gw.allow_unauthenticated && gw.token.empty()
      && !is_loopback_host(gw.host))
    out.push_back("gateway.allow_unauthenticated is true: anyone who can "
                  "reach "
                  + gw.host + ":" + std::to_string(gw.port)
                  + " can read and write every thread");
  if (!gw.token.empty() && gw.admin_token.empty()
      && (is_loopback_host(gw.host) || gw.allow_unauthenticated))
    out.push_back("gateway.admin_token is not set: the client token also "
                  "opens the admin API (/api/v1/*, /metrics); set "
                  "gateway.admin_token to keep clients out of it");
  if (gw.allow_query_token)
    out.push_back("gateway.allow_query_token is true: tokens in URLs can end "
                  "up in proxy logs and browser history");
}

void parser::collect_exposure_warnings(node_config& cfg) const {
  auto& out = cfg.warnings;
  for (size_t i = 0; i < cfg.providers.size(); ++i) {
    auto& p = cfg.providers[i];
    if (!p.api_key.empty() && p.base_url.compare(0, 7, "http://") == 0)
      out.push_back(indexed("providers", i)
                    + ".base_url is http://, so "
                      "the API key of provider "
                    + quote(p.name) + " travels unencrypted");
  }
  for (size_t i = 0; i < cfg.delivery.channels.size(); ++i) {
    auto& c = cfg.delivery.channels[i];
    if (!c.token.empty() && c.url.compare(0, 7, "http://") == 0)
      out.push_back(indexed("delivery.channels", i)
                    + ".url is http://, so the bot token of channel "
                    + quote(c.name) + " travels unencrypted");
  }
  if (!cfg.storage.sync)
    out.push_back("storage.sync is false: acknowledged messages can be lost "
                  "when the machine crashes");
  if (cfg.cluster.enabled && cfg.cluster.insecure_plaintext
      && !cfg.cluster.tls.enabled())
    out.push_back(
      "cluster.insecure_plaintext is true: links between nodes "
      "are neither encrypted nor authenticated, so any local "
      "process that reaches "
      + render_host_port(cfg.cluster.listen_host, cfg.cluster.listen_port)
      + " can send the node's peers actor messages");
  for (auto& [key, path] : secret_files_)
    if (auto w = exposed_file_warning(key, path))
      out.push_back(*w);
  if (auto w = exposed_file_warning("gateway.tls.key_file",
                                    cfg.gateway.tls.key_file))
    out.push_back(*w);
  if (auto w = exposed_file_warning("cluster.tls.key", cfg.cluster.tls.key))
    out.push_back(*w);
  if (cfg.chaos.kill)
    out.push_back("chaos.kill is true: admin clients can kill any actor");
  if (cfg.chaos.disk)
    out.push_back("chaos.disk is true: admin clients can make every disk "
                  "write fail");
}

void parser::collect_tool_warnings(node_config& cfg) const {
  for (size_t i = 0; i < cfg.tools.size(); ++i) {
    auto& command = cfg.tools[i].command;
    for (size_t j = 1; j < command.size(); ++j) {
      if (command[j] == "--")
        break; // What follows is never read as an option.
      auto& element = command[j];
      if (element.size() < 2 || element[0] != '{' || element[1] == '{')
        continue;
      cfg.warnings.push_back(
        indexed(indexed("tools", i) + ".command", j) + ": " + quote(element)
        + " starts with an argument of the model's choosing and no \"--\" "
          "comes before it, so a value starting with '-' is read as an "
          "option (put \"--\" before it, or a fixed prefix such as "
          "--name={name})");
    }
  }
}

} // namespace keel::config_detail
