#define CAF_SUITE context_window

// The context budget: token estimates, known models' windows, pressure
// thresholds, and the compaction tiers' ranges (properties over random
// context lengths and chunk settings: the chunks cover the compactable
// entries in order with the set overlap, and never touch the protected
// tail).

#include <caf/test/unit_test.hpp>

#include <random>

#include "keel/context_window.hpp"

using namespace keel;

namespace {

std::vector<context_entry> context_of(size_t n) {
  std::vector<context_entry> result;
  for (size_t i = 0; i < n; ++i)
    result.push_back({static_cast<seq_t>(i + 1),
                      i % 2 == 0 ? "user" : "assistant",
                      "message " + std::to_string(i + 1)});
  return result;
}

} // namespace

CAF_TEST(tokens are a quarter of the bytes plus the framing) {
  CAF_CHECK_EQUAL(estimate_tokens(context_entry{1, "user", ""}), 4u);
  CAF_CHECK_EQUAL(estimate_tokens(context_entry{1, "user", "abcd"}), 5u);
  CAF_CHECK_EQUAL(estimate_tokens(context_entry{1, "user", "abcde"}), 6u);
  CAF_CHECK_EQUAL(estimate_tokens(context_of(3)), 3u * (3 + 4));
}

CAF_TEST(known models have their windows and others the fallback) {
  CAF_CHECK_EQUAL(context_window("claude-sonnet-4-20250514"), 200'000u);
  CAF_CHECK_EQUAL(context_window("claude-opus-4-1"), 200'000u);
  CAF_CHECK_EQUAL(context_window("GPT-4o-mini"), 128'000u);
  CAF_CHECK_EQUAL(context_window("gpt-4-0613"), 8'192u);
  CAF_CHECK_EQUAL(context_window("gemini-1.5-pro-002"), 2'097'152u);
  CAF_CHECK_EQUAL(context_window("deepseek-chat"), 65'536u);
  CAF_CHECK_EQUAL(context_window("qwen-plus-latest"), 131'072u);
  CAF_CHECK_EQUAL(context_window("llama-3"), default_context_window);
  CAF_CHECK_EQUAL(context_window("llama-3", 4096), 4096u);
}

CAF_TEST(a context warns at 80 percent and compacts at 90) {
  compaction_settings s;
  CAF_CHECK(pressure(799, 1000, s) == context_pressure::fine);
  CAF_CHECK(pressure(800, 1000, s) == context_pressure::warn);
  CAF_CHECK(pressure(899, 1000, s) == context_pressure::warn);
  CAF_CHECK(pressure(900, 1000, s) == context_pressure::compact);
}

CAF_TEST(nothing is compacted below six entries and the last four never) {
  compaction_settings s;
  CAF_CHECK(compactable(context_of(5), s) == entry_range(0, 0));
  CAF_CHECK(compactable(context_of(6), s) == entry_range(0, 2));
  CAF_CHECK(summary_chunks(context_of(5), s).empty());
  CAF_CHECK(!oldest_half(context_of(5), s));
  CAF_CHECK(*oldest_half(context_of(6), s) == entry_range(0, 1));
  CAF_CHECK(*oldest_half(context_of(24), s) == entry_range(0, 10));
}

CAF_TEST(tier one strips long tool results outside the protected tail) {
  compaction_settings s;
  auto ctx = context_of(10);
  ctx[1] = {2, "tool", std::string(201, 'x')};
  ctx[3] = {4, "tool", std::string(200, 'x')};
  // 201 bytes but 67 characters: not long.
  ctx[4] = {5, "tool", [] {
              std::string text;
              for (int i = 0; i < 67; ++i)
                text += "\xE2\x82\xAC";
              return text;
            }()};
  ctx[8] = {9, "tool", std::string(500, 'x')}; // Protected.
  CAF_CHECK_EQUAL(tool_results_to_strip(ctx, s), std::vector<size_t>{1});
  CAF_CHECK_EQUAL(stripped_tool_result(201),
                  "[tool result of 201 characters removed to save context]");
}

CAF_TEST(the plain fallback counts and quotes without a model) {
  auto ctx = context_of(8);
  ctx[0].content = std::string(300, 'a');
  CAF_CHECK_EQUAL(plain_summary(ctx, {0, 3}),
                  "[Earlier conversation: 3 messages removed to fit the "
                  "context window (2 from the user, 1 others). It began: \""
                    + std::string(200, 'a') + "…\" It ended: \"message 3\"]");
  auto merged = replace_range(ctx, {0, 3}, "summary");
  CAF_REQUIRE_EQUAL(merged.size(), 6u);
  CAF_CHECK_EQUAL(merged[0].seq, 3u);
  CAF_CHECK_EQUAL(merged[0].role, "system");
  CAF_CHECK_EQUAL(merged[0].content, "summary");
  CAF_CHECK_EQUAL(merged[1].seq, 4u);
}

CAF_TEST(chunks stay within their token budget) {
  std::mt19937 gen{20261127};
  for (int round = 0; round < 2000; ++round) {
    compaction_settings s;
    s.chunk_entries = 2 + gen() % 40;
    s.chunk_overlap = gen() % 4;
    s.protect_last = 1 + gen() % 5;
    s.min_entries = s.protect_last + 1;
    std::vector<context_entry> ctx;
    for (size_t i = 0, n = gen() % 120; i < n; ++i)
      ctx.push_back({i + 1, "user", std::string(gen() % 400, 'x')});
    uint64_t budget = 20 + gen() % 500;
    auto range = compactable(ctx, s);
    auto chunks = summary_chunks(ctx, s, budget);
    if (range.first == range.second) {
      CAF_REQUIRE(chunks.empty());
      continue;
    }
    CAF_REQUIRE_EQUAL(chunks.front().first, range.first);
    CAF_REQUIRE_EQUAL(chunks.back().second, range.second);
    for (size_t i = 0; i < chunks.size(); ++i) {
      auto [first, second] = chunks[i];
      auto fresh = i == 0 ? first : chunks[i - 1].second;
      CAF_REQUIRE_LESS(fresh, second); // Something new in every chunk.
      CAF_REQUIRE_LESS_OR_EQUAL(second - first, s.chunk_entries);
      std::vector<context_entry> part(ctx.begin() + first,
                                      ctx.begin() + second);
      // Over budget only as the overlap plus its one new entry.
      if (estimate_tokens(part) > budget)
        CAF_REQUIRE_EQUAL(second, fresh + 1);
    }
  }
}

CAF_TEST(chunks cover the compactable entries with the set overlap) {
  std::mt19937 gen{20261126};
  for (int round = 0; round < 2000; ++round) {
    compaction_settings s;
    s.chunk_entries = 1 + gen() % 20;
    s.chunk_overlap = gen() % 25;
    s.protect_last = gen() % 6;
    s.min_entries = gen() % 10;
    auto ctx = context_of(gen() % 120);
    auto range = compactable(ctx, s);
    auto chunks = summary_chunks(ctx, s);
    CAF_REQUIRE_LESS_OR_EQUAL(range.second, ctx.size());
    if (ctx.size() >= s.min_entries && ctx.size() > s.protect_last)
      CAF_REQUIRE_EQUAL(range.second, ctx.size() - s.protect_last);
    if (range.first == range.second) {
      CAF_REQUIRE(chunks.empty());
      continue;
    }
    CAF_REQUIRE(!chunks.empty());
    CAF_REQUIRE_EQUAL(chunks.front().first, range.first);
    CAF_REQUIRE_EQUAL(chunks.back().second, range.second);
    auto overlap = std::min(s.chunk_overlap, s.chunk_entries - 1);
    for (size_t i = 0; i < chunks.size(); ++i) {
      CAF_REQUIRE_LESS(chunks[i].first, chunks[i].second);
      CAF_REQUIRE_LESS_OR_EQUAL(chunks[i].second - chunks[i].first,
                                s.chunk_entries);
      if (i > 0)
        CAF_REQUIRE_EQUAL(chunks[i].first, chunks[i - 1].second - overlap);
    }
  }
}
