#pragma once

// The processes a run of `run_process` started, wherever they went: its
// child's descendants (also those that left its process group or session
// with setsid), and, where this process is a child subreaper, the orphans
// re-parented to it. Blocking; system calls and /proc only.

#include <cstddef>
#include <mutex>
#include <vector>

#include <sys/types.h>

namespace keel {

/// Makes this process a child subreaper (`PR_SET_CHILD_SUBREAPER`): a
/// descendant whose parent exits is re-parented to us, not to init, so
/// `end_process_tree` still finds it. Returns false if the kernel refused.
bool become_child_subreaper();

/// Whether this process is a child subreaper.
bool is_child_subreaper();

/// The descendants of `roots` (not the roots), read from /proc: children
/// before their children.
std::vector<pid_t> descendants_of(const std::vector<pid_t>& roots);

/// A process as it was seen: its pid and start time, so that a signal
/// never reaches another process that got the pid later.
struct process_mark {
  pid_t pid = -1;
  unsigned long long start = 0;
};

/// The descendants of `root` now (none for `root <= 0`).
std::vector<process_mark> mark_descendants(pid_t root);

/// Sends `sig` to each of `marks` still alive as the same process.
void signal_marked(const std::vector<process_mark>& marks, int sig);

/// The children of run_process's live runs, registered while their
/// supervisor waits for them: every other child of a subreaper is an
/// orphan some run left behind. Lock `mutex()` around a `vfork` and the
/// `add` of its child, so no sweep takes the new child for an orphan.
class run_children {
public:
  static std::mutex& mutex();
  /// With `mutex()` held.
  static void add(pid_t pid);
  /// Takes `mutex()` itself.
  static void remove(pid_t pid);
  /// With `mutex()` held.
  static bool contains(pid_t pid);
};

/// SIGKILLs every descendant of `root` (if it still lives: before it is
/// reaped; 0 for none) and, if this process is a child subreaper, every child
/// of ours that is no registered run's (an orphan of a run that escaped its
/// group) with all its descendants, reaping those orphans (by their pids only:
/// never a registered run's child). Repeats while it finds any, at most a
/// few rounds. Returns the processes killed.
size_t end_process_tree(pid_t root);

} // namespace keel
