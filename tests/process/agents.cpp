#define CAF_SUITE agents

#include <thread>

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

// A scripted pool: "delegate" makes the model call spawn_agent (task
// "summarize the report"); "tell" calls message_agent ("keep going"); "slow"
// answers after 2 s (so a cancel finds pending work); everything else is
// answered at once. The tasks do not contain the triggers, or every child
// would spawn a grandchild in turn. `steps` go before these, `extra`
// (top-level sections) at the end.
std::string agents_yaml(const temp_dir& dir, const std::string& steps = {},
                        const std::string& extra = {}) {
  return "node:\n  name: agents-test\n  data_dir: " + dir.str()
         + "/data\n"
           "gateway:\n  port: 0\n"
           "logging:\n  level: warn\n"
           "providers:\n"
           "  - name: agent-script\n    kind: scripted\n"
           "    script:\n"
         + steps
         + "      - match: \"delegate \"\n"
           "        reply: \"delegating\"\n"
           "        tool:\n          name: spawn_agent\n"
           "          arguments: '{\"name\": \"helper\", \"task\": "
           "\"summarize the report\"}'\n"
           "      - match: \"tell \"\n"
           "        reply: \"telling\"\n"
           "        tool:\n          name: message_agent\n"
           "          arguments: '{\"name\": \"helper\", \"text\": "
           "\"keep going\"}'\n"
           "      - match: \"slow\"\n"
           "        reply: \"slow answer\"\n"
           "        delay: 2s\n"
           "      - reply: \"answer to {input}\"\n"
           "pools:\n  - name: default\n    chain: [agent-script]\n"
         + storage_yaml(dir.str() + "/data") + extra;
}

// Small agent limits, and a parent model that answers every message from
// its child by messaging the child again: without the hop budget the two
// would talk forever.
std::string limits_yaml(const temp_dir& dir) {
  return agents_yaml(dir,
                     "      - match: \"[agent \"\n"
                     "        reply: \"again\"\n"
                     "        tool:\n          name: message_agent\n"
                     "          arguments: '{\"name\": \"helper\", "
                     "\"text\": \"once more\"}'\n",
                     "threads:\n  agents:\n    max_children: 2\n"
                     "    max_depth: 2\n    hop_budget: 6\n");
}

std::string plain_yaml(const temp_dir& dir) {
  return agents_yaml(dir);
}

struct fixture {
  explicit fixture(std::string (*make_yaml)(const temp_dir&) = plain_yaml)
    : node(dir.str(), make_yaml(dir)) {
    // nop
  }

  temp_dir dir{"keel-agents"};
  node_process node;
  std::unique_ptr<ws_client> ws = connect_client(node.address());

  // Sends and waits for the ack; returns the user message's seq.
  uint64_t send(const std::string& thread, const std::string& id,
                const std::string& text) {
    CAF_REQUIRE(!ws->send_text(protocol::send_frame(thread, id, text)));
    auto ack = receive_until(*ws, [&](auto& j) {
      return j["type"] == "ack" && j["id"] == id;
    });
    CAF_REQUIRE(ack);
    return (*ack)["seq"].get<uint64_t>();
  }

  // Sends a frame and returns the first answer with this id.
  json request(const std::string& frame, const std::string& id) {
    CAF_REQUIRE(!ws->send_text(frame));
    auto answer = receive_until(*ws, [&](auto& j) {
      return j["type"] != "status" && j["type"] != "delta" && j.contains("id")
             && j["id"] == id;
    });
    CAF_REQUIRE(answer);
    return *answer;
  }

  json history(const std::string& thread) {
    auto entries = read_history(*ws, thread);
    CAF_REQUIRE(entries);
    return *entries;
  }

  // Polls the history until `pred` holds for it (bounded).
  template <class Pred>
  json history_until(const std::string& thread, Pred pred) {
    auto deadline = std::chrono::steady_clock::now() + 20s;
    auto entries = history(thread);
    while (!pred(entries) && std::chrono::steady_clock::now() < deadline)
      entries = history(thread);
    return entries;
  }
};

} // namespace

CAF_TEST_FIXTURE_SCOPE(agents_tests, fixture)

CAF_TEST(a spawned child answers and its reply reaches the parent) {
  send("p", "m1", "hello");
  auto bad = request(protocol::spawn_frame("nobody", "nobody.c", "s0"), "s0");
  CAF_CHECK_EQUAL(bad["type"], "error");
  CAF_CHECK_EQUAL(bad["code"], "not_found");
  auto spawned = request(protocol::spawn_frame("p", "p.c", "s1"), "s1");
  CAF_CHECK_EQUAL(spawned["type"], "spawned");
  CAF_CHECK_EQUAL(spawned["child"], "p.c");
  CAF_CHECK_EQUAL(spawned["created"], true);
  auto again = request(protocol::spawn_frame("p", "p.c", "s2"), "s2");
  CAF_CHECK_EQUAL(again["created"], false);
  send("p.c", "c1", "work item");
  // The child's reply arrives in the parent as a message, answered once.
  auto parent = history_until("p", [](const json& entries) {
    return count_text(entries, "reply", "[agent p.c] answer to work item") == 1;
  });
  CAF_CHECK_EQUAL(count_text(parent, "user",
                             "[agent p.c] answer to work "
                             "item"),
                  1u);
  CAF_CHECK_EQUAL(count_text(parent, "reply",
                             "answer to [agent p.c] answer "
                             "to work item"),
                  1u);
  // The session records name the provider and model that answered.
  auto agents = api_call(node.address(), "GET", "/api/v1/agents");
  CAF_REQUIRE(agents);
  for (auto& agent : (*agents)["agents"]) {
    CAF_CHECK_EQUAL(agent["provider"], "agent-script");
    CAF_CHECK_EQUAL(agent["model"], "scripted");
  }
  auto out = run_command(
    {tool_binary("keelctl"), "tree", "--agents", "--node",
     node.address().host + ":" + std::to_string(node.address().port)});
  CAF_CHECK_EQUAL(out.exit_code, 0);
  CAF_CHECK(out.out.find("p.c") != std::string::npos);
}

CAF_TEST(the model spawns and messages a child through the agent tools) {
  send("q", "m1", "delegate the summary");
  auto child = history_until("q.helper", [](const json& entries) {
    return count_text(entries, "reply", "answer to [parent q]") == 1;
  });
  CAF_CHECK_EQUAL(count_text(child, "user", "[parent q] summarize the report"),
                  1u);
  auto parent = history_until("q", [](const json& entries) {
    return count_text(entries, "reply", "answer to [agent q.helper]") == 1;
  });
  CAF_CHECK_EQUAL(count_text(parent, "reply", "[spawned agent q.helper]"), 1u);
  send("q", "m2", "tell the helper");
  auto child2 = history_until("q.helper", [](const json& entries) {
    return count_text(entries, "reply", "answer to [parent q] keep going") == 1;
  });
  CAF_CHECK_EQUAL(count_text(child2, "user", "[parent q] keep going"), 1u);
  parent = history(("q"));
  CAF_CHECK_EQUAL(count_text(parent, "reply", "[message to agent q.helper]"),
                  1u);
}

CAF_TEST(the model messages a child a client spawned while it ran) {
  send("w", "m1", "hello"); // w's conversation runs from here on.
  auto spawned = request(protocol::spawn_frame("w", "w.helper", "s1"), "s1");
  CAF_CHECK_EQUAL(spawned["type"], "spawned");
  send("w", "m2", "tell the helper");
  auto child = history_until("w.helper", [](const json& entries) {
    return count_text(entries, "reply", "answer to [parent w] keep going") == 1;
  });
  CAF_CHECK_EQUAL(count_text(child, "user", "[parent w] keep going"), 1u);
  CAF_CHECK_EQUAL(
    count_text(history("w"), "reply", "[message to agent w.helper]"), 1u);
}

CAF_TEST(a tool spawn of an id another thread holds is refused and noted) {
  // A client made z.helper a root first: the tool may not take it over.
  send("z.helper", "h1", "hello");
  send("z", "m1", "delegate the summary");
  auto parent = history_until("z", [](const json& entries) {
    return count_text(entries, "reply", "[cannot spawn agent z.helper") == 1;
  });
  CAF_CHECK_EQUAL(count_text(parent, "reply",
                             "[cannot spawn agent z.helper: cannot spawn "
                             "z.helper under z: the thread exists as a root]"),
                  1u);
  // The root kept its log and got no message from z.
  auto root = history("z.helper");
  CAF_CHECK_EQUAL(count_text(root, "user", "[parent z]"), 0u);
  CAF_CHECK_EQUAL(count_text(root, "reply", "answer to hello"), 1u);
  CAF_REQUIRE_EQUAL(node.stop(), 0);
  CAF_CHECK_EQUAL(data_violations(dir.str() + "/data"), "");
}

CAF_TEST(cancelling a parent cancels its children and answers pending work) {
  send("r", "m1", "hello");
  auto a = request(protocol::spawn_frame("r", "r.a", "s1"), "s1");
  CAF_CHECK_EQUAL(a["type"], "spawned");
  auto b = request(protocol::spawn_frame("r.a", "r.a.b", "s2"), "s2");
  CAF_CHECK_EQUAL(b["type"], "spawned");
  send("r.a.b", "b1", "slow one");
  send("r.a.b", "b2", "slow two");
  auto cancelled = request(protocol::cancel_frame("r", "x1"), "x1");
  CAF_REQUIRE_EQUAL(cancelled["type"], "cancelled");
  auto threads = cancelled["threads"].get<std::vector<std::string>>();
  CAF_CHECK_EQUAL(threads, (std::vector<std::string>{"r", "r.a", "r.a.b"}));
  // Every acknowledged message got exactly one outcome.
  auto log = history("r.a.b");
  size_t outcomes = 0;
  for (auto& e : log)
    if (e["kind"] != "user")
      ++outcomes;
  CAF_CHECK_EQUAL(outcomes, 2u);
  CAF_CHECK_GREATER_OR_EQUAL(count_text(log, "error", "cancelled"), 1u);
  auto refused = request(protocol::send_frame("r.a", "a9", "more"), "a9");
  CAF_CHECK_EQUAL(refused["type"], "error");
  CAF_CHECK_EQUAL(refused["code"], "thread_closed");
}

CAF_TEST(a restart after kill - 9 recovers and reports what it did) {
  send("k", "m1", "hello");
  auto spawned = request(protocol::spawn_frame("k", "k.c", "s1"), "s1");
  CAF_CHECK_EQUAL(spawned["type"], "spawned");
  send("k.c", "c1", "slow pending");
  node.kill9();
  node.start();
  ws = connect_client(node.address());
  // The pending message is answered after the restart, exactly once.
  auto child = history_until("k.c", [](const json& entries) {
    return count_text(entries, "reply", "slow answer") == 1;
  });
  CAF_CHECK_EQUAL(count_text(child, "reply", "slow answer"), 1u);
  auto node_arg = node.address().host + ":"
                  + std::to_string(node.address().port);
  auto out = run_command(
    {tool_binary("keelctl"), "recovery", "--json", "--node", node_arg});
  CAF_REQUIRE_EQUAL(out.exit_code, 0);
  auto report = json::parse(out.out);
  CAF_CHECK_GREATER_OR_EQUAL(report["suspended"].get<uint64_t>(), 1u);
  CAF_CHECK_EQUAL(report["inbox_messages"].get<uint64_t>(), 1u);
  CAF_CHECK_EQUAL(report["sessions"].get<uint64_t>(), 2u);
  CAF_CHECK_EQUAL(report["links"].get<uint64_t>(), 1u);
  CAF_CHECK_EQUAL(report["steps"].size(), 6u);
  CAF_REQUIRE_EQUAL(node.stop(), 0);
  CAF_CHECK_EQUAL(data_violations(dir.str() + "/data"), "");
}

CAF_TEST_FIXTURE_SCOPE_END()

namespace {

struct limits_fixture : fixture {
  limits_fixture() : fixture(limits_yaml) {
    // nop
  }
};

} // namespace

CAF_TEST_FIXTURE_SCOPE(agent_limits_tests, limits_fixture)

CAF_TEST(the hop budget ends two agents messaging each other) {
  send("x", "m1", "delegate the summary");
  // x -> helper (1), helper -> x (2), ... helper -> x (6): x may not
  // answer the sixth message by messaging the helper again. (The status
  // event first: reading histories skips the events on the way.)
  auto notice = receive_until(
    *ws,
    [](auto& j) {
      return j["type"] == "status" && j["state"] == "agent_limit";
    },
    20s);
  CAF_REQUIRE(notice);
  auto detail = (*notice)["detail"].get<std::string>();
  CAF_CHECK(detail.find("threads.agents.hop_budget") != std::string::npos);
  auto parent = history_until("x", [](const json& entries) {
    return count_text(entries, "reply", "[cannot message agent x.helper") == 1;
  });
  CAF_CHECK_EQUAL(count_text(parent, "reply",
                             "[cannot message agent x.helper: the agents "
                             "exchanged 6 messages for one client message, "
                             "the most they may (threads.agents.hop_budget)]"),
                  1u);
  CAF_CHECK_EQUAL(count_text(parent, "user", "[agent x.helper]"), 3u);
  // The helper answered each of its three messages once, and nothing more
  // is under way.
  auto child = history("x.helper");
  CAF_CHECK_EQUAL(count_text(child, "user", "[parent x]"), 3u);
  CAF_CHECK_EQUAL(count_text(child, "reply", "answer to [parent x]"), 3u);
  CAF_REQUIRE_EQUAL(node.stop(), 0);
  CAF_CHECK_EQUAL(data_violations(dir.str() + "/data"), "");
}

CAF_TEST(spawns past the children and depth limits are refused) {
  send("y", "m1", "hello");
  auto first = request(protocol::spawn_frame("y", "y.a", "s1"), "s1");
  CAF_CHECK_EQUAL(first["type"], "spawned");
  auto second = request(protocol::spawn_frame("y", "y.b", "s2"), "s2");
  CAF_CHECK_EQUAL(second["type"], "spawned");
  auto third = request(protocol::spawn_frame("y", "y.c", "s3"), "s3");
  CAF_CHECK_EQUAL(third["type"], "error");
  CAF_CHECK_EQUAL(third["code"], "agent_limit");
  auto why = third["message"].get<std::string>();
  CAF_CHECK(why.find("threads.agents.max_children") != std::string::npos);
  // A spawn sent again is answered as before, at the limit too.
  auto again = request(protocol::spawn_frame("y", "y.b", "s4"), "s4");
  CAF_CHECK_EQUAL(again["created"], false);
  auto deep = request(protocol::spawn_frame("y.a", "y.a.a", "s5"), "s5");
  CAF_CHECK_EQUAL(deep["type"], "spawned");
  auto deeper = request(protocol::spawn_frame("y.a.a", "y.a.a.a", "s6"), "s6");
  CAF_CHECK_EQUAL(deeper["code"], "agent_limit");
  why = deeper["message"].get<std::string>();
  CAF_CHECK(why.find("threads.agents.max_depth") != std::string::npos);
  // The model's spawn is refused alike, and told why.
  send("y", "m2", "delegate the summary");
  auto parent = history_until("y", [](const json& entries) {
    return count_text(entries, "reply", "[cannot spawn agent y.helper") == 1;
  });
  CAF_CHECK_EQUAL(count_text(parent, "reply",
                             "[cannot spawn agent y.helper: cannot spawn "
                             "y.helper under y: it has 2 child agents, the "
                             "most a thread may have "
                             "(threads.agents.max_children)]"),
                  1u);
  auto agents = api_call(node.address(), "GET", "/api/v1/agents");
  CAF_REQUIRE(agents);
  CAF_CHECK_EQUAL((*agents)["agents"].size(), 4u);
  CAF_REQUIRE_EQUAL(node.stop(), 0);
  CAF_CHECK_EQUAL(data_violations(dir.str() + "/data"), "");
}

CAF_TEST_FIXTURE_SCOPE_END()

namespace {

// Dead letters retried every second, abandoned after two retries.
std::string dead_letter_yaml(const temp_dir& dir) {
  return agents_yaml(dir, {},
                     "delivery:\n  dead_letters:\n    max_retries: 2\n"
                     "    interval: 1s\n");
}

struct dead_letter_fixture : fixture {
  dead_letter_fixture() : fixture(dead_letter_yaml) {
    // nop
  }

  command_result keelctl(const std::vector<std::string>& args) {
    return keelctl_at(node.address(), args);
  }

  // The dead letters as `keelctl dlq list --json` prints them.
  json letters() {
    return dead_letters_at(node.address());
  }

  // Polls the letters until `pred` holds for them (bounded).
  template <class Pred>
  json letters_until(Pred pred) {
    auto deadline = std::chrono::steady_clock::now() + 20s;
    auto xs = letters();
    while (!pred(xs) && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(100ms); // polling a running process
      xs = letters();
    }
    return xs;
  }
};

} // namespace

CAF_TEST_FIXTURE_SCOPE(dead_letter_tests, dead_letter_fixture)

CAF_TEST(a message to a cancelled child is retried then abandoned and operators
           see it) {
  send("d", "m1", "hello");
  auto spawned = request(protocol::spawn_frame("d", "d.helper", "s1"), "s1");
  CAF_REQUIRE_EQUAL(spawned["type"], "spawned");
  auto cancelled = request(protocol::cancel_frame("d.helper", "x1"), "x1");
  CAF_REQUIRE_EQUAL(cancelled["type"], "cancelled");
  send("d", "m2", "tell the helper");
  auto xs = letters_until([](const json& xs) {
    return xs.size() == 1 && xs[0]["status"] == "abandoned";
  });
  CAF_REQUIRE_EQUAL(xs.size(), 1u);
  CAF_CHECK_EQUAL(xs[0]["status"], "abandoned");
  CAF_CHECK_EQUAL(xs[0]["to"], "d.helper");
  CAF_CHECK_EQUAL(xs[0]["retries"], 2);
  CAF_CHECK_EQUAL(xs[0]["events"].size(), 2u);
  auto id = xs[0]["id"].get<std::string>();
  auto list = keelctl({"dlq", "list", "--status", "abandoned"});
  CAF_CHECK_EQUAL(list.exit_code, 0);
  KEEL_CHECK_CONTAINS(list.out, id);
  KEEL_CHECK_CONTAINS(list.out, "d.helper");
  CAF_CHECK(keelctl({"dlq", "list", "--status", "pending"}).out.find(id)
            == std::string::npos);
  auto shown = keelctl({"dlq", "show", id});
  CAF_CHECK_EQUAL(shown.exit_code, 0);
  KEEL_CHECK_CONTAINS(shown.out, "abandoned");
  KEEL_CHECK_CONTAINS(shown.out, "scheduled retry: thread_closed");
  auto retried = keelctl({"dlq", "retry", id});
  CAF_CHECK_EQUAL(retried.exit_code, 1); // it could not deliver
  KEEL_CHECK_CONTAINS(retried.out, "operator retry: thread_closed");
  KEEL_CHECK_CONTAINS(retried.err, "the retry did not deliver " + id);
  auto leading_zero = keelctl(
    {"dlq", "show",
     id.substr(0, id.find('/') + 1) + "0" + id.substr(id.find('/') + 1)});
  CAF_CHECK_EQUAL(leading_zero.exit_code, 0);
  auto dropped = keelctl({"dlq", "drop", id, "--reason", "the child is gone"});
  CAF_CHECK_EQUAL(dropped.exit_code, 0);
  KEEL_CHECK_CONTAINS(dropped.out, "dropped");
  KEEL_CHECK_CONTAINS(dropped.out, "operator drop: the child is gone");
  auto again = keelctl({"dlq", "retry", id});
  CAF_CHECK_EQUAL(again.exit_code, 1);
  KEEL_CHECK_CONTAINS(again.err, "already dropped");
  auto unknown = keelctl({"dlq", "show", "d/999"});
  CAF_CHECK_EQUAL(unknown.exit_code, 1);
  KEEL_CHECK_CONTAINS(unknown.err, "no dead letter d/999");
  // What the operators did is in the letter, and it stays after a restart.
  CAF_CHECK_EQUAL(node.stop(), 0);
  node.start();
  xs = letters();
  CAF_REQUIRE_EQUAL(xs.size(), 1u);
  CAF_CHECK_EQUAL(xs[0]["status"], "dropped");
  CAF_CHECK_EQUAL(xs[0]["events"].size(), 4u);
}

CAF_TEST_FIXTURE_SCOPE_END()
