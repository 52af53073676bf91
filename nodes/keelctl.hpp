#pragma once

// keelctl's pieces: the exit codes, the helpers every subcommand uses, and
// one `add_X_command` per subcommand, which adds it to the command line and
// returns what runs it once the command line is parsed.

#include <chrono>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <streambuf>
#include <string>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "keel/endpoint.hpp"
#include "keel/error.hpp"
#include "keel/store.hpp"
#include "keel/tools/data_dir.hpp"
#include "keel/tools/json_fields.hpp"

namespace keelctl {

using json = nlohmann::json;

constexpr int exit_ok = 0;
constexpr int exit_failed = 1;
constexpr int exit_usage = 2;
constexpr int exit_unreachable = 3;

/// The global options --node (HOST:PORT or wss://HOST:PORT), --token,
/// --admin-token and --ca-file, as given.
struct node_args {
  std::string address = "127.0.0.1:8080";
  std::string token;
  /// Sent instead of `token` by the commands that call `/api/v1/*`.
  std::string admin_token;
  /// Trusted certificates for a TLS node; empty for the system's.
  std::string ca_file;
};

/// A subcommand and what runs it once the command line is parsed; `run`
/// returns the exit code.
struct command {
  CLI::App* app = nullptr;
  std::function<int()> run;
};

/// While alive, what keelctl writes to stdout and stderr passes through
/// `keel::terminal_text` (control characters but newline and tab escaped)
/// where that stream is a terminal, or always with env
/// KEEL_ESCAPE_CONTROL=1 (never with 0): message text from the node cannot
/// drive the reader's terminal. Piped output is left as it is; --json
/// output stays valid JSON (the escapes are JSON's own).
class terminal_output {
public:
  terminal_output();
  ~terminal_output();

  terminal_output(const terminal_output&) = delete;
  terminal_output& operator=(const terminal_output&) = delete;

private:
  std::unique_ptr<std::streambuf> out_;
  std::unique_ptr<std::streambuf> err_;
  std::streambuf* old_out_ = nullptr;
  std::streambuf* old_err_ = nullptr;
};

// -- helpers ------------------------------------------------------------------

/// Prints `keelctl: MESSAGE` for a failure to reach or use the node at `ep`
/// and returns its exit code.
int fail(const keel::endpoint& ep, const caf::error& err);

/// Prints `keelctl: MESSAGE` and returns `code`.
int fail(const std::string& msg, int code = exit_failed);

/// Calls `run` with the node's address and token (the admin token, when
/// `admin` and one was given); a bad address fails with `exit_usage`.
int with_node(const node_args& node,
              const std::function<int(const keel::endpoint&)>& run,
              bool admin = false);

/// Adds a subcommand that talks to a node; its help names the global
/// options.
CLI::App* add_node_command(CLI::App& app, const std::string& name,
                           const std::string& description);

/// The subcommand `cmd`, run with the node of `node` (see `with_node`);
/// `admin` for commands that call the admin API.
command node_command(CLI::App* cmd, const node_args& node,
                     std::function<int(const keel::endpoint&)> run,
                     bool admin = false);

using keel::json_number;
using keel::json_string;

/// A number of milliseconds at `path` (as `json_number`), as a duration.
std::chrono::milliseconds millis_at(const json& j,
                                    std::initializer_list<const char*> path);

/// GET `path`, a paged list of the admin API (`?limit=`, `?after=`, the
/// answer's `next`), page after page until the last: the first page's
/// answer with the rows under `list` of every page and without `next`.
caf::expected<json> api_list(const keel::endpoint& ep, const std::string& path,
                             const char* list);

/// Prints an error frame's code and message; returns `exit_failed`.
int print_error_frame(const json& body);

/// Adds --data-dir DIR and --pg URL, one or the other, reading a node's
/// data rather than asking the node; `required` (the command reads nothing
/// else): --pg also comes from env KEEL_PG_URL. Returns the --data-dir
/// option.
CLI::Option* add_data_options(CLI::App* cmd, keel::data_source& src,
                              bool required);

/// Opens `src` read-only and calls `run` with its store; data that cannot
/// be opened fails with `exit_usage`.
int with_data(const keel::data_source& src,
              const std::function<int(keel::store&)>& run);

// -- the subcommands ----------------------------------------------------------

command add_send_command(CLI::App& app, const node_args& node);
command add_history_command(CLI::App& app, const node_args& node);
command add_status_command(CLI::App& app, const node_args& node);
command add_tree_command(CLI::App& app, const node_args& node);
command add_kill_command(CLI::App& app, const node_args& node);
command add_providers_command(CLI::App& app, const node_args& node);
command add_verify_command(CLI::App& app);
command add_recovery_command(CLI::App& app, const node_args& node);
command add_migrate_command(CLI::App& app);
command add_cluster_command(CLI::App& app, const node_args& node);
command add_drain_command(CLI::App& app, const node_args& node);
command add_dlq_command(CLI::App& app, const node_args& node);
command add_notifications_command(CLI::App& app, const node_args& node);
/// `pause THREAD` (`paused`) or `resume THREAD`.
command add_pause_command(CLI::App& app, const node_args& node, bool paused);
command add_task_command(CLI::App& app, const node_args& node);
command add_agents_command(CLI::App& app, const node_args& node);
command add_usage_command(CLI::App& app, const node_args& node);

} // namespace keelctl
