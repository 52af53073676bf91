#pragma once

// Where the tests find the repository's own files (docs, config, npm).

#include <cstdlib>
#include <filesystem>
#include <string>

namespace keel::test {

/// The Keel source tree: $KEEL_SOURCE_DIR (CTest sets it), else the folder
/// two levels above this header.
inline std::string keel_source_dir() {
  if (auto dir = std::getenv("KEEL_SOURCE_DIR"); dir != nullptr && *dir)
    return dir;
  return std::filesystem::path{__FILE__}
    .parent_path()
    .parent_path()
    .parent_path()
    .lexically_normal()
    .string();
}

} // namespace keel::test
