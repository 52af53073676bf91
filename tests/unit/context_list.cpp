#define CAF_SUITE context_list

// The context a conversation shares with its requests: copies share the
// committed entries, a copy's own entries stay its own, `edit` copies only
// while another list still shares, and the list travels as a plain list.

#include <caf/test/unit_test.hpp>

#include <algorithm>
#include <string>
#include <vector>

#include <caf/binary_deserializer.hpp>
#include <caf/binary_serializer.hpp>
#include <caf/deep_to_string.hpp>

#include "keel/context_list.hpp"

using namespace keel;

namespace {

std::vector<std::string> contents(const context_list& xs) {
  std::vector<std::string> result;
  for (auto& x : xs)
    result.push_back(x.content);
  return result;
}

using strings = std::vector<std::string>;

} // namespace

CAF_TEST(a copy shares the entries and keeps its own apart) {
  context_list committed{{1, "user", "a"}, {2, "assistant", "b"}};
  auto request = committed;
  request.push_back({3, "user", "c"});
  CAF_CHECK(request.shares_with(committed));
  CAF_CHECK_EQUAL(contents(committed), strings({"a", "b"}));
  CAF_CHECK_EQUAL(contents(request), strings({"a", "b", "c"}));
  CAF_CHECK_EQUAL(request.size(), 3u);
  CAF_CHECK_EQUAL(request.back().content, "c");
  CAF_CHECK_EQUAL(request[1].content, "b");
  CAF_CHECK_EQUAL(request.rbegin()->content, "c");
  CAF_CHECK_EQUAL(std::prev(request.rend())->content, "a");
  auto user = std::find_if(request.rbegin(), request.rend(),
                           [](auto& x) { return x.role == "user"; });
  CAF_CHECK_EQUAL(user->seq, 3u);
  auto after_one = std::upper_bound(request.begin(), request.end(), 1u,
                                    [](seq_t seq, const context_entry& x) {
                                      return seq < x.seq;
                                    });
  CAF_CHECK_EQUAL(after_one - request.begin(), 1);
}

CAF_TEST(an edit copies only while another list shares the entries) {
  context_list committed{{1, "user", "a"}};
  auto request = committed;
  request.push_back({2, "user", "b"});
  auto& edited = committed.edit();
  edited.push_back({3, "assistant", "x"});
  CAF_CHECK(!committed.shares_with(request));
  CAF_CHECK_EQUAL(contents(request), strings({"a", "b"}));
  CAF_CHECK_EQUAL(contents(committed), strings({"a", "x"}));
  // Alone again: the same entries are edited in place.
  CAF_CHECK_EQUAL(&committed.edit(), &edited);
  // Once the reader is gone, no copy either.
  auto reader = std::make_unique<context_list>(committed);
  CAF_CHECK_EQUAL(reader->shared_entries(), &edited);
  reader.reset();
  CAF_CHECK_EQUAL(&committed.edit(), &edited);
  CAF_CHECK_EQUAL(committed.shared_entries(), &edited);
}

CAF_TEST(an edit takes the entries of a list alone into the shared ones) {
  context_list xs;
  CAF_CHECK(xs.empty());
  xs.push_back({1, "user", "a"});
  auto copy = xs;
  CAF_CHECK(!copy.shares_with(xs));
  xs.edit().push_back({2, "assistant", "b"});
  copy = xs;
  CAF_CHECK(copy.shares_with(xs));
  CAF_CHECK_EQUAL(contents(copy), strings({"a", "b"}));
  CAF_CHECK(copy == xs);
  CAF_CHECK_EQUAL(xs.to_vector().size(), 2u);
}

CAF_TEST(a list travels as a plain list of its entries) {
  context_list xs{{1, "user", "a"}};
  auto request = xs;
  request.push_back({2, "system", "note"});
  std::vector<char> bytes;
  caf::binary_serializer sink{nullptr, bytes};
  CAF_REQUIRE(!sink(request));
  std::vector<char> plain;
  caf::binary_serializer plain_sink{nullptr, plain};
  auto entries = request.to_vector();
  CAF_REQUIRE(!plain_sink(entries));
  CAF_CHECK(bytes == plain);
  context_list read;
  caf::binary_deserializer source{nullptr, bytes};
  CAF_REQUIRE(!source(read));
  CAF_CHECK(read == request);
  CAF_CHECK_EQUAL(caf::deep_to_string(read), caf::deep_to_string(entries));
}
