#define CAF_SUITE compaction

// Context compaction in a real node: a scripted model with a 1,024-token
// window, which summarizes what it is asked to (the transcript's "user: "
// lines) and answers everything else. A 5,000-message thread keeps
// answering, its stored context stays a summary and a few recent entries,
// and its history stays complete; a provider's context overflow compacts
// and retries once.

#include <caf/test/unit_test.hpp>

#include "node_client.hpp"
#include "temp_dir.hpp"
#include "test_store.hpp"

#include "keel/compactor.hpp"
#include "keel/protocol.hpp"

using namespace keel;
using namespace keel::test;
using namespace std::chrono_literals;
using nlohmann::json;

namespace {

std::string compaction_yaml(const temp_dir& dir) {
  auto d = dir.str();
  return "node:\n  name: compaction-test\n  data_dir: " + d
         + "/data\n"
           "gateway:\n  port: 0\n  rate_limit:\n    per_second: 0\n"
           "logging:\n  level: warn\n"
           "providers:\n"
           "  - name: small-model\n    kind: scripted\n"
           "    context_window: 1024\n    script:\n"
           "      - {match: 'too long', fail: context_overflow}\n"
           "      - {match: 'user: ', reply: 'they counted messages'}\n"
           "      - reply: 'answer to {input}'\n"
           "pools:\n  - name: default\n    chain: [small-model]\n"
         + storage_yaml(d + "/data");
}

struct fixture {
  temp_dir dir{"keel-compaction"};
  node_process node{dir.str(), compaction_yaml(dir)};
  std::unique_ptr<ws_client> ws = connect_client(node.address());
  std::map<std::string, size_t> statuses;

  // Waits (bounded) for the reply or error to message `id`, counting the
  // status events on the way.
  json answer_to(const std::string& id) {
    auto answer = receive_until(
      *ws,
      [&](auto& j) {
        if (j["type"] == "status")
          ++statuses[j["state"].template get<std::string>()];
        return (j["type"] == "reply" || j["type"] == "error") && j["id"] == id;
      },
      60s);
    CAF_REQUIRE(answer);
    return *answer;
  }

  void send(const std::string& thread, const std::string& id,
            const std::string& text) {
    CAF_REQUIRE(!ws->send_text(protocol::send_frame(thread, id, text)));
  }

  // The stored context of `thread` on the stopped node.
  std::vector<context_entry> stored_context(const std::string& thread) {
    auto db = open_node_store(dir.str() + "/data");
    CAF_REQUIRE(db);
    auto snapshot = (*db)->load_thread(thread);
    CAF_REQUIRE(snapshot);
    return snapshot->context;
  }
};

} // namespace

CAF_TEST_FIXTURE_SCOPE(compaction_tests, fixture)

CAF_TEST(a 5000 message thread is compacted and keeps answering) {
  constexpr int messages = 5000;
  for (int i = 1; i <= messages; ++i) {
    send("long", "m" + std::to_string(i), "message " + std::to_string(i));
    if (i % 25 == 0) {
      auto answer = answer_to("m" + std::to_string(i));
      CAF_REQUIRE_EQUAL(answer["text"],
                        "answer to message " + std::to_string(i));
    }
  }
  CAF_MESSAGE(statuses["compacted"] << " compactions, "
                                    << statuses["context_warning"]
                                    << " warnings");
  CAF_CHECK_GREATER(statuses["compacted"], 50u);
  CAF_CHECK_GREATER(statuses["context_warning"], 0u);
  auto history = read_whole_history(*ws, "long", 60s);
  CAF_REQUIRE(history);
  CAF_CHECK_EQUAL(count_text(*history, "reply", "answer to message"),
                  size_t{messages});
  CAF_CHECK_EQUAL(history->front()["text"], "message 1");
  node.stop();
  auto context = stored_context("long");
  CAF_MESSAGE("stored context: " << context.size() << " entries, ~"
                                 << estimate_tokens(context) << " tokens");
  CAF_CHECK_LESS(estimate_tokens(context), 1024u);
  CAF_REQUIRE(!context.empty());
  CAF_CHECK_EQUAL(context.front().role, "system");
  CAF_CHECK_EQUAL(context.front().content.rfind(summary_heading, 0), 0u);
  CAF_CHECK_EQUAL(data_violations(dir.str() + "/data"), "");
}

CAF_TEST(a context overflow compacts once and then fails the message) {
  for (int i = 1; i <= 8; ++i) {
    send("t", "m" + std::to_string(i), "message " + std::to_string(i));
    answer_to("m" + std::to_string(i));
  }
  send("t", "big", "this one is too long");
  auto answer = answer_to("big");
  CAF_CHECK_EQUAL(answer["type"], "error");
  CAF_CHECK_EQUAL(answer["code"], "context_overflow");
  CAF_CHECK_EQUAL(statuses["compacting"], 1u);
  CAF_CHECK_EQUAL(statuses["compacted"], 1u);
  send("t", "after", "still there?");
  auto after = answer_to("after");
  CAF_CHECK_EQUAL(after["text"], "answer to still there?");
  node.stop();
  // The first eight exchanges are a summary now; the protected tail stays.
  auto context = stored_context("t");
  CAF_CHECK_EQUAL(context.front().content.rfind(summary_heading, 0), 0u);
  CAF_CHECK_EQUAL(context.back().content, "answer to still there?");
}

CAF_TEST_FIXTURE_SCOPE_END()
