#include "keel/compactor.hpp"

#include <algorithm>
#include <map>

#include "keel/text.hpp"

namespace keel {

const char* const summary_instruction
  = "You compact a conversation so that it fits the model's context window. "
    "Summarize the excerpt below for the assistant's own later use: keep "
    "facts, decisions, names, numbers, commitments, open questions and what "
    "tools were called with what outcome. Write in the third person, as "
    "briefly as the content allows, and answer with the summary only.";

const char* const summary_heading = "[Summary of the earlier conversation]\n";

namespace {

// At most `max` bytes of `text`, never cutting a UTF-8 sequence.
std::string bounded(const std::string& text, size_t max) {
  if (text.size() <= max)
    return text;
  return std::string{utf8_prefix(text, max)} + " [...]";
}

std::string speaker(const context_entry& entry) {
  if (entry.role == "tool")
    return "tool " + entry.tool_name() + " returned";
  return entry.role.str();
}

} // namespace

std::string transcript(const std::vector<context_entry>& entries,
                       entry_range range, size_t max_entry_bytes) {
  std::string result;
  for (auto i = range.first; i < range.second && i < entries.size(); ++i) {
    auto& entry = entries[i];
    if (!result.empty())
      result += "\n\n";
    result += speaker(entry) + ": " + bounded(entry.content, max_entry_bytes);
    for (auto& call : entry.tool_calls())
      result += "\n(called " + call.name + " with "
                + bounded(call.arguments, max_entry_bytes) + ")";
  }
  return result;
}

compactor::compactor(std::vector<context_entry> entries, uint64_t fixed_tokens,
                     uint64_t target, uint64_t chunk_tokens,
                     compaction_settings settings)
  : original_(entries),
    entries_(std::move(entries)),
    fixed_tokens_(fixed_tokens),
    target_(target),
    chunk_tokens_(chunk_tokens),
    settings_(settings) {
  for (auto i : tool_results_to_strip(entries_, settings_)) {
    auto& content = entries_[i].content;
    content = stripped_tool_result(utf8_length(content));
    tier_ = 1;
  }
  if (!fits())
    start_chunks();
}

uint64_t compactor::tokens() const {
  return fixed_tokens_ + estimate_tokens(entries_);
}

bool compactor::fits() const {
  return tokens() <= target_;
}

void compactor::ask_for(entry_range range) {
  asked_ = range;
  ask_ = transcript(entries_, range);
}

void compactor::start_chunks() {
  chunks_ = summary_chunks(entries_, settings_, chunk_tokens_);
  chunk_summaries_.clear();
  if (chunks_.empty()) {
    plain_fallback();
    return;
  }
  stage_ = stage::chunks;
  ask_for(chunks_.front());
}

void compactor::start_half() {
  auto half = oldest_half(entries_, settings_);
  if (!half) {
    plain_fallback();
    return;
  }
  stage_ = stage::half;
  ask_for(*half);
}

bool compactor::replace(entry_range range, const std::string& text) {
  auto first = entries_.begin() + static_cast<std::ptrdiff_t>(range.first);
  auto last = entries_.begin() + static_cast<std::ptrdiff_t>(range.second);
  if (estimate_tokens(context_entry{0, "system", text})
      >= estimate_tokens(std::vector<context_entry>(first, last)))
    return false;
  entries_ = replace_range(std::move(entries_), range, text);
  return true;
}

void compactor::finish_chunks() {
  std::string joined;
  for (auto& part : chunk_summaries_)
    joined += (joined.empty() ? "" : "\n\n") + part;
  if (!replace({chunks_.front().first, chunks_.back().second},
               summary_heading + joined)) {
    plain_fallback();
    return;
  }
  tier_ = 2;
  if (fits()) {
    stage_ = stage::done;
    ask_.reset();
  } else {
    start_half();
  }
}

void compactor::summarized(const std::string& summary) {
  if (!asked_ || !ask_)
    return;
  if (summary.empty()) {
    failed();
    return;
  }
  if (stage_ == stage::chunks) {
    chunk_summaries_.push_back(summary);
    if (chunk_summaries_.size() < chunks_.size())
      ask_for(chunks_[chunk_summaries_.size()]);
    else
      finish_chunks();
    return;
  }
  if (!replace(*asked_, summary_heading + summary)) {
    plain_fallback();
    return;
  }
  tier_ = std::max(tier_, 3);
  if (fits()) {
    stage_ = stage::done;
    ask_.reset();
  } else {
    plain_fallback();
  }
}

void compactor::failed() {
  plain_fallback();
}

void compactor::plain_fallback() {
  stage_ = stage::done;
  asked_.reset();
  ask_.reset();
  while (!fits()) {
    auto half = oldest_half(entries_, settings_);
    if (!half || !replace(*half, plain_summary(entries_, *half)))
      return;
    tier_ = 4;
  }
}

compaction_result compactor::result() const {
  compaction_result result;
  result.tier = tier_;
  result.tokens_before = fixed_tokens_ + estimate_tokens(original_);
  result.tokens_after = tokens();
  std::map<seq_t, const context_entry*> now;
  for (auto& entry : entries_)
    now.emplace(entry.seq, &entry);
  for (auto& entry : original_) {
    auto i = now.find(entry.seq);
    if (i == now.end()) {
      result.retired.push_back(entry.seq);
    } else if (!(*i->second == entry)) {
      result.retired.push_back(entry.seq);
      result.put.push_back(*i->second);
    }
  }
  return result;
}

} // namespace keel
