#define CAF_SUITE verify

#include "keel/tools/verify.hpp"

#include "store_fixture.hpp"

#include <caf/test/unit_test.hpp>

#include <string>
#include <vector>

#include "keel/json_codec.hpp"
#include "keel/stored_form.hpp"
#include "keel/tools/data_dir.hpp"

using namespace keel;

namespace {

using namespace keel::test;

using strings = std::vector<std::string>;

struct fixture : store_fixture {
  fixture() {
    // Two roots, a child and a grandchild, all stopped cleanly.
    root("p");
    root("q");
    spawn("p", "p.a");
    spawn("p.a", "p.a.b");
    flush();
  }

  /// Stages a SUSPENDED root with its first message answered.
  void root(const std::string& thread) {
    auto req = make_accept(thread, 1, "c1", "hello", true);
    req.session.state = session_state::suspended;
    accept(req);
    db->stage_commit(make_commit(thread, 1, "c1", 2, "hi"));
  }

  /// Runs the oracle; logs what it found unless told not to.
  verify_report run(bool log = true) {
    auto res = verify_store(*db);
    CAF_REQUIRE_EQUAL(outcome(res), "none");
    if (log)
      for (auto& v : res->violations)
        CAF_MESSAGE(v.rule << " " << v.where << ": " << v.what);
    return std::move(*res);
  }

  /// The violations as "RULE WHERE".
  strings violations() {
    strings result;
    for (auto& v : run().violations)
      result.push_back(v.rule + " " + v.where);
    return result;
  }

  /// The single violation's text.
  std::string what() {
    auto report = run(false);
    CAF_REQUIRE_EQUAL(report.violations.size(), 1u);
    return report.violations[0].what;
  }
};

} // namespace

CAF_TEST_FIXTURE_SCOPE(verify_tests, fixture)

CAF_TEST(a consistent store passes and is counted) {
  // A pending client message, a message between threads delivered and
  // answered by an error, and one still in the outbox.
  accept(make_accept("q", 3, "c3", "still thinking"));
  auto to_child = make_outbox("p", 2, "p.a", "do it");
  accept(make_delivery(to_child, 1));
  flush();
  // p.a's turn fails (an error answers too) after sending to p.a.b.
  turn_commit failed;
  failed.thread = "p.a";
  failed.inbox_seq = 1;
  log_entry error;
  error.seq = 2;
  error.kind = log_kind::error;
  error.client_id = to_child.client_id;
  error.reply_to = 1;
  error.code = "provider_failed";
  failed.log.push_back(error);
  failed.outbox.push_back(make_outbox("p.a", 2, "p.a.b", "do it too"));
  db->stage_commit(failed);
  flush();
  auto report = run();
  CAF_CHECK(report.ok());
  CAF_CHECK_EQUAL(report.sessions, 4u);
  CAF_CHECK_EQUAL(report.links, 2u);
  CAF_CHECK_EQUAL(report.user_messages, 4u);
  CAF_CHECK_EQUAL(report.answered, 3u);
  CAF_CHECK_EQUAL(report.pending, 1u);
  CAF_CHECK_EQUAL(report.outbox, 1u);
  CAF_CHECK_EQUAL(render_verify_report(report),
                  "4 sessions, 2 links, 4 messages (3 answered, 1 pending), "
                  "1 in outboxes\nevery invariant holds\n");
}

CAF_TEST(an active session is a violation) {
  auto rec = make_session("q");
  db->stage_session(rec);
  flush();
  CAF_CHECK_EQUAL(violations(), strings{"active_session q"});
}

CAF_TEST(corrupt records are named by key and hide nothing else) {
  put_raw("sessions", "q", "{not json");
  put_raw("log", seq_key("p", 2), R"({"seq":2})");
  put_raw("tree", "p/p.x", "[]");
  // Still checked: a message lost in another thread.
  accept(make_accept("p.a", 1, "c1", "lost"));
  flush();
  db->stage_commit([] {
    turn_commit commit;
    commit.thread = "p.a";
    commit.inbox_seq = 1;
    return commit;
  }());
  flush();
  auto report = run();
  strings rules;
  for (auto& v : report.violations)
    rules.push_back(v.rule + " " + v.where);
  // p's reply is unreadable, so its message counts as lost.
  CAF_CHECK_EQUAL(rules,
                  (strings{"bad_record q", "bad_record p/p.x", "bad_record p/2",
                           "lost_message p/1", "lost_message p.a/1"}));
  CAF_CHECK_EQUAL(report.violations[0].what,
                  "corrupt record in sessions: record is not valid JSON");
  CAF_CHECK_EQUAL(report.violations[2].what,
                  "corrupt record in log: log entry: missing field 'kind'");
  // q's session is corrupt, not missing: its messages are still checked
  // and no tree rule fires for it.
  CAF_CHECK_EQUAL(report.sessions, 3u);
}

CAF_TEST(a child session without its link is an orphan) {
  auto rec = make_session("q.kid", "q");
  rec.state = session_state::suspended;
  db->stage_session(rec);
  flush();
  CAF_CHECK_EQUAL(violations(), strings{"orphan_child q -> q.kid"});
  auto ghost = make_session("ghost.kid", "ghost");
  ghost.state = session_state::suspended;
  db->stage_session(ghost);
  flush();
  CAF_CHECK_EQUAL(violations(), (strings{"orphan_child ghost -> ghost.kid",
                                         "orphan_child q -> q.kid"}));
}

CAF_TEST(a link whose ends do not agree with the sessions dangles) {
  put_raw("tree", "x/y", encode(tree_link{"x", "y", 0}));
  CAF_CHECK_EQUAL(violations(), strings{"dangling_link x -> y"});
  CAF_CHECK_EQUAL(what(), "parent x has no session");
}

CAF_TEST(a link to a missing child or a child of another parent dangles) {
  put_raw("tree", "q/nobody", encode(tree_link{"q", "nobody", 0}));
  CAF_CHECK_EQUAL(violations(), strings{"dangling_link q -> nobody"});
  CAF_CHECK_EQUAL(what(), "child nobody has no session");
}

CAF_TEST(a second parent of a child is one dangling link) {
  // p.a's session names p: the link from q is the stale one.
  put_raw("tree", "q/p.a", encode(tree_link{"q", "p.a", 0}));
  CAF_CHECK_EQUAL(violations(), strings{"dangling_link q -> p.a"});
  CAF_CHECK_EQUAL(what(), "child p.a's session names parent p");
  // A link to a root.
  put_raw("tree", "q/p", encode(tree_link{"q", "p", 0}));
  CAF_CHECK_EQUAL(violations(),
                  (strings{"dangling_link q -> p", "dangling_link q -> p.a"}));
}

CAF_TEST(parents in a cycle are one violation) {
  // Each one's session and link agree; only the whole is wrong.
  std::vector<std::pair<std::string, std::string>> links{
    {"x", "z"}, {"y", "x"}, {"z", "y"}};
  for (auto& [thread, parent] : links) {
    auto rec = make_session(thread, parent);
    rec.state = session_state::suspended;
    db->stage_session(rec);
  }
  flush();
  for (auto& [thread, parent] : links)
    put_raw("tree", parent + "/" + thread,
            encode(tree_link{parent, thread, 0}));
  CAF_CHECK_EQUAL(violations(), strings{"tree_cycle x -> y -> z -> x"});
}

CAF_TEST(a message neither answered nor pending is lost) {
  accept(make_accept("q", 3, "c3", "into the void"));
  flush();
  turn_commit commit;
  commit.thread = "q";
  commit.inbox_seq = 3;
  db->stage_commit(commit);
  flush();
  CAF_CHECK_EQUAL(violations(), strings{"lost_message q/3"});
  CAF_CHECK_EQUAL(what(),
                  "message (client id c3) is neither answered nor in the "
                  "inbox");
}

CAF_TEST(a message from another thread follows the same rules) {
  auto msg = make_outbox("p", 2, "p.a", "work");
  accept(make_delivery(msg, 1));
  flush();
  turn_commit commit;
  commit.thread = "p.a";
  commit.inbox_seq = 1;
  db->stage_commit(commit);
  flush();
  CAF_CHECK_EQUAL(violations(), strings{"lost_message p.a/1"});
  CAF_CHECK_EQUAL(what(), "message from another thread (client id "
                          "agent:p:2) is neither answered nor in the inbox");
}

CAF_TEST(two outcomes for one message are a duplicate reply) {
  accept(make_accept("q", 3, "c3", "twice"));
  flush();
  db->stage_commit(make_commit("q", 3, "c3", 4, "first"));
  auto second = make_commit("q", 3, "c3", 5, "second");
  second.log[0].kind = log_kind::error;
  db->stage_commit(second);
  flush();
  CAF_CHECK_EQUAL(violations(), strings{"duplicate_reply q/3"});
  CAF_CHECK_EQUAL(what(), "message (client id c3) is answered 2 times "
                          "(seqs 4, 5)");
}

CAF_TEST(an answered message still in the inbox is a violation) {
  put_raw("inbox", seq_key("q", 1),
          encode(inbox_entry{1, "c1", "hello", 2001}));
  CAF_CHECK_EQUAL(violations(), strings{"answered_but_pending q/1"});
}

CAF_TEST(an inbox entry without its message is a violation) {
  put_raw("inbox", seq_key("q", 9), encode(inbox_entry{9, "c9", "?", 0}));
  CAF_CHECK_EQUAL(violations(), strings{"inbox_without_message q/9"});
}

CAF_TEST(an outcome answering no message is a violation) {
  db->stage_commit(make_commit("q", 7, "c7", 3, "to what?"));
  flush();
  CAF_CHECK_EQUAL(violations(), strings{"outcome_without_message q/3"});
}

CAF_TEST(the client id index and the outcomes must agree with the log) {
  put_raw("client_ids", "q/c1", "5");
  CAF_CHECK_EQUAL(violations(), strings{"client_id_mismatch q/1"});
  CAF_CHECK_EQUAL(what(), "the index maps client id c1 to seq 5");
  put_raw("client_ids", "q/c1", "1");
  // An index entry no message carries.
  put_raw("client_ids", "q/stray", "2");
  CAF_CHECK_EQUAL(violations(), strings{"client_id_mismatch q/2"});
  CAF_CHECK_EQUAL(what(), "the index maps client id stray to seq 2, which "
                          "is not a user message");
}

CAF_TEST(an outcome must carry the client id of its message) {
  accept(make_accept("q", 3, "c3", "mine"));
  flush();
  db->stage_commit(make_commit("q", 3, "c1", 4, "yours"));
  flush();
  CAF_CHECK_EQUAL(violations(), strings{"client_id_mismatch q/4"});
  CAF_CHECK_EQUAL(what(), "reply to seq 3 carries client id c1, the message "
                          "has c3");
}

CAF_TEST(an outbox entry must target a thread with a session) {
  accept(make_accept("p", 3, "c3", "tell the ghost"));
  flush();
  auto commit = make_commit("p", 3, "c3", 4, "told");
  commit.outbox.push_back(make_outbox("p", 4, "ghost", "boo"));
  db->stage_commit(commit);
  flush();
  CAF_CHECK_EQUAL(violations(), strings{"outbox_target_missing p/4"});
  CAF_CHECK_EQUAL(what(), "message to ghost, which has no session");
}

CAF_TEST(a node data is checked through a read - only store) {
  auto rec = make_session("q");
  db->stage_session(rec);
  flush();
  // Beside the writer, as keelctl does it: the data folder, or the
  // PostgreSQL store.
  data_source src;
  if (store_on_postgres())
    src.pg_url = test_pg_server().url();
  else
    src.data_dir = tmp.str();
  auto reader = open_data_source(src);
  CAF_REQUIRE_EQUAL(outcome(reader), "none");
  auto report = verify_store(**reader);
  CAF_REQUIRE_EQUAL(outcome(report), "none");
  CAF_CHECK_EQUAL(render_verify_report(*report),
                  "4 sessions, 2 links, 2 messages (2 answered, 0 pending), "
                  "0 in outboxes\n1 violation:\nactive_session q: the "
                  "session is ACTIVE (recovery should have suspended it)\n");
  auto j = to_json(*report);
  CAF_CHECK(j["ok"] == false);
  CAF_CHECK(j["violations"][0]["rule"] == "active_session");
  CAF_CHECK_EQUAL(
    message_of(open_data_dir((tmp.path() / "db").string() + "/nothing")),
    "cannot open data folder " + tmp.str() + "/db/nothing: no such folder");
  temp_dir empty;
  CAF_CHECK_EQUAL(message_of(open_data_dir(empty.str())),
                  "no database in " + empty.str() + " (looked in " + empty.str()
                    + "/db and " + empty.str() + ")");
}

CAF_TEST(the agent tree renders roots with their children) {
  auto agents = read_agents(*db);
  CAF_REQUIRE_EQUAL(outcome(agents), "none");
  CAF_REQUIRE_EQUAL(agents->size(), 4u);
  CAF_CHECK_EQUAL((*agents)[0].thread, "p");
  CAF_CHECK_EQUAL((*agents)[0].children, strings{"p.a"});
  CAF_CHECK_EQUAL((*agents)[1].parent, "p");
  CAF_CHECK_EQUAL(render_agent_tree(*agents),
                  "p                                SUSPENDED agent=default "
                  "pool=default\n"
                  "`-- p.a                          SUSPENDED agent=default "
                  "pool=default\n"
                  "    `-- p.a.b                    SUSPENDED agent=default "
                  "pool=default\n"
                  "q                                SUSPENDED agent=default "
                  "pool=default\n"
                  "4 agents, 2 roots\n");
  auto back = agents_from_json(agents_to_json(*agents));
  CAF_REQUIRE_EQUAL(outcome(back), "none");
  CAF_CHECK_EQUAL(agents_to_json(*back).dump(), agents_to_json(*agents).dump());
  CAF_CHECK_EQUAL(message_of(agents_from_json(
                    nlohmann::json::parse(R"({"agents":[{"thread":"x"}]})"))),
                  "agents[0]: agent: missing field 'parent'");
}

CAF_TEST_FIXTURE_SCOPE_END()
