#include "keel/context_window.hpp"

#include <algorithm>
#include <array>
#include <cctype>

#include "keel/text.hpp"

namespace keel {

uint64_t estimate_tokens(const context_entry& entry) {
  auto bytes = entry.content.size();
  for (auto& call : entry.tool_calls())
    bytes += call.name.size() + call.arguments.size();
  return (bytes + 3) / 4 + 4;
}

namespace {

template <class Entries>
uint64_t sum_of_estimates(const Entries& entries) {
  uint64_t result = 0;
  for (auto& entry : entries)
    result += estimate_tokens(entry);
  return result;
}

} // namespace

uint64_t estimate_tokens(const std::vector<context_entry>& entries) {
  return sum_of_estimates(entries);
}

uint64_t estimate_tokens(const context_list& entries) {
  return sum_of_estimates(entries);
}

namespace {

struct known_window {
  std::string_view key;
  uint64_t tokens;
};

// First match wins: "gpt-4o" before "gpt-4".
constexpr std::array<known_window, 7> known_windows{{
  {"sonnet-4", 200'000},
  {"opus-4", 200'000},
  {"gpt-4o", 128'000},
  {"gpt-4", 8'192},
  {"gemini-1.5-pro", 2'097'152},
  {"deepseek-chat", 65'536},
  {"qwen-plus", 131'072},
}};

// At most `max` bytes of `text` from its start (`from_end`: its end),
// never cutting a UTF-8 sequence.
std::string excerpt(const std::string& text, size_t max, bool from_end) {
  if (text.size() <= max)
    return text;
  auto continues = [&](size_t i) {
    return (static_cast<unsigned char>(text[i]) & 0xC0) == 0x80;
  };
  if (!from_end) {
    size_t end = max;
    while (end > 0 && continues(end))
      --end;
    return text.substr(0, end) + "…";
  }
  size_t begin = text.size() - max;
  while (begin < text.size() && continues(begin))
    ++begin;
  return "…" + text.substr(begin);
}

} // namespace

uint64_t context_window(std::string_view model, uint64_t fallback) {
  std::string id;
  for (char c : model)
    id += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (auto& known : known_windows)
    if (id.find(known.key) != std::string::npos)
      return known.tokens;
  return fallback;
}

context_pressure pressure(uint64_t tokens, uint64_t window,
                          const compaction_settings& settings) {
  auto used = static_cast<double>(tokens);
  auto size = static_cast<double>(window);
  if (used >= settings.compact_at * size)
    return context_pressure::compact;
  if (used >= settings.warn_at * size)
    return context_pressure::warn;
  return context_pressure::fine;
}

entry_range compactable(const std::vector<context_entry>& entries,
                        const compaction_settings& settings) {
  if (entries.size() < settings.min_entries
      || entries.size() <= settings.protect_last)
    return {0, 0};
  return {0, entries.size() - settings.protect_last};
}

std::vector<size_t>
tool_results_to_strip(const std::vector<context_entry>& entries,
                      const compaction_settings& settings) {
  std::vector<size_t> result;
  auto range = compactable(entries, settings);
  for (auto i = range.first; i < range.second; ++i)
    if (entries[i].role == "tool"
        && utf8_length(entries[i].content) > settings.strip_over)
      result.push_back(i);
  return result;
}

std::string stripped_tool_result(size_t chars) {
  return "[tool result of " + std::to_string(chars)
         + " characters removed to save context]";
}

std::vector<entry_range>
summary_chunks(const std::vector<context_entry>& entries,
               const compaction_settings& settings, uint64_t max_tokens) {
  std::vector<entry_range> result;
  auto [begin, end] = compactable(entries, settings);
  auto size = std::max<size_t>(settings.chunk_entries, 1);
  auto overlap = std::min(settings.chunk_overlap, size - 1);
  for (auto start = begin; start < end;) {
    // At least one entry the chunk before did not have.
    auto stop = result.empty() ? start + 1 : result.back().second + 1;
    uint64_t tokens = 0;
    for (auto i = start; i < stop; ++i)
      tokens += estimate_tokens(entries[i]);
    while (stop < end && stop - start < size
           && (max_tokens == 0
               || tokens + estimate_tokens(entries[stop]) <= max_tokens))
      tokens += estimate_tokens(entries[stop++]);
    result.emplace_back(start, stop);
    if (stop == end)
      break;
    start = stop - std::min(overlap, stop - start - 1);
  }
  return result;
}

std::optional<entry_range>
oldest_half(const std::vector<context_entry>& entries,
            const compaction_settings& settings) {
  auto [begin, end] = compactable(entries, settings);
  if (begin == end)
    return std::nullopt;
  return entry_range{begin, begin + std::max<size_t>((end - begin) / 2, 1)};
}

std::string plain_summary(const std::vector<context_entry>& entries,
                          entry_range range) {
  size_t user = 0;
  size_t assistant = 0;
  for (auto i = range.first; i < range.second; ++i)
    (entries[i].role == "user" ? user : assistant) += 1;
  auto count = range.second - range.first;
  if (count == 0)
    return "[No earlier messages were removed.]";
  return "[Earlier conversation: " + std::to_string(count)
         + " messages removed to fit the context window ("
         + std::to_string(user) + " from the user, " + std::to_string(assistant)
         + " others). It began: \""
         + excerpt(entries[range.first].content, 200, false) + "\" It ended: \""
         + excerpt(entries[range.second - 1].content, 200, true) + "\"]";
}

std::vector<context_entry> replace_range(std::vector<context_entry> entries,
                                         entry_range range,
                                         const std::string& summary) {
  if (range.first >= range.second || range.second > entries.size())
    return entries;
  context_entry merged{entries[range.second - 1].seq, "system", summary};
  auto first = entries.begin() + static_cast<std::ptrdiff_t>(range.first);
  auto last = entries.begin() + static_cast<std::ptrdiff_t>(range.second);
  auto pos = entries.erase(first, last);
  entries.insert(pos, std::move(merged));
  return entries;
}

} // namespace keel
