#include "keel/prompt_files.hpp"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace keel {

file_text read_file_text(const std::string& path) {
  std::error_code ignored;
  if (std::filesystem::is_directory(path, ignored))
    return {std::nullopt, std::strerror(EISDIR)};
  errno = 0;
  std::ifstream in{path, std::ios::binary};
  if (!in)
    return {std::nullopt, std::strerror(errno != 0 ? errno : ENOENT)};
  std::ostringstream out;
  out << in.rdbuf();
  if (in.bad())
    return {std::nullopt, "read error"};
  return {out.str(), {}};
}

std::string assemble_prompt(const std::string& prompt,
                            const std::vector<std::string>& files) {
  auto result = prompt;
  for (auto& text : files) {
    if (text.empty())
      continue;
    if (!result.empty())
      result += "\n\n";
    result += text;
  }
  return result;
}

prompt_files::prompt_files(std::vector<std::string> paths, reader read)
  : paths_(std::move(paths)), read_(std::move(read)) {
  // nop
}

std::string prompt_files::assemble(const std::string& prompt,
                                   const warner& warn) {
  std::vector<std::string> texts;
  std::vector<std::pair<std::string, std::string>> newly_failing;
  {
    std::lock_guard<std::mutex> guard{mtx_};
    for (auto& path : paths_) {
      auto file = read_(path);
      if (file.text) {
        failing_.erase(path);
        texts.push_back(std::move(*file.text));
      } else if (failing_.insert(path).second) {
        newly_failing.emplace_back(path, file.error);
      }
    }
  }
  // Outside the lock: the warning logs.
  for (auto& [path, why] : newly_failing)
    if (warn)
      warn(path, why);
  return assemble_prompt(prompt, texts);
}

} // namespace keel
