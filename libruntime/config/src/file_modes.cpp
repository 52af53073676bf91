#include "keel/file_modes.hpp"

#include <cstdio>
#include <sys/stat.h>

namespace keel {

std::optional<std::string> exposed_mode_warning(const std::string& what,
                                                mode_t mode) {
  auto exposed = mode & (S_IRWXG | S_IRWXO);
  if ((exposed & (S_IRGRP | S_IWGRP | S_IROTH | S_IWOTH)) == 0)
    return std::nullopt;
  char octal[8];
  std::snprintf(octal, sizeof(octal), "%04o",
                static_cast<unsigned>(mode & 07777));
  auto who = (exposed & (S_IROTH | S_IWOTH)) != 0 ? "every local user"
                                                  : "its group";
  return what + " is open to " + who + " (mode " + octal
         + "), yet it holds a secret: chmod 600 it";
}

std::optional<std::string> exposed_file_warning(const std::string& key,
                                                const std::string& path) {
  struct stat st {};
  if (path.empty() || ::stat(path.c_str(), &st) != 0)
    return std::nullopt;
  return exposed_mode_warning(key + " " + path, st.st_mode);
}

} // namespace keel
