#include "keel/process_tree.hpp"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <set>
#include <string>
#include <thread>
#include <utility>

#include <dirent.h>
#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

namespace keel {

namespace {

std::set<pid_t>& registered() {
  static auto* pids = new std::set<pid_t>;
  return *pids;
}

// What /proc/PID/stat says of a process.
struct stat_line {
  pid_t parent = -1;            // -1: gone.
  unsigned long long start = 0; // Clock ticks after boot.
};

stat_line read_stat(const std::string& pid) {
  std::string path = "/proc/" + pid + "/stat";
  auto fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return {};
  char buf[1024];
  auto n = ::read(fd, buf, sizeof(buf) - 1);
  ::close(fd);
  if (n <= 0)
    return {};
  buf[n] = '\0';
  // "PID (COMM) STATE PPID ...": COMM may hold anything, even ')'. The
  // start time is field 22, the 20th after COMM.
  auto end = std::strrchr(buf, ')');
  if (end == nullptr)
    return {};
  stat_line result;
  auto field = end + 2;
  for (int i = 0; i < 20 && field != nullptr; ++i) {
    if (i == 1)
      result.parent = static_cast<pid_t>(std::atol(field));
    if (i == 19)
      result.start = std::strtoull(field, nullptr, 10);
    field = std::strchr(field, ' ');
    field = field == nullptr ? nullptr : field + 1;
  }
  return result;
}

// Every process and its parent.
std::vector<std::pair<pid_t, pid_t>> process_parents() {
  std::vector<std::pair<pid_t, pid_t>> result;
  auto dir = ::opendir("/proc");
  if (dir == nullptr)
    return result;
  while (auto entry = ::readdir(dir)) {
    auto name = entry->d_name;
    if (*name < '1' || *name > '9')
      continue;
    if (auto stat = read_stat(name); stat.parent > 0)
      result.emplace_back(static_cast<pid_t>(std::atol(name)), stat.parent);
  }
  ::closedir(dir);
  return result;
}

std::vector<pid_t>
descendants_in(const std::vector<std::pair<pid_t, pid_t>>& parents,
               std::vector<pid_t> roots) {
  std::vector<pid_t> result;
  for (size_t i = 0; i < roots.size(); ++i)
    for (auto& [pid, parent] : parents)
      if (parent == roots[i]
          && std::find(roots.begin(), roots.end(), pid) == roots.end()) {
        roots.push_back(pid);
        result.push_back(pid);
      }
  return result;
}

// Our children that no live run registered, with `mutex()` held.
std::vector<pid_t>
orphans_in(const std::vector<std::pair<pid_t, pid_t>>& parents) {
  std::vector<pid_t> result;
  auto self = ::getpid();
  for (auto& [pid, parent] : parents)
    if (parent == self && !run_children::contains(pid))
      result.push_back(pid);
  return result;
}

// Reaps `orphans` (SIGKILLed), waiting up to 100 ms for each to die: a
// zombie left over is reaped by a later sweep.
void reap(const std::vector<pid_t>& orphans) {
  auto deadline = std::chrono::steady_clock::now()
                  + std::chrono::milliseconds{100};
  for (auto pid : orphans) {
    int status = 0;
    while (::waitpid(pid, &status, WNOHANG) == 0
           && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::microseconds{200});
  }
}

// One round of `end_process_tree`; returns the processes killed.
size_t kill_round(pid_t root, bool sweep) {
  std::lock_guard<std::mutex> guard{run_children::mutex()};
  auto parents = process_parents();
  auto orphans = sweep ? orphans_in(parents) : std::vector<pid_t>{};
  auto roots = orphans;
  if (root > 0) // Never 0: the kernel's threads have parent 0.
    roots.push_back(root);
  auto doomed = descendants_in(parents, roots);
  doomed.insert(doomed.end(), orphans.begin(), orphans.end());
  for (auto pid : doomed)
    ::kill(pid, SIGKILL);
  reap(orphans);
  return doomed.size();
}

} // namespace

bool become_child_subreaper() {
  return ::prctl(PR_SET_CHILD_SUBREAPER, 1) == 0;
}

bool is_child_subreaper() {
  int flag = 0;
  return ::prctl(PR_GET_CHILD_SUBREAPER, &flag) == 0 && flag != 0;
}

std::vector<pid_t> descendants_of(const std::vector<pid_t>& roots) {
  std::vector<pid_t> valid;
  std::copy_if(roots.begin(), roots.end(), std::back_inserter(valid),
               [](pid_t pid) { return pid > 0; });
  return descendants_in(process_parents(), std::move(valid));
}

std::vector<process_mark> mark_descendants(pid_t root) {
  std::vector<process_mark> result;
  for (auto pid : descendants_of({root}))
    result.push_back({pid, read_stat(std::to_string(pid)).start});
  return result;
}

void signal_marked(const std::vector<process_mark>& marks, int sig) {
  for (auto& mark : marks) {
    auto stat = read_stat(std::to_string(mark.pid));
    if (stat.parent > 0 && stat.start == mark.start)
      ::kill(mark.pid, sig);
  }
}

std::mutex& run_children::mutex() {
  static auto* instance = new std::mutex;
  return *instance;
}

void run_children::add(pid_t pid) {
  registered().insert(pid);
}

void run_children::remove(pid_t pid) {
  std::lock_guard<std::mutex> guard{mutex()};
  registered().erase(pid);
}

bool run_children::contains(pid_t pid) {
  return registered().count(pid) != 0;
}

size_t end_process_tree(pid_t root) {
  auto sweep = is_child_subreaper();
  if (root <= 0 && !sweep)
    return 0;
  size_t killed = 0;
  for (int round = 0; round < 8; ++round) {
    auto n = kill_round(root, sweep);
    if (n == 0)
      break;
    killed += n;
  }
  return killed;
}

} // namespace keel
