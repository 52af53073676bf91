#include "keel/tools/pg_server.hpp"

#include <algorithm>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <vector>

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>

#include "keel/tools/process.hpp"

namespace keel {

namespace {

/// Whether the PostgreSQL tools must run as `postgres` (we are root).
bool as_postgres() {
  return ::geteuid() == 0;
}

/// The path of `program` on $PATH (run_command does not search it).
std::string program(const std::string& name) {
  auto path = find_in_path(name);
  if (!path)
    throw std::runtime_error("pg_server: " + name + " is not on PATH");
  return *path;
}

} // namespace

std::string pg_server::bin_dir() {
  namespace fs = std::filesystem;
  std::string best;
  if (fs::exists("/usr/lib/postgresql"))
    for (auto& entry : fs::directory_iterator{"/usr/lib/postgresql"})
      if (fs::exists(entry.path() / "bin" / "pg_ctl")
          && entry.path().string() > best)
        best = entry.path().string();
  if (best.empty())
    throw std::runtime_error("pg_server: no PostgreSQL under "
                             "/usr/lib/postgresql (scripts/setup installs it)");
  return best + "/bin";
}

pg_server::pg_server(std::string dir)
  : dir_(std::move(dir)),
    socket_dir_(dir_ + "/socket"),
    data_dir_(dir_ + "/pgdata"),
    port_(free_port()) {
  std::filesystem::create_directories(socket_dir_);
  if (as_postgres())
    run_command({program("chown"), "-R", "postgres:postgres", dir_});
  run_tool({bin_dir() + "/initdb", "-D", data_dir_, "-U", "keel", "-A", "trust",
            "-E", "UTF8", "--no-instructions"});
  start();
  start_watchdog();
  run_tool({bin_dir() + "/createdb", "-h", socket_dir_, "-p",
            std::to_string(port_), "-U", "keel", "keel"});
}

pg_server::~pg_server() {
  try {
    if (running())
      stop();
  } catch (...) {
    kill9();
  }
  if (watchdog_fd_ >= 0) {
    ::close(watchdog_fd_);
    ::waitpid(watchdog_, nullptr, 0);
  }
}

void pg_server::start_watchdog() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0)
    throw std::runtime_error("pg_server: cannot create the watchdog's pipe");
  // Built before the fork: the child may only make system calls.
  auto pid_path = data_dir_ + "/postmaster.pid";
  auto child = ::fork();
  if (child < 0)
    throw std::runtime_error("pg_server: cannot fork the watchdog");
  if (child == 0) {
    // Holds nothing of ours but the pipe (a test waiting for the end of
    // one of its pipes must not wait for the watchdog).
    ::dup2(fds[0], 3);
    ::close_range(4, ~0U, 0);
    int null_fd = ::open("/dev/null", O_RDWR);
    for (int fd = 0; fd < 3; ++fd)
      ::dup2(null_fd, fd);
    char byte;
    while (::read(3, &byte, 1) < 0 && errno == EINTR)
      continue;
    char text[32] = {};
    int pid_fd = ::open(pid_path.c_str(), O_RDONLY);
    if (pid_fd >= 0 && ::read(pid_fd, text, sizeof(text) - 1) > 0) {
      pid_t pid = 0;
      for (char* c = text; *c >= '0' && *c <= '9'; ++c)
        pid = pid * 10 + (*c - '0');
      if (pid > 0)
        ::kill(pid, SIGQUIT);
    }
    ::_exit(0);
  }
  ::close(fds[0]);
  watchdog_fd_ = fds[1];
  watchdog_ = child;
}

std::string pg_server::url(const std::string& database) const {
  return "postgresql:///" + database + "?host=" + socket_dir_
         + "&port=" + std::to_string(port_) + "&user=keel";
}

void pg_server::start() {
  run_tool({bin_dir() + "/pg_ctl", "start", "-w", "-t", "60", "-D", data_dir_,
            "-l", dir_ + "/server.log", "-o",
            "-k " + socket_dir_ + " -p " + std::to_string(port_)
              + " -c listen_addresses=127.0.0.1"});
}

void pg_server::stop() {
  run_tool(
    {bin_dir() + "/pg_ctl", "stop", "-w", "-m", "fast", "-D", data_dir_});
}

namespace {

/// The pids of the processes whose parent is `parent` (from /proc).
std::vector<pid_t> pg_children_of(pid_t parent) {
  std::vector<pid_t> result;
  for (auto& entry : std::filesystem::directory_iterator{"/proc"}) {
    auto name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos)
      continue;
    // /proc/PID/stat: "PID (COMM) STATE PPID ..."; COMM may hold spaces.
    auto stat = read_text_file(entry.path().string() + "/stat");
    auto close = stat.rfind(')');
    if (close == std::string::npos)
      continue;
    std::istringstream rest{stat.substr(close + 1)};
    std::string state;
    pid_t ppid = 0;
    if (rest >> state >> ppid && ppid == parent)
      result.push_back(static_cast<pid_t>(std::stol(name)));
  }
  return result;
}

} // namespace

/// Kills the postmaster and every backend at once, as a crash of the
/// machine's database would: no backend outlives it to answer.
void pg_server::kill9() {
  std::ifstream pid_file{data_dir_ + "/postmaster.pid"};
  pid_t pid = 0;
  if (!(pid_file >> pid) || pid <= 0)
    return;
  // The backends first: none is left to notice the postmaster's death and
  // say goodbye to its client.
  auto all = pg_children_of(pid);
  all.push_back(pid);
  for (auto p : all)
    ::kill(p, SIGKILL);
  // Gone once /proc forgets them (their parent reaped them): a start right
  // after must not find one still attached to the shared memory.
  poll_until(
    [&] {
      return std::none_of(all.begin(), all.end(), [](pid_t p) {
        return std::filesystem::exists("/proc/" + std::to_string(p));
      });
    },
    std::chrono::seconds{10});
}

bool pg_server::running() const {
  return tool_result({bin_dir() + "/pg_ctl", "status", "-D", data_dir_})
           .exit_code
         == 0;
}

command_result
pg_server::tool_result(const std::vector<std::string>& argv) const {
  std::vector<std::string> cmd;
  if (as_postgres())
    cmd = {program("runuser"), "-u", "postgres", "--"};
  cmd.insert(cmd.end(), argv.begin(), argv.end());
  return run_command(cmd, std::chrono::seconds{120});
}

void pg_server::run_tool(const std::vector<std::string>& argv) const {
  auto res = tool_result(argv);
  if (res.exit_code != 0)
    throw std::runtime_error("pg_server: " + argv.front() + " failed ("
                             + std::to_string(res.exit_code) + "): " + res.out
                             + res.err);
}

} // namespace keel
