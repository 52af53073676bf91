#define CAF_SUITE run_process

// Running a program as a child in a process group of its own: output and
// exit status, the output cap, the environment and folder it gets, the
// timeout and cancellation ending the whole group (a grandchild included),
// and programs that cannot be started.

#include <caf/test/unit_test.hpp>

#include <cerrno>
#include <csignal>
#include <thread>

#include <poll.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "keel/run_process.hpp"

using namespace keel;
using namespace std::chrono_literals;

namespace {

process_spec shell(const std::string& script) {
  process_spec spec;
  spec.argv = {"/bin/sh", "-c", script};
  return spec;
}

process_result run(const process_spec& spec,
                   const std::atomic<bool>* cancel = nullptr) {
  auto result = run_process(spec, cancel);
  CAF_REQUIRE(result);
  return std::move(*result);
}

// Whether process `pid` ends within `limit`: its pidfd becomes readable
// when it exits (a killed process is not gone the moment kill returns).
bool ends_within(pid_t pid, std::chrono::milliseconds limit) {
  auto fd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  if (fd < 0)
    return errno == ESRCH;
  pollfd p{fd, POLLIN, 0};
  auto ready = ::poll(&p, 1, static_cast<int>(limit.count()));
  ::close(fd);
  return ready > 0;
}

} // namespace

CAF_TEST(output and exit status are captured) {
  auto result = run(shell("echo out; echo err >&2; exit 3"));
  CAF_CHECK_EQUAL(result.exit_code, 3);
  CAF_CHECK_EQUAL(result.out, "out\n");
  CAF_CHECK_EQUAL(result.err, "err\n");
  CAF_CHECK(!result.timed_out);
  CAF_CHECK_EQUAL(run(shell("kill -TERM $$")).exit_code, 128 + SIGTERM);
}

CAF_TEST(output past the cap is read and counted and not kept) {
  auto spec = shell("head -c 100000 /dev/zero | tr '\\0' x");
  spec.output_cap = 1000;
  auto result = run(spec);
  CAF_CHECK_EQUAL(result.exit_code, 0);
  CAF_CHECK_EQUAL(result.out, std::string(1000, 'x'));
  CAF_CHECK_EQUAL(result.out_dropped, 99000u);
}

CAF_TEST(the child gets only the environment and folder it is given) {
  auto spec = shell("echo \"$KEEL_TOOL_VAR:${HOME:-none}\"; pwd");
  spec.env = {{{"KEEL_TOOL_VAR", "set"}}};
  spec.cwd = "/tmp";
  CAF_CHECK_EQUAL(run(spec).out, "set:none\n/tmp\n");
}

CAF_TEST(the child gets default signal actions and none blocked) {
  // A node ignores SIGPIPE and blocks signals in some threads: the program
  // must not inherit either (a pipeline would never see its SIGPIPE).
  auto old_pipe = std::signal(SIGPIPE, SIG_IGN);
  sigset_t usr1;
  sigemptyset(&usr1);
  sigaddset(&usr1, SIGUSR1);
  sigset_t old_mask;
  ::pthread_sigmask(SIG_BLOCK, &usr1, &old_mask);
  auto result = run(shell("grep -E '^Sig(Ign|Blk)' /proc/self/status"));
  ::pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
  std::signal(SIGPIPE, old_pipe);
  CAF_CHECK_EQUAL(result.out, "SigBlk:\t0000000000000000\n"
                              "SigIgn:\t0000000000000000\n");
  // A program killed by SIGPIPE says so.
  CAF_CHECK_EQUAL(
    run(shell("yes | head -c 1 >/dev/null; kill -PIPE $$")).exit_code,
    128 + SIGPIPE);
}

CAF_TEST(a timeout ends the program and what it left running) {
  // The grandchild sleeps on in the background, holding stdout open; it
  // writes its pid first.
  auto spec = shell("sleep 30 & echo $!; sleep 30");
  spec.timeout = 300ms;
  spec.grace = 200ms;
  auto result = run(spec);
  CAF_CHECK(result.timed_out);
  CAF_CHECK_EQUAL(result.exit_code, 128 + SIGTERM);
  CAF_CHECK_LESS(result.took, 5s);
  auto grandchild = static_cast<pid_t>(std::stoi(result.out));
  CAF_CHECK(ends_within(grandchild, 2s));
  // One that ignores SIGTERM is killed after the grace period.
  spec = shell("trap '' TERM; sleep 30");
  spec.timeout = 200ms;
  spec.grace = 200ms;
  result = run(spec);
  CAF_CHECK(result.timed_out);
  CAF_CHECK_EQUAL(result.exit_code, 128 + SIGKILL);
}

CAF_TEST(a program that exits leaves nothing running behind) {
  auto result = run(shell("sleep 30 >/dev/null 2>&1 & echo $!"));
  CAF_CHECK_EQUAL(result.exit_code, 0);
  CAF_CHECK(ends_within(static_cast<pid_t>(std::stoi(result.out)), 2s));
}

CAF_TEST(cancelling ends the run like a timeout) {
  std::atomic<bool> cancel{false};
  std::thread canceller{[&] {
    std::this_thread::sleep_for(100ms);
    cancel = true;
  }};
  auto result = run(shell("sleep 30"), &cancel);
  canceller.join();
  CAF_CHECK(result.cancelled);
  CAF_CHECK(!result.timed_out);
  CAF_CHECK_LESS(result.took, 10s);
}

CAF_TEST(a program that cannot be started is an error naming it) {
  process_spec spec;
  spec.argv = {"keel-no-such-program"};
  auto missing = run_process(spec);
  CAF_REQUIRE(!missing);
  CAF_CHECK_EQUAL(missing.error(), ec::unavailable);
  CAF_CHECK_EQUAL(error_message(missing.error()),
                  "cannot start keel-no-such-program: No such file or "
                  "directory");
  spec = shell("true");
  spec.cwd = "/nonexistent-folder";
  auto nowhere = run_process(spec);
  CAF_REQUIRE(!nowhere);
  CAF_CHECK_EQUAL(error_message(nowhere.error()),
                  "cannot start /bin/sh: chdir: No such file or directory");
  CAF_CHECK_EQUAL(run_process(process_spec{}).error(), ec::config_invalid);
}

CAF_TEST(a descendant that left the group ends with a timed - out run) {
  // setsid puts the sleeper in a session (and group) of its own, out of
  // reach of the group kill; it is still a descendant of the run.
  auto spec = shell("setsid sleep 30 & echo $!; wait");
  spec.timeout = 300ms;
  spec.grace = 100ms;
  auto result = run(spec);
  CAF_CHECK(result.timed_out);
  auto escaped = static_cast<pid_t>(std::stoi(result.out));
  CAF_CHECK(ends_within(escaped, 2s));
}

CAF_TEST(the child runs under the resource limits it is given) {
  auto spec = shell("cat /proc/self/limits");
  spec.limits = {64 << 20, 3, 77, 55, 4096};
  auto limits = run(spec).out;
  auto soft = [&limits](const std::string& name) {
    auto at = limits.find(name);
    if (at == std::string::npos)
      return std::string{"(no "} + name + ")";
    auto begin = limits.find_first_not_of(' ', at + name.size());
    return limits.substr(begin, limits.find(' ', begin) - begin);
  };
  CAF_CHECK_EQUAL(soft("Max address space"), "67108864");
  CAF_CHECK_EQUAL(soft("Max cpu time"), "3");
  CAF_CHECK_EQUAL(soft("Max open files"), "77");
  CAF_CHECK_EQUAL(soft("Max processes"), "55");
  CAF_CHECK_EQUAL(soft("Max file size"), "4096");
  // 0 leaves a limit as ours.
  rlimit ours{};
  ::getrlimit(RLIMIT_NOFILE, &ours);
  spec.limits = {};
  limits = run(spec).out;
  CAF_CHECK_EQUAL(soft("Max open files"), std::to_string(ours.rlim_cur));
}

CAF_TEST(a limit the kernel refuses is an error naming the limit) {
  // Above the kernel's ceiling for open files (fs.nr_open), even for root.
  auto spec = shell("true");
  spec.limits.open_files = uint64_t{1} << 40;
  auto refused = run_process(spec);
  CAF_REQUIRE(!refused);
  CAF_CHECK_EQUAL(refused.error(), ec::unavailable);
  CAF_CHECK_EQUAL(error_message(refused.error())
                    .rfind("cannot start /bin/sh: open_files limit: ", 0),
                  0u);
}
