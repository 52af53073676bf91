#define CAF_SUITE admin_paging

// The admin API's paged lists against a real node: following `next` from
// the first page to the last gives every agent once, in thread order, with
// its children; `limit` is capped and checked; a cursor no page gave is
// refused; the dead letters and notifications answer pages of the same
// shape; keelctl still prints whole lists; the supervision tree answers a
// page of each supervisor's children, filtered by path when asked.

#include <string>
#include <vector>

#include <caf/test/unit_test.hpp>

#include "node_client.hpp"
#include "temp_dir.hpp"
#include "text_checks.hpp"

#include "keel/protocol.hpp"

using namespace keel;
using namespace keel::test;
using namespace std::chrono_literals;
using nlohmann::json;

namespace {

const std::vector<std::string> threads = {"pg-a", "pg-b", "pg-c", "pg-d",
                                          "pg-e"};

struct fixture {
  temp_dir dir{"keel-admin-paging"};
  node_process node{dir.str(),
                    slow_echo_yaml("paging-test", dir.str() + "/data", "1ms")};

  fixture() {
    auto client = connect_client(node.address());
    for (auto& thread : threads) {
      CAF_REQUIRE(!client->send_text(protocol::send_frame(thread, "m1", "hi")));
      auto reply = receive_until(*client, [&](const json& j) {
        return j.value("type", "") == "reply"
               && j.value("thread", "") == thread;
      });
      CAF_REQUIRE(reply);
    }
    auto spawned = receive_spawn(*client, "pg-b", "pg-b.kid");
    CAF_REQUIRE_EQUAL(spawned, "spawned");
  }

  static std::string receive_spawn(ws_client& client, const std::string& parent,
                                   const std::string& child) {
    if (client.send_text(protocol::spawn_frame(parent, child, "s1")))
      return "send failed";
    auto answer = receive_until(client, [](const json& j) {
      return j.value("id", "") == "s1";
    });
    return answer ? answer->value("type", "") : "no answer";
  }

  caf::expected<json> get(const std::string& target) {
    return api_call(node.address(), "GET", target);
  }

  /// The tree node below `parent` whose children include the thread
  /// `thread` (the supervisor of the conversations), or null.
  static const json* holder_of(const json& parent, const std::string& thread) {
    for (auto& child : parent["children"]) {
      if (child["id"] == thread)
        return &parent;
      if (auto found = holder_of(child, thread))
        return found;
    }
    return nullptr;
  }
};

} // namespace

CAF_TEST_FIXTURE_SCOPE(admin_paging_tests, fixture)

CAF_TEST(following next gives every agent once in thread order) {
  std::vector<std::string> seen;
  std::string after;
  json kids;
  for (int page = 0; page < 10; ++page) {
    auto target = "/api/v1/agents?limit=2"
                  + (after.empty() ? std::string{} : "&after=" + after);
    auto res = get(target);
    CAF_REQUIRE(res);
    CAF_CHECK_LESS_OR_EQUAL((*res)["agents"].size(), 2u);
    for (auto& x : (*res)["agents"]) {
      seen.push_back(x["thread"].get<std::string>());
      if (x["thread"] == "pg-b")
        kids = x["children"];
    }
    if ((*res)["next"].is_null())
      break;
    after = (*res)["next"].get<std::string>();
    CAF_CHECK_EQUAL(after, seen.back());
  }
  CAF_CHECK_EQUAL(seen, (std::vector<std::string>{"pg-a", "pg-b", "pg-b.kid",
                                                  "pg-c", "pg-d", "pg-e"}));
  CAF_CHECK_EQUAL(kids, json::array({"pg-b.kid"}));
  // Without a limit the page is the default size: all six, the last page.
  auto all = get("/api/v1/agents");
  CAF_REQUIRE(all);
  CAF_CHECK_EQUAL((*all)["agents"].size(), 6u);
  CAF_CHECK((*all)["next"].is_null());
  // A page that ends exactly at the last agent says so.
  auto exact = get("/api/v1/agents?limit=6");
  CAF_REQUIRE(exact);
  CAF_CHECK((*exact)["next"].is_null());
  // keelctl follows the cursors and prints the whole tree.
  auto tree = keelctl_at(node.address(), {"tree", "--agents", "--json"});
  CAF_REQUIRE_EQUAL(tree.exit_code, 0);
  CAF_CHECK_EQUAL(json::parse(tree.out)["agents"].size(), 6u);
}

CAF_TEST(limit is checked and capped) {
  for (auto bad : {"0", "-1", "x", ""}) {
    auto res = get(std::string{"/api/v1/agents?limit="} + bad);
    CAF_REQUIRE(!res);
    KEEL_CHECK_CONTAINS(error_message(res.error()), "limit must be a whole "
                                                    "number from 1");
  }
  auto huge = get("/api/v1/agents?limit=999999");
  CAF_REQUIRE(huge);
  CAF_CHECK_EQUAL((*huge)["agents"].size(), 6u);
}

CAF_TEST(the other lists answer pages of the same shape) {
  auto letters = get("/api/v1/dlq?limit=10");
  CAF_REQUIRE(letters);
  CAF_CHECK((*letters)["dead_letters"].empty());
  CAF_CHECK((*letters)["next"].is_null());
  CAF_CHECK((*letters)["counts"].is_object());
  auto bad_letter = get("/api/v1/dlq?after=nothing-like-an-id");
  CAF_REQUIRE(!bad_letter);
  KEEL_CHECK_CONTAINS(error_message(bad_letter.error()), "'next' of a page");
  auto notices = get("/api/v1/notifications?limit=10");
  CAF_REQUIRE(notices);
  CAF_CHECK((*notices)["notifications"].is_array());
  CAF_CHECK((*notices)["next"].is_null());
  auto bad_notice = get("/api/v1/notifications?after=x");
  CAF_REQUIRE(!bad_notice);
  auto from_cursor = get("/api/v1/notifications?after=1%2Fall_models_failed");
  CAF_REQUIRE(from_cursor);
  CAF_CHECK((*from_cursor)["next"].is_null());
}

CAF_TEST(the tree answers a page of the children of each supervisor) {
  auto whole = get("/api/v1/tree");
  CAF_REQUIRE(whole);
  auto holder = holder_of((*whole)["tree"], "pg-a");
  CAF_REQUIRE(holder != nullptr);
  auto live = (*holder)["children_total"].get<size_t>();
  CAF_CHECK_EQUAL((*holder)["children"].size(), live);
  CAF_CHECK_GREATER_OR_EQUAL(live, threads.size());
  // The limit holds at every level: the filter leads to the threads.
  auto page = get("/api/v1/tree?limit=2&filter=pg-");
  CAF_REQUIRE(page);
  auto paged = holder_of((*page)["tree"], "pg-a");
  CAF_REQUIRE(paged != nullptr);
  CAF_CHECK_EQUAL((*paged)["children"].size(), 2u);
  CAF_CHECK_EQUAL((*paged)["children_total"], live);
  // The filter keeps the matching path and its ancestors only.
  auto one = get("/api/v1/tree?filter=pg-c");
  CAF_REQUIRE(one);
  auto found = holder_of((*one)["tree"], "pg-c");
  CAF_REQUIRE(found != nullptr);
  CAF_CHECK_EQUAL((*found)["children"].size(), 1u);
  CAF_CHECK_EQUAL((*found)["children_total"], 1u);
  CAF_CHECK_EQUAL((*one)["tree"]["children"].size(), 1u);
  auto bad = get("/api/v1/tree?limit=0");
  CAF_REQUIRE(!bad);
  KEEL_CHECK_CONTAINS(error_message(bad.error()), "limit must be a whole");
}

CAF_TEST_FIXTURE_SCOPE_END()
