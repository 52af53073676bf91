#include "keel/tools/process.hpp"

#include "keel/run_process.hpp"

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <stdexcept>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;

namespace keel {

namespace {

using clock_type = std::chrono::steady_clock;

[[noreturn]] void fail(const std::string& what, int err = errno) {
  throw std::runtime_error(what + ": " + std::strerror(err));
}

// Our environment with `overrides` set, as "KEY=VALUE" strings.
std::vector<std::string> merged_environment(
  const std::vector<std::pair<std::string, std::string>>& overrides) {
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

// Pointers into `strings`, null-terminated, as execve wants them.
std::vector<char*> c_strings(std::vector<std::string>& strings) {
  std::vector<char*> result;
  for (auto& str : strings)
    result.push_back(str.data());
  result.push_back(nullptr);
  return result;
}

// The file descriptors a child gets as stdin, stdout and stderr.
struct child_fds {
  int in;
  int out;
  int err;
};

// Forks and execs `opts.argv` with `fds`. Everything the child needs is
// prepared before the fork: afterwards it only makes async-signal-safe
// calls. Returns the child's pid (throws when fork fails).
pid_t fork_exec(const child_options& opts, child_fds fds) {
  auto env = merged_environment(opts.env);
  auto envp = c_strings(env);
  auto args = opts.argv;
  auto argv = c_strings(args);
  auto parent = ::getpid();
  auto cwd = opts.cwd.empty() ? nullptr : opts.cwd.c_str();
  auto pid = ::fork();
  if (pid < 0)
    fail("fork");
  if (pid == 0) {
    // Die with the parent even if it aborts (a watchdog, a failed REQUIRE)
    // before any destructor runs; and if it died already.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent)
      ::_exit(126);
    if (opts.own_process_group)
      ::setpgid(0, 0);
    ::dup2(fds.in, STDIN_FILENO);
    ::dup2(fds.out, STDOUT_FILENO);
    ::dup2(fds.err, STDERR_FILENO);
    // Nothing else of ours: a node must not keep another node's sockets (a
    // proxied database connection, a listener) open after that one died.
    ::close_range(3, ~0U, 0);
    // Unblock signals the parent may have blocked.
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    if (cwd != nullptr && ::chdir(cwd) != 0)
      ::_exit(127);
    ::execve(argv[0], argv.data(), envp.data());
    static constexpr char msg[] = "exec failed\n";
    [[maybe_unused]] auto n = ::write(STDERR_FILENO, msg, sizeof(msg) - 1);
    ::_exit(127);
  }
  // Also from here, so that a kill right after the start reaches the whole
  // group even if the child has not run setpgid yet.
  if (opts.own_process_group)
    ::setpgid(pid, pid);
  return pid;
}

// Waits until `fd` has bytes (at most until `deadline`), then appends what
// one read returns to `out`; clears `open` at EOF. It returns with the
// first bytes, so a reader sees a line the moment it is written.
void read_some(int fd, std::string& out, clock_type::time_point deadline,
               bool& open) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                deadline - clock_type::now())
                .count();
  pollfd p{fd, POLLIN, 0};
  auto wait = static_cast<int>(
    std::min<long long>(left, std::numeric_limits<int>::max()));
  if (left <= 0 || ::poll(&p, 1, wait) <= 0)
    return;
  char buf[4096];
  auto got = ::read(fd, buf, sizeof(buf));
  if (got <= 0) {
    open = false;
    return;
  }
  out.append(buf, static_cast<size_t>(got));
}

// Waits until `pid` exits or `timeout` passes; true when it exited. Waits
// on a pidfd (an event), falling back to polling where there is none.
bool await_exit(pid_t pid, std::chrono::milliseconds timeout) {
  auto pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  if (pidfd < 0)
    return poll_until(
      [pid] {
        siginfo_t info{};
        return ::waitid(P_PID, static_cast<id_t>(pid), &info,
                        WEXITED | WNOHANG | WNOWAIT)
                 == 0
               && info.si_pid == pid;
      },
      timeout);
  pollfd p{pidfd, POLLIN, 0};
  auto ready = ::poll(&p, 1, static_cast<int>(timeout.count()));
  ::close(pidfd);
  return ready > 0;
}

} // namespace

uint16_t free_port() {
  auto fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    fail("socket");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0
      || ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    auto err = errno;
    ::close(fd);
    fail("bind to 127.0.0.1:0", err);
  }
  ::close(fd);
  return ntohs(addr.sin_port);
}

std::optional<std::string> find_in_path(const std::string& program) {
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

std::string own_executable() {
  char buf[4096];
  auto n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  return n <= 0 ? std::string{} : std::string{buf, static_cast<size_t>(n)};
}

std::string sibling_path(const std::string& path, const std::string& name) {
  return path.substr(0, path.rfind('/') + 1) + name;
}

std::string make_temp_dir(const std::string& prefix) {
  auto pattern
    = (std::filesystem::temp_directory_path() / (prefix + "-XXXXXX")).string();
  if (::mkdtemp(pattern.data()) == nullptr)
    throw std::runtime_error("cannot create a folder " + pattern + ": "
                             + std::strerror(errno));
  return pattern;
}

std::string read_text_file(const std::string& path) {
  std::ifstream in{path};
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// -- child_process ------------------------------------------------------------

child_process::child_process(child_options opts) : opts_(std::move(opts)) {
  if (opts_.argv.empty())
    throw std::runtime_error("child_process: empty argv");
  auto null_fd = ::open("/dev/null", O_RDWR | O_CLOEXEC);
  if (null_fd < 0)
    fail("child_process: cannot open /dev/null");
  auto log_fd = opts_.log_path.empty()
                  ? null_fd
                  : ::open(opts_.log_path.c_str(),
                           O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  int out[2] = {-1, -1};
  if (log_fd < 0 || (opts_.capture_stdout && ::pipe2(out, O_CLOEXEC) != 0)) {
    auto err = errno;
    ::close(null_fd);
    if (log_fd >= 0 && log_fd != null_fd)
      ::close(log_fd);
    fail("child_process: cannot open "
           + (log_fd < 0 ? opts_.log_path : std::string{"a pipe"}),
         err);
  }
  try {
    pid_ = fork_exec(opts_,
                     {null_fd, opts_.capture_stdout ? out[1] : log_fd, log_fd});
  } catch (...) {
    for (auto fd : {out[0], out[1]})
      if (fd >= 0)
        ::close(fd);
    pid_ = -1;
  }
  if (out[1] >= 0)
    ::close(out[1]);
  stdout_fd_ = out[0];
  if (log_fd != null_fd)
    ::close(log_fd);
  ::close(null_fd);
  if (pid_ < 0)
    fail("child_process: fork");
}

child_process::~child_process() {
  kill();
  if (stdout_fd_ >= 0)
    ::close(stdout_fd_);
}

bool child_process::running() {
  if (pid_ <= 0)
    return false;
  int status = 0;
  if (::waitpid(pid_, &status, WNOHANG) == pid_) {
    record(status);
    return false;
  }
  return true;
}

std::optional<int> child_process::exit_code() {
  running();
  return exit_code_;
}

void child_process::kill() {
  if (pid_ <= 0)
    return;
  if (opts_.own_process_group)
    ::kill(-pid_, SIGKILL);
  ::kill(pid_, SIGKILL);
  int status = 0;
  ::waitpid(pid_, &status, 0);
  record(status);
}

int child_process::terminate(std::chrono::milliseconds grace) {
  return terminate(grace, grace);
}

int child_process::terminate(std::chrono::milliseconds grace,
                             std::chrono::milliseconds every) {
  if (pid_ <= 0)
    return exit_code_.value_or(-1);
  auto deadline = clock_type::now() + grace;
  bool exited = false;
  while (!exited && clock_type::now() < deadline) {
    // One signal a round (a group's signal reaches its leader too): a Keel
    // node takes a second SIGTERM as "stop now".
    if (!opts_.own_process_group || ::kill(-pid_, SIGTERM) != 0)
      ::kill(pid_, SIGTERM);
    exited = await_exit(
      pid_,
      std::min(every, std::chrono::duration_cast<std::chrono::milliseconds>(
                        deadline - clock_type::now())));
  }
  if (!exited)
    kill();
  if (pid_ > 0) {
    int status = 0;
    ::waitpid(pid_, &status, 0);
    record(status);
  }
  return exit_code_.value_or(-1);
}

std::optional<std::string>
child_process::read_stdout_line(const std::string& marker,
                                std::chrono::milliseconds timeout) {
  if (stdout_fd_ < 0)
    return std::nullopt;
  std::string text;
  bool open = true;
  auto deadline = clock_type::now() + timeout;
  auto complete = [&] {
    auto at = text.find(marker);
    return at != std::string::npos && text.find('\n', at) != std::string::npos;
  };
  while (open && clock_type::now() < deadline && !complete())
    read_some(stdout_fd_, text, deadline, open);
  ::close(stdout_fd_);
  stdout_fd_ = -1;
  if (!complete())
    return std::nullopt;
  auto start = text.find(marker) + marker.size();
  return text.substr(start, text.find('\n', start) - start);
}

std::string child_process::log() const {
  return opts_.log_path.empty() ? std::string{}
                                : read_text_file(opts_.log_path);
}

void child_process::record(int status) {
  exit_code_ = exit_code_of(status);
  pid_ = -1;
}

// -- run_command --------------------------------------------------------------

command_result run_command(const std::vector<std::string>& argv,
                           std::chrono::seconds timeout) {
  process_spec spec;
  spec.argv = argv;
  spec.timeout = timeout;
  spec.grace = std::chrono::milliseconds{0};
  auto ran = run_process(spec);
  if (!ran) // As a shell says it: the program could not be run.
    return {127, "", error_message(ran.error()) + "\n"};
  return {ran->exit_code, std::move(ran->out), std::move(ran->err)};
}

} // namespace keel
