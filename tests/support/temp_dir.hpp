#pragma once

#include <atomic>
#include <filesystem>
#include <random>
#include <string>

#include <unistd.h>

namespace keel::test {

/// A fresh folder under the system's temp folder, removed on destruction.
class temp_dir {
public:
  explicit temp_dir(const std::string& prefix = "keel-test") {
    static std::atomic<uint64_t> counter{0};
    std::random_device rd;
    path_ = std::filesystem::temp_directory_path()
            / (prefix + "-" + std::to_string(::getpid()) + "-"
               + std::to_string(counter++) + "-" + std::to_string(rd()));
    std::filesystem::create_directories(path_);
  }

  ~temp_dir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }

  temp_dir(const temp_dir&) = delete;
  temp_dir& operator=(const temp_dir&) = delete;

  const std::filesystem::path& path() const {
    return path_;
  }

  std::string str() const {
    return path_.string();
  }

private:
  std::filesystem::path path_;
};

} // namespace keel::test
