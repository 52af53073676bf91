#pragma once

#include <filesystem>
#include <string>

#include "keel/tools/process.hpp"

namespace keel::test {

/// A fresh, uniquely named folder under the system's temp folder (mkdtemp),
/// removed with everything in it on destruction.
class temp_dir {
public:
  explicit temp_dir(const std::string& prefix = "keel-test")
    : path_(make_temp_dir(prefix)) {
    // nop
  }

  ~temp_dir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
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
