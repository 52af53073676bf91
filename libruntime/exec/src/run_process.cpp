#include "keel/run_process.hpp"

#include "keel/process_tree.hpp"

#include <array>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <iterator>
#include <mutex>
#include <thread>

#include <fcntl.h>
#include <linux/close_range.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

namespace keel {

namespace {

using clock_type = std::chrono::steady_clock;

// The pipes of one run: stdout, stderr, and the exec report (closed by a
// successful exec, or carrying its errno).
struct run_pipes {
  int out[2] = {-1, -1};
  int err[2] = {-1, -1};
  int report[2] = {-1, -1};

  ~run_pipes() {
    for (int* p : {out, err, report})
      for (int i = 0; i < 2; ++i)
        close_end(p[i]);
  }

  static void close_end(int& fd) {
    if (fd >= 0)
      ::close(fd);
    fd = -1;
  }

  bool open() {
    return ::pipe2(out, O_CLOEXEC) == 0 && ::pipe2(err, O_CLOEXEC) == 0
           && ::pipe2(report, O_CLOEXEC) == 0;
  }
};

// What the child hands to exec, built before the vfork: the child shares
// the parent's memory until it execs, so it may only make system calls.
struct exec_args {
  explicit exec_args(const process_spec& spec) {
    for (auto& arg : spec.argv)
      argv.push_back(const_cast<char*>(arg.c_str()));
    argv.push_back(nullptr);
    if (spec.env) {
      for (auto& [key, value] : *spec.env)
        vars.push_back(key + "=" + value);
      for (auto& var : vars)
        envp.push_back(const_cast<char*>(var.c_str()));
      envp.push_back(nullptr);
    }
    cwd = spec.cwd.empty() ? nullptr : spec.cwd.c_str();
    auto& l = spec.limits;
    uid = spec.identity.uid;
    gid = spec.identity.gid;
    limits = {{{RLIMIT_AS, l.memory},
               {RLIMIT_CPU, l.cpu_seconds},
               {RLIMIT_NOFILE, l.open_files},
               {RLIMIT_NPROC, l.processes},
               {RLIMIT_FSIZE, l.file_size}}};
  }

  std::vector<std::string> vars;
  std::vector<char*> argv;
  std::vector<char*> envp;
  const char* cwd = nullptr;
  /// Each resource and its limit (0: left as it is).
  std::array<std::pair<int, uint64_t>, 5> limits;
  /// The account to switch to; uid < 0: none.
  int64_t uid = -1;
  int64_t gid = -1;
};

// What the child reports when it could not exec: the step that failed
// (an index into `child_steps`) and its errno.
struct child_report {
  int step = 0;
  int code = 0;
};

constexpr const char* child_steps[] = {"exec",
                                       "chdir",
                                       "memory limit",
                                       "cpu_time limit",
                                       "open_files limit",
                                       "processes limit",
                                       "file_size limit",
                                       "setgroups",
                                       "setgid",
                                       "setuid"};

// In the child: reports `step` failed with errno and exits.
[[noreturn]] void child_failed(const run_pipes& p, int step) {
  child_report report{step, errno};
  [[maybe_unused]] auto n = ::write(p.report[1], &report, sizeof(report));
  ::_exit(127);
}

// In the child: the resource limits, soft and hard.
void apply_limits(const exec_args& args, const run_pipes& p) {
  for (size_t i = 0; i < args.limits.size(); ++i) {
    auto [resource, value] = args.limits[i];
    if (value == 0)
      continue;
    rlimit rl{static_cast<rlim_t>(value), static_cast<rlim_t>(value)};
    if (::setrlimit(resource, &rl) != 0)
      child_failed(p, static_cast<int>(2 + i));
  }
}

// In the child: drops to the account of `args`, if any. Raw system calls:
// glibc's setuid and friends signal every thread of the process to change
// them all, and this vforked child shares the node's memory (and its
// list of threads).
void switch_account(const exec_args& args, const run_pipes& p) {
  if (args.uid < 0)
    return;
  auto gid = static_cast<gid_t>(args.gid);
  auto uid = static_cast<uid_t>(args.uid);
  if (::syscall(SYS_setgroups, 1, &gid) != 0)
    child_failed(p, 7);
  if (::syscall(SYS_setresgid, gid, gid, gid) != 0)
    child_failed(p, 8);
  if (::syscall(SYS_setresuid, uid, uid, uid) != 0)
    child_failed(p, 9);
}

// In the vforked child, every signal blocked: never returns. Gives every
// signal its default action (the parent's handlers must not run here, and
// what the node ignores, such as SIGPIPE, the program must not), unblocks
// them at the exec, and reports a failing exec's errno on the report pipe,
// which a successful exec closes.
[[noreturn]] void exec_child(const exec_args& args, const run_pipes& p) {
  struct sigaction dfl = {};
  dfl.sa_handler = SIG_DFL;
  for (int sig = 1; sig < NSIG; ++sig)
    ::sigaction(sig, &dfl, nullptr); // Fails harmlessly for KILL and STOP.
  ::setpgid(0, 0);
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  auto null_fd = ::open("/dev/null", O_RDONLY);
  ::dup2(null_fd, STDIN_FILENO);
  ::dup2(p.out[1], STDOUT_FILENO);
  ::dup2(p.err[1], STDERR_FILENO);
  // Nothing else of ours survives the exec (the report pipe is
  // close-on-exec already).
  ::close_range(3, ~0U, CLOSE_RANGE_CLOEXEC);
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  if (args.cwd != nullptr && ::chdir(args.cwd) != 0)
    child_failed(p, 1);
  apply_limits(args, p);
  switch_account(args, p);
  if (args.envp.empty())
    ::execvp(args.argv[0], args.argv.data());
  else
    ::execvpe(args.argv[0], args.argv.data(), args.envp.data());
  child_failed(p, 0);
}

// Starts the child: vfork, not fork, which would copy the page tables of
// the whole node (milliseconds for a large one, and a copy-on-write fault
// for each page the node writes until the child execs). Signals stay
// blocked in this thread until the child has exec'd or exited. The child
// is registered under the lock that sweeps for orphans take, so none takes
// it for one.
pid_t spawn_child(const exec_args& args, const run_pipes& p) {
  sigset_t all;
  sigset_t before;
  sigfillset(&all);
  ::pthread_sigmask(SIG_SETMASK, &all, &before);
  std::unique_lock<std::mutex> guard{run_children::mutex()};
  auto pid = ::vfork();
  if (pid == 0)
    exec_child(args, p);
  auto saved = errno;
  if (pid > 0)
    run_children::add(pid);
  guard.unlock();
  ::pthread_sigmask(SIG_SETMASK, &before, nullptr);
  errno = saved;
  return pid;
}

// Reads what `fd` has into `into` (up to `cap`, counting the rest in
// `dropped`); closes it at end of file.
void take_output(int& fd, std::string& into, size_t cap, size_t& dropped) {
  char buf[4096];
  auto n = ::read(fd, buf, sizeof(buf));
  if (n < 0 && (errno == EINTR || errno == EAGAIN))
    return;
  if (n <= 0) {
    run_pipes::close_end(fd);
    return;
  }
  auto bytes = static_cast<size_t>(n);
  auto kept = into.size() < cap ? std::min(bytes, cap - into.size()) : 0;
  into.append(buf, kept);
  dropped += bytes - kept;
}

// Waits up to `wait_ms` for output (or for `exit_fd`, a pidfd of the
// child, to tell it exited) and takes what came.
void read_ready(run_pipes& p, const process_spec& spec, process_result& result,
                int wait_ms, int exit_fd = -1) {
  pollfd fds[3]
    = {{p.out[0], POLLIN, 0}, {p.err[0], POLLIN, 0}, {exit_fd, POLLIN, 0}};
  ::poll(fds, 3, wait_ms);
  if (p.out[0] >= 0 && fds[0].revents != 0)
    take_output(p.out[0], result.out, spec.output_cap, result.out_dropped);
  if (p.err[0] >= 0 && fds[1].revents != 0)
    take_output(p.err[0], result.err, spec.output_cap, result.err_dropped);
}

// Ends the group: SIGTERM, then SIGKILL after `grace` (at once without
// one) to the group and to every descendant (also those that left the
// group). Returns the child's wait status.
int end_group(pid_t pid, std::chrono::milliseconds grace) {
  int status = 0;
  // Marked now: once the child is gone, its descendants are no longer
  // found as such (they were re-parented).
  auto tree = mark_descendants(pid);
  if (grace.count() > 0) {
    ::kill(-pid, SIGTERM);
    signal_marked(tree, SIGTERM);
    auto deadline = clock_type::now() + grace;
    while (clock_type::now() < deadline) {
      if (::waitpid(pid, &status, WNOHANG) == pid) {
        ::kill(-pid, SIGKILL); // What it left behind.
        signal_marked(tree, SIGKILL);
        return status;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds{10});
    }
  }
  end_process_tree(pid);
  ::kill(-pid, SIGKILL);
  signal_marked(tree, SIGKILL);
  ::waitpid(pid, &status, 0);
  return status;
}

// Whether the exec failed; `reason` gets why.
bool exec_failed(run_pipes& p, std::string& reason) {
  run_pipes::close_end(p.report[1]);
  child_report report;
  auto n = ::read(p.report[0], &report, sizeof(report));
  run_pipes::close_end(p.report[0]);
  if (n != static_cast<ssize_t>(sizeof(report)))
    return false;
  reason = std::strerror(report.code);
  if (report.step > 0 && report.step < static_cast<int>(std::size(child_steps)))
    reason = std::string{child_steps[report.step]} + ": " + reason;
  return true;
}

// Collects the output until the child exits, the deadline passes or
// `cancel` is set; ends the group either way.
void supervise(pid_t pid, run_pipes& p, const process_spec& spec,
               const std::atomic<bool>* cancel, process_result& result) {
  auto deadline = clock_type::now() + spec.timeout;
  // Wakes the loop the moment the child exits (where pidfds exist; else
  // the loop looks every 20 ms).
  auto exit_fd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  int status = 0;
  bool exited = false;
  while (!exited) {
    if (cancel != nullptr && cancel->load()) {
      result.cancelled = true;
      break;
    }
    if (clock_type::now() >= deadline) {
      result.timed_out = true;
      break;
    }
    read_ready(p, spec, result, 20, exit_fd);
    exited = ::waitpid(pid, &status, WNOHANG) == pid;
  }
  if (exit_fd >= 0)
    ::close(exit_fd);
  if (exited)
    ::kill(-pid, SIGKILL); // Whatever it left running in its group.
  else
    status = end_group(pid, spec.grace);
  run_children::remove(pid);
  end_process_tree(0); // What escaped the group and was orphaned.
  result.exit_code = exit_code_of(status);
  // The group is gone: what is left in the pipes is all there is.
  for (int i = 0; i < 100 && (p.out[0] >= 0 || p.err[0] >= 0); ++i)
    read_ready(p, spec, result, 10);
}

} // namespace

int exit_code_of(int wait_status) {
  if (WIFEXITED(wait_status))
    return WEXITSTATUS(wait_status);
  if (WIFSIGNALED(wait_status))
    return 128 + WTERMSIG(wait_status);
  return -1;
}

caf::expected<process_result> run_process(const process_spec& spec,
                                          const std::atomic<bool>* cancel) {
  if (spec.argv.empty() || spec.argv.front().empty())
    return caf::make_error(ec::config_invalid, "no command to run");
  auto started = clock_type::now();
  run_pipes p;
  if (!p.open())
    return caf::make_error(ec::unavailable,
                           "cannot start " + spec.argv.front()
                             + ": pipe: " + std::strerror(errno));
  exec_args args{spec};
  auto pid = spawn_child(args, p);
  if (pid < 0)
    return caf::make_error(ec::unavailable,
                           "cannot start " + spec.argv.front()
                             + ": vfork: " + std::strerror(errno));
  ::setpgid(pid, pid); // Also here: no window before the child's own call.
  run_pipes::close_end(p.out[1]);
  run_pipes::close_end(p.err[1]);
  std::string reason;
  if (exec_failed(p, reason)) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    run_children::remove(pid);
    return caf::make_error(ec::unavailable,
                           "cannot start " + spec.argv.front() + ": " + reason);
  }
  process_result result;
  supervise(pid, p, spec, cancel, result);
  result.took = std::chrono::duration_cast<std::chrono::milliseconds>(
    clock_type::now() - started);
  return result;
}

} // namespace keel
