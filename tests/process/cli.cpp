#define CAF_SUITE cli

#include <fstream>

#include <caf/test/unit_test.hpp>

#include "keel/json_codec.hpp"
#include "keel/protocol.hpp"
#include "keel/store.hpp"
#include "keel/stored_form.hpp"
#include "node_client.hpp"
#include "temp_dir.hpp"
#include "text_checks.hpp"

using namespace keel;
using namespace keel::test;

namespace {

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

std::string node_yaml(const temp_dir& dir) {
  return "node:\n  name: cli-test\n  data_dir: " + dir.str()
         + "/data\ngateway:\n  port: 0\nlogging:\n  level: warn\n";
}

std::string node_flag(const node_process& node) {
  return "127.0.0.1:" + std::to_string(node.address().port);
}

} // namespace

CAF_TEST(check - config accepts the shipped example and names bad keys) {
  auto source = std::getenv("KEEL_SOURCE_DIR");
  CAF_REQUIRE(source != nullptr);
  auto ok = run_command({node_binary(), "--check-config",
                         std::string{source} + "/config/example.yaml"});
  CAF_CHECK_EQUAL(ok.exit_code, 0);
  temp_dir dir{"keel-cli"};
  auto bad = dir.str() + "/bad.yaml";
  std::ofstream{bad} << "node:\n  name: x\ngateway:\n  prot: 80\n";
  for (auto flag : {"--check-config", "--config"}) {
    auto res = run_command({node_binary(), flag, bad});
    CAF_CHECK_EQUAL(res.exit_code, 2);
    CAF_CHECK(contains(res.err, "bad.yaml:4"));
    CAF_CHECK(contains(res.err, "gateway.prot"));
    CAF_MESSAGE("stderr: " << res.err);
  }
}

CAF_TEST(check - config prints the warnings a start would log) {
  temp_dir dir{"keel-cli"};
  auto file = dir.str() + "/warned.yaml";
  std::ofstream{file} << "gateway:\n  token: cli-secret-1\n"
                      << "  allow_query_token: true\n";
  auto res = run_command({node_binary(), "--check-config", file});
  CAF_CHECK_EQUAL(res.exit_code, 0);
  CAF_CHECK(contains(res.out, "configuration is valid"));
  CAF_CHECK(contains(res.err, "warned.yaml: warning: "));
  CAF_CHECK(contains(res.err, "allow_query_token"));
  CAF_CHECK(contains(res.err, "gateway.admin_token is not set"));
  CAF_CHECK(!contains(res.out + res.err, "cli-secret-1"));
  CAF_MESSAGE("stderr: " << res.err);
}

CAF_TEST(keelctl sends and reads history and status) {
  temp_dir dir{"keel-cli"};
  node_process node{dir.str(), node_yaml(dir)};
  auto ctl = tool_binary("keelctl");
  auto sent = run_command(
    {ctl, "send", "--node", node_flag(node), "t1", "hello there"});
  CAF_CHECK_EQUAL(sent.exit_code, 0);
  CAF_CHECK(contains(sent.out, "echo: hello there"));
  auto hist = run_command({ctl, "history", "--node", node_flag(node), "t1"});
  CAF_CHECK_EQUAL(hist.exit_code, 0);
  CAF_CHECK(contains(hist.out, "hello there"));
  CAF_CHECK(contains(hist.out, "echo: hello there"));
  auto status = run_command({ctl, "status", "--node", node_flag(node)});
  CAF_CHECK_EQUAL(status.exit_code, 0);
  CAF_CHECK(contains(status.out, "cli-test"));
  CAF_CHECK_EQUAL(node.stop(), 0);
  auto down = run_command({ctl, "status", "--node", node_flag(node)});
  CAF_CHECK_EQUAL(down.exit_code, 3);
  CAF_CHECK(contains(down.err, "cannot reach"));
}

CAF_TEST(a second node on the same data folder fails with a clear error) {
  temp_dir dir{"keel-cli"};
  node_process first{dir.str(), node_yaml(dir)};
  auto second = run_command({node_binary(), "--config", first.config_path()});
  CAF_CHECK_EQUAL(second.exit_code, 1);
  CAF_CHECK(contains(second.err, "cannot start"));
  CAF_CHECK(contains(second.err, dir.str() + "/data"));
  CAF_MESSAGE("stderr: " << second.err);
}

// A reply or history entry holding escape sequences (ESC, CR, a C1 CSI)
// reaches a terminal escaped; piped without KEEL_ESCAPE_CONTROL it stays
// as the node sent it, and --json stays valid JSON.
CAF_TEST(keelctl escapes control characters for a terminal) {
  temp_dir dir{"keel-cli"};
  node_process node{dir.str(), node_yaml(dir)};
  auto ctl = tool_binary("keelctl");
  std::string text = "red \x1b[31mtitle\x1b]0;pwned\x07 back\rcsi \xc2\x9b"
                     "2J";
  auto as_terminal = [&](std::vector<std::string> args) {
    std::vector<std::string> argv{"/usr/bin/env", "KEEL_ESCAPE_CONTROL=1", ctl,
                                  "--node", node_flag(node)};
    argv.insert(argv.end(), args.begin(), args.end());
    return run_command(argv);
  };
  auto sent = as_terminal({"send", "t1", text});
  CAF_CHECK_EQUAL(sent.exit_code, 0);
  auto hist = as_terminal({"history", "t1"});
  CAF_CHECK_EQUAL(hist.exit_code, 0);
  for (auto& out : {sent.out, hist.out}) {
    KEEL_CHECK_CONTAINS(out, "red \\u001b[31mtitle\\u001b]0;pwned\\u0007 "
                             "back\\u000dcsi \\u009b2J");
    for (auto raw : {"\x1b", "\x07", "\r", "\xc2\x9b"})
      CAF_CHECK_EQUAL(out.find(raw), std::string::npos);
  }
  auto json_out = as_terminal({"history", "t1", "--json"});
  auto j = nlohmann::json::parse(json_out.out, nullptr, false);
  CAF_REQUIRE(!j.is_discarded());
  CAF_CHECK_EQUAL(j["entries"][0]["text"], text);
  auto piped = run_command({ctl, "history", "--node", node_flag(node), "t1"});
  KEEL_CHECK_CONTAINS(piped.out, text);
}

CAF_TEST(keelctl reads the data folder of a stopped node) {
  temp_dir dir{"keel-cli"};
  auto data = dir.str() + "/data";
  auto ctl = tool_binary("keelctl");
  auto write = [&](auto fn) {
    auto db = store::open(data + "/db");
    CAF_REQUIRE(db);
    fn(**db);
    CAF_REQUIRE_EQUAL(render((*db)->flush()), "none");
  };
  auto session = [](const std::string& thread, session_state state) {
    session_record rec;
    rec.thread = thread;
    rec.pool = "default";
    rec.state = state;
    return rec;
  };
  write([&](store& db) {
    db.stage_session(session("root", session_state::suspended));
    spawn_request req;
    req.child = session("root.kid", session_state::suspended);
    req.child.parent = "root";
    req.link = tree_link{"root", "root.kid", 0};
    CAF_CHECK(db.stage_spawn(req));
  });
  auto ok = run_command({ctl, "verify", "--data-dir", data});
  CAF_CHECK_EQUAL(ok.exit_code, 0);
  CAF_CHECK(contains(ok.out, "every invariant holds"));
  auto tree = run_command({ctl, "tree", "--agents", "--data-dir", data});
  CAF_CHECK_EQUAL(tree.exit_code, 0);
  CAF_CHECK(contains(tree.out, "`-- root.kid"));
  CAF_CHECK(contains(tree.out, "2 agents, 1 root"));
  auto none = run_command({ctl, "recovery", "--data-dir", data});
  CAF_CHECK_EQUAL(none.exit_code, 0);
  CAF_CHECK_EQUAL(none.out, "no recovery has run\n");
  recovery_report report;
  report.started_at = 1700000000000;
  report.finished_at = 1700000000003;
  report.suspended = 1;
  report.steps = {{"suspend_active", 1, 1234}};
  write([&](store& db) {
    db.stage_meta("last_recovery", encode(report));
    db.stage_session(session("root", session_state::active));
  });
  auto rec = run_command({ctl, "recovery", "--data-dir", data});
  CAF_CHECK_EQUAL(rec.exit_code, 0);
  CAF_CHECK(contains(rec.out, "recovery at 2023-11-14 22:13:20.000 UTC, took "
                              "3 ms"));
  CAF_CHECK(contains(rec.out, "suspend_active"));
  CAF_CHECK(contains(rec.out, "1.23 ms"));
  auto bad = run_command({ctl, "verify", "--data-dir", data, "--json"});
  CAF_CHECK_EQUAL(bad.exit_code, 1);
  CAF_CHECK(contains(bad.out, "\"rule\": \"active_session\""));
  auto missing
    = run_command({ctl, "verify", "--data-dir", dir.str() + "/nowhere"});
  CAF_CHECK_EQUAL(missing.exit_code, 2);
  CAF_CHECK(contains(missing.err, "no such folder"));
  auto empty = run_command({ctl, "verify", "--data-dir", dir.str()});
  CAF_CHECK_EQUAL(empty.exit_code, 2);
  CAF_CHECK(contains(empty.err, "no database in " + dir.str()));
}

// The recovery benchmark reads back the histories of every pending thread
// over one connection, more than the gateway's default frame rate allows
// a client: its node must not be rate limited.
CAF_TEST(bench recovery reads back more threads than a rate limit burst) {
  temp_dir dir{"keel-cli"};
  auto res
    = run_command({tool_binary("keel-bench"), "recovery", "--threads", "1000",
                   "--pending-fraction", "0.5", "--data-dir",
                   dir.str() + "/data", "--json", "--node-binary",
                   node_binary(), "--keelctl-binary", tool_binary("keelctl")});
  CAF_MESSAGE("stderr: " << res.err);
  CAF_CHECK_EQUAL(res.exit_code, 0);
  auto report = nlohmann::json::parse(res.out, nullptr, false);
  CAF_REQUIRE(report.is_object());
  auto seen = report.value("outcomes_seen", uint64_t{0});
  auto expected = report.value("outcomes_expected", uint64_t{0});
  auto clean = report.value("clean", false);
  CAF_CHECK_GREATER_OR_EQUAL(expected, 500u);
  CAF_CHECK_EQUAL(seen, expected);
  CAF_CHECK(clean);
}

CAF_TEST(keelctl pauses and resumes an agent) {
  temp_dir dir{"keel-cli"};
  node_process node{dir.str(), node_yaml(dir)};
  auto ctl = tool_binary("keelctl");
  auto send = [&](const std::string& text) {
    return run_command({ctl, "send", "--node", node_flag(node), "t1", text});
  };
  CAF_CHECK_EQUAL(send("hello").exit_code, 0);
  auto paused = keelctl_at(node.address(), {"pause", "t1"});
  CAF_CHECK_EQUAL(paused.exit_code, 0);
  CAF_CHECK(contains(paused.out, "t1 is paused"));
  // Stored and answered with the offline text, as an error.
  auto offline = send("anyone there?");
  CAF_CHECK_EQUAL(offline.exit_code, 1);
  CAF_CHECK(contains(offline.out + offline.err, "I'm currently offline"));
  CAF_CHECK(contains(offline.out + offline.err, "agent_paused"));
  CAF_CHECK_EQUAL(keelctl_at(node.address(), {"resume", "t1"}).exit_code, 0);
  auto back = send("back");
  CAF_CHECK_EQUAL(back.exit_code, 0);
  CAF_CHECK(contains(back.out, "echo: back"));
  auto hist = run_command({ctl, "history", "--node", node_flag(node), "t1"});
  CAF_CHECK(contains(hist.out, "anyone there?"));
  auto ghost = keelctl_at(node.address(), {"pause", "ghost"});
  CAF_CHECK_EQUAL(ghost.exit_code, 1);
  CAF_CHECK(contains(ghost.err, "thread 'ghost' does not exist"));
}

CAF_TEST(keelctl shows where a message stands as a task) {
  temp_dir dir{"keel-cli"};
  node_process node{dir.str(), node_yaml(dir)};
  auto ctl = tool_binary("keelctl");
  CAF_CHECK_EQUAL(
    run_command({ctl, "send", "--node", node_flag(node), "t1", "hi"}).exit_code,
    0);
  auto shown = keelctl_at(node.address(), {"task", "t1", "1"});
  CAF_CHECK_EQUAL(shown.exit_code, 0);
  CAF_CHECK(contains(shown.out, "t1/1: succeeded, attempts 0"));
  auto raw = keelctl_at(node.address(), {"task", "t1", "1", "--json"});
  auto j = nlohmann::json::parse(raw.out, nullptr, false);
  CAF_REQUIRE(!j.is_discarded());
  CAF_CHECK_EQUAL(j["state"], "succeeded");
  CAF_CHECK_EQUAL(j["text"], "hi");
  auto missing = keelctl_at(node.address(), {"task", "t1", "9"});
  CAF_CHECK_EQUAL(missing.exit_code, 1);
  CAF_CHECK(contains(missing.err, "has no message 9"));
}

CAF_TEST(a turn cut by kill - 9 is retried after the restart) {
  temp_dir dir{"keel-cli"};
  node_process node{dir.str(),
                    node_yaml(dir)
                      + "providers:\n  - name: slow\n    kind: scripted\n"
                        "    script:\n      - reply: late\n        delay: 3s\n"
                        "pools:\n  - name: default\n    chain: [slow]\n"};
  auto client = connect_client(node.address());
  CAF_REQUIRE(!client->send_text(protocol::send_frame("t1", "m1", "x")));
  CAF_REQUIRE(
    receive_until(*client, [](auto& j) { return j["type"] == "ack"; }));
  auto state = [&] {
    auto res = keelctl_at(node.address(), {"task", "t1", "1", "--json"});
    auto j = nlohmann::json::parse(res.out, nullptr, false);
    return j.is_discarded() ? nlohmann::json{} : j;
  };
  auto first = state();
  CAF_CHECK_EQUAL(first["state"], "dispatched");
  node.kill9();
  node.start();
  // Recovery runs the turn again: retried, then answered.
  auto retried = state();
  CAF_CHECK_EQUAL(retried["state"], "retried");
  CAF_CHECK_EQUAL(retried["attempts"], 1);
  nlohmann::json done;
  CAF_CHECK(poll_until(
    [&] {
      done = state();
      return done["state"] == "succeeded";
    },
    std::chrono::seconds{10}));
  CAF_CHECK_EQUAL(done["attempts"], 1);
}
