#pragma once

// Runs a program to completion as a child process, in a process group of
// its own, under resource limits; everything it starts ends with it, also
// what left its group (see process_tree.hpp). Blocking: call it from a
// thread of its own (e.g. one of `job_threads`), never on a CAF worker.

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "keel/error.hpp"

namespace keel {

/// Resource limits of the child (`setrlimit` before the exec, soft and
/// hard alike); 0 leaves a limit as the parent has it.
struct process_limits {
  /// Address space in bytes (RLIMIT_AS).
  uint64_t memory = 0;
  /// CPU seconds (RLIMIT_CPU): SIGXCPU, then SIGKILL a second later.
  uint64_t cpu_seconds = 0;
  /// Open file descriptors (RLIMIT_NOFILE).
  uint64_t open_files = 0;
  /// Processes of the child's real user (RLIMIT_NPROC; not enforced for
  /// root).
  uint64_t processes = 0;
  /// Bytes of the largest file it may write (RLIMIT_FSIZE).
  uint64_t file_size = 0;
};

/// The account the child runs as; `uid < 0`: ours.
struct process_identity {
  int64_t uid = -1;
  int64_t gid = -1;
};

/// What to run and how.
struct process_spec {
  /// The command; argv[0] is looked up in $PATH unless it has a '/'. No
  /// shell.
  std::vector<std::string> argv;
  /// Working directory; empty for ours.
  std::string cwd;
  /// The child's whole environment; none: ours.
  std::optional<std::vector<std::pair<std::string, std::string>>> env;
  /// The program and everything it started are ended after this.
  std::chrono::milliseconds timeout = std::chrono::seconds{120};
  /// Between SIGTERM and SIGKILL to the group; 0: SIGKILL at once.
  std::chrono::milliseconds grace = std::chrono::seconds{2};
  /// Bytes kept of stdout and of stderr each; the rest is read and
  /// counted, never left to block the child.
  size_t output_cap = std::numeric_limits<size_t>::max();
  process_limits limits;
  /// Set: the child drops to this account (its group alone as the
  /// supplementary groups, then the group, then the user) before the exec.
  process_identity identity;
};

/// How a run ended.
struct process_result {
  /// The exit status, or 128 + N for a signal N.
  int exit_code = -1;
  /// The timeout ended it (its group was killed).
  bool timed_out = false;
  /// `cancel` ended it (its group was killed).
  bool cancelled = false;
  std::string out;
  std::string err;
  /// Bytes read beyond `output_cap`, dropped.
  size_t out_dropped = 0;
  size_t err_dropped = 0;
  /// From the start to the end of the group.
  std::chrono::milliseconds took{0};
};

/// The exit code of a `waitpid` status: the exit status, or 128 + N for a
/// signal N.
int exit_code_of(int wait_status);

/// Runs `spec` to completion. Once the program exited, whatever it left
/// running in its group is killed too. When `cancel` becomes true the run
/// ends as on a timeout. Fails with `ec::config_invalid` for an empty argv
/// and with `ec::unavailable`, naming the program and the reason, when it
/// cannot be started (not found, not executable, no such folder, a limit
/// or the account refused, vfork failed).
caf::expected<process_result>
run_process(const process_spec& spec,
            const std::atomic<bool>* cancel = nullptr);

} // namespace keel
