#define CAF_SUITE tools

#include <caf/test/unit_test.hpp>

#include <csignal>
#include <filesystem>
#include <functional>

#include "node_client.hpp"
#include "npm_server.hpp"
#include "raw_records.hpp"
#include "temp_dir.hpp"
#include "test_store.hpp"
#include "text_checks.hpp"

#include "keel/protocol.hpp"
#include "keel/tools/process.hpp"
#include "keel/turn_texts.hpp"

using namespace keel;
using namespace keel::test;
using namespace std::chrono_literals;
using nlohmann::json;

namespace {

// Tools that time out leaving a grandchild, fail, repeat themselves or
// leave a mark, and a scripted model that calls them by what the last user
// message or tool result says.
std::string tools_yaml(const temp_dir& dir) {
  auto d = dir.str();
  return "node:\n  name: tools-test\n  data_dir: " + d
         + "/data\n"
           "gateway:\n  port: 0\n  rate_limit:\n    per_second: 0\n"
           "logging:\n  level: warn\n"
           "tools:\n"
           "  - name: sleepy\n"
           "    description: Sleeps in the background and waits.\n"
           "    command: [sh, -c, 'sleep 300 & echo $! > "
         + d
         + "/grandchild.pid; wait']\n"
           "    timeout: 1s\n    grace: 200ms\n"
           "  - name: flaky\n"
           "    description: Fails, saying which attempt it was.\n"
           "    parameters:\n      type: object\n"
           "      properties:\n        n: {type: string}\n"
           "    command: [sh, -c, 'echo failure {n} >&2; exit 3']\n"
           "  - name: say\n    description: Says again.\n"
           "    command: [echo, again]\n"
           "  - name: note\n    description: Writes a line into a file.\n"
           "    parameters:\n      type: object\n      properties:\n"
           "        path: {type: string}\n        line: {type: string}\n"
           "    loop_key: path\n"
           "    command: [echo, 'noted {line}']\n"
           "  - name: stamp\n    description: Leaves a mark.\n"
           "    command: [sh, -c, 'echo ran >> "
         + d
         + "/stamp.txt; echo stamped']\n"
           "threads:\n  tools: [sleepy, flaky, say, note, stamp]\n"
           "providers:\n"
           "  - name: tool-script\n    kind: scripted\n    script:\n"
           "      - {match: 'interrupted by a restart', reply: 'resumed "
           "after the restart'}\n"
           "      - {match: 'timed out', reply: 'the tool timed out'}\n"
           "      - {match: 'run sleepy', reply: '', tool: {name: sleepy, "
           "arguments: '{}'}}\n"
           "      - {match: 'use flaky', reply: '', tool: {name: flaky, "
           "arguments: '{\"n\": \"1\"}'}}\n"
           "      - {match: 'failure 1', reply: '', tool: {name: flaky, "
           "arguments: '{\"n\": \"2\"}'}}\n"
           "      - {match: 'failure 2', reply: '', tool: {name: flaky, "
           "arguments: '{\"n\": \"3\"}'}}\n"
           "      - {match: 'failure 3', reply: '', tool: {name: flaky, "
           "arguments: '{\"n\": \"4\"}'}}\n"
           "      - {match: 'available here', reply: 'done without flaky'}\n"
           "      - {match: 'loop', reply: '', tool: {name: say, arguments: "
           "'{}'}}\n"
           "      - {match: 'again', reply: '', tool: {name: say, arguments: "
           "'{}'}}\n"
           "      - {match: 'edit the notes', reply: '', tool: {name: note, "
           "arguments: '{\"path\": \"notes.md\", \"line\": \"1\"}'}}\n"
           "      - {match: 'noted 1', reply: '', tool: {name: note, "
           "arguments: '{\"path\": \"notes.md\", \"line\": \"2\"}'}}\n"
           "      - {match: 'noted 2', reply: '', tool: {name: note, "
           "arguments: '{\"path\": \"notes.md\", \"line\": \"3\"}'}}\n"
           "      - {match: 'noted 3', reply: '', tool: {name: note, "
           "arguments: '{\"path\": \"notes.md\", \"line\": \"4\"}'}}\n"
           "      - {match: 'noted 4', reply: '', tool: {name: note, "
           "arguments: '{\"path\": \"notes.md\", \"line\": \"5\"}'}}\n"
           "      - {match: 'stamp it', reply: '', tool: {name: stamp, "
           "arguments: '{}'}}\n"
           "      - {match: 'stamped', reply: 'stamp done'}\n"
           "      - reply: 'answer to {input}'\n"
           "pools:\n  - name: default\n    chain: [tool-script]\n"
         + storage_yaml(d + "/data");
}

// True if process `pid` is gone (or a zombie nobody reaped yet).
bool process_gone(pid_t pid) {
  if (::kill(pid, 0) != 0)
    return true;
  auto stat = read_text_file("/proc/" + std::to_string(pid) + "/stat");
  auto end = stat.rfind(')');
  return end != std::string::npos && end + 2 < stat.size()
         && stat[end + 2] == 'Z';
}

// A node whose model is an OpenAI-compatible server at `base_url`
// (tests/mock-llm/tool-loop.yaml) that calls the tool echo_text, then
// answers with what the tool said.
std::string openai_tools_yaml(const temp_dir& dir,
                              const std::string& base_url) {
  auto d = dir.str();
  return "node:\n  name: tools-openai-test\n  data_dir: " + d
         + "/data\n"
           "gateway:\n  port: 0\n"
           "logging:\n  level: warn\n"
           "tools:\n"
           "  - name: echo_text\n"
           "    description: Prints the text it is given.\n"
           "    parameters:\n      type: object\n"
           "      properties:\n        text: {type: string}\n"
           "      required: [text]\n"
           "    command: [printf, '%s', '{text}']\n"
           "threads:\n  tools: [echo_text]\n"
           "providers:\n"
           "  - name: gpt\n    kind: openai\n    base_url: "
         + base_url
         + "\n    model: mock-model\n    api_key: sk-test\n"
           "    stream: false\n"
           "pools:\n  - name: default\n    chain: [gpt]\n"
         + storage_yaml(d + "/data");
}

struct fixture {
  explicit fixture(std::function<std::string(const temp_dir&)> make_yaml
                   = tools_yaml)
    : node(dir.str(), make_yaml(dir)) {
    // nop
  }

  temp_dir dir{"keel-tools"};
  node_process node;
  std::unique_ptr<ws_client> ws = connect_client(node.address());

  void reconnect() {
    ws = connect_client(node.address());
  }

  // Sends `text` as message `id` and returns the first reply or error
  // answering it; status events seen on the way are kept in `statuses`.
  json ask(const std::string& thread, const std::string& id,
           const std::string& text, std::chrono::seconds timeout = 30s) {
    CAF_REQUIRE(!ws->send_text(protocol::send_frame(thread, id, text)));
    auto answer = receive_until(
      *ws,
      [&](auto& j) {
        if (j["type"] == "status")
          statuses.push_back(j);
        return (j["type"] == "reply" || j["type"] == "error") && j["id"] == id;
      },
      timeout);
    CAF_REQUIRE(answer);
    if ((*answer)["type"] == "error")
      CAF_MESSAGE("error frame: " << answer->dump());
    return *answer;
  }

  json history(const std::string& thread) {
    auto entries = read_history(*ws, thread);
    CAF_REQUIRE(entries);
    return *entries;
  }

  // Asks `thread` to run the stamp tool on a node armed to die at kill
  // point `point` and waits (bounded) until it died.
  void stamp_until_crash(const std::string& thread, const std::string& point) {
    node.kill9();
    node.start({"--kill-at", point});
    reconnect();
    CAF_REQUIRE(!ws->send_text(protocol::send_frame(thread, "m1", "stamp it")));
    auto deadline = std::chrono::steady_clock::now() + 30s;
    while (node.running() && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(20ms);
    CAF_REQUIRE(!node.running());
  }

  // Starts the node again and returns `thread`'s history once message m1
  // has an answer (bounded).
  json restart_until_answered(const std::string& thread) {
    node.start();
    reconnect();
    auto deadline = std::chrono::steady_clock::now() + 30s;
    auto entries = history(thread);
    while (count_answers(entries, "m1") == 0
           && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(50ms);
      entries = history(thread);
    }
    return entries;
  }

  // The replies and errors in `entries` answering client id `id`.
  static size_t count_answers(const json& entries, const std::string& id) {
    return std::count_if(entries.begin(), entries.end(), [&](auto& e) {
      return (e["kind"] == "reply" || e["kind"] == "error")
             && e["client_id"] == id;
    });
  }

  json stamp_across_crash(const std::string& thread, const std::string& point) {
    stamp_until_crash(thread, point);
    return restart_until_answered(thread);
  }

  bool saw_status(const std::string& status) const {
    return std::any_of(statuses.begin(), statuses.end(),
                       [&](auto& j) { return j["state"] == status; });
  }

  /// The first status event of state `status` seen so far.
  json status_of(const std::string& status) const {
    auto i = std::find_if(statuses.begin(), statuses.end(),
                          [&](auto& j) { return j["state"] == status; });
    CAF_REQUIRE(i != statuses.end());
    return *i;
  }

  std::vector<json> statuses;
};

} // namespace

CAF_TEST_FIXTURE_SCOPE(tools_tests, fixture)

CAF_TEST(a tool past its timeout is killed with its whole process tree) {
  auto reply = ask("t1", "m1", "run sleepy");
  CAF_CHECK_EQUAL(reply["type"], "reply");
  CAF_CHECK_EQUAL(reply["text"], "the tool timed out");
  CAF_CHECK(saw_status("tool"));
  // The user hears of it in words; operators read which tool and how long.
  auto timed_out = status_of("tool_timed_out");
  CAF_CHECK_EQUAL(timed_out["text"], protocol::status_texts::tool_timed_out);
  CAF_CHECK_EQUAL(timed_out["detail"], "sleepy timed out after 1 s");
  auto entries = history("t1");
  CAF_CHECK_EQUAL(count_text(entries, "tool", "sleepy timed out after 1 s"),
                  1u);
  auto pid_text = read_text_file(dir.str() + "/grandchild.pid");
  CAF_REQUIRE(!pid_text.empty());
  auto grandchild = static_cast<pid_t>(std::stol(pid_text));
  CAF_CHECK(process_gone(grandchild));
}

CAF_TEST(a tool failing three times is disabled for the thread) {
  auto reply = ask("t2", "m1", "use flaky");
  CAF_CHECK_EQUAL(reply["text"], "done without flaky");
  auto disabled = status_of("tool_disabled");
  CAF_CHECK_EQUAL(disabled["text"], protocol::status_texts::tool_failed);
  auto entries = history("t2");
  CAF_CHECK_EQUAL(count_text(entries, "tool", "[flaky exited with status 3]"),
                  3u);
  CAF_CHECK_EQUAL(count_text(entries, "tool",
                             "The tool flaky failed 3 times in this thread "
                             "and is disabled here"),
                  1u);
  CAF_CHECK_EQUAL(
    count_text(entries, "tool", "no tool named flaky is available here"), 1u);
  // Operators see it: the thread's history and the agent tree.
  auto node_arg = node.address().host + ":"
                  + std::to_string(node.address().port);
  auto shown = run_command(
    {tool_binary("keelctl"), "history", "t2", "--node", node_arg});
  CAF_CHECK_EQUAL(shown.exit_code, 0);
  CAF_CHECK(shown.out.find("tool   [flaky] The tool flaky failed 3 times")
            != std::string::npos);
  auto tree = run_command(
    {tool_binary("keelctl"), "tree", "--agents", "--node", node_arg});
  CAF_CHECK(tree.out.find("[tool failures: flaky 3]") != std::string::npos);
  // Disabled in this thread only: another thread may still call it.
  ask("t3", "m1", "use flaky");
  CAF_CHECK_EQUAL(
    count_text(history("t3"), "tool", "[flaky exited with status 3]"), 3u);
}

CAF_TEST(a model repeating the same call is stopped by the guard) {
  auto answer = ask("t4", "m1", "loop");
  CAF_CHECK_EQUAL(answer["type"], "error");
  CAF_CHECK_EQUAL(answer["code"], "guard_stopped");
  // The user reads that the agent is stuck; operators the guard's report.
  CAF_CHECK_EQUAL(answer["message"], turn_errors::stuck);
  auto text = answer["detail"].get<std::string>();
  CAF_CHECK_EQUAL(text.rfind("Forced stop: say was called 4 times in a row "
                             "with the same arguments. Events processed: ",
                             0),
                  0u);
  CAF_CHECK(text.find("| Tool calls: 3 |") != std::string::npos);
  auto stored = history("t4");
  CAF_CHECK_EQUAL(count_text(stored, "tool", "again"), 3u);
  CAF_REQUIRE(!stored.empty());
  CAF_CHECK_EQUAL(stored.back()["kind"], "error");
  CAF_CHECK_EQUAL(stored.back()["detail"], text);
  // The thread goes on answering.
  auto next = ask("t4", "m2", "hello");
  CAF_CHECK_EQUAL(next["text"], "answer to hello");
  if (next["text"] != "answer to hello")
    CAF_MESSAGE(next.dump() << "\n" << history("t4").dump());
}

CAF_TEST(a tool call cut by a crash before it ran is not run again) {
  auto entries = stamp_across_crash("t5", "tool_call_committed");
  CAF_CHECK_EQUAL(count_text(entries, "reply", "resumed after the restart"),
                  1u);
  CAF_CHECK_EQUAL(count_text(entries, "tool", "interrupted by a restart"), 1u);
  CAF_CHECK(!std::filesystem::exists(dir.str() + "/stamp.txt"));
  node.stop();
  CAF_CHECK_EQUAL(data_violations(dir.str() + "/data"), "");
}

CAF_TEST(a tool that ran before a crash is not run twice) {
  auto entries = stamp_across_crash("t6", "tool_finished");
  CAF_CHECK_EQUAL(count_text(entries, "reply", "resumed after the restart"),
                  1u);
  CAF_CHECK_EQUAL(count_text(entries, "tool", "interrupted by a restart"), 1u);
  CAF_CHECK_EQUAL(read_text_file(dir.str() + "/stamp.txt"), "ran\n");
  node.stop();
  CAF_CHECK_EQUAL(data_violations(dir.str() + "/data"), "");
}

CAF_TEST(a cut tool call survives the quarantine of an older record) {
  // Seqs: "hello" 1, its reply 2, "stamp it" 3, the model's call 4.
  auto first = ask("t7", "m0", "hello");
  CAF_CHECK_EQUAL(first["text"], "answer to hello");
  stamp_until_crash("t7", "tool_call_committed");
  CAF_REQUIRE_EQUAL(write_node_record(dir.str() + "/data", "context",
                                      seq_key("t7", 2), "garbage{"),
                    "OK");
  auto entries = restart_until_answered("t7");
  CAF_CHECK_EQUAL(count_text(entries, "reply", "resumed after the restart"),
                  1u);
  CAF_CHECK_EQUAL(count_text(entries, "tool", "interrupted by a restart"), 1u);
  CAF_CHECK(!std::filesystem::exists(dir.str() + "/stamp.txt"));
}

CAF_TEST(a message whose steps are unreadable is answered not run again) {
  auto first = ask("t8", "m0", "hello");
  CAF_CHECK_EQUAL(first["text"], "answer to hello");
  stamp_until_crash("t8", "tool_call_committed");
  CAF_REQUIRE_EQUAL(write_node_record(dir.str() + "/data", "context",
                                      seq_key("t8", 4), "garbage{"),
                    "OK");
  auto entries = restart_until_answered("t8");
  CAF_CHECK_EQUAL(count_text(entries, "error", "lost track of the steps"), 1u);
  CAF_CHECK_EQUAL(count_answers(entries, "m1"), 1u);
  CAF_CHECK(!std::filesystem::exists(dir.str() + "/stamp.txt"));
  // The thread goes on.
  auto next = ask("t8", "m2", "hello");
  CAF_CHECK_EQUAL(next["text"], "answer to hello");
}

CAF_TEST(calls of a tool on one file again and again are a file loop) {
  auto answer = ask("t9", "m1", "edit the notes");
  CAF_CHECK_EQUAL(answer["code"], "guard_stopped");
  auto detail = answer["detail"].get<std::string>();
  KEEL_CHECK_CONTAINS(detail, "Forced stop: note was called 5 times on "
                              "notes.md (a file loop).");
  // Four ran; the fifth, on the same file, was stopped before it ran.
  CAF_CHECK_EQUAL(count_text(history("t9"), "tool", "noted"), 4u);
}

CAF_TEST_FIXTURE_SCOPE_END()

namespace {

struct mock_server {
  mock_llm mock{"tool-loop.yaml"};
};

// The OpenAI-compatible mock first (its address goes into the config).
struct openai_fixture : mock_server, fixture {
  openai_fixture()
    : fixture([this](const temp_dir& dir) {
        return openai_tools_yaml(dir, mock.base_url());
      }) {
    // nop
  }
};

} // namespace

CAF_TEST_FIXTURE_SCOPE(openai_tools_tests, openai_fixture)

CAF_TEST(an openai model calls a real tool and answers with its result) {
  auto reply = ask("o1", "m1", "what does the tool say?");
  CAF_CHECK_EQUAL(reply["type"], "reply");
  CAF_CHECK_EQUAL(reply["text"], "the tool said: hello from the tool");
  CAF_CHECK(saw_status("tool"));
  auto entries = history("o1");
  CAF_CHECK_EQUAL(count_text(entries, "tool", "hello from the tool"), 1u);
}

CAF_TEST(an openai model stuck calling a tool is stopped by the guard) {
  auto answer = ask("o2", "m1", "[mock:loop] keep going");
  CAF_CHECK_EQUAL(answer["type"], "error");
  CAF_CHECK_EQUAL(answer["code"], "guard_stopped");
  auto text = answer["detail"].get<std::string>();
  CAF_CHECK_EQUAL(text.rfind("Forced stop: echo_text was called 4 times in "
                             "a row with the same arguments.",
                             0),
                  0u);
  CAF_CHECK_EQUAL(count_text(history("o2"), "tool", "hello from the tool"), 3u);
}

CAF_TEST_FIXTURE_SCOPE_END()
