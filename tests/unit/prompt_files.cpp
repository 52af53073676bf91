#define CAF_SUITE prompt_files

// An agent's prompt files: placed after the prompt in order, read fresh for
// every turn, and one that cannot be read left out and warned about once.

#include "keel/prompt_files.hpp"

#include "temp_dir.hpp"

#include <caf/test/unit_test.hpp>

#include <fstream>
#include <map>

using namespace keel;

namespace {

void write(const std::filesystem::path& path, const std::string& text) {
  std::ofstream out{path, std::ios::trunc};
  out << text;
}

/// Collects the warnings `assemble` gives.
struct warnings {
  std::vector<std::string> seen;
  prompt_files::warner fn() {
    return [this](const std::string& path, const std::string& why) {
      seen.push_back(path + ": " + why);
    };
  }
};

} // namespace

CAF_TEST(files follow the prompt in their order) {
  CAF_CHECK_EQUAL(assemble_prompt("P", {"a", "", "b"}), "P\n\na\n\nb");
  CAF_CHECK_EQUAL(assemble_prompt("", {"a"}), "a");
  CAF_CHECK_EQUAL(assemble_prompt("P", {}), "P");
}

CAF_TEST(an edited file applies to the next turn) {
  keel::test::temp_dir dir;
  auto identity = dir.path() / "identity.md";
  auto skills = dir.path() / "skills.md";
  write(identity, "I am Ada.");
  write(skills, "I write C++.");
  prompt_files files{{identity.string(), skills.string()}};
  warnings w;
  CAF_CHECK_EQUAL(files.assemble("Help.", w.fn()),
                  "Help.\n\nI am Ada.\n\nI write C++.");
  write(skills, "I write Rust.");
  CAF_CHECK_EQUAL(files.assemble("Help.", w.fn()),
                  "Help.\n\nI am Ada.\n\nI write Rust.");
  CAF_CHECK(w.seen.empty());
}

CAF_TEST(a missing file is left out and warned about once) {
  keel::test::temp_dir dir;
  auto memory = dir.path() / "memory.md";
  auto identity = dir.path() / "identity.md";
  write(identity, "I am Ada.");
  prompt_files files{{memory.string(), identity.string()}};
  warnings w;
  CAF_CHECK_EQUAL(files.assemble("Help.", w.fn()), "Help.\n\nI am Ada.");
  CAF_CHECK_EQUAL(files.assemble("Help.", w.fn()), "Help.\n\nI am Ada.");
  CAF_REQUIRE_EQUAL(w.seen.size(), 1u);
  CAF_CHECK_EQUAL(w.seen[0], memory.string() + ": No such file or directory");
  // Once it exists it is read; gone again, it is warned about again.
  write(memory, "You like tea.");
  CAF_CHECK_EQUAL(files.assemble("Help.", w.fn()),
                  "Help.\n\nYou like tea.\n\nI am Ada.");
  std::filesystem::remove(memory);
  CAF_CHECK_EQUAL(files.assemble("Help.", w.fn()), "Help.\n\nI am Ada.");
  CAF_CHECK_EQUAL(w.seen.size(), 2u);
}

CAF_TEST(an unreadable file is left out) {
  keel::test::temp_dir dir;
  // A folder opens but cannot be read as a file, even by root.
  std::filesystem::create_directory(dir.path() / "skills");
  prompt_files files{{(dir.path() / "skills").string()}};
  warnings w;
  CAF_CHECK_EQUAL(files.assemble("Help.", w.fn()), "Help.");
  CAF_CHECK_EQUAL(w.seen.size(), 1u);
  // And through a reader that fails the way a permission would.
  prompt_files denied{{"secret.md"}, [](const std::string&) {
                        return file_text{std::nullopt, "Permission denied"};
                      }};
  CAF_CHECK_EQUAL(denied.assemble("Help.", w.fn()), "Help.");
  CAF_REQUIRE_EQUAL(w.seen.size(), 2u);
  CAF_CHECK_EQUAL(w.seen[1], "secret.md: Permission denied");
}
