#pragma once

// An agent's prompt files (`agents[].prompt_files`): identity, memory and
// skills kept in files the operator (or a tool) edits, read fresh for every
// turn so an edit applies to the next one.

#include <functional>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace keel {

/// The text of a file, or why it cannot be read.
struct file_text {
  std::optional<std::string> text;
  std::string error;
};

/// Reads the whole file at `path`.
file_text read_file_text(const std::string& path);

/// The system prompt of a turn: `prompt`, then each text of `files` in
/// order, separated by a blank line; empty texts are left out.
std::string assemble_prompt(const std::string& prompt,
                            const std::vector<std::string>& files);

/// The prompt files of one agent, shared by its conversations (safe to use
/// from several threads at once).
class prompt_files {
public:
  using reader = std::function<file_text(const std::string&)>;
  /// Told about a file that just became unreadable: its path and why.
  using warner = std::function<void(const std::string&, const std::string&)>;

  explicit prompt_files(std::vector<std::string> paths,
                        reader read = read_file_text);

  /// `prompt` with the files as they are now (see `assemble_prompt`). A
  /// file that cannot be read is left out; `warn` hears of it once, until
  /// it was read again.
  std::string assemble(const std::string& prompt, const warner& warn);

  const std::vector<std::string>& paths() const {
    return paths_;
  }

private:
  std::vector<std::string> paths_;
  reader read_;
  std::mutex mtx_;
  /// The files whose last read failed (warned about once).
  std::set<std::string> failing_;
};

} // namespace keel
