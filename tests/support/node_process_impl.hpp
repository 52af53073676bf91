#pragma once

// Header-only implementation of node_process.hpp (the test binaries are the
// only users).

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include <fcntl.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "keel/protocol.hpp"

namespace keel::test {

inline std::string node_binary() {
  if (auto path = std::getenv("KEEL_NODE_BINARY"))
    return path;
  throw std::runtime_error("KEEL_NODE_BINARY is not set (run through ctest)");
}

inline std::string tool_binary(const std::string& name) {
  auto node = node_binary();
  return node.substr(0, node.rfind('/') + 1) + name;
}

namespace detail {

inline std::string read_file(const std::string& path) {
  std::ifstream in{path};
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Reads everything from `fd` until EOF or the deadline.
inline void drain_fd(int fd, std::string& out,
                     std::chrono::steady_clock::time_point deadline,
                     bool& open) {
  char buf[4096];
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                  deadline - std::chrono::steady_clock::now())
                  .count();
    if (left <= 0)
      return;
    pollfd p{fd, POLLIN, 0};
    auto n = ::poll(&p, 1, static_cast<int>(std::min<long>(left, 100)));
    if (n <= 0)
      return;
    auto got = ::read(fd, buf, sizeof(buf));
    if (got <= 0) {
      open = false;
      return;
    }
    out.append(buf, static_cast<size_t>(got));
  }
}

inline pid_t spawn(const std::vector<std::string>& argv, int out_fd,
                   int err_fd) {
  std::vector<char*> args;
  for (auto& a : argv)
    args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  auto pid = ::fork();
  if (pid == 0) {
    // Die with the test process even if it aborts (watchdog, failed
    // REQUIRE) before its destructors run: no node outlives its test.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    ::dup2(out_fd, STDOUT_FILENO);
    ::dup2(err_fd, STDERR_FILENO);
    // Unblock signals the parent may have blocked.
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    ::execv(args[0], args.data());
    std::fprintf(stderr, "exec %s failed: %s\n", args[0], std::strerror(errno));
    ::_exit(127);
  }
  return pid;
}

} // namespace detail

inline command_result run_command(const std::vector<std::string>& argv,
                                  std::chrono::seconds timeout) {
  int out[2];
  int err[2];
  if (::pipe(out) != 0 || ::pipe(err) != 0)
    throw std::runtime_error("pipe failed");
  auto pid = detail::spawn(argv, out[1], err[1]);
  ::close(out[1]);
  ::close(err[1]);
  command_result result;
  auto deadline = std::chrono::steady_clock::now() + timeout;
  bool out_open = true;
  bool err_open = true;
  while ((out_open || err_open)
         && std::chrono::steady_clock::now() < deadline) {
    if (out_open)
      detail::drain_fd(out[0], result.out,
                       std::chrono::steady_clock::now()
                         + std::chrono::milliseconds{50},
                       out_open);
    if (err_open)
      detail::drain_fd(err[0], result.err,
                       std::chrono::steady_clock::now()
                         + std::chrono::milliseconds{50},
                       err_open);
  }
  if (out_open || err_open)
    ::kill(pid, SIGKILL);
  int status = 0;
  ::waitpid(pid, &status, 0);
  ::close(out[0]);
  ::close(err[0]);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status)
                                       : 128 + WTERMSIG(status);
  return result;
}

inline std::string data_violations(const std::string& data_dir) {
  auto res = run_command({tool_binary("keelctl"), "verify", "--data-dir",
                          data_dir});
  if (res.exit_code == 0)
    return {};
  return "keelctl verify exited with " + std::to_string(res.exit_code) + ":\n"
         + res.out + res.err;
}

inline node_process::node_process(std::string dir, std::string yaml)
  : dir_(std::move(dir)) {
  config_path_ = dir_ + "/node.yaml";
  stderr_path_ = dir_ + "/node.stderr";
  std::ofstream{config_path_} << yaml;
  auto pos = yaml.find("token:");
  if (pos != std::string::npos) {
    auto line = yaml.substr(pos + 6, yaml.find('\n', pos) - pos - 6);
    line.erase(0, line.find_first_not_of(" \"'"));
    line.erase(line.find_last_not_of(" \"'") + 1);
    token_ = line;
  }
  start();
}

inline node_process::~node_process() {
  if (pid_ > 0)
    kill9();
}

inline void node_process::start() {
  int out[2];
  if (::pipe(out) != 0)
    throw std::runtime_error("pipe failed");
  auto err_fd = ::open(stderr_path_.c_str(), O_WRONLY | O_CREAT | O_APPEND,
                       0644);
  pid_ = detail::spawn({node_binary(), "--config", config_path_}, out[1],
                       err_fd);
  ::close(out[1]);
  ::close(err_fd);
  ++starts_;
  std::string text;
  bool open = true;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds{60};
  const std::string marker = "listening on ";
  while (open && std::chrono::steady_clock::now() < deadline
         && text.find('\n', text.find(marker)) == std::string::npos)
    detail::drain_fd(out[0], text,
                     std::chrono::steady_clock::now()
                       + std::chrono::milliseconds{100},
                     open);
  ::close(out[0]); // The node writes nothing else to stdout.
  auto at = text.find(marker);
  if (at == std::string::npos) {
    kill9();
    throw std::runtime_error("keel-node did not start: "
                             + detail::read_file(stderr_path_));
  }
  auto line = text.substr(at + marker.size());
  port_ = static_cast<uint16_t>(
    std::stoi(line.substr(line.rfind(':') + 1)));
}

inline void node_process::kill9() {
  if (pid_ <= 0)
    return;
  ::kill(pid_, SIGKILL);
  int status = 0;
  ::waitpid(pid_, &status, 0);
  pid_ = -1;
}

inline int node_process::stop() {
  if (pid_ <= 0)
    return -1;
  // Wait for the exit as an event (a pidfd becomes readable), not by polling.
  auto pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid_, 0));
  ::kill(pid_, SIGTERM);
  if (pidfd >= 0) {
    pollfd p{pidfd, POLLIN, 0};
    auto ready = ::poll(&p, 1, 30'000);
    ::close(pidfd);
    if (ready <= 0) {
      kill9();
      return -1;
    }
  }
  int status = 0;
  ::waitpid(pid_, &status, 0);
  pid_ = -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

inline bool node_process::running() {
  if (pid_ <= 0)
    return false;
  int status = 0;
  if (::waitpid(pid_, &status, WNOHANG) == pid_) {
    pid_ = -1;
    return false;
  }
  return true;
}

inline endpoint node_process::address() const {
  endpoint ep;
  ep.host = "127.0.0.1";
  ep.port = port_;
  ep.token = token_;
  return ep;
}

inline std::string node_process::stderr_text() const {
  return detail::read_file(stderr_path_);
}

inline std::string slow_echo_yaml(const std::string& name,
                                  const std::string& data_dir,
                                  const std::string& delay,
                                  const std::string& extra) {
  return "node:\n  name: " + name + "\n  data_dir: " + data_dir
         + "\ngateway:\n  port: 0\n"
           "providers:\n"
           "  - name: slow-echo\n    kind: scripted\n"
           "    script:\n      - reply: \"answer to {input}\"\n"
           "        delay: "
         + delay
         + "\n"
           "pools:\n  - name: default\n    chain: [slow-echo]\n"
         + extra;
}

inline std::unique_ptr<ws_client> connect_client(const endpoint& ep) {
  auto client = ws_client::connect(ep);
  if (!client)
    throw std::runtime_error("cannot connect: " + render(client.error()));
  auto hello = (*client)->receive();
  if (!hello)
    throw std::runtime_error("no hello: " + render(hello.error()));
  return std::move(*client);
}

template <class Pred>
std::optional<nlohmann::json>
receive_until(ws_client& client, Pred pred,
              std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0)
      return std::nullopt;
    auto msg = client.receive(left);
    if (!msg)
      return std::nullopt;
    auto json = nlohmann::json::parse(msg->payload, nullptr, false);
    if (!json.is_discarded() && pred(json))
      return json;
  }
}

inline std::optional<nlohmann::json>
read_history(ws_client& client, const std::string& thread,
             std::chrono::milliseconds timeout) {
  if (client.send_text(
        protocol::history_request_frame(thread, "h-" + thread, 0, 1000)))
    return std::nullopt;
  auto page = receive_until(
    client,
    [&](auto& j) { return j["type"] == "history" && j["thread"] == thread; },
    timeout);
  if (!page)
    return std::nullopt;
  return std::move((*page)["entries"]);
}

} // namespace keel::test
