#pragma once

// Child processes for the tools and tests: started with fork/exec in their
// own process group, with extra environment variables, stdout optionally
// through a pipe and everything else in a log file. A child dies with its
// parent (PR_SET_PDEATHSIG) even if the parent aborts, and is always killed
// (its whole group) when the object goes away. Plus the small helpers that
// go with them: running a command to completion, a free port, polling with
// a bound, a $PATH lookup, the paths of programs beside each other.

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <sys/types.h>

namespace keel {

/// A TCP port on 127.0.0.1 that was free a moment ago (the kernel picked it
/// for a socket bound to port 0, which is closed again). For programs that
/// cannot listen on port 0 and report the port they got; a child that finds
/// it taken after all fails to start, so callers retry with another one.
/// Throws std::runtime_error when no socket can be bound.
uint16_t free_port();

/// Calls `ready` every `interval` until it returns true (then true) or
/// `timeout` has passed (then false). `ready` is always called at least once.
template <class Pred>
bool poll_until(Pred ready, std::chrono::milliseconds timeout,
                std::chrono::milliseconds interval
                = std::chrono::milliseconds{20}) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    if (ready())
      return true;
    if (std::chrono::steady_clock::now() + interval > deadline)
      return false;
    std::this_thread::sleep_for(interval);
  }
}

/// The absolute path of `program` in $PATH (or `program` itself if it has a
/// '/'); std::nullopt if there is no such executable.
std::optional<std::string> find_in_path(const std::string& program);

/// The path of this program's executable (from /proc/self/exe); "" when it
/// cannot be read.
std::string own_executable();

/// The path of `name` in the folder of the file `path` ("a/b/keel-node" and
/// "keelctl" give "a/b/keelctl"); `name` itself when `path` has no folder.
std::string sibling_path(const std::string& path, const std::string& name);

/// Creates a fresh, uniquely named folder `PREFIX-XXXXXX` under the
/// system's temp folder (mkdtemp) and returns its path. Throws
/// std::runtime_error when it cannot.
std::string make_temp_dir(const std::string& prefix);

/// How to start a child_process.
struct child_options {
  /// The command; argv[0] is the program's path (no $PATH search: see
  /// find_in_path). Scripts with a `#!` line are fine.
  std::vector<std::string> argv;
  /// Environment variables to set (or override) on top of ours.
  std::vector<std::pair<std::string, std::string>> env;
  /// Working directory; empty for ours.
  std::string cwd;
  /// The child's stderr (and stdout, unless `capture_stdout`) is appended to
  /// this file; empty for /dev/null. (A file, not a pipe: a chatty child
  /// never blocks on a full pipe nor dies of a closed one.) Its stdin is
  /// /dev/null.
  std::string log_path;
  /// Send the child's stdout through a pipe that `read_stdout_line` reads
  /// (for a child that announces itself on stdout).
  bool capture_stdout = false;
  /// Put the child in a new process group (its id is the child's pid), so
  /// that killing it kills whatever it started too.
  bool own_process_group = true;
};

/// A running child process; see the top of this file.
class child_process {
public:
  /// Starts the child. Throws std::runtime_error if it cannot be forked or
  /// the log file cannot be opened; a failing exec shows as exit code 127
  /// with the reason in the log.
  explicit child_process(child_options opts);

  /// Kills the child (and its group) if it still runs.
  ~child_process();

  child_process(const child_process&) = delete;
  child_process& operator=(const child_process&) = delete;

  /// The child's pid; -1 once it has been reaped.
  pid_t pid() const {
    return pid_;
  }

  /// True while the child runs (reaps it once it has exited).
  bool running();

  /// The exit code once the child has exited (128 + N for a signal N).
  std::optional<int> exit_code();

  /// SIGKILL to the child (and its process group), then reap it. Safe to
  /// call more than once.
  void kill();

  /// SIGTERM to the child (and its process group); SIGKILL if it has not
  /// exited after `grace`. Returns the exit code.
  int terminate(std::chrono::milliseconds grace = std::chrono::seconds{5});

  /// Like `terminate`, but sends SIGTERM again every `every` until the
  /// child exits (a Keel node drains on the first and stops at once on the
  /// second).
  int terminate(std::chrono::milliseconds grace,
                std::chrono::milliseconds every);

  /// With `capture_stdout`: reads the child's stdout until a complete line
  /// containing `marker` has arrived, and returns that line (without the
  /// marker's prefix and the newline); std::nullopt when the child closes
  /// its stdout or `timeout` passes first. The pipe is closed afterwards
  /// (the child must write nothing more to stdout).
  std::optional<std::string>
  read_stdout_line(const std::string& marker,
                   std::chrono::milliseconds timeout);

  /// Everything the child wrote to its log so far ("" without a log).
  std::string log() const;

  const child_options& options() const {
    return opts_;
  }

private:
  void record(int status);

  child_options opts_;
  pid_t pid_ = -1;
  int stdout_fd_ = -1;
  std::optional<int> exit_code_;
};

/// The output and exit status of a finished command.
struct command_result {
  int exit_code = -1;
  std::string out;
  std::string err;
};

/// Runs a command to completion (no shell; `run_process` in its own
/// process group), capturing its stdout and stderr; kills it and what it
/// started (exit code 137) when it has not finished after `timeout`. A
/// command that cannot be started exits 127 with the reason on stderr.
command_result
run_command(const std::vector<std::string>& argv,
            std::chrono::seconds timeout = std::chrono::seconds{60});

/// Reads a whole file ("" when it cannot be read).
std::string read_text_file(const std::string& path);

} // namespace keel
