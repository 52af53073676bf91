#define CAF_SUITE compactor

// Compaction by tiers, driven as the conversation drives it: strip tool
// results, chunk summaries, the oldest half, the plain fallback. A property
// over random contexts and model behaviours (short summaries, failures,
// summaries no shorter than their text): it always ends, never changes the
// protected tail, and what it stores keeps the context in seq order.

#include <caf/test/unit_test.hpp>

#include <algorithm>
#include <random>

#include "keel/compactor.hpp"

using namespace keel;

namespace {

std::vector<context_entry> context_of(size_t n, size_t bytes = 40) {
  std::vector<context_entry> result;
  for (size_t i = 0; i < n; ++i)
    result.push_back({static_cast<seq_t>(10 + 2 * i),
                      i % 2 == 0 ? "user" : "assistant",
                      std::string(bytes, 'a' + static_cast<char>(i % 26))});
  return result;
}

// `entries` with `result` applied as the store applies a commit.
std::vector<context_entry> applied(std::vector<context_entry> entries,
                                   const compaction_result& result) {
  auto retired = [&](const context_entry& x) {
    return std::count(result.retired.begin(), result.retired.end(), x.seq) > 0;
  };
  entries.erase(std::remove_if(entries.begin(), entries.end(), retired),
                entries.end());
  entries.insert(entries.end(), result.put.begin(), result.put.end());
  std::sort(entries.begin(), entries.end(),
            [](auto& x, auto& y) { return x.seq < y.seq; });
  return entries;
}

// Answers every ask with `summary` until the compactor is done; returns
// how many it asked.
size_t answer_all(compactor& job, const std::string& summary) {
  size_t asks = 0;
  while (job.next()) {
    ++asks;
    job.summarized(summary);
  }
  return asks;
}

} // namespace

CAF_TEST(stripping large tool results is enough when it fits) {
  auto ctx = context_of(10);
  ctx[2].role = "tool";
  ctx[2].set_tool_result("", "grep");
  ctx[2].content = std::string(4000, 'x');
  compaction_settings s;
  compactor job{ctx, 0, estimate_tokens(ctx) - 500, 1000, s};
  CAF_CHECK(!job.next());
  auto result = job.result();
  CAF_CHECK_EQUAL(result.tier, 1);
  CAF_REQUIRE_EQUAL(result.put.size(), 1u);
  CAF_CHECK_EQUAL(result.put[0].seq, ctx[2].seq);
  CAF_CHECK_EQUAL(result.put[0].content, stripped_tool_result(4000));
  CAF_CHECK_EQUAL(result.retired, std::vector<seq_t>{ctx[2].seq});
}

CAF_TEST(chunk summaries replace the compactable entries) {
  auto ctx = context_of(40, 400);
  compaction_settings s;
  compactor job{ctx, 0, estimate_tokens(ctx) / 2, 1000, s};
  CAF_REQUIRE(job.next());
  CAF_CHECK_EQUAL(job.asking_tier(), 2);
  CAF_CHECK_NOT_EQUAL(job.next()->find("user: aaaa"), std::string::npos);
  auto asks = answer_all(job, "they talked");
  CAF_CHECK_GREATER(asks, 1u); // 36 entries of ~104 tokens, 1000 a chunk.
  auto result = job.result();
  CAF_CHECK_EQUAL(result.tier, 2);
  auto after = applied(ctx, result);
  CAF_REQUIRE_EQUAL(after.size(), s.protect_last + 1);
  CAF_CHECK_EQUAL(after[0].role, "system");
  CAF_CHECK_EQUAL(after[0].seq, ctx[35].seq);
  CAF_CHECK_EQUAL(after[0].content.rfind(summary_heading, 0), 0u);
  CAF_CHECK_LESS(result.tokens_after, result.tokens_before / 2);
}

CAF_TEST(a failing model leaves the plain fallback) {
  auto ctx = context_of(40, 400);
  compaction_settings s;
  compactor job{ctx, 0, estimate_tokens(ctx) / 2, 1000, s};
  CAF_REQUIRE(job.next());
  job.failed();
  CAF_CHECK(!job.next());
  auto result = job.result();
  CAF_CHECK_EQUAL(result.tier, 4);
  CAF_CHECK_LESS_OR_EQUAL(result.tokens_after, estimate_tokens(ctx) / 2);
  auto after = applied(ctx, result);
  CAF_CHECK_EQUAL(after.front().content.rfind("[Earlier conversation:", 0), 0u);
}

CAF_TEST(a summary no shorter than its text counts as failed) {
  auto ctx = context_of(40, 400);
  compaction_settings s;
  compactor job{ctx, 0, estimate_tokens(ctx) / 2, 1000, s};
  CAF_REQUIRE(job.next());
  auto text = *job.next();
  for (size_t i = 0; job.next() && i < 100; ++i)
    job.summarized(text + text);
  CAF_CHECK(!job.next());
  CAF_CHECK_EQUAL(job.result().tier, 4);
}

CAF_TEST(too few entries are kept as they are) {
  auto ctx = context_of(5, 4000);
  compaction_settings s;
  compactor job{ctx, 0, 100, 1000, s};
  CAF_CHECK(!job.next());
  auto result = job.result();
  CAF_CHECK_EQUAL(result.tier, 0);
  CAF_CHECK(result.put.empty());
  CAF_CHECK(result.retired.empty());
}

CAF_TEST(any model behaviour ends with the protected tail intact) {
  std::mt19937 gen{20261126};
  for (int round = 0; round < 500; ++round) {
    compaction_settings s;
    s.protect_last = 1 + gen() % 6;
    s.min_entries = s.protect_last + 1 + gen() % 4;
    s.chunk_entries = 2 + gen() % 30;
    s.chunk_overlap = gen() % 4;
    auto ctx = context_of(gen() % 150, 1 + gen() % 600);
    for (auto& entry : ctx)
      if (gen() % 5 == 0) {
        entry.role = "tool";
        entry.set_tool_result("", "t");
      }
    auto before = estimate_tokens(ctx);
    compactor job{ctx, gen() % 100, gen() % (before + 1), 200 + gen() % 3000,
                  s};
    size_t asks = 0;
    while (job.next()) {
      CAF_REQUIRE_LESS(++asks, 200u);
      switch (gen() % 3) {
        case 0: job.summarized("short"); break;
        case 1: job.failed(); break;
        default: job.summarized(*job.next() + "!"); break;
      }
    }
    auto result = job.result();
    auto after = applied(ctx, result);
    CAF_REQUIRE(std::is_sorted(after.begin(), after.end(),
                               [](auto& x, auto& y) { return x.seq < y.seq; }));
    CAF_REQUIRE_LESS_OR_EQUAL(estimate_tokens(after), before);
    if (ctx.size() >= s.min_entries)
      for (size_t i = 1; i <= s.protect_last; ++i)
        CAF_REQUIRE(after[after.size() - i] == ctx[ctx.size() - i]);
    else
      CAF_REQUIRE((result.put.empty() && result.retired.empty())
                  || result.tier == 1);
  }
}
