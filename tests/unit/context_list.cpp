#define CAF_SUITE context_list

// The context a conversation shares with its requests: copies share the
// committed entries, a copy's own entries stay its own, `edit` copies only
// while another list still shares, an append grows the storage by a quarter,
// and the list travels as a plain list. An entry's copies share its tool
// exchange, and its role takes one byte.

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

template <class F>
std::string message_of_throw(F fn) {
  try {
    fn();
  } catch (const std::exception& ex) {
    return ex.what();
  }
  return "nothing thrown";
}

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

CAF_TEST(appending grows the entries by a quarter and not twice over) {
  context_list xs;
  auto request = xs;
  size_t growths = 0;
  size_t capacity = 0;
  for (seq_t seq = 1; seq < 400; seq += 2) {
    if (seq == 201)
      request = xs; // A request in flight holds the entries so far.
    xs.append({{seq, "user", "q"}, {seq + 1, "assistant", "a"}});
    auto& entries = *xs.shared_entries();
    // libstdc++'s `reserve` allocates exactly what it is asked for.
    CAF_CHECK_LESS_OR_EQUAL(entries.capacity(),
                            entries.size() + entries.size() / 4);
    if (entries.capacity() != capacity)
      ++growths;
    capacity = entries.capacity();
  }
  // Geometric growth: 2, 4, ..., 12, 15, 17, 20, 25, ..., 487, with the
  // copy made while the request shared the entries, in 25 steps (room for
  // just the new entries would take 200; doubling breaks the bound).
  CAF_CHECK_EQUAL(growths, 25u);
  CAF_REQUIRE_EQUAL(xs.size(), 400u);
  for (size_t i = 0; i < xs.size(); ++i)
    CAF_CHECK_EQUAL(xs[i].seq, i + 1);
  CAF_CHECK_EQUAL(request.size(), 200u);
  CAF_CHECK(!request.shares_with(xs));
}

CAF_TEST(copies of an entry share its tool exchange and change apart) {
  context_entry call{2, "assistant", ""};
  call.set_tool_calls({tool_call{"c1", "ls", "{}"}});
  auto copy = call;
  CAF_CHECK_EQUAL(&copy.tools(), &call.tools());
  copy.set_tool_result("c1", "ls");
  CAF_CHECK_EQUAL(call.tool_call_id(), "");
  CAF_CHECK_EQUAL(copy.tool_call_id(), "c1");
  CAF_CHECK_EQUAL(copy.tool_calls().size(), 1u);
  CAF_CHECK(!(copy == call));
  copy.set_tools({});
  CAF_CHECK(copy.tools().empty());
  CAF_CHECK(copy == (context_entry{2, "assistant", ""}));
  CAF_CHECK_EQUAL(call.tool_calls().size(), 1u);
}

CAF_TEST(an entry keeps its role in one byte) {
  // With libstdc++ on x86-64: seq, content (32), message_seq, tools, role.
  CAF_CHECK_EQUAL(sizeof(context_entry), 64u);
  context_entry user{1, "user", "hi"};
  CAF_CHECK(user.role == "user");
  CAF_CHECK(user.role != "assistant");
  CAF_CHECK(user.role == *context_role::parse("user"));
  CAF_CHECK_EQUAL(user.role.str(), "user");
  CAF_CHECK_EQUAL(context_role{}.str(), "");
  // No build writes any other role: the code cannot make one, and a
  // record naming one does not load (see the json_codec suite).
  CAF_CHECK(!context_role::parse("error"));
  CAF_CHECK_EQUAL(message_of_throw([] { context_role{"error"}; }),
                  "unknown context role 'error'");
  // The role travels as its name.
  context_entry entry{4, "system", "note"};
  std::vector<char> buf;
  caf::binary_serializer sink{nullptr, buf};
  CAF_REQUIRE(!sink(entry));
  CAF_CHECK(std::search(buf.begin(), buf.end(), std::begin("system"),
                        std::end("system") - 1)
            != buf.end());
  context_entry copy;
  caf::binary_deserializer source{nullptr, buf};
  CAF_REQUIRE(!source(copy));
  CAF_CHECK(copy == entry);
  CAF_CHECK_EQUAL(copy.role, "system");
}
