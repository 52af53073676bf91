// The node's sd_notify conversation with a service manager
// (packaging/keel-node.service: Type=notify, NotifyAccess=main,
// WatchdogSec=). The test plays systemd: it binds a unix datagram socket,
// starts keel-node with NOTIFY_SOCKET naming it and WATCHDOG_USEC=600000
// (WATCHDOG_PID unset, which sd_watchdog_enabled accepts), and a thread
// of its own stamps every datagram as it arrives. It checks that
//   - READY=1 comes once, when the node serves (STATUS= lines may come
//     before and with it);
//   - WATCHDOG=1 follows READY=1 and then comes regularly: never 0.6 s
//     (WATCHDOG_USEC) without one, about every 0.3 s (WATCHDOG_USEC / 2);
//   - an orchestrator wedged for 2 s (POST /api/v1/chaos/wedge, which
//     answers at once) stops the pings for at least 1.5 s and turns
//     /healthz to 503, and both recover once it answers again;
//   - SIGTERM brings STOPPING=1, then exit code 0;
//   - every datagram comes from the node's own pid (NotifyAccess=main) and
//     is made of KEY=VALUE lines.

#define CAF_SUITE service_notify

#include <caf/test/unit_test.hpp>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/un.h>
#include <unistd.h>

#include "node_client.hpp"
#include "temp_dir.hpp"

#include "keel/protocol.hpp"

using namespace keel;
using namespace keel::test;
using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;
using time_point = clock_type::time_point;

namespace {

// What the test tells the node, and what it expects of it.
constexpr auto watchdog_usec = 600'000;
constexpr auto watchdog_interval = std::chrono::microseconds{watchdog_usec};
// The node pings after every successful check of its tree, and checks
// every min(1 s, WATCHDOG_USEC / 2) = 0.3 s: the mean gap may exceed that
// by the checks' own time and the scheduler's jitter on a busy machine.
constexpr auto mean_gap_limit = 450ms;
constexpr auto wedge_ms = 2000;
constexpr auto wedge_silence = 1500ms;
constexpr auto admin_token = "admin-5e1f07";

long long ms(clock_type::duration d) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(d).count();
}

// One datagram the node sent, stamped on arrival.
struct notice {
  size_t index = 0;
  time_point at;
  pid_t pid = -1; // the sender, from SCM_CREDENTIALS
  bool truncated = false;
  bool well_formed = true; // every non-empty line is KEY=VALUE
  std::string raw;
  std::vector<std::pair<std::string, std::string>> fields;

  // True if one of its lines is `assignment` (e.g. "READY=1").
  bool has(const std::string& assignment) const {
    auto eq = assignment.find('=');
    auto key = assignment.substr(0, eq);
    auto value = assignment.substr(eq + 1);
    return std::any_of(fields.begin(), fields.end(), [&](auto& kv) {
      return kv.first == key && kv.second == value;
    });
  }

  bool is_ping() const {
    return has("WATCHDOG=1");
  }
};

void parse_fields(notice& n) {
  std::istringstream in{n.raw};
  for (std::string line; std::getline(in, line);) {
    if (line.empty())
      continue;
    auto eq = line.find('=');
    if (eq == std::string::npos || eq == 0) {
      n.well_formed = false;
      continue;
    }
    n.fields.emplace_back(line.substr(0, eq), line.substr(eq + 1));
  }
}

// The service manager's end: a unix datagram socket at `path` and a thread
// that receives (poll on the socket and on a stop eventfd, no timeouts)
// and records every datagram with its arrival time and sender. Receiving at
// once matters: a unix datagram socket holds only a few unread datagrams
// (net.unix.max_dgram_qlen) before the sender blocks or fails.
class notify_socket {
public:
  explicit notify_socket(std::string path) : path_(std::move(path)) {
    sockaddr_un addr{};
    if (path_.size() >= sizeof(addr.sun_path))
      throw std::runtime_error("socket path too long: " + path_);
    addr.sun_family = AF_UNIX;
    std::memcpy(addr.sun_path, path_.c_str(), path_.size() + 1);
    fd_ = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    stop_fd_ = ::eventfd(0, EFD_CLOEXEC);
    int on = 1;
    if (fd_ < 0 || stop_fd_ < 0
        || ::setsockopt(fd_, SOL_SOCKET, SO_PASSCRED, &on, sizeof(on)) != 0
        || ::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0)
      throw std::runtime_error("cannot bind " + path_ + ": "
                               + std::strerror(errno));
    reader_ = std::thread{[this] { run(); }};
  }

  ~notify_socket() {
    uint64_t one = 1;
    if (::write(stop_fd_, &one, sizeof(one)) < 0) {
      // The thread would never end: nothing better to do than leave it.
      reader_.detach();
    } else {
      reader_.join();
    }
    ::close(fd_);
    ::close(stop_fd_);
    ::unlink(path_.c_str());
  }

  notify_socket(const notify_socket&) = delete;
  notify_socket& operator=(const notify_socket&) = delete;

  const std::string& path() const {
    return path_;
  }

  // Waits for the first notice from index `from` on that satisfies `pred`;
  // std::nullopt if none has come by `deadline`.
  template <class Pred>
  std::optional<notice> wait_for(Pred pred, size_t from, time_point deadline) {
    std::unique_lock<std::mutex> guard{mtx_};
    size_t i = from;
    std::optional<notice> found;
    cv_.wait_until(guard, deadline, [&] {
      for (; i < notices_.size(); ++i)
        if (pred(notices_[i])) {
          found = notices_[i];
          return true;
        }
      return false;
    });
    return found;
  }

  // The first notice from index `from` on with the line `assignment`.
  std::optional<notice> wait_for_line(const std::string& assignment,
                                      size_t from, time_point deadline) {
    return wait_for([&](const notice& n) { return n.has(assignment); }, from,
                    deadline);
  }

  std::vector<notice> all() const {
    std::lock_guard<std::mutex> guard{mtx_};
    return notices_;
  }

  // Every notice, one line each, times relative to `origin`.
  std::string timeline(time_point origin) const {
    std::ostringstream out;
    for (auto& n : all()) {
      auto raw = n.raw;
      std::replace(raw.begin(), raw.end(), '\n', '|');
      out << "  +" << ms(n.at - origin) << " ms pid " << n.pid << ": " << raw
          << (n.truncated ? " (truncated)" : "") << '\n';
    }
    return out.str();
  }

private:
  void run() {
    pollfd fds[2] = {{fd_, POLLIN, 0}, {stop_fd_, POLLIN, 0}};
    for (;;) {
      if (::poll(fds, 2, -1) < 0 && errno != EINTR)
        return;
      if (fds[1].revents != 0)
        return;
      if (fds[0].revents != 0)
        while (receive_one()) {
          // Drain everything that is queued.
        }
    }
  }

  // Receives one datagram if one is queued; false when none is.
  bool receive_one() {
    char buf[4096];
    alignas(cmsghdr) char
      control[CMSG_SPACE(sizeof(ucred)) + CMSG_SPACE(sizeof(int) * 16)];
    iovec iov{buf, sizeof(buf)};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    auto n = ::recvmsg(fd_, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
    if (n < 0)
      return errno == EINTR;
    notice item;
    item.at = clock_type::now();
    item.truncated = (msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) != 0;
    for (auto c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c))
      if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_CREDENTIALS) {
        ucred cred;
        std::memcpy(&cred, CMSG_DATA(c), sizeof(cred));
        item.pid = cred.pid;
      } else if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
        auto count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t k = 0; k < count; ++k) {
          int fd;
          std::memcpy(&fd, CMSG_DATA(c) + k * sizeof(int), sizeof(int));
          ::close(fd);
        }
      }
    item.raw.assign(buf, static_cast<size_t>(n));
    parse_fields(item);
    {
      std::lock_guard<std::mutex> guard{mtx_};
      item.index = notices_.size();
      notices_.push_back(std::move(item));
    }
    cv_.notify_all();
    return true;
  }

  std::string path_;
  int fd_ = -1;
  int stop_fd_ = -1;
  std::thread reader_;
  mutable std::mutex mtx_;
  std::condition_variable cv_;
  std::vector<notice> notices_;
};

std::string node_yaml(const temp_dir& dir) {
  return "node:\n  name: notify-test\n  data_dir: " + dir.str()
         + "/data\ngateway:\n  port: 0\n  admin_token: " + admin_token
         + "\nchaos:\n  kill: true\nlogging:\n  level: info\n";
}

// A node started as systemd would start it with Type=notify and
// WatchdogSec=0.6s. (node_process takes no environment, so the test starts
// the process itself, the same way.)
struct fixture {
  temp_dir dir{"keel-notify"};
  notify_socket notify{dir.str() + "/notify.sock"};
  std::unique_ptr<child_process> node;
  endpoint admin;
  time_point started;

  fixture() {
    auto config = dir.str() + "/node.yaml";
    std::ofstream{config} << node_yaml(dir);
    // sd_watchdog_enabled() ignores WATCHDOG_USEC when WATCHDOG_PID names
    // another process, as ours would if this test ran under systemd.
    ::unsetenv("WATCHDOG_PID");
    child_options opts;
    opts.argv = {node_binary(), "--config", config};
    opts.env = {{"NOTIFY_SOCKET", notify.path()},
                {"WATCHDOG_USEC", std::to_string(watchdog_usec)}};
    opts.log_path = dir.str() + "/node.stderr";
    opts.capture_stdout = true;
    started = clock_type::now();
    node = std::make_unique<child_process>(std::move(opts));
    auto line = node->read_stdout_line("listening on ", 60s);
    if (!line || line->rfind(':') == std::string::npos)
      throw std::runtime_error("keel-node did not start: " + node->log());
    admin.port
      = static_cast<uint16_t>(std::stoi(line->substr(line->rfind(':') + 1)));
    admin.token = admin_token;
  }

  // What was received and what the node logged, for a failed check.
  std::string diagnostics() const {
    return "notices (ms after the start):\n" + notify.timeline(started)
           + "node log:\n" + node->log();
  }

  notice ready() {
    auto found = notify.wait_for_line("READY=1", 0, started + 60s);
    if (!found)
      CAF_FAIL("no READY=1 within 60 s\n" << diagnostics());
    return *found;
  }

  // The first WATCHDOG=1 that arrives after `t`, waiting until `deadline`.
  std::optional<notice> ping_after(time_point t, time_point deadline) {
    return notify.wait_for(
      [t](const notice& n) { return n.is_ping() && n.at > t; }, 0, deadline);
  }

  // Waits for `count` pings after `from`, each within WATCHDOG_USEC of the
  // one before (or of `from`); returns their arrival times (fewer when one
  // was late).
  std::vector<time_point> steady_pings(time_point from, size_t count) {
    std::vector<time_point> result;
    auto last = from;
    while (result.size() < count) {
      auto next = ping_after(last, last + watchdog_interval);
      if (!next)
        break;
      last = next->at;
      result.push_back(last);
    }
    return result;
  }

  unsigned healthz_status(std::chrono::milliseconds timeout) {
    auto res = http_request(admin, "GET", "/healthz", {}, timeout);
    return res ? res->status : 0u;
  }

  // Checks what every test expects of all the datagrams.
  void check_all_notices() {
    auto pid = node->pid();
    for (auto& n : notify.all()) {
      CAF_CHECK(n.well_formed && !n.truncated);
      if (pid > 0)
        CAF_CHECK_EQUAL(n.pid, pid);
    }
  }
};

} // namespace

// Checks `cond`; when it fails, prints every datagram and the node's log.
#define NOTIFY_CHECK(cond)                                                     \
  do {                                                                         \
    if (!(cond))                                                               \
      CAF_TEST_PRINT_ERROR(diagnostics());                                     \
    CAF_CHECK(cond);                                                           \
  } while (false)

CAF_TEST_FIXTURE_SCOPE(service_notify_tests, fixture)

CAF_TEST(ready once the node serves then watchdog pings at half the interval) {
  auto ready_notice = ready();
  // READY=1 means the gateway serves.
  CAF_CHECK_EQUAL(healthz_status(5s), 200u);
  // The first ping within WATCHDOG_USEC of READY=1 (systemd's watchdog
  // starts then), then ten more, none later than WATCHDOG_USEC.
  auto pings = steady_pings(ready_notice.at, 11);
  NOTIFY_CHECK(pings.size() == 11);
  if (pings.size() >= 2) {
    auto mean = (pings.back() - pings.front())
                / static_cast<long>(pings.size() - 1);
    CAF_MESSAGE("mean gap between pings: " << ms(mean) << " ms");
    NOTIFY_CHECK(mean <= mean_gap_limit);
  }
  // READY=1 came once; only STATUS= may come along with it.
  auto all = notify.all();
  auto readies = std::count_if(all.begin(), all.end(),
                               [](auto& n) { return n.has("READY=1"); });
  NOTIFY_CHECK(readies == 1);
  for (auto& [key, value] : ready_notice.fields)
    CAF_CHECK(key == "READY" || key == "STATUS");
  NOTIFY_CHECK(std::none_of(all.begin(), all.end(),
                            [](auto& n) { return n.has("STOPPING=1"); }));
  check_all_notices();
}

CAF_TEST(a wedged orchestrator stops the pings and fails healthz until it
           answers again) {
  auto ready_notice = ready();
  // Pinging steadily before the wedge.
  NOTIFY_CHECK(steady_pings(ready_notice.at, 3).size() == 3);
  auto wedge_sent = clock_type::now();
  auto body = nlohmann::json{{"path", "/orchestrator"}, {"ms", wedge_ms}};
  auto answer = api_call(admin, "POST", "/api/v1/chaos/wedge", body.dump());
  auto wedge_answered = clock_type::now();
  if (!answer)
    CAF_FAIL("POST /api/v1/chaos/wedge failed: " << render(answer.error()));
  CAF_CHECK(answer->is_object());
  // The answer does not wait for the wedge.
  CAF_CHECK_LESS(ms(wedge_answered - wedge_sent), 1000);
  auto wedge_ends = wedge_sent + std::chrono::milliseconds{wedge_ms};
  // /healthz turns 503 while the orchestrator does not answer.
  bool unhealthy = poll_until(
    [&] {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        wedge_ends - clock_type::now());
      return left > 100ms
             && healthz_status(
                  std::min<std::chrono::milliseconds>(left, 1500ms))
                  == 503u;
    },
    std::chrono::milliseconds{wedge_ms - 200}, 50ms);
  NOTIFY_CHECK(unhealthy);
  // The pings stop: the last one at most a check after the wedge began,
  // the next one at least 1.5 s later, once the wedge is over.
  auto resumed = ping_after(wedge_answered + 600ms, wedge_ends + 3s);
  NOTIFY_CHECK(resumed);
  if (resumed) {
    auto all = notify.all();
    auto before = std::find_if(all.rbegin(), all.rend(), [&](auto& n) {
      return n.is_ping() && n.index < resumed->index;
    });
    NOTIFY_CHECK(before != all.rend());
    if (before != all.rend()) {
      CAF_MESSAGE("silence: " << ms(resumed->at - before->at) << " ms, from "
                              << ms(before->at - wedge_sent)
                              << " ms after the wedge was sent");
      NOTIFY_CHECK(resumed->at - before->at >= wedge_silence);
    }
    // ... and go on steadily.
    NOTIFY_CHECK(steady_pings(resumed->at, 3).size() == 3);
  }
  // /healthz recovers, and the node still answers a message.
  NOTIFY_CHECK(poll_until([&] { return healthz_status(2s) == 200u; },
                          std::chrono::milliseconds{5000}, 50ms));
  auto client = connect_client(admin);
  CAF_REQUIRE(!client->send_text(protocol::send_frame("t1", "m1", "hi")));
  auto reply = receive_until(*client,
                             [](auto& j) { return j["type"] == "reply"; });
  CAF_REQUIRE(reply);
  CAF_CHECK_EQUAL((*reply)["text"], "echo: hi");
  // No restart: the same process, still running.
  CAF_CHECK(node->running());
  check_all_notices();
}

CAF_TEST(sigterm brings stopping then exit code zero) {
  auto ready_notice = ready();
  NOTIFY_CHECK(steady_pings(ready_notice.at, 1).size() == 1);
  auto pid = node->pid();
  check_all_notices();
  CAF_REQUIRE_EQUAL(::kill(pid, SIGTERM), 0);
  auto stopping = notify.wait_for_line("STOPPING=1", 0,
                                       clock_type::now() + 10s);
  NOTIFY_CHECK(stopping);
  if (stopping)
    CAF_CHECK_GREATER(stopping->index, ready_notice.index);
  // The drain takes at most 30 s.
  NOTIFY_CHECK(poll_until([&] { return !node->running(); },
                          std::chrono::milliseconds{40'000}, 20ms));
  auto code = node->exit_code();
  CAF_REQUIRE(code);
  if (*code != 0)
    CAF_TEST_PRINT_ERROR(diagnostics());
  CAF_CHECK_EQUAL(*code, 0);
  // STOPPING=1 once, and no READY=1 after it.
  auto all = notify.all();
  auto stoppings = std::count_if(all.begin(), all.end(),
                                 [](auto& n) { return n.has("STOPPING=1"); });
  CAF_CHECK_EQUAL(stoppings, 1);
  if (stopping)
    NOTIFY_CHECK(std::none_of(all.begin() + stopping->index, all.end(),
                              [](auto& n) { return n.has("READY=1"); }));
  for (auto& n : all)
    if (pid > 0)
      CAF_CHECK_EQUAL(n.pid, pid);
}

CAF_TEST_FIXTURE_SCOPE_END()
