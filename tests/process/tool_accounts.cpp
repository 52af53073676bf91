#define CAF_SUITE tool_accounts

// What a tool can learn of the node: a tool run as another account
// (tools[].user) cannot read the node's /proc files; the node's /proc
// files are root's even for its own user (PR_SET_DUMPABLE 0); and a tool
// gets only PATH and the variables its env: names.

#include <caf/test/unit_test.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "node_client.hpp"
#include "temp_dir.hpp"
#include "test_store.hpp"
#include "text_checks.hpp"

#include "keel/protocol.hpp"

using namespace keel;
using namespace keel::test;
using namespace std::chrono_literals;
using nlohmann::json;

namespace {

constexpr const char* secret = "sk-keel-accounts-test-secret";

// Secrets in the environment the node inherits from the test.
struct secret_env {
  secret_env() {
    ::setenv("OPENAI_API_KEY", secret, 1);
    ::setenv("KEEL_ADMIN_TOKEN", secret, 1);
    ::setenv("KEEL_TOOL_LANG", "passed", 1);
  }
  ~secret_env() {
    ::unsetenv("OPENAI_API_KEY");
    ::unsetenv("KEEL_ADMIN_TOKEN");
    ::unsetenv("KEEL_TOOL_LANG");
  }
};

// Tools that show who they run as and try the node's environment ($PPID:
// the node starts each tool itself), and one that prints its environment.
std::string accounts_yaml(const temp_dir& dir) {
  auto d = dir.str();
  return "node:\n  name: accounts-test\n  data_dir: " + d
         + "/data\n"
           "gateway:\n  port: 0\n"
           "logging:\n  level: warn\n"
           "tools:\n"
           "  - name: peek\n"
           "    description: Reads the node's environment.\n"
           "    command: [sh, -c, 'id -u; id -g; id -G; cat "
           "/proc/$$PPID/environ "
           "|| echo refused']\n"
           "    user: nobody\n"
           "  - name: peek_as_root\n"
           "    description: Reads the node's environment as the node.\n"
           "    command: [sh, -c, 'grep -ac OPENAI_API_KEY "
           "/proc/$$PPID/environ']\n"
           "  - name: show_env\n"
           "    description: Prints its environment.\n"
           "    command: [env]\n"
           "    env: [KEEL_TOOL_LANG]\n"
           "threads:\n  tools: [peek, peek_as_root, show_env]\n"
           "providers:\n"
           "  - name: tool-script\n    kind: scripted\n    script:\n"
           "      - {match: 'run peek_as_root', reply: '', tool: {name: "
           "peek_as_root, arguments: '{}'}}\n"
           "      - {match: 'run peek', reply: '', tool: {name: peek, "
           "arguments: '{}'}}\n"
           "      - {match: 'run show_env', reply: '', tool: {name: show_env, "
           "arguments: '{}'}}\n"
           "      - reply: 'tool said: {input}'\n"
           "pools:\n  - name: default\n    chain: [tool-script]\n"
         + storage_yaml(d + "/data");
}

json ask(const endpoint& node, const std::string& thread,
         const std::string& text) {
  auto ws = connect_client(node);
  CAF_REQUIRE(!ws->send_text(protocol::send_frame(thread, "m1", text)));
  auto reply = receive_until(
    *ws,
    [&](auto& j) {
      return (j["type"] == "reply" || j["type"] == "error")
             && j["thread"] == thread;
    },
    30s);
  CAF_REQUIRE(reply);
  return *reply;
}

struct fixture {
  secret_env env;
  temp_dir dir{"keel-accounts"};
  node_process node{dir.str(), accounts_yaml(dir)};
};

// A script starting keel-node as nobody (uid and gid 65534, no other
// groups) in `dir`, which it hands to nobody first.
std::string nobody_launcher(const temp_dir& dir) {
  auto path = dir.str() + "/as-nobody.sh";
  std::ofstream{path} << "#!/bin/sh\nchown -R 65534:65534 " << dir.str()
                      << "\nexec setpriv --reuid=65534 --regid=65534 "
                         "--clear-groups "
                      << node_binary() << " \"$@\"\n";
  std::filesystem::permissions(path, std::filesystem::perms::owner_all);
  return path;
}

// The exit code of `cat /proc/PID/environ` run as nobody, and its output.
command_result read_environ_as_nobody(pid_t pid) {
  return run_command({"setpriv", "--reuid=65534", "--regid=65534",
                      "--clear-groups", "cat",
                      "/proc/" + std::to_string(pid) + "/environ"});
}

} // namespace

CAF_TEST_FIXTURE_SCOPE(tool_accounts_tests, fixture)

CAF_TEST(a tool run as another user cannot read the environment of the node) {
  auto text = ask(node.address(), "a1", "run peek")["text"].get<std::string>();
  KEEL_CHECK_CONTAINS(text, "tool said: 65534\n65534\n65534\n");
  KEEL_CHECK_CONTAINS(text, "refused");
  CAF_CHECK_EQUAL(text.find(secret), std::string::npos);
  // The same read as the node's user works (root here): the test would
  // show nothing if the environment held no secret.
  auto as_node = ask(node.address(), "a2", "run peek_as_root");
  KEEL_CHECK_CONTAINS(as_node["text"].get<std::string>(), "tool said: 1");
}

CAF_TEST(a tool gets only PATH and the variables it names) {
  auto text
    = ask(node.address(), "a3", "run show_env")["text"].get<std::string>();
  auto path = std::getenv("PATH");
  CAF_REQUIRE(path != nullptr);
  CAF_CHECK_EQUAL(text, "tool said: PATH=" + std::string{path}
                          + "\nKEEL_TOOL_LANG=passed\n");
}

CAF_TEST_FIXTURE_SCOPE_END()

CAF_TEST(the own user of the node cannot read its environment) {
  secret_env env;
  temp_dir dir{"keel-accounts-nobody"};
  auto launcher = nobody_launcher(dir);
  node_process node{dir.str(), accounts_yaml(dir), launcher};
  CAF_REQUIRE(node.pid() > 0);
  auto status
    = read_text_file("/proc/" + std::to_string(node.pid()) + "/status");
  KEEL_CHECK_CONTAINS(status, "Uid:\t65534\t65534\t65534\t65534");
  auto read = read_environ_as_nobody(node.pid());
  CAF_CHECK_NOT_EQUAL(read.exit_code, 0);
  CAF_CHECK_EQUAL(read.out.find(secret), std::string::npos);
  KEEL_CHECK_CONTAINS(read.err, "Permission denied");
  node.stop();
}
