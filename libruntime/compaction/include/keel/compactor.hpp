#pragma once

// One compaction of a context, tier by tier. Pure: the conversation actor
// asks `next()` for the summary to request from its provider pool, reports
// each answer (`summarized`) or failure (`failed`) until `next()` has
// nothing more, and stores `result()` in one batch.
//
// Tiers, each only while the context is still over its target:
//   1. tool results longer than `strip_over` characters are stripped;
//   2. the compactable entries are summarized in chunks that overlap, and
//      the chunk summaries replace them;
//   3. the oldest half of what is then compactable is summarized;
//   4. without a model: the oldest half is replaced by a plain-text account,
//      repeatedly, until the context fits or nothing is left to replace.
// A model's summary that fails, or that with its heading is not shorter
// than what it replaces, sends the compaction to tier 4; tier 4 stops where
// its account would not be shorter either. The protected tail (`protect_last`)
// is never changed.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "keel/context_window.hpp"
#include "keel/types.hpp"

namespace keel {

/// The instruction a summary request carries as its system prompt.
extern const char* const summary_instruction;

/// What a summary entry begins with.
extern const char* const summary_heading;

/// What `entries[range]` said, as one text for a model to summarize: one
/// paragraph per entry, "role: content" (tool calls and results named);
/// each entry at most `max_entry_bytes`.
std::string transcript(const std::vector<context_entry>& entries,
                       entry_range range, size_t max_entry_bytes = 8192);

/// The outcome of a compaction: the entries to write (each new or changed;
/// a summary takes the seq of the last entry it replaces) and the seqs to
/// remove (every replaced or changed entry), applied in one batch.
struct compaction_result {
  std::vector<context_entry> put;
  std::vector<seq_t> retired;
  /// The highest tier applied; 0 if nothing changed.
  int tier = 0;
  /// Estimated tokens of the whole request before and after.
  uint64_t tokens_before = 0;
  uint64_t tokens_after = 0;
};

class compactor {
public:
  /// `entries`: the part of the context that may change (the running turn's
  /// entries excluded); `fixed_tokens`: what the rest of the request takes;
  /// `target`: the total to get to or under; `chunk_tokens`: the most a
  /// tier-2 chunk takes (besides one entry that alone is more).
  compactor(std::vector<context_entry> entries, uint64_t fixed_tokens,
            uint64_t target, uint64_t chunk_tokens,
            compaction_settings settings);

  /// The text to summarize next, or none once the compaction is complete.
  const std::optional<std::string>& next() const {
    return ask_;
  }

  /// The tier of the summary `next()` asks for (2 or 3).
  int asking_tier() const {
    return stage_ == stage::chunks ? 2 : 3;
  }

  /// The model answered the `next()` request with `summary`.
  void summarized(const std::string& summary);

  /// The `next()` request failed for good.
  void failed();

  compaction_result result() const;

private:
  enum class stage { chunks, half, done };

  uint64_t tokens() const;
  bool fits() const;
  void start_chunks();
  void start_half();
  void finish_chunks();
  void plain_fallback();
  void ask_for(entry_range range);
  // Replaces `range` by one entry holding `text`, if that saves tokens.
  bool replace(entry_range range, const std::string& text);

  std::vector<context_entry> original_;
  std::vector<context_entry> entries_;
  uint64_t fixed_tokens_;
  uint64_t target_;
  uint64_t chunk_tokens_;
  compaction_settings settings_;
  stage stage_ = stage::done;
  int tier_ = 0;
  std::vector<entry_range> chunks_;
  std::vector<std::string> chunk_summaries_;
  std::optional<entry_range> asked_;
  std::optional<std::string> ask_;
};

} // namespace keel
