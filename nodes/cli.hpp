#pragma once

// Command-line helpers shared by keelctl and keel-bench (CLI11).

#include <chrono>
#include <string>

#include <CLI/CLI.hpp>

#include "keel/config.hpp"
#include "keel/error.hpp"
#include "keel/tools/ws_client.hpp"

namespace keel::cli {

/// Adds an option taking a duration written as in the configuration files
/// ("500ms", "30s", "2m"; see `keel::parse_duration`).
inline CLI::Option* add_duration(CLI::App& app, const std::string& name,
                                 std::chrono::milliseconds& out,
                                 const std::string& description,
                                 bool allow_zero = true) {
  auto parse = [&out, name, allow_zero](const std::string& str) {
    auto value = keel::parse_duration(str);
    if (!value)
      throw CLI::ValidationError(name, "'" + str
                                         + "' is not a duration (an integer "
                                           "with a unit: ms, s, m or h, e.g. "
                                           "500ms, 30s)");
    if (!allow_zero && value->count() == 0)
      throw CLI::ValidationError(name, "must be longer than 0");
    out = std::chrono::duration_cast<std::chrono::milliseconds>(*value);
  };
  return app.add_option_function<std::string>(name, parse, description)
    ->type_name("DURATION");
}

/// A CLI11 check for "HOST:PORT" or "wss://HOST:PORT" (see
/// `keel::parse_endpoint`).
inline std::string check_endpoint(const std::string& str) {
  auto ep = keel::parse_endpoint(str);
  return ep ? std::string{} : keel::error_message(ep.error());
}

/// Adds --node (env KEEL_NODE) and --token (env KEEL_TOKEN).
inline void add_node_options(CLI::App& app, std::string& node,
                             std::string& token) {
  app
    .add_option("--node", node,
                "The node's address; wss://HOST:PORT for a node serving TLS")
    ->type_name("HOST:PORT")
    ->envname("KEEL_NODE")
    ->check(check_endpoint)
    ->capture_default_str();
  app.add_option("--token", token, "The node's gateway token")
    ->type_name("TOKEN")
    ->envname("KEEL_TOKEN");
}

/// Adds --admin-token (env KEEL_ADMIN_TOKEN): the token for `/api/v1/*`.
inline void add_admin_token_option(CLI::App& app, std::string& token) {
  app
    .add_option("--admin-token", token,
                "The node's admin token (gateway.admin_token), for the "
                "commands that use the admin API")
    ->type_name("TOKEN")
    ->envname("KEEL_ADMIN_TOKEN");
}

/// Adds --ca-file (env KEEL_CA_FILE): the certificates that sign a TLS
/// node's certificate.
inline void add_ca_file_option(CLI::App& app, std::string& file) {
  app
    .add_option("--ca-file", file,
                "PEM certificates to trust for a wss:// node (default: the "
                "system's)")
    ->type_name("FILE")
    ->envname("KEEL_CA_FILE");
}

} // namespace keel::cli
