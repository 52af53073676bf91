// The test runners' main: CAF's unit test framework (Debian's libcaf-dev
// ships no test library, so the implementation is compiled here).
//
// CAF prints a failing check's line only at console verbosity 4 and up,
// where every passing check is printed too, so CTest's output of a failed
// run would say which test failed but not which check. Unless told where
// to log (`-l`) or how much to print or log (`-v`, `-V`), the runner sends
// CAF's log at full verbosity through a pipe, keeps its failing checks and
// prints them after CAF's summary. Nothing of the log touches the disk.
// A failed requirement aborts the run before the summary, so the checks
// kept until then are not printed; CAF prints the requirement's expression
// itself, with the line of the last check that passed before it.
#define CAF_TEST_NO_MAIN
#include <caf/test/unit_test_impl.hpp>

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

namespace {

/// Collects the failing checks ("!! " lines) CAF logs into a pipe.
class failed_check_collector {
public:
  bool open() {
    if (pipe2(fds_, O_CLOEXEC | O_NONBLOCK) != 0)
      return false;
    reader_ = std::thread{[this] { drain_until_stopped(); }};
    return true;
  }

  /// Where CAF's logger writes: the pipe's write end.
  std::string log_path() const {
    return "/proc/self/fd/" + std::to_string(fds_[1]);
  }

  /// Stops reading once all that was written is read, then prints the
  /// failing checks. The logger must have closed its end by now (its data
  /// is in the pipe); a child process holding a copy cannot delay this.
  void finish() {
    ::close(fds_[1]);
    stopped_ = true;
    reader_.join();
    ::close(fds_[0]);
    if (failed_.empty())
      return;
    std::cerr << "\nfailed checks:\n" << failed_ << std::flush;
  }

private:
  void drain_until_stopped() {
    pollfd pfd{fds_[0], POLLIN, 0};
    while (!stopped_) {
      ::poll(&pfd, 1, 100);
      read_available();
    }
    read_available();
  }

  void read_available() {
    char buf[4096];
    ssize_t n;
    while ((n = ::read(fds_[0], buf, sizeof(buf))) > 0)
      keep_failed(std::string_view{buf, static_cast<size_t>(n)});
  }

  void keep_failed(std::string_view chunk) {
    for (auto c : chunk) {
      line_ += c;
      if (c != '\n')
        continue;
      if (line_.rfind("!! ", 0) == 0)
        failed_ += line_;
      line_.clear();
    }
  }

  int fds_[2] = {-1, -1};
  std::thread reader_;
  std::atomic<bool> stopped_{false};
  std::string line_;
  std::string failed_;
};

failed_check_collector collector;

bool chooses_own_output(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    std::string_view arg{argv[i]};
    if (arg == "--")
      return false;
    for (auto option : {"-l", "--log-file", "-v", "--console-verbosity", "-V",
                        "--file-verbosity"})
      if (arg.rfind(option, 0) == 0)
        return true;
  }
  return false;
}

} // namespace

int main(int argc, char** argv) {
  if (chooses_own_output(argc, argv) || !collector.open())
    return caf::test::main(argc, argv);
  // Registered before CAF's logger exists, so it runs after the logger is
  // destroyed, when its last buffered lines are in the pipe.
  std::atexit([] { collector.finish(); });
  auto log_file = "--log-file=" + collector.log_path();
  std::string verbosity = "--file-verbosity=4";
  std::vector<char*> args{argv[0], log_file.data(), verbosity.data()};
  args.insert(args.end(), argv + 1, argv + argc);
  return caf::test::main(static_cast<int>(args.size()), args.data());
}
