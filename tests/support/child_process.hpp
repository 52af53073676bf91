#pragma once

// Child processes for tests: started with fork/exec in their own process
// group, with extra environment variables and their output in a log file;
// they die with the test process (PR_SET_PDEATHSIG) even if it aborts, and
// are always killed (the whole group) when the object goes away. Plus the
// small tools that go with them: a free port, polling with a bound.
//
// Header-only (the test binaries are the only users).

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;

namespace keel::test {

/// A TCP port on 127.0.0.1 that was free a moment ago (the kernel picked it
/// for a socket bound to port 0, which is closed again). For programs that
/// cannot listen on port 0 and report the port they got; a child that finds
/// it taken after all fails to start, so callers retry with another one.
inline uint16_t free_port() {
  auto fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    throw std::runtime_error(std::string{"socket: "} + std::strerror(errno));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0
      || ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    auto err = errno;
    ::close(fd);
    throw std::runtime_error(std::string{"bind to 127.0.0.1:0: "}
                             + std::strerror(err));
  }
  ::close(fd);
  return ntohs(addr.sin_port);
}

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
inline std::optional<std::string> find_in_path(const std::string& program) {
  if (program.find('/') != std::string::npos)
    return ::access(program.c_str(), X_OK) == 0
             ? std::optional<std::string>{program}
             : std::nullopt;
  auto path = std::getenv("PATH");
  std::stringstream dirs{path ? path : "/usr/local/bin:/usr/bin:/bin"};
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    auto candidate = (dir.empty() ? std::string{"."} : dir) + "/" + program;
    if (::access(candidate.c_str(), X_OK) == 0)
      return candidate;
  }
  return std::nullopt;
}

/// How to start a child_process.
struct child_options {
  /// The command; argv[0] is the program's path (no $PATH search: see
  /// find_in_path). Scripts with a `#!` line are fine.
  std::vector<std::string> argv;
  /// Environment variables to set (or override) on top of ours.
  std::vector<std::pair<std::string, std::string>> env;
  /// Working directory; empty for ours.
  std::string cwd;
  /// The child's stdout and stderr are appended to this file; empty for
  /// /dev/null. (A file, not a pipe: a chatty child never blocks on a full
  /// pipe nor dies of a closed one.) Its stdin is /dev/null.
  std::string log_path;
  /// Put the child in a new process group (its id is the child's pid), so
  /// that killing it kills whatever it started too.
  bool own_process_group = true;
};

namespace child_detail {

inline std::string read_whole_file(const std::string& path) {
  std::ifstream in{path};
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Our environment with `overrides` set, as "KEY=VALUE" strings.
inline std::vector<std::string>
merged_environment(const std::vector<std::pair<std::string, std::string>>&
                     overrides) {
  std::vector<std::string> result;
  for (auto e = environ; e != nullptr && *e != nullptr; ++e) {
    std::string entry{*e};
    auto key = entry.substr(0, entry.find('='));
    auto overridden = std::any_of(overrides.begin(), overrides.end(),
                                  [&](auto& kv) { return kv.first == key; });
    if (!overridden)
      result.push_back(std::move(entry));
  }
  for (auto& [key, value] : overrides)
    result.push_back(key + "=" + value);
  return result;
}

} // namespace child_detail

/// A running child process; see the top of this file.
class child_process {
public:
  /// Starts the child. Throws std::runtime_error if it cannot be forked or
  /// the log file cannot be opened; a failing exec shows as exit code 127
  /// with the reason in the log.
  explicit child_process(child_options opts) : opts_(std::move(opts)) {
    if (opts_.argv.empty())
      throw std::runtime_error("child_process: empty argv");
    // Everything the child needs is prepared here: after fork it only makes
    // async-signal-safe calls.
    auto env = child_detail::merged_environment(opts_.env);
    std::vector<char*> envp;
    for (auto& e : env)
      envp.push_back(e.data());
    envp.push_back(nullptr);
    std::vector<char*> argv;
    for (auto& a : opts_.argv)
      argv.push_back(a.data());
    argv.push_back(nullptr);
    auto null_fd = ::open("/dev/null", O_RDWR | O_CLOEXEC);
    auto log_fd = opts_.log_path.empty()
                    ? null_fd
                    : ::open(opts_.log_path.c_str(),
                             O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (null_fd < 0 || log_fd < 0) {
      auto err = errno;
      if (null_fd >= 0)
        ::close(null_fd);
      throw std::runtime_error("child_process: cannot open "
                               + (log_fd < 0 ? opts_.log_path
                                             : std::string{"/dev/null"})
                               + ": " + std::strerror(err));
    }
    auto parent = ::getpid();
    auto cwd = opts_.cwd.empty() ? nullptr : opts_.cwd.c_str();
    auto own_group = opts_.own_process_group;
    pid_ = ::fork();
    if (pid_ == 0) {
      // Die with the test process even if it aborts (watchdog, failed
      // REQUIRE) before any destructor runs; and if it died already.
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent)
        ::_exit(126);
      if (own_group)
        ::setpgid(0, 0);
      ::dup2(null_fd, STDIN_FILENO);
      ::dup2(log_fd, STDOUT_FILENO);
      ::dup2(log_fd, STDERR_FILENO);
      sigset_t none;
      sigemptyset(&none);
      ::sigprocmask(SIG_SETMASK, &none, nullptr);
      if (cwd != nullptr && ::chdir(cwd) != 0)
        ::_exit(127);
      ::execve(argv[0], argv.data(), envp.data());
      static constexpr char msg[] = "child_process: exec failed\n";
      [[maybe_unused]] auto n = ::write(STDERR_FILENO, msg, sizeof(msg) - 1);
      ::_exit(127);
    }
    auto fork_errno = errno;
    if (log_fd != null_fd)
      ::close(log_fd);
    ::close(null_fd);
    if (pid_ < 0)
      throw std::runtime_error(std::string{"fork: "}
                               + std::strerror(fork_errno));
    // Also from here, so that a kill right after the constructor reaches
    // the whole group even if the child has not run setpgid yet.
    if (opts_.own_process_group)
      ::setpgid(pid_, pid_);
  }

  ~child_process() {
    kill();
  }

  child_process(const child_process&) = delete;
  child_process& operator=(const child_process&) = delete;

  pid_t pid() const {
    return pid_;
  }

  /// True while the child runs (reaps it once it has exited).
  bool running() {
    if (pid_ <= 0)
      return false;
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      record(status);
      return false;
    }
    return true;
  }

  /// The exit code once the child has exited (128 + N for a signal N).
  std::optional<int> exit_code() {
    running();
    return exit_code_;
  }

  /// SIGKILL to the child (and its process group), then reap it. Safe to
  /// call more than once.
  void kill() {
    if (pid_ <= 0)
      return;
    if (opts_.own_process_group)
      ::kill(-pid_, SIGKILL);
    ::kill(pid_, SIGKILL);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    record(status);
  }

  /// SIGTERM to the child (and its process group); SIGKILL if it has not
  /// exited after `grace`. Returns the exit code.
  int terminate(std::chrono::milliseconds grace = std::chrono::seconds{5}) {
    if (pid_ <= 0)
      return exit_code_.value_or(-1);
    // Wait for the exit as an event (a pidfd becomes readable).
    auto pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid_, 0));
    if (opts_.own_process_group)
      ::kill(-pid_, SIGTERM);
    ::kill(pid_, SIGTERM);
    if (pidfd >= 0) {
      pollfd p{pidfd, POLLIN, 0};
      auto ready = ::poll(&p, 1, static_cast<int>(grace.count()));
      ::close(pidfd);
      if (ready <= 0)
        kill();
    } else if (!poll_until([this] { return !running(); }, grace)) {
      kill();
    }
    if (pid_ > 0) {
      int status = 0;
      ::waitpid(pid_, &status, 0);
      record(status);
    }
    return exit_code_.value_or(-1);
  }

  /// Everything the child wrote to its log so far ("" without a log).
  std::string log() const {
    return opts_.log_path.empty() ? std::string{}
                                  : child_detail::read_whole_file(
                                    opts_.log_path);
  }

  const child_options& options() const {
    return opts_;
  }

private:
  void record(int status) {
    exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status)
                                   : 128 + WTERMSIG(status);
    pid_ = -1;
  }

  child_options opts_;
  pid_t pid_ = -1;
  std::optional<int> exit_code_;
};

} // namespace keel::test
