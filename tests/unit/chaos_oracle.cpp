#define CAF_SUITE chaos_oracle
#include <caf/test/unit_test.hpp>

#include "keel/tools/chaos_oracle.hpp"

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "keel/protocol.hpp"

using namespace keel::chaos;
using json = nlohmann::json;

namespace {

using strings = std::vector<std::string>;
using history = std::vector<history_entry>;

history_entry user(uint64_t seq, std::string client_id) {
  return history_entry{seq, "user", std::move(client_id), 0};
}

history_entry reply(uint64_t seq, std::string client_id, uint64_t reply_to) {
  return history_entry{seq, "reply", std::move(client_id), reply_to};
}

history_entry failure(uint64_t seq, std::string client_id, uint64_t reply_to) {
  return history_entry{seq, "error", std::move(client_id), reply_to};
}

// A record and histories that agree; each test tampers with one of them.
struct fixture {
  record rec;
  std::map<std::string, history> histories;

  fixture() {
    // t1: m1 and m2 acknowledged and answered, with a message the node added
    // itself (and its answer) in between; m3 resent, acknowledged twice at
    // the same seq and answered by an error; m4 of unknown outcome but
    // stored and answered; m5 of unknown outcome, never stored.
    sent_acked("t1", "m1", 1);
    rec.outcome("t1", "m1", 2);
    sent_acked("t1", "m2", 3);
    rec.outcome("t1", "m2", 5);
    sent_acked("t1", "m3", 7);
    sent_acked("t1", "m3", 7);
    rec.outcome("t1", "m3", 8);
    rec.sent("t1", "m4");
    rec.sent("t1", "m5");
    histories["t1"] = {user(1, "m1"),     reply(2, "m1", 1),
                       user(3, "m2"),     user(4, "agent:p:9"),
                       reply(5, "m2", 3), failure(6, "agent:p:9", 4),
                       user(7, "m3"),     failure(8, "m3", 7),
                       user(9, "m4"),     reply(10, "m4", 9)};
    // t2: r1 refused; a1 acknowledged and answered, the answer never seen
    // live (the connection died).
    rec.sent("t2", "r1");
    rec.refused("t2", "r1", "thread_closed");
    sent_acked("t2", "a1", 1);
    histories["t2"] = {user(1, "a1"), reply(2, "a1", 1)};
    // t3: one message of unknown outcome, and no history at all.
    rec.sent("t3", "u1");
    // Another client's thread, not in this record.
    histories["other"] = {user(1, "x"), reply(2, "x", 1)};
  }

  void sent_acked(const std::string& thread, const std::string& id,
                  uint64_t seq) {
    rec.sent(thread, id);
    CAF_REQUIRE(rec.acked(thread, id, seq));
  }

  /// The violations `check` finds as "RULE: text", logged.
  strings texts() {
    strings result;
    for (auto& v : check(rec, histories)) {
      auto line = v.rule + ": " + v.text;
      CAF_MESSAGE(line);
      CAF_CHECK_EQUAL(v.text.find('\n'), std::string::npos);
      result.push_back(line);
    }
    return result;
  }

  /// The single violation, as "RULE: text".
  std::string single() {
    auto all = texts();
    CAF_REQUIRE_EQUAL(all.size(), 1u);
    return all[0];
  }

  /// Removes the entry at `seq` from `thread`'s history.
  void erase(const std::string& thread, uint64_t seq) {
    auto& h = histories[thread];
    auto n = h.size();
    h.erase(std::remove_if(h.begin(), h.end(),
                           [seq](auto& e) { return e.seq == seq; }),
            h.end());
    CAF_REQUIRE_EQUAL(h.size() + 1, n);
  }
};

bool parse(const std::string& text, history_entry& out) {
  return from_json(json::parse(text), out);
}

} // namespace

CAF_TEST_FIXTURE_SCOPE(chaos_oracle_tests, fixture)

CAF_TEST(a record that agrees with the histories passes) {
  CAF_CHECK_EQUAL(texts(), strings{});
  CAF_CHECK_EQUAL(rec.messages(), 8u);
  CAF_CHECK_EQUAL(rec.acknowledged(), 4u);
  CAF_CHECK_EQUAL(rec.unknown(), 3u);
  // The resend and its second ack at the same seq changed nothing.
  auto& m3 = rec.threads().at("t1").at("m3");
  CAF_CHECK(m3.acked);
  CAF_CHECK_EQUAL(m3.seq, 7u);
  CAF_CHECK(m3.conflicting_acks.empty());
  CAF_CHECK_EQUAL(m3.thread, "t1");
  CAF_CHECK_EQUAL(m3.id, "m3");
}

CAF_TEST(an ack the history lacks is LOST) {
  sent_acked("t1", "m6", 11);
  CAF_CHECK_EQUAL(single(),
                  "LOST: t1/m6 was acknowledged at seq 11 and is not in the "
                  "history");
}

CAF_TEST(an acknowledged message in a thread without history is LOST) {
  sent_acked("t3", "m7", 1);
  CAF_CHECK_EQUAL(single(),
                  "LOST: t3/m7 was acknowledged at seq 1 and is not in the "
                  "history");
}

CAF_TEST(a message stored twice is a DUPLICATE) {
  histories["t1"].push_back(user(11, "m1"));
  CAF_CHECK_EQUAL(single(),
                  "DUPLICATE: t1/m1 is stored 2 times, at seqs 1 and 11");
}

CAF_TEST(a message with two outcomes is a DUPLICATE) {
  histories["t1"].push_back(failure(11, "m1", 1));
  CAF_CHECK_EQUAL(single(),
                  "DUPLICATE: t1/m1 stored at seq 1 has 2 outcomes, at seqs "
                  "2 and 11");
}

CAF_TEST(outcomes out of order are an ORDER violation named once) {
  // a, b and c stored in this order, answered c, b, a: two inversions, the
  // first one is reported. The node's own message in between is ignored.
  for (auto id : {"a", "b", "c"})
    rec.sent("t4", id);
  rec.acked("t4", "a", 1);
  rec.acked("t4", "b", 2);
  rec.acked("t4", "c", 4);
  histories["t4"] = {user(1, "a"),         user(2, "b"),
                     user(3, "agent:p:1"), user(4, "c"),
                     reply(5, "c", 4),     reply(6, "agent:p:1", 3),
                     reply(7, "b", 2),     reply(8, "a", 1)};
  CAF_CHECK_EQUAL(single(),
                  "ORDER: t4/b (seq 2) is answered at seq 7, before t4/a "
                  "(seq 1), answered at seq 8");
}

CAF_TEST(the node answering its own messages out of order is no violation) {
  histories["t1"] = {user(1, "m1"),        user(2, "agent:p:1"),
                     user(3, "agent:p:2"), reply(4, "agent:p:2", 3),
                     reply(5, "m1", 1),    reply(6, "agent:p:1", 2),
                     user(7, "m2"),        reply(8, "m2", 7),
                     user(9, "m3"),        failure(10, "m3", 9),
                     user(11, "m4"),       reply(12, "m4", 11)};
  auto& t1 = rec.threads()["t1"];
  t1["m1"].outcomes_seen = {5};
  t1["m2"].seq = 7;
  t1["m2"].outcomes_seen = {8};
  t1["m3"].seq = 9;
  t1["m3"].outcomes_seen = {10};
  CAF_CHECK_EQUAL(texts(), strings{});
}

CAF_TEST(a stored message without outcome is UNANSWERED) {
  // Acknowledged (t2/a1) or of unknown outcome (t1/m4) alike.
  erase("t2", 2);
  erase("t1", 10);
  CAF_CHECK_EQUAL(texts(),
                  (strings{"UNANSWERED: t1/m4 is stored at seq 9 and has no "
                           "outcome",
                           "UNANSWERED: t2/a1 is stored at seq 1 and has no "
                           "outcome"}));
}

CAF_TEST(a refused message that is stored is STORED_REFUSED) {
  histories["t2"].push_back(user(3, "r1"));
  CAF_CHECK_EQUAL(single(),
                  "STORED_REFUSED: t2/r1 was refused (thread_closed) and is "
                  "stored at seq 3");
}

CAF_TEST(an ack at another seq than the stored one is MISPLACED) {
  rec.threads()["t1"]["m1"].seq = 11;
  CAF_CHECK_EQUAL(single(),
                  "MISPLACED: t1/m1 was acknowledged at seq 11 and is stored "
                  "at seq 1");
}

CAF_TEST(two acks of one message at different seqs are MISPLACED) {
  CAF_CHECK(rec.acked("t1", "m1", 12));
  CAF_CHECK(rec.acked("t1", "m1", 12));
  CAF_CHECK(rec.acked("t1", "m1", 1));
  auto& m1 = rec.threads().at("t1").at("m1");
  CAF_CHECK_EQUAL(m1.seq, 1u);
  CAF_CHECK_EQUAL(m1.conflicting_acks, (std::vector<uint64_t>{12}));
  CAF_CHECK_EQUAL(single(),
                  "MISPLACED: t1/m1 was acknowledged at seq 1 and again at "
                  "seq 12");
}

CAF_TEST(an outcome seen live that the history lacks is UNEXPECTED) {
  rec.outcome("t1", "m1", 6);  // the node's own message's answer
  rec.outcome("t1", "m1", 99); // no such entry
  rec.outcome("t1", "m1", 99); // the same frame twice: reported once
  rec.outcome("t1", "m2", 3);  // a user entry
  rec.outcome("t1", "m5", 2);  // m5 is not stored
  CAF_CHECK_EQUAL(
    texts(),
    (strings{"UNEXPECTED: t1/m1 was answered live at seq 6, but the entry at "
             "seq 6 answers seq 4, not seq 1",
             "UNEXPECTED: t1/m1 was answered live at seq 99, but the history "
             "has no entry at seq 99",
             "UNEXPECTED: t1/m2 was answered live at seq 3, but the entry at "
             "seq 3 is a user entry of client id m2",
             "UNEXPECTED: t1/m5 was answered live at seq 2, but the entry at "
             "seq 2 answers seq 1 and the message is not stored"}));
}

CAF_TEST(an outcome seen with its content must show it in the history) {
  // What the crash fuzzer records: kind, reply_to, a reply's text, a code.
  auto seen = reply(2, "m1", 1);
  seen.text = "answer to m1";
  histories["t1"][1].text = "answer to m1";
  rec.outcome("t1", "m1", seen);
  CAF_CHECK_EQUAL(texts(), strings{});
  seen.text = "another answer";
  rec.threads()["t1"]["m1"].outcomes_seen_as.clear();
  rec.outcome("t1", "m1", seen);
  auto err = failure(8, "m3", 7);
  err.code = "cancelled";
  rec.outcome("t1", "m3", err);
  CAF_CHECK_EQUAL(
    texts(),
    (strings{"UNEXPECTED: t1/m1 was answered live at seq 2, but the history "
             "holds reply to seq 1 \"answer to m1\", the frame showed reply "
             "to seq 1 \"another answer\"",
             "UNEXPECTED: t1/m3 was answered live at seq 8, but the history "
             "holds error to seq 7, the frame showed error to seq 7 "
             "[cancelled]"}));
}

CAF_TEST(what later entries could mend is marked beyond the history) {
  // m4's answer and an outcome after the history's end: a history read
  // only so far. An outcome missing inside the history is not.
  erase("t1", 10);
  rec.outcome("t1", "m1", 11);
  rec.outcome("t1", "m2", 4);
  std::vector<std::string> marked;
  for (auto& v : check(rec, histories))
    marked.push_back(v.rule + (v.beyond_history ? " beyond" : " within"));
  CAF_CHECK_EQUAL(marked, (strings{"UNEXPECTED beyond", "UNEXPECTED within",
                                   "UNANSWERED beyond"}));
}

CAF_TEST(adopted messages are checked but need not keep ORDER) {
  // The node's own messages, adopted, answered out of order: no
  // violation; answered twice: a DUPLICATE.
  rec.adopt("t1", "agent:p:9");
  rec.adopt("t1", "m1"); // known already: kept as it is
  CAF_CHECK(!rec.threads().at("t1").at("m1").own);
  CAF_CHECK(rec.threads().at("t1").at("agent:p:9").own);
  rec.adopt("t5", "agent:q:1");
  rec.adopt("t5", "agent:q:2");
  histories["t5"] = {user(1, "agent:q:1"), user(2, "agent:q:2"),
                     reply(3, "agent:q:2", 2), reply(4, "agent:q:1", 1)};
  CAF_CHECK_EQUAL(texts(), strings{});
  histories["t5"].push_back(reply(5, "agent:q:1", 1));
  CAF_CHECK_EQUAL(single(),
                  "DUPLICATE: t5/agent:q:1 stored at seq 1 has 2 outcomes, "
                  "at seqs 4 and 5");
}

CAF_TEST(a message of unknown outcome that was never stored is fine) {
  record fresh;
  fresh.sent("t", "m");
  fresh.sent("t", "m");
  CAF_CHECK_EQUAL(fresh.messages(), 1u);
  CAF_CHECK_EQUAL(fresh.unknown(), 1u);
  CAF_CHECK(check(fresh, {}).empty());
  CAF_CHECK(check(fresh, {{"t", {user(1, "other")}}}).empty());
}

CAF_TEST(frames for ids never sent record nothing) {
  CAF_CHECK(!rec.acked("t1", "nope", 4));
  CAF_CHECK(!rec.acked("t9", "nope", 4));
  rec.refused("t1", "nope", "thread_closed");
  rec.outcome("t1", "nope", 6);
  rec.outcome("t9", "nope", 6);
  CAF_CHECK_EQUAL(rec.messages(), 8u);
  CAF_CHECK_EQUAL(rec.threads().count("t9"), 0u);
  CAF_CHECK_EQUAL(texts(), strings{});
}

CAF_TEST(a refusal keeps its first code and never reads as unknown) {
  rec.refused("t2", "r1", "thread_limit");
  CAF_CHECK_EQUAL(rec.threads().at("t2").at("r1").refusal, "thread_closed");
  rec.sent("t2", "r2");
  rec.refused("t2", "r2", "");
  CAF_CHECK_EQUAL(rec.threads().at("t2").at("r2").refusal, "(no code)");
  CAF_CHECK_EQUAL(rec.unknown(), 3u);
}

CAF_TEST(several broken rules are all reported in a stable order) {
  sent_acked("t1", "m6", 11);
  histories["t2"].push_back(user(3, "r1"));
  erase("t1", 2);
  CAF_CHECK_EQUAL(
    texts(),
    (strings{"UNANSWERED: t1/m1 is stored at seq 1 and has no outcome",
             "UNEXPECTED: t1/m1 was answered live at seq 2, but the history "
             "has no entry at seq 2",
             "LOST: t1/m6 was acknowledged at seq 11 and is not in the "
             "history",
             "STORED_REFUSED: t2/r1 was refused (thread_closed) and is stored "
             "at seq 3"}));
}

CAF_TEST_FIXTURE_SCOPE_END()

CAF_TEST(merge joins the records of two clients) {
  record a;
  a.sent("t1", "m1");
  a.acked("t1", "m1", 1);
  a.sent("t1", "m2");
  a.refused("t1", "m2", "thread_closed");
  record b;
  b.sent("t2", "n1");
  b.acked("t2", "n1", 1);
  b.outcome("t2", "n1", 2);
  // The same message, known to both: b saw its outcome, acks disagree.
  b.sent("t1", "m1");
  b.acked("t1", "m1", 1);
  b.acked("t1", "m1", 5);
  b.outcome("t1", "m1", 2);
  b.sent("t1", "m2");
  b.refused("t1", "m2", "thread_limit");
  a.merge(b);
  a.merge(a);
  CAF_CHECK_EQUAL(a.messages(), 3u);
  CAF_CHECK_EQUAL(a.acknowledged(), 2u);
  CAF_CHECK_EQUAL(a.unknown(), 0u);
  auto& m1 = a.threads().at("t1").at("m1");
  CAF_CHECK(m1.acked);
  CAF_CHECK_EQUAL(m1.seq, 1u);
  CAF_CHECK_EQUAL(m1.conflicting_acks, (std::vector<uint64_t>{5}));
  CAF_CHECK_EQUAL(m1.outcomes_seen, (std::vector<uint64_t>{2}));
  CAF_CHECK_EQUAL(a.threads().at("t1").at("m2").refusal, "thread_closed");
  auto& n1 = a.threads().at("t2").at("n1");
  CAF_CHECK_EQUAL(n1.thread, "t2");
  CAF_CHECK_EQUAL(n1.outcomes_seen, (std::vector<uint64_t>{2}));
  // Merging again adds nothing new.
  a.merge(b);
  CAF_CHECK_EQUAL(m1.outcomes_seen, (std::vector<uint64_t>{2}));
  CAF_CHECK_EQUAL(m1.conflicting_acks, (std::vector<uint64_t>{5}));
  // The merged record is checked as one.
  std::map<std::string, history> histories{
    {"t1", {user(1, "m1"), reply(2, "m1", 1)}},
    {"t2", {user(1, "n1"), reply(2, "n1", 1)}}};
  auto found = check(a, histories);
  CAF_REQUIRE_EQUAL(found.size(), 1u);
  CAF_CHECK_EQUAL(found[0].rule, "MISPLACED");
  CAF_CHECK_EQUAL(found[0].text,
                  "t1/m1 was acknowledged at seq 1 and again at seq 5");
}

CAF_TEST(merge takes an ack the record lacked) {
  record a;
  a.sent("t", "m");
  record b;
  b.sent("t", "m");
  b.acked("t", "m", 3);
  a.merge(b);
  CAF_CHECK(a.threads().at("t").at("m").acked);
  CAF_CHECK_EQUAL(a.threads().at("t").at("m").seq, 3u);
  CAF_CHECK(a.threads().at("t").at("m").conflicting_acks.empty());
}

CAF_TEST(from_json reads the entries of a history frame) {
  history_entry e;
  CAF_REQUIRE(parse(R"({"seq":8,"kind":"reply","client_id":"m-0001",)"
                    R"("reply_to":7,"provider":"echo","text":"...","at":1})",
                    e));
  CAF_CHECK_EQUAL(e.seq, 8u);
  CAF_CHECK_EQUAL(e.kind, "reply");
  CAF_CHECK_EQUAL(e.client_id, "m-0001");
  CAF_CHECK_EQUAL(e.reply_to, 7u);
  CAF_REQUIRE(parse(R"({"seq":7,"kind":"user","client_id":"m-0001",)"
                    R"("text":"Where is my order?","at":1732240000123})",
                    e));
  CAF_CHECK_EQUAL(e.seq, 7u);
  CAF_CHECK_EQUAL(e.kind, "user");
  CAF_CHECK_EQUAL(e.reply_to, 0u);
  CAF_REQUIRE(parse(R"({"seq":9,"kind":"error","client_id":"m-0002",)"
                    R"("reply_to":3,"code":"provider_failed","text":"x",)"
                    R"("at":1})",
                    e));
  CAF_CHECK_EQUAL(e.kind, "error");
  CAF_CHECK_EQUAL(e.reply_to, 3u);
}

CAF_TEST(from_json rejects malformed entries and keeps its output) {
  history_entry e{42, "user", "keep", 0};
  auto rejects = [&](const std::string& text) {
    CAF_MESSAGE("rejects " << text);
    CAF_CHECK(!parse(text, e));
  };
  rejects(R"({"kind":"reply","client_id":"m-0001","reply_to":7,"text":"."})");
  rejects(R"({"seq":"8","kind":"user","client_id":"m"})");
  rejects(R"({"seq":-1,"kind":"user","client_id":"m"})");
  rejects(R"({"seq":1.5,"kind":"user","client_id":"m"})");
  rejects(R"({"seq":8,"client_id":"m"})");
  rejects(R"({"seq":8,"kind":"note","client_id":"m"})");
  rejects(R"({"seq":8,"kind":"user"})");
  rejects(R"({"seq":8,"kind":"user","client_id":7})");
  rejects(R"({"seq":8,"kind":"reply","client_id":"m"})");
  rejects(R"({"seq":8,"kind":"reply","client_id":"m","reply_to":"7"})");
  rejects(R"([8,"user","m"])");
  CAF_CHECK_EQUAL(e.seq, 42u);
  CAF_CHECK_EQUAL(e.client_id, "keep");
}

CAF_TEST(from_json reads what the node encodes in a history frame) {
  keel::history_page page;
  page.thread = "support-42";
  keel::log_entry question;
  question.seq = 7;
  question.kind = keel::log_kind::user;
  question.client_id = "m-0001";
  question.text = "Where is my order?";
  keel::log_entry answer;
  answer.seq = 8;
  answer.kind = keel::log_kind::error;
  answer.client_id = "m-0001";
  answer.reply_to = 7;
  answer.code = "provider_failed";
  answer.text = "sorry";
  page.entries = {question, answer};
  auto frame = json::parse(keel::protocol::history_frame("h-1", page));
  auto& entries = frame.at("entries");
  CAF_REQUIRE_EQUAL(entries.size(), 2u);
  history rebuilt;
  for (auto& j : entries) {
    history_entry e;
    CAF_REQUIRE(from_json(j, e));
    rebuilt.push_back(e);
  }
  CAF_CHECK_EQUAL(rebuilt[0].kind, "user");
  CAF_CHECK_EQUAL(rebuilt[0].seq, 7u);
  CAF_CHECK_EQUAL(rebuilt[1].kind, "error");
  CAF_CHECK_EQUAL(rebuilt[1].reply_to, 7u);
  record rec;
  rec.sent("support-42", "m-0001");
  rec.acked("support-42", "m-0001", 7);
  rec.outcome("support-42", "m-0001", 8);
  CAF_CHECK(check(rec, {{"support-42", rebuilt}}).empty());
}
