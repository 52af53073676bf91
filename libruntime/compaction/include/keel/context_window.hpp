#pragma once

// The model's working memory as a budget: how many tokens a context takes
// (estimated), how many the model takes (its context window), when to warn
// and when to compact, and which entries each compaction tier works on.
// Pure functions over `context_entry`; the conversation actor runs the
// summaries through its provider pool and stores the result atomically.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "keel/context_list.hpp"
#include "keel/types.hpp"

namespace keel {

/// The context window assumed for a model the table does not know.
constexpr uint64_t default_context_window = 128'000;

/// The estimated tokens of one entry: a token per 4 bytes of its content
/// and its tool calls' names and arguments (rounded up; about right for English
/// text and code, pessimistic for most other scripts' UTF-8) plus 4 for its
/// role and framing. No tokenizer is exact for every provider; the thresholds
/// leave room.
uint64_t estimate_tokens(const context_entry& entry);

/// The sum over `entries`.
uint64_t estimate_tokens(const std::vector<context_entry>& entries);
uint64_t estimate_tokens(const context_list& entries);

/// The context window of `model` (the provider's model id): the first row
/// of the known models whose key the lowercased id contains (Claude Sonnet
/// 4 and Opus 4 200,000; GPT-4o 128,000; GPT-4 8,192; Gemini 1.5 Pro
/// 2,097,152; DeepSeek Chat 65,536; Qwen Plus 131,072), else `fallback`.
uint64_t context_window(std::string_view model,
                        uint64_t fallback = default_context_window);

/// When and how to compact (`threads.compaction:`).
struct compaction_settings {
  /// Share of the window at which the thread is warned.
  double warn_at = 0.80;
  /// Share of the window at which the context is compacted.
  double compact_at = 0.90;
  /// Tier 1 strips tool results longer than this (in characters).
  size_t strip_over = 200;
  /// The most recent entries, never summarized nor stripped.
  size_t protect_last = 4;
  /// Entries a context needs before anything is summarized.
  size_t min_entries = 6;
  /// Tier 2: the most entries per summarized chunk (a chunk also stays
  /// within a quarter of the window), and how many each chunk shares with
  /// the one before it (so a summary keeps the thread of the last).
  size_t chunk_entries = 100;
  size_t chunk_overlap = 2;
};

/// How full a context is.
enum class context_pressure { fine, warn, compact };

context_pressure pressure(uint64_t tokens, uint64_t window,
                          const compaction_settings& settings);

/// A range of entries [begin, end) by index.
using entry_range = std::pair<size_t, size_t>;

/// The entries before the protected tail: what compaction may change;
/// empty if the context has fewer than `min_entries` entries.
entry_range compactable(const std::vector<context_entry>& entries,
                        const compaction_settings& settings);

/// Tier 1: the compactable tool results (role "tool") longer than
/// `strip_over`, by index.
std::vector<size_t>
tool_results_to_strip(const std::vector<context_entry>& entries,
                      const compaction_settings& settings);

/// What a stripped tool result says in place of its content.
std::string stripped_tool_result(size_t chars);

/// Tier 2: the compactable entries in chunks of at most `chunk_entries`
/// and (unless 0) `max_tokens` estimated tokens, each sharing up to
/// `chunk_overlap` entries with the one before and adding at least one
/// (a chunk is over `max_tokens` only if that one entry is); together they
/// cover the compactable range. Empty if nothing is compactable.
std::vector<entry_range>
summary_chunks(const std::vector<context_entry>& entries,
               const compaction_settings& settings, uint64_t max_tokens = 0);

/// Tier 3: the oldest half of the compactable entries (at least one);
/// none if nothing is compactable.
std::optional<entry_range>
oldest_half(const std::vector<context_entry>& entries,
            const compaction_settings& settings);

/// Tier 4: a plain-text account of `range`, made without a model: how many
/// messages of which roles were removed, and how they began and ended.
std::string plain_summary(const std::vector<context_entry>& entries,
                          entry_range range);

/// `entries` with `range` replaced by one "system" entry holding `summary`,
/// at the seq of the last entry it replaces (so the context stays in seq
/// order and a reload finds the summary where the range was).
std::vector<context_entry> replace_range(std::vector<context_entry> entries,
                                         entry_range range,
                                         const std::string& summary);

} // namespace keel
