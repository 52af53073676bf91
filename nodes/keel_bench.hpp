#pragma once

// keel-bench's pieces: the exit codes, how a report goes out, the
// top-level mode (a node, or an HTTP server with --http) and the recovery
// subcommand, each adding its options and returning what runs it once the
// command line is parsed.

#include <chrono>
#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "keel/error.hpp"
#include "keel/tools/ws_load.hpp"

namespace keel_bench {

constexpr int exit_failed = 1;
constexpr int exit_usage = 2;
constexpr int exit_unreachable = 3;

/// Prints `keel-bench: MESSAGE` for a failed run and returns its exit code
/// (unreachable for a node or server that cannot be reached or refuses the
/// token).
int fail_run(const caf::error& err);

/// Where a report goes besides the table on stdout.
struct output_args {
  /// Print JSON instead of the table.
  bool json = false;
  /// Also write the JSON to this file.
  std::string json_out;
  /// Append a row of a results table to this file.
  std::string row_out;
};

/// Prints the report (its `json`, or `text`), writes the JSON to
/// `json_out`, and appends `row()` to `row_out` (`header` first if the file
/// is new). Returns false after saying which file could not be written.
bool output_report(const output_args& out, const nlohmann::json& json,
                   const std::string& text, const std::string& header,
                   const std::function<std::string()>& row);

/// Prints a progress line on stderr.
void say(const std::string& line);

/// The top-level mode's options, and what runs it.
struct load_mode {
  /// After parsing: checks what the options cannot check alone; throws
  /// CLI::ValidationError.
  std::function<void()> check;
  /// Runs the benchmark; returns the exit code.
  std::function<int()> run;
};

load_mode add_load_mode(CLI::App& app);

/// The memory runs' options, part of the top-level mode: --idle-threads
/// and --idle-connections each select a run instead of the load.
struct memory_args {
  size_t idle_threads = 0;
  size_t idle_connections = 0;
  std::chrono::milliseconds passivate_wait{0};
  std::chrono::milliseconds hold{3000};
  CLI::Option* idle_threads_opt = nullptr;
  CLI::Option* idle_connections_opt = nullptr;

  /// Whether a memory run was asked for.
  bool selected() const {
    return *idle_threads_opt || *idle_connections_opt;
  }
};

/// Adds the memory runs' options, excluding those of the load (`load_only`:
/// rate, length, raw measurement, fault, HTTP) that do not apply.
void add_memory_options(CLI::App& app, memory_args& args,
                        const std::vector<CLI::Option*>& load_only);

/// Runs the memory run asked for on `load`'s node (with its connections,
/// window and thread prefix for --idle-threads); returns the exit code.
int run_memory(const memory_args& args, const keel::bench::load_options& load,
               const output_args& out, const std::string& label);

/// A subcommand and what runs it once the command line is parsed.
struct command {
  CLI::App* app = nullptr;
  std::function<int()> run;
};

command add_recovery_command(CLI::App& app);
/// `keel-bench dashboard` (keel_bench_dashboard.cpp).
command add_dashboard_command(CLI::App& app);

} // namespace keel_bench
