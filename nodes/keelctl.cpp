// keelctl: talks to a running node. One subcommand per task; each takes
// --node HOST:PORT or wss://HOST:PORT (env KEEL_NODE), --token (env
// KEEL_TOKEN) and, for TLS, --ca-file (env KEEL_CA_FILE). `verify`,
// and `recovery` and `tree --agents` with --data-dir DIR or --pg URL, read
// a node's data instead (read-only: the node may be stopped or running);
// `migrate` copies a stopped node's RocksDB data into PostgreSQL;
// `cluster` and `drain` show and change a cluster's membership; `dlq`
// lists, shows, retries and drops dead letters; `notifications` lists what
// the owner was told; `pause` and `resume` pause an agent; `task` shows
// where a message stands; `agents` lists the agents and sets their
// status; `usage` shows the tokens their turns took.
//
// Exit codes: 0 success, 1 the request failed (error frame, timeout) or
// `verify` found a violated invariant, 2 bad arguments (an unreadable
// --ca-file too) or a data folder that cannot be read, 3 the node cannot be
// reached or refuses the token.
//
// On a terminal (or with env KEEL_ESCAPE_CONTROL=1) control characters in
// the output are escaped: see `terminal_output`.
//
// This file wires the subcommands up; each is in keelctl_*.cpp.

#include <vector>

#include <CLI/CLI.hpp>

#include "cli.hpp"
#include "keelctl.hpp"

int main(int argc, char** argv) {
  using namespace keelctl;
  terminal_output terminal;
  CLI::App app{"keelctl: talks to a running Keel node."};
  app.require_subcommand(1);
  // Global options may also follow the subcommand.
  app.fallthrough();
  node_args node;
  keel::cli::add_node_options(app, node.address, node.token);
  keel::cli::add_admin_token_option(app, node.admin_token);
  keel::cli::add_ca_file_option(app, node.ca_file);
  std::vector<command> commands{
    add_send_command(app, node),
    add_history_command(app, node),
    add_status_command(app, node),
    add_tree_command(app, node),
    add_kill_command(app, node),
    add_providers_command(app, node),
    add_verify_command(app),
    add_recovery_command(app, node),
    add_migrate_command(app),
    add_cluster_command(app, node),
    add_drain_command(app, node),
    add_dlq_command(app, node),
    add_notifications_command(app, node),
    add_pause_command(app, node, true),
    add_pause_command(app, node, false),
    add_task_command(app, node),
    add_agents_command(app, node),
    add_usage_command(app, node),
  };
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? exit_ok : exit_usage;
  }
  for (auto& cmd : commands)
    if (cmd.app->parsed())
      return cmd.run();
  return exit_usage;
}
