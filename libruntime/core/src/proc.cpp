#include "keel/proc.hpp"

#include <cstdlib>
#include <fstream>
#include <sstream>

#include <unistd.h>

namespace keel {

namespace {

std::string proc_path(int pid, const char* file) {
  return (pid == 0 ? std::string{"/proc/self/"}
                   : "/proc/" + std::to_string(pid) + "/")
         + file;
}

std::string read_first_line(const std::string& path) {
  std::ifstream in{path};
  std::string line;
  std::getline(in, line);
  return line;
}

} // namespace

caf::expected<memory_usage> read_memory_usage(int pid) {
  auto path = proc_path(pid, "status");
  std::ifstream in{path};
  if (!in)
    return caf::make_error(ec::not_found, path + ": cannot be read");
  memory_usage result;
  bool have_rss = false;
  bool have_peak = false;
  std::string line;
  // Lines look like "VmRSS:	   12345 kB".
  auto kib = [](const std::string& line) {
    return std::strtoull(line.c_str() + line.find(':') + 1, nullptr, 10) * 1024;
  };
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) {
      result.rss_bytes = kib(line);
      have_rss = true;
    } else if (line.rfind("VmHWM:", 0) == 0) {
      result.peak_rss_bytes = kib(line);
      have_peak = true;
    }
  }
  if (!have_rss || !have_peak)
    return caf::make_error(ec::not_found, path + ": no VmRSS/VmHWM fields");
  return result;
}

caf::expected<double> read_cpu_seconds(int pid) {
  auto path = proc_path(pid, "stat");
  auto stat = read_first_line(path);
  // "PID (NAME) STATE ...": the name may hold spaces and parentheses.
  auto close = stat.rfind(')');
  if (close == std::string::npos)
    return caf::make_error(ec::not_found, path + ": cannot be read");
  std::istringstream fields{stat.substr(close + 2)};
  std::string field;
  double ticks = 0;
  // Fields 3.. follow the name; utime and stime are fields 14 and 15.
  int i = 3;
  for (; i <= 15 && fields >> field; ++i)
    if (i >= 14)
      ticks += std::strtod(field.c_str(), nullptr);
  if (i <= 15)
    return caf::make_error(ec::not_found, path + ": no utime/stime fields");
  return ticks / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

std::string read_load_average() {
  // "0.52 0.58 0.59 1/467 12345": the three averages come first.
  std::istringstream loadavg{read_first_line("/proc/loadavg")};
  std::string result;
  std::string avg;
  for (int i = 0; i < 3 && loadavg >> avg; ++i)
    result += (i == 0 ? "" : " ") + avg;
  return result;
}

} // namespace keel
