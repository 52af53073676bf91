#define CAF_SUITE store

#include "keel/store.hpp"

#include "store_fixture.hpp"

#include <caf/test/unit_test.hpp>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "keel/json_codec.hpp"
#include "keel/protocol.hpp"
#include "keel/stored_form.hpp"
#include "keel/text.hpp"

using namespace keel;

namespace {

using namespace keel::test;

using fixture = store_fixture;

} // namespace

CAF_TEST_FIXTURE_SCOPE(store_tests, fixture)

CAF_TEST(opening creates the folder and records the schema version) {
  if (!store_on_postgres())
    CAF_CHECK(std::filesystem::is_directory(dir));
  CAF_CHECK_EQUAL(outcome(db->meta("schema_version")), "none");
  CAF_CHECK_EQUAL(value_or(db->meta("schema_version"), ""), "2");
  CAF_CHECK_EQUAL(error_of(db->meta("node_id")), ec::not_found);
  CAF_CHECK_EQUAL(value_or(db->count_sessions(), 99), 0u);
  CAF_CHECK_EQUAL(column_families.size(), 13u);
  auto snapshot = load("t1");
  CAF_CHECK(!snapshot.exists);
  CAF_CHECK(snapshot.inbox.empty());
  CAF_CHECK(snapshot.context.empty());
  CAF_CHECK_EQUAL(snapshot.next_seq, 1u);
  CAF_CHECK_EQUAL(error_of(db->session("t1")), ec::not_found);
}

CAF_TEST(reopening keeps the data) {
  accept(make_accept("t1", 1, "c1", "hello", true));
  db->stage_meta("node_id", "n1");
  flush();
  open();
  auto snapshot = load("t1");
  CAF_CHECK(snapshot.exists);
  CAF_CHECK_EQUAL(snapshot.session.pool, "default");
  CAF_REQUIRE_EQUAL(snapshot.inbox.size(), 1u);
  CAF_CHECK_EQUAL(snapshot.inbox[0].text, "hello");
  CAF_CHECK_EQUAL(value_or(db->meta("node_id"), ""), "n1");
  CAF_CHECK_EQUAL(value_or(db->meta("schema_version"), ""), "2");
}

CAF_TEST(provider health records are replaced and survive a reopen) {
  provider_health_record rec;
  rec.pool = "default";
  rec.provider = "gpt";
  rec.status = "down";
  rec.breaker = "open";
  rec.consecutive_failures = 3;
  rec.last_error = "HTTP 503";
  rec.last_error_class = "overloaded";
  rec.cooldown_until = 1700000000000;
  db->stage_health(rec);
  auto other = rec;
  other.provider = "claude";
  other.status = "healthy";
  db->stage_health(other);
  flush();
  rec.consecutive_failures = 4;
  db->stage_health(rec);
  flush();
  open();
  auto all = db->health();
  CAF_REQUIRE(all);
  CAF_REQUIRE_EQUAL(all->size(), 2u);
  // Key order: "default/claude" before "default/gpt".
  CAF_CHECK_EQUAL((*all)[0].provider, "claude");
  CAF_CHECK_EQUAL((*all)[1].consecutive_failures, 4u);
  CAF_CHECK_EQUAL((*all)[1].last_error_class, "overloaded");
  CAF_CHECK_EQUAL((*all)[1].cooldown_until, 1700000000000);
}

CAF_TEST(owner notices are kept per kind and subject and survive a reopen) {
  owner_notice x;
  x.kind = notice_kind::all_models_failed;
  x.subject = "pool default";
  x.text = "every provider failed";
  x.at = 1700000000000;
  x.status = notice_status::sent;
  db->stage_notice(x);
  auto y = x;
  y.kind = notice_kind::agent_stuck;
  y.subject = "t1";
  y.status = notice_status::failed;
  y.error = "HTTP 500";
  db->stage_notice(y);
  flush();
  x.suppressed = 3;
  x.last_suppressed_at = 1700000000900;
  db->stage_notice(x); // replaces: one record per kind and subject
  flush();
  open();
  auto all = db->notices();
  CAF_REQUIRE(all);
  CAF_REQUIRE_EQUAL(all->size(), 2u);
  // Key order: "agent_stuck/t1" before "all_models_failed/pool default".
  auto stuck = (*all)[0];
  auto failed = (*all)[1];
  CAF_CHECK(stuck.status == notice_status::failed);
  CAF_CHECK_EQUAL(stuck.error, "HTTP 500");
  CAF_CHECK_EQUAL(failed.subject, "pool default");
  CAF_CHECK(failed.status == notice_status::sent);
  CAF_CHECK_EQUAL(failed.suppressed, 3u);
  CAF_CHECK_EQUAL(failed.last_suppressed_at, 1700000000900);
}

CAF_TEST(a schema version newer than ours refuses to open) {
  db->stage_meta("schema_version", "3");
  flush();
  close();
  auto res = try_open();
  CAF_REQUIRE(!res);
  CAF_CHECK_EQUAL(res.error(), ec::storage_open_failed);
  CAF_CHECK_EQUAL(message_of(res),
                  where() + ": schema version 3 is newer than this build's 2");
}

CAF_TEST(a store of schema version 1 reads its JSON records and becomes 2) {
  put_raw("meta", "schema_version", "1", false);
  put_raw("sessions", "t1",
          R"({"thread":"t1","parent":"","pool":"default","model":"",)"
          R"("state":"SUSPENDED","created_at":1,"provider_state":""})",
          false);
  put_raw("inbox", seq_key("t1", 1),
          R"({"seq":1,"client_id":"c1","text":"hello","accepted_at":2})");
  // Builds that store JSON refuse it from now on.
  CAF_CHECK_EQUAL(value_or(db->meta("schema_version"), ""), "2");
  auto snapshot = load("t1");
  CAF_CHECK(snapshot.exists);
  CAF_CHECK_EQUAL(snapshot.session.pool, "default");
  CAF_REQUIRE_EQUAL(snapshot.inbox.size(), 1u);
  CAF_CHECK_EQUAL(snapshot.inbox[0].text, "hello");
  // Rewritten, the session is stored in the binary form and reads back.
  snapshot.session.state = session_state::active;
  db->stage_session(snapshot.session);
  flush();
  open();
  auto rec = db->session("t1");
  CAF_REQUIRE(rec);
  CAF_CHECK(rec->state == session_state::active);
  CAF_CHECK_EQUAL(rec->created_at, 1);
}

CAF_TEST(an accepted message is loaded with its thread) {
  accept(make_accept("t1", 1, "c1", "hello", true));
  accept(make_accept("t1", 2, "c2", "world"));
  CAF_CHECK_EQUAL(db->staged(), 2u);
  // Staged writes are invisible until flushed.
  CAF_CHECK(!load("t1").exists);
  CAF_CHECK(load("t1").inbox.empty());
  flush();
  CAF_CHECK_EQUAL(db->staged(), 0u);
  auto snapshot = load("t1");
  CAF_CHECK(snapshot.exists);
  CAF_CHECK_EQUAL(snapshot.session.thread, "t1");
  CAF_CHECK_EQUAL(snapshot.session.state, session_state::active);
  CAF_REQUIRE_EQUAL(snapshot.inbox.size(), 2u);
  CAF_CHECK_EQUAL(snapshot.inbox[0].seq, 1u);
  CAF_CHECK_EQUAL(snapshot.inbox[0].client_id, "c1");
  CAF_CHECK_EQUAL(snapshot.inbox[0].text, "hello");
  CAF_CHECK_EQUAL(snapshot.inbox[0].accepted_at, 2001);
  CAF_CHECK_EQUAL(snapshot.inbox[1].seq, 2u);
  CAF_CHECK_EQUAL(snapshot.inbox[1].text, "world");
  CAF_CHECK(snapshot.context.empty());
  CAF_CHECK_EQUAL(snapshot.next_seq, 3u);
  // The accept also wrote the user entries of the log.
  auto page = db->history("t1", 0, 10);
  CAF_REQUIRE_EQUAL(outcome(page), "none");
  CAF_REQUIRE_EQUAL(page->entries.size(), 2u);
  CAF_CHECK_EQUAL(page->entries[0].kind, log_kind::user);
  CAF_CHECK_EQUAL(page->entries[0].client_id, "c1");
  CAF_CHECK_EQUAL(page->entries[0].text, "hello");
  CAF_CHECK_EQUAL(page->entries[0].at, 2001);
  CAF_CHECK_EQUAL(value_or(db->count_sessions(), 0), 1u);
  auto stats = db->stats();
  CAF_CHECK_EQUAL(stats.flushes, 1u);
  CAF_CHECK_EQUAL(stats.staged_operations, 2u);
  CAF_CHECK_EQUAL(stats.failed_flushes, 0u);
}

CAF_TEST(a client id already on disk is a duplicate) {
  accept(make_accept("t1", 1, "c1", "hello", true));
  flush();
  auto res = db->stage_accept(make_accept("t1", 2, "c1", "hello again"));
  CAF_REQUIRE_EQUAL(outcome(res), "none");
  CAF_CHECK_EQUAL(res->seq, 1u);
  CAF_CHECK(res->duplicate);
  CAF_CHECK_EQUAL(db->staged(), 0u);
  // The same client id in another thread is a different message.
  accept(make_accept("t2", 1, "c1", "other thread", true));
  flush();
  CAF_CHECK_EQUAL(load("t1").inbox.size(), 1u);
  CAF_CHECK_EQUAL(load("t2").inbox.size(), 1u);
  // Still known after a restart.
  open();
  res = db->stage_accept(make_accept("t1", 5, "c1", "third time"));
  CAF_REQUIRE_EQUAL(outcome(res), "none");
  CAF_CHECK_EQUAL(res->seq, 1u);
  CAF_CHECK(res->duplicate);
}

CAF_TEST(a client id staged in the same group is a duplicate) {
  accept(make_accept("t1", 1, "c1", "hello", true));
  auto res = db->stage_accept(make_accept("t1", 2, "c1", "hello again"));
  CAF_REQUIRE_EQUAL(outcome(res), "none");
  CAF_CHECK_EQUAL(res->seq, 1u);
  CAF_CHECK(res->duplicate);
  CAF_CHECK_EQUAL(db->staged(), 1u);
  flush();
  auto snapshot = load("t1");
  CAF_REQUIRE_EQUAL(snapshot.inbox.size(), 1u);
  CAF_CHECK_EQUAL(snapshot.inbox[0].text, "hello");
  CAF_CHECK_EQUAL(snapshot.next_seq, 2u);
}

CAF_TEST(a commit removes the inbox entry and adds context and log) {
  accept(make_accept("t1", 1, "c1", "hello", true));
  accept(make_accept("t1", 2, "c2", "second"));
  flush();
  // The reply to seq 1 takes seq 3 (seq 2 is the next user message).
  auto commit = make_commit("t1", 1, "c1", 3, "hi there");
  db->stage_commit(commit);
  CAF_CHECK_EQUAL(db->staged(), 1u);
  CAF_CHECK_EQUAL(load("t1").inbox.size(), 2u);
  flush();
  auto snapshot = load("t1");
  CAF_REQUIRE_EQUAL(snapshot.inbox.size(), 1u);
  CAF_CHECK_EQUAL(snapshot.inbox[0].seq, 2u);
  CAF_REQUIRE_EQUAL(snapshot.context.size(), 2u);
  CAF_CHECK_EQUAL(snapshot.context[0].role, "user");
  CAF_CHECK_EQUAL(snapshot.context[1].role, "assistant");
  CAF_CHECK_EQUAL(snapshot.context[1].content, "hi there");
  CAF_CHECK_EQUAL(snapshot.next_seq, 4u);
  auto page = db->history("t1", 0, 10);
  CAF_REQUIRE_EQUAL(outcome(page), "none");
  CAF_REQUIRE_EQUAL(page->entries.size(), 3u);
  CAF_CHECK_EQUAL(page->entries[2].kind, log_kind::reply);
  CAF_CHECK_EQUAL(page->entries[2].reply_to, 1u);
  CAF_CHECK_EQUAL(page->entries[2].provider, "echo");
  CAF_CHECK_EQUAL(page->entries[2].text, "hi there");
  CAF_CHECK(!page->more);
}

CAF_TEST(history pages by seq) {
  accept(make_accept("t1", 1, "c1", "m1", true));
  for (seq_t seq = 2; seq <= 7; ++seq)
    accept(make_accept("t1", seq, "c" + std::to_string(seq),
                       "m" + std::to_string(seq)));
  // A neighbour whose keys sort right after t1's.
  accept(make_accept("t10", 1, "c1", "other", true));
  flush();
  auto page = db->history("t1", 0, 3);
  CAF_REQUIRE_EQUAL(outcome(page), "none");
  CAF_CHECK_EQUAL(page->thread, "t1");
  CAF_REQUIRE_EQUAL(page->entries.size(), 3u);
  CAF_CHECK_EQUAL(page->entries[0].seq, 1u);
  CAF_CHECK_EQUAL(page->entries[2].seq, 3u);
  CAF_CHECK(page->more);
  page = db->history("t1", 3, 3);
  CAF_REQUIRE_EQUAL(outcome(page), "none");
  CAF_REQUIRE_EQUAL(page->entries.size(), 3u);
  CAF_CHECK_EQUAL(page->entries[0].seq, 4u);
  CAF_CHECK_EQUAL(page->entries[2].seq, 6u);
  CAF_CHECK(page->more);
  page = db->history("t1", 6, 3);
  CAF_REQUIRE_EQUAL(outcome(page), "none");
  CAF_REQUIRE_EQUAL(page->entries.size(), 1u);
  CAF_CHECK_EQUAL(page->entries[0].text, "m7");
  CAF_CHECK(!page->more);
  // Exactly `limit` entries left: no more.
  page = db->history("t1", 4, 3);
  CAF_REQUIRE_EQUAL(outcome(page), "none");
  CAF_CHECK_EQUAL(page->entries.size(), 3u);
  CAF_CHECK(!page->more);
  page = db->history("t1", 7, 3);
  CAF_REQUIRE_EQUAL(outcome(page), "none");
  CAF_CHECK(page->entries.empty());
  CAF_CHECK(!page->more);
  page = db->history("t1", 0, 0);
  CAF_REQUIRE_EQUAL(outcome(page), "none");
  CAF_CHECK(page->entries.empty());
  CAF_CHECK(page->more);
  page = db->history("t", 0, 10);
  CAF_REQUIRE_EQUAL(outcome(page), "none");
  CAF_CHECK(page->entries.empty());
  page = db->history("t1", std::numeric_limits<seq_t>::max(), 10);
  CAF_REQUIRE_EQUAL(outcome(page), "none");
  CAF_CHECK(page->entries.empty());
}

CAF_TEST(history pages stop before the entry that passes the byte cap) {
  accept(make_accept("t", 1, "c1", "aaaa", true));
  accept(make_accept("t", 2, "c2", "bbbbbbbbbb"));
  accept(make_accept("t", 3, "c3", "cc"));
  accept(make_accept("t", 4, "c4", "d"));
  flush();
  auto seqs = [](const caf::expected<history_page>& page) {
    std::vector<seq_t> result;
    for (auto& e : page->entries)
      result.push_back(e.seq);
    return result;
  };
  // Entries are measured as the frame encodes them, with their comma.
  auto all = db->history("t", 0, 100);
  CAF_REQUIRE_EQUAL(outcome(all), "none");
  CAF_REQUIRE_EQUAL(all->entries.size(), 4u);
  std::vector<size_t> size;
  for (auto& e : all->entries)
    size.push_back(json_size(e) + 1);
  auto page = db->history("t", 0, 100, size[0] + size[1] - 1);
  CAF_CHECK_EQUAL(seqs(page), std::vector<seq_t>{1});
  CAF_CHECK(page->more);
  page = db->history("t", 1, 100, size[1]);
  CAF_CHECK_EQUAL(seqs(page), std::vector<seq_t>{2});
  CAF_CHECK(page->more);
  page = db->history("t", 2, 100, size[2] + size[3]);
  CAF_CHECK_EQUAL(seqs(page), (std::vector<seq_t>{3, 4}));
  CAF_CHECK(!page->more);
  // One entry larger than the cap still makes a page: paging progresses.
  page = db->history("t", 0, 100, 3);
  CAF_CHECK_EQUAL(seqs(page), std::vector<seq_t>{1});
  CAF_CHECK(page->more);
  page = db->history("t", 1, 100, 3);
  CAF_CHECK_EQUAL(seqs(page), std::vector<seq_t>{2});
  // The entry count still applies under the cap.
  page = db->history("t", 2, 1, 100000);
  CAF_CHECK_EQUAL(seqs(page), std::vector<seq_t>{3});
  CAF_CHECK(page->more);
}

CAF_TEST(history pages of control characters stay within the byte cap) {
  // JSON writes each of these as `\u0001`: six bytes per byte of text.
  std::string text(4000, '\x01');
  for (seq_t seq = 1; seq <= 10; ++seq)
    accept(make_accept("ctl", seq, "c" + std::to_string(seq), text, seq == 1));
  flush();
  const size_t cap = 64 * 1024;
  auto page = db->history("ctl", 0, 100, cap);
  CAF_REQUIRE_EQUAL(outcome(page), "none");
  CAF_CHECK(page->more);
  // Two entries of 24 KB and a bit fit, a third would not.
  CAF_CHECK_EQUAL(page->entries.size(), 2u);
  auto frame = protocol::history_frame("h", *page);
  // The frame is the cap plus its header (type, thread, id, more).
  CAF_CHECK_LESS_OR_EQUAL(frame.size(), cap + 64);
  CAF_CHECK_GREATER(frame.size(), 2 * 6 * text.size());
}

CAF_TEST(threads with an inbox are listed once each in key order) {
  // '.' sorts before '/', '0' right after it: prefix bugs show here.
  for (auto thread : {"t10", "t1", "t1.x", "t1-", "a", "t2"}) {
    accept(make_accept(thread, 1, "c1", "one", true));
    accept(make_accept(thread, 2, "c2", "two"));
  }
  flush();
  // t2's only entries get answered: it has no inbox left.
  db->stage_commit(make_commit("t2", 1, "c1", 3, "r1"));
  db->stage_commit(make_commit("t2", 2, "c2", 4, "r2"));
  flush();
  auto threads = db->threads_with_inbox();
  CAF_REQUIRE_EQUAL(outcome(threads), "none");
  std::vector<std::string> expected{"a", "t1-", "t1.x", "t1", "t10"};
  CAF_CHECK_EQUAL(*threads, expected);
  CAF_CHECK_EQUAL(load("t1").inbox.size(), 2u);
  CAF_CHECK_EQUAL(load("t1.x").inbox.size(), 2u);
  CAF_CHECK_EQUAL(log_size("t1", 0, 100), 2u);
  CAF_CHECK_EQUAL(value_or(db->count_sessions(), 0), 6u);
}

CAF_TEST(the next seq survives a restart) {
  accept(make_accept("t1", 1, "c1", "hello", true));
  flush();
  db->stage_commit(make_commit("t1", 1, "c1", 2, "hi"));
  flush();
  open();
  // The inbox is empty; the log says where the thread is.
  auto snapshot = load("t1");
  CAF_CHECK(snapshot.inbox.empty());
  CAF_CHECK_EQUAL(snapshot.next_seq, 3u);
  accept(make_accept("t1", 3, "c3", "again"));
  flush();
  open();
  CAF_CHECK_EQUAL(load("t1").next_seq, 4u);
  CAF_CHECK_EQUAL(load("t0").next_seq, 1u);
  CAF_CHECK_EQUAL(load("t10").next_seq, 1u);
}

CAF_TEST(flushing nothing succeeds without writing) {
  CAF_CHECK_EQUAL(db->staged(), 0u);
  CAF_CHECK_EQUAL(render(db->flush()), "none");
  CAF_CHECK_EQUAL(db->stats().flushes, 0u);
  // A duplicate stages nothing either.
  accept(make_accept("t1", 1, "c1", "hello", true));
  flush();
  auto dup = db->stage_accept(make_accept("t1", 2, "c1", "x"));
  CAF_REQUIRE_EQUAL(outcome(dup), "none");
  CAF_CHECK(dup->duplicate);
  CAF_CHECK_EQUAL(render(db->flush()), "none");
  CAF_CHECK_EQUAL(db->stats().flushes, 1u);
}

CAF_TEST(sessions are written and counted) {
  db->stage_session(make_session("t1"));
  auto rec = make_session("t2");
  rec.provider_state = "{\"opaque\":true}";
  db->stage_session(rec);
  CAF_CHECK_EQUAL(db->staged(), 2u);
  flush();
  CAF_CHECK_EQUAL(value_or(db->count_sessions(), 0), 2u);
  rec.state = session_state::suspended;
  db->stage_session(rec);
  flush();
  auto loaded = db->session("t2");
  CAF_REQUIRE_EQUAL(outcome(loaded), "none");
  CAF_CHECK_EQUAL(loaded->state, session_state::suspended);
  CAF_CHECK_EQUAL(loaded->provider_state, "{\"opaque\":true}");
  CAF_CHECK_EQUAL(value_or(db->count_sessions(), 0), 2u);
  CAF_CHECK_EQUAL(message_of(db->session("t3")), "no session for thread t3");
}

CAF_TEST(a corrupt record names its column family and key) {
  accept(make_accept("t1", 1, "c1", "hello", true));
  accept(make_accept("t1", 2, "c2", "world"));
  flush();
  put_raw("inbox", seq_key("t1", 2), "garbage{");
  auto snapshot = db->load_thread("t1");
  CAF_REQUIRE(!snapshot);
  CAF_CHECK_EQUAL(snapshot.error(), ec::storage_corrupt);
  CAF_CHECK_EQUAL(message_of(snapshot),
                  "corrupt record in inbox at t1/2: record is not valid JSON");
  put_raw("log", seq_key("t1", 1), R"({"seq":1,"kind":"user"})");
  auto page = db->history("t1", 0, 10);
  CAF_REQUIRE(!page);
  CAF_CHECK_EQUAL(page.error(), ec::storage_corrupt);
  CAF_CHECK(contains(message_of(page), "corrupt record in log at t1/1: "));
  CAF_CHECK(contains(message_of(page), "client_id"));
  // A record under the wrong key.
  log_entry moved;
  moved.seq = 9;
  moved.client_id = "c9";
  put_raw("log", seq_key("t2", 1), encode(moved));
  CAF_CHECK_EQUAL(message_of(db->history("t2", 0, 10)),
                  "corrupt record in log at t2/1: record has seq 9");
  put_raw("sessions", "t3", "[]");
  CAF_CHECK_EQUAL(message_of(db->session("t3")),
                  "corrupt record in sessions at t3: session record: not a "
                  "JSON object");
  put_raw("client_ids", "t1/c7", "seven");
  auto dup = db->stage_accept(make_accept("t1", 7, "c7", "x"));
  CAF_REQUIRE(!dup);
  CAF_CHECK_EQUAL(dup.error(), ec::storage_corrupt);
  CAF_CHECK_EQUAL(message_of(dup), "corrupt record in client_ids at t1/c7: "
                                   "not a sequence number");
  CAF_CHECK_EQUAL(db->staged(), 0u);
}

CAF_TEST(quarantine moves unreadable records aside and the thread loads) {
  accept(make_accept("t1", 1, "c1", "hello", true));
  accept(make_accept("t1", 2, "c2", "second"));
  accept(make_accept("t2", 1, "c1", "other thread", true));
  flush();
  db->stage_commit(make_commit("t1", 1, "c1", 3, "hi there"));
  flush();
  // One context entry is garbage; the other is readable.
  put_raw("context", seq_key("t1", 3), "garbage{");
  CAF_REQUIRE(!db->load_thread("t1"));
  auto report = db->stage_quarantine("t1");
  CAF_REQUIRE_EQUAL(outcome(report), "none");
  CAF_REQUIRE_EQUAL(report->unreadable.size(), 1u);
  CAF_CHECK_EQUAL(report->unreadable[0].column_family, "context");
  CAF_CHECK_EQUAL(report->unreadable[0].key, "t1/3");
  // The readable half of the context goes too: no context with a hole.
  CAF_CHECK_EQUAL(report->readable_moved, 1u);
  flush();
  auto snapshot = load("t1");
  CAF_CHECK(snapshot.exists);
  CAF_CHECK(snapshot.context.empty());
  // The unanswered message and the history stay.
  CAF_REQUIRE_EQUAL(snapshot.inbox.size(), 1u);
  CAF_CHECK_EQUAL(snapshot.inbox[0].seq, 2u);
  CAF_CHECK_EQUAL(snapshot.next_seq, 4u);
  CAF_CHECK_EQUAL(log_size("t1", 0, 10), 3u);
  // Nothing was deleted: the bytes are in quarantine, listed by thread.
  auto listed = db->quarantined();
  CAF_REQUIRE_EQUAL(outcome(listed), "none");
  CAF_REQUIRE_EQUAL(listed->size(), 2u);
  CAF_CHECK_EQUAL((*listed)[0].thread, "t1");
  CAF_CHECK_EQUAL((*listed)[0].column_family, "context");
  CAF_CHECK_EQUAL((*listed)[0].key, "t1/1");
  CAF_CHECK_EQUAL((*listed)[1].key, "t1/3");
  CAF_CHECK_EQUAL((*listed)[1].bytes, 8u);
  // Other threads are untouched.
  CAF_CHECK_EQUAL(load("t2").inbox.size(), 1u);
}

namespace {

// A message whose turn has committed steps (a tool call) but no answer yet:
// its user entry and steps are context records at or after its inbox seq.
turn_commit make_tool_step(const std::string& thread, seq_t seq, seq_t step) {
  turn_commit commit;
  commit.thread = thread;
  commit.inbox_seq = seq;
  commit.keeps_inbox = true;
  commit.context.push_back(context_entry{seq, "user", "run the tool"});
  context_entry call{step, "assistant", ""};
  call.set_tool_calls({tool_call{"call-1", "mark", "{}"}});
  commit.context.push_back(call);
  return commit;
}

} // namespace

CAF_TEST(quarantine keeps the steps of a message still in the inbox) {
  // A tool call in the steps must not be lost with an older, unreadable
  // record: the resumed turn would run the tool a second time.
  accept(make_accept("t1", 1, "c1", "hello", true));
  flush();
  db->stage_commit(make_commit("t1", 1, "c1", 2, "hi there"));
  accept(make_accept("t1", 3, "c3", "run the tool"));
  flush();
  db->stage_commit(make_tool_step("t1", 3, 4));
  flush();
  put_raw("context", seq_key("t1", 2), "garbage{");
  auto report = db->stage_quarantine("t1");
  CAF_REQUIRE_EQUAL(outcome(report), "none");
  CAF_CHECK_EQUAL(report->unreadable.size(), 1u);
  CAF_CHECK_EQUAL(report->readable_moved, 1u);
  CAF_CHECK(!report->steps_lost);
  flush();
  auto snapshot = load("t1");
  CAF_REQUIRE_EQUAL(snapshot.inbox.size(), 1u);
  CAF_REQUIRE_EQUAL(snapshot.context.size(), 2u);
  CAF_CHECK_EQUAL(snapshot.context[0].seq, 3u);
  CAF_REQUIRE_EQUAL(snapshot.context[1].tool_calls().size(), 1u);
}

CAF_TEST(quarantine of the steps of a message says the message lost them) {
  accept(make_accept("t1", 1, "c1", "hello", true));
  flush();
  db->stage_commit(make_commit("t1", 1, "c1", 2, "hi there"));
  accept(make_accept("t1", 3, "c3", "run the tool"));
  flush();
  db->stage_commit(make_tool_step("t1", 3, 4));
  flush();
  put_raw("context", seq_key("t1", 4), "garbage{");
  auto report = db->stage_quarantine("t1");
  CAF_REQUIRE_EQUAL(outcome(report), "none");
  CAF_CHECK_EQUAL(report->readable_moved, 3u);
  CAF_CHECK(report->steps_lost);
  flush();
  auto snapshot = load("t1");
  CAF_CHECK(snapshot.context.empty());
  CAF_REQUIRE_EQUAL(snapshot.inbox.size(), 1u);
}

CAF_TEST(quarantine moves an unreadable session and inbox entry) {
  accept(make_accept("t1", 1, "c1", "hello", true));
  accept(make_accept("t1", 2, "c2", "second"));
  flush();
  put_raw("sessions", "t1", "[]", false);
  put_raw("inbox", seq_key("t1", 2), "garbage{");
  auto report = db->stage_quarantine("t1");
  CAF_REQUIRE_EQUAL(outcome(report), "none");
  CAF_CHECK_EQUAL(report->unreadable.size(), 2u);
  CAF_CHECK_EQUAL(report->readable_moved, 0u);
  flush();
  auto snapshot = load("t1");
  CAF_CHECK(!snapshot.exists); // Starts as a new thread.
  CAF_REQUIRE_EQUAL(snapshot.inbox.size(), 1u);
  CAF_CHECK_EQUAL(snapshot.inbox[0].seq, 1u);
  CAF_CHECK_EQUAL(snapshot.next_seq, 3u);
}

CAF_TEST(a record with ill formed utf8 never fails its group) {
  // Provider error text once reached records raw: one such record made the
  // whole group's flush fail, and with it every write that shared it.
  accept(make_accept("t1", 1, "c1", "fine", true));
  auto rec = make_session("t1");
  rec.provider_state = "\xc3";
  db->stage_session(rec);
  provider_health_record health;
  health.pool = "default";
  health.provider = "p";
  health.last_error = std::string{"cut mid-character \xe2\x82"};
  db->stage_health(health);
  CAF_CHECK_EQUAL(db->flush(), caf::none);
  CAF_CHECK(load("t1").exists);
  CAF_CHECK_EQUAL(load("t1").inbox.size(), 1u);
  auto stored = db->health();
  CAF_REQUIRE(stored);
  CAF_REQUIRE_EQUAL(stored->size(), 1u);
  CAF_CHECK(valid_utf8(stored->front().last_error));
  // Each ill-formed byte is a U+FFFD (sanitize_utf8).
  CAF_CHECK_EQUAL(stored->front().last_error,
                  "cut mid-character \xef\xbf\xbd\xef\xbf\xbd");
}

CAF_TEST(sessions keep provider and recovery mark and old records still read) {
  auto rec = make_session("t1");
  rec.provider = "gpt";
  rec.recovered_at = 1700000000123;
  db->stage_session(rec);
  flush();
  open();
  auto loaded = db->session("t1");
  CAF_REQUIRE_EQUAL(outcome(loaded), "none");
  CAF_CHECK_EQUAL(loaded->provider, "gpt");
  CAF_CHECK_EQUAL(loaded->recovered_at, 1700000000123);
  // A record written before the crash recovery stored them has neither
  // field.
  put_raw("sessions", "t0",
          R"({"thread":"t0","parent":"","pool":"default","model":"m",)"
          R"("state":"SUSPENDED","created_at":5,"provider_state":"blob"})");
  auto old = db->session("t0");
  CAF_REQUIRE_EQUAL(outcome(old), "none");
  CAF_CHECK_EQUAL(old->provider, "");
  CAF_CHECK_EQUAL(old->recovered_at, 0);
  CAF_CHECK_EQUAL(old->provider_state, "blob");
  CAF_CHECK_EQUAL(old->state, session_state::suspended);
  // Present but of the wrong type is still an error naming the field.
  put_raw("sessions", "t2",
          R"({"thread":"t2","parent":"","pool":"p","model":"",)"
          R"("state":"ACTIVE","created_at":5,"provider_state":"",)"
          R"("recovered_at":"yesterday"})");
  CAF_CHECK_EQUAL(message_of(db->session("t2")),
                  "corrupt record in sessions at t2: session record: field "
                  "'recovered_at' has the wrong type");
  // So is a record stored under another thread's key.
  put_raw("sessions", "t3", encode(make_session("t4")));
  CAF_CHECK_EQUAL(message_of(db->session("t3")),
                  "corrupt record in sessions at t3: record has thread t4");
}

CAF_TEST(a spawn writes the child session and its link together) {
  accept(make_accept("p", 1, "c1", "spawn a helper", true));
  flush();
  auto res = db->stage_spawn(make_spawn("p", "p.kid"));
  CAF_REQUIRE_EQUAL(outcome(res), "none");
  CAF_CHECK_EQUAL(res->parent, "p");
  CAF_CHECK_EQUAL(res->child, "p.kid");
  CAF_CHECK(res->created);
  CAF_CHECK_EQUAL(db->staged(), 1u);
  // Invisible until flushed.
  CAF_CHECK_EQUAL(error_of(db->session("p.kid")), ec::not_found);
  CAF_CHECK(load("p").children.empty());
  flush();
  auto kid = db->session("p.kid");
  CAF_REQUIRE_EQUAL(outcome(kid), "none");
  CAF_CHECK_EQUAL(kid->parent, "p");
  CAF_CHECK_EQUAL(kid->state, session_state::suspended);
  auto links = db->tree_links();
  CAF_REQUIRE_EQUAL(outcome(links), "none");
  CAF_REQUIRE_EQUAL(links->size(), 1u);
  CAF_CHECK_EQUAL((*links)[0].parent, "p");
  CAF_CHECK_EQUAL((*links)[0].child, "p.kid");
  CAF_CHECK_EQUAL((*links)[0].created_at, 1500);
  CAF_CHECK_EQUAL(value_or(db->children("p"), std::vector<std::string>{}),
                  std::vector<std::string>{"p.kid"});
  CAF_CHECK_EQUAL(load("p").children, std::vector<std::string>{"p.kid"});
  CAF_CHECK(load("p.kid").children.empty());
}

CAF_TEST(a spawn sees parents and children staged in the same group) {
  // The parent's first message and its spawn share one flush.
  accept(make_accept("p", 1, "c1", "hello", true));
  spawn("p", "p.a");
  // A grandchild under the staged child.
  spawn("p.a", "p.a.b");
  // Resent before the flush: nothing more is staged.
  auto again = db->stage_spawn(make_spawn("p", "p.a"));
  CAF_REQUIRE_EQUAL(outcome(again), "none");
  CAF_CHECK(!again->created);
  CAF_CHECK_EQUAL(db->staged(), 3u);
  flush();
  CAF_CHECK_EQUAL(value_or(db->count_sessions(), 0), 3u);
  CAF_CHECK_EQUAL(load("p.a").children, std::vector<std::string>{"p.a.b"});
  // After a failed flush, the staged sessions are forgotten with the group.
  spawn("p", "p.c");
  fail_writes(true);
  CAF_CHECK_EQUAL(db->flush(), ec::storage_io);
  fail_writes(false);
  CAF_CHECK_EQUAL(error_of(db->stage_spawn(make_spawn("p.c", "p.c.d"))),
                  ec::not_found);
}

CAF_TEST(a resent spawn writes nothing) {
  accept(make_accept("p", 1, "c1", "hello", true));
  spawn("p", "p.a");
  flush();
  auto flushes = db->stats().flushes;
  auto again = db->stage_spawn(make_spawn("p", "p.a"));
  CAF_REQUIRE_EQUAL(outcome(again), "none");
  CAF_CHECK(!again->created);
  CAF_CHECK_EQUAL(db->staged(), 0u);
  flush();
  CAF_CHECK_EQUAL(db->stats().flushes, flushes);
  CAF_CHECK_EQUAL(value_or(db->tree_links(), std::vector<tree_link>{}).size(),
                  1u);
}

CAF_TEST(a spawn that conflicts with the tree is refused) {
  accept(make_accept("p", 1, "c1", "hello", true));
  accept(make_accept("q", 1, "c1", "hello", true));
  accept(make_accept("root", 1, "c1", "hello", true));
  spawn("p", "p.a");
  flush();
  auto refused = [&](const spawn_request& req, ec code,
                     const std::string& message) {
    auto res = db->stage_spawn(req);
    CAF_CHECK_EQUAL(error_of(res), code);
    CAF_CHECK_EQUAL(message_of(res), message);
  };
  refused(make_spawn("nobody", "nobody.a"), ec::not_found,
          "cannot spawn nobody.a under nobody: the parent has no session");
  refused(make_spawn("q", "p.a"), ec::conflict,
          "cannot spawn p.a under q: the thread exists under p");
  refused(make_spawn("q", "root"), ec::conflict,
          "cannot spawn root under q: the thread exists as a root");
  refused(make_spawn("q", "q"), ec::conflict,
          "cannot spawn q under q: a thread cannot be its own child");
  refused(make_spawn("q", "q/x"), ec::conflict,
          "cannot spawn q/x under q: not a valid thread id");
  auto mismatched = make_spawn("q", "q.a");
  mismatched.child.parent = "p";
  refused(mismatched, ec::conflict,
          "cannot spawn q.a under q: the link (q -> q.a) does not match the "
          "child's session (parent p)");
  // A CLOSED parent, also when the close is only staged.
  auto closed = make_session("q");
  closed.state = session_state::closed;
  db->stage_session(closed);
  refused(make_spawn("q", "q.a"), ec::conflict,
          "cannot spawn q.a under q: the parent is CLOSED");
  flush();
  refused(make_spawn("q", "q.a"), ec::conflict,
          "cannot spawn q.a under q: the parent is CLOSED");
  CAF_CHECK_EQUAL(db->staged(), 0u);
  CAF_CHECK_EQUAL(value_or(db->tree_links(), std::vector<tree_link>{}).size(),
                  1u);
}

CAF_TEST(a spawn past the tree limits is refused and staged children count) {
  accept(make_accept("p", 1, "c1", "hello", true));
  auto limited = [](std::string parent, std::string child) {
    auto req = make_spawn(std::move(parent), std::move(child));
    req.max_children = 2;
    req.max_depth = 2;
    return req;
  };
  CAF_CHECK_EQUAL(outcome(db->stage_spawn(limited("p", "p.a"))), "none");
  CAF_CHECK_EQUAL(outcome(db->stage_spawn(limited("p", "p.b"))), "none");
  // p.a and p.b are staged only: they count.
  auto third = db->stage_spawn(limited("p", "p.c"));
  CAF_CHECK_EQUAL(error_of(third), ec::agent_limit);
  CAF_CHECK_EQUAL(message_of(third),
                  "cannot spawn p.c under p: it has 2 child agents, the most "
                  "a thread may have (threads.agents.max_children)");
  flush();
  CAF_CHECK_EQUAL(error_of(db->stage_spawn(limited("p", "p.c"))),
                  ec::agent_limit);
  // A resent spawn is no new child.
  auto again = db->stage_spawn(limited("p", "p.b"));
  CAF_REQUIRE_EQUAL(outcome(again), "none");
  CAF_CHECK(!again->created);
  CAF_CHECK_EQUAL(outcome(db->stage_spawn(limited("p.a", "p.a.a"))), "none");
  auto deep = db->stage_spawn(limited("p.a.a", "p.a.a.a"));
  CAF_CHECK_EQUAL(error_of(deep), ec::agent_limit);
  CAF_CHECK_EQUAL(message_of(deep),
                  "cannot spawn p.a.a.a under p.a.a: the tree would be deeper "
                  "than 2 levels (threads.agents.max_depth)");
  // Without limits the same spawns go through.
  CAF_CHECK_EQUAL(outcome(db->stage_spawn(make_spawn("p", "p.c"))), "none");
  CAF_CHECK_EQUAL(outcome(db->stage_spawn(make_spawn("p.a.a", "p.a.a.a"))),
                  "none");
  flush();
  CAF_CHECK_EQUAL(
    value_or(db->children("p"), std::vector<std::string>{}).size(), 3u);
}

CAF_TEST(a commit writes the session and outbox after a spawn in its group) {
  accept(make_accept("p", 1, "c1", "ask a helper", true));
  flush();
  // A turn spawns the children it asks for, then commits.
  auto spawned = db->stage_spawn(make_spawn("p", "p.a"));
  CAF_REQUIRE_EQUAL(outcome(spawned), "none");
  CAF_CHECK(spawned->created);
  auto commit = make_commit("p", 1, "c1", 2, "asked p.a");
  commit.write_session = true;
  commit.session = make_session("p");
  commit.session.provider = "gpt";
  commit.session.recovered_at = 0;
  commit.outbox.push_back(make_outbox("p", 2, "p.a", "do the thing"));
  db->stage_commit(commit);
  CAF_CHECK_EQUAL(db->staged(), 2u);
  // A spawn in the same group sees the staged child.
  auto again = db->stage_spawn(make_spawn("p", "p.a"));
  CAF_REQUIRE_EQUAL(outcome(again), "none");
  CAF_CHECK(!again->created);
  flush();
  auto snapshot = load("p");
  CAF_CHECK(snapshot.inbox.empty());
  CAF_CHECK_EQUAL(snapshot.session.provider, "gpt");
  CAF_CHECK_EQUAL(snapshot.children, std::vector<std::string>{"p.a"});
  CAF_REQUIRE_EQUAL(snapshot.outbox.size(), 1u);
  CAF_CHECK_EQUAL(snapshot.outbox[0].to, "p.a");
  CAF_CHECK_EQUAL(snapshot.outbox[0].client_id, "agent:p:2");
  CAF_CHECK_EQUAL(snapshot.outbox[0].text, "do the thing");
  CAF_CHECK_EQUAL(snapshot.next_seq, 3u);
  CAF_CHECK_EQUAL(value_or(db->session("p.a"), session_record{}).parent, "p");
  auto all = db->outbox();
  CAF_REQUIRE_EQUAL(outcome(all), "none");
  CAF_REQUIRE_EQUAL(all->size(), 1u);
  CAF_CHECK_EQUAL((*all)[0].from, "p");
  CAF_CHECK_EQUAL((*all)[0].seq, 2u);
  // The child's outbox is its own range.
  CAF_CHECK(load("p.a").outbox.empty());
}

CAF_TEST(session writes keep the parent a spawn gave the thread) {
  accept(make_accept("p", 1, "c1", "hello", true));
  flush();
  spawn("p", "p.a");
  // A conversation that began before the spawn writes its session as a
  // root's: in the same group as the spawn, then after its flush.
  accept(make_accept("p.a", 1, "x1", "early", true));
  flush();
  CAF_CHECK_EQUAL(value_or(db->session("p.a"), session_record{}).parent, "p");
  auto commit = make_commit("p.a", 1, "x1", 2, "done");
  commit.write_session = true;
  commit.session = make_session("p.a");
  db->stage_commit(commit);
  auto suspended = make_session("p.a");
  suspended.state = session_state::suspended;
  db->stage_session(suspended);
  flush();
  auto rec = value_or(db->session("p.a"), session_record{});
  CAF_CHECK_EQUAL(rec.parent, "p");
  CAF_CHECK_EQUAL(rec.state, session_state::suspended);
  // A root stays a root.
  db->stage_session(make_session("p"));
  flush();
  CAF_CHECK_EQUAL(value_or(db->session("p"), session_record{}).parent, "");
}

CAF_TEST(a stored session rewritten in a group reads right in that group) {
  accept(make_accept("p", 1, "c1", "hello", true));
  spawn("p", "p.a");
  flush();
  // Suspended as a recovery does: a conversation's write in the same group
  // still keeps the spawn's parent, and a spawn under it is not refused.
  auto stored = value_or(db->session("p.a"), session_record{});
  CAF_REQUIRE_EQUAL(stored.parent, "p");
  stored.recovered_at = 42;
  db->stage_stored_session(stored);
  db->stage_session(make_session("p.a"));
  spawn("p.a", "p.a.b");
  flush();
  auto rec = value_or(db->session("p.a"), session_record{});
  CAF_CHECK_EQUAL(rec.parent, "p");
  CAF_CHECK_EQUAL(rec.recovered_at, 0);
  CAF_CHECK_EQUAL(load("p.a").children, std::vector<std::string>{"p.a.b"});
  // Rewritten CLOSED: a spawn under it in the same group is refused.
  auto closed = value_or(db->session("p.a.b"), session_record{});
  closed.state = session_state::closed;
  db->stage_stored_session(closed);
  CAF_CHECK_EQUAL(error_of(db->stage_spawn(make_spawn("p.a.b", "p.a.b.c"))),
                  ec::conflict);
  // Staged CLOSED, then rewritten open as stored: the last one counts.
  auto reopened = value_or(db->session("p.a.b"), session_record{});
  db->stage_stored_session(reopened);
  auto res = db->stage_spawn(make_spawn("p.a.b", "p.a.b.c"));
  CAF_REQUIRE_EQUAL(outcome(res), "none");
  CAF_CHECK(res->created);
  flush();
  CAF_CHECK_EQUAL(value_or(db->session("p.a.b"), session_record{}).state,
                  reopened.state);
}

CAF_TEST(delivering a message removes its outbox entry in the same batch) {
  accept(make_accept("p", 1, "c1", "hello", true));
  spawn("p", "p.a");
  auto commit = make_commit("p", 1, "c1", 2, "delegated");
  auto msg = make_outbox("p", 2, "p.a", "do it");
  commit.outbox.push_back(msg);
  db->stage_commit(commit);
  flush();
  accept(make_delivery(msg, 1));
  // Staged: still in the outbox, not in the inbox.
  CAF_CHECK_EQUAL(load("p").outbox.size(), 1u);
  CAF_CHECK(load("p.a").inbox.empty());
  flush();
  CAF_CHECK(load("p").outbox.empty());
  auto child = load("p.a");
  CAF_REQUIRE_EQUAL(child.inbox.size(), 1u);
  CAF_CHECK_EQUAL(child.inbox[0].client_id, "agent:p:2");
  CAF_CHECK_EQUAL(child.inbox[0].text, "do it");
  // The entry resent after a crash (written again by a replayed commit):
  // the duplicate accept still removes it, and needs a flush for that.
  put_raw("outbox", seq_key("p", 2), encode(msg));
  CAF_CHECK_EQUAL(load("p").outbox.size(), 1u);
  auto dup = db->stage_accept(make_delivery(msg, 5));
  CAF_REQUIRE_EQUAL(outcome(dup), "none");
  CAF_CHECK(dup->duplicate);
  CAF_CHECK_EQUAL(dup->seq, 1u);
  CAF_CHECK_EQUAL(db->staged(), 1u);
  flush();
  CAF_CHECK(load("p").outbox.empty());
  CAF_CHECK_EQUAL(load("p.a").inbox.size(), 1u);
  CAF_CHECK_EQUAL(load("p.a").next_seq, 2u);
  // A duplicate within one group removes it as well.
  put_raw("outbox", seq_key("p", 2), encode(msg));
  auto msg2 = make_outbox("p", 3, "p.a", "and this");
  put_raw("outbox", seq_key("p", 3), encode(msg2));
  accept(make_delivery(msg2, 2));
  auto dup2 = db->stage_accept(make_delivery(msg2, 3));
  CAF_REQUIRE_EQUAL(outcome(dup2), "none");
  CAF_CHECK(dup2->duplicate);
  CAF_CHECK_EQUAL(dup2->seq, 2u);
  CAF_CHECK(db->stage_accept(make_delivery(msg, 4))->duplicate);
  flush();
  CAF_CHECK(load("p").outbox.empty());
  CAF_CHECK_EQUAL(load("p.a").inbox.size(), 2u);
}

CAF_TEST(an undeliverable message moves to the dead letters) {
  auto msg = make_outbox("p", 2, "gone", "anyone there?");
  put_raw("outbox", seq_key("p", 2), encode(msg));
  dead_letter letter{msg, "target thread gone has no session", 1700000000000};
  letter.next_retry_at = 1700000300000;
  db->stage_dead_letter(letter);
  CAF_CHECK_EQUAL(db->staged(), 1u);
  flush();
  CAF_CHECK(value_or(db->outbox(), std::vector<outbox_entry>{}).empty());
  auto letters = db->dead_letters();
  CAF_REQUIRE_EQUAL(outcome(letters), "none");
  CAF_REQUIRE_EQUAL(letters->size(), 1u);
  CAF_CHECK_EQUAL((*letters)[0].entry.from, "p");
  CAF_CHECK_EQUAL((*letters)[0].entry.seq, 2u);
  CAF_CHECK_EQUAL((*letters)[0].entry.to, "gone");
  CAF_CHECK_EQUAL((*letters)[0].entry.text, "anyone there?");
  CAF_CHECK_EQUAL((*letters)[0].reason, "target thread gone has no session");
  CAF_CHECK_EQUAL((*letters)[0].at, 1700000000000);
  CAF_CHECK_EQUAL((*letters)[0].status, dead_letter_status::pending);
  CAF_CHECK_EQUAL((*letters)[0].next_retry_at, 1700000300000);
  // Updating it (a failed retry) keeps one record.
  letter.retries = 1;
  letter.events.push_back({1700000300000, "scheduled retry", "no session"});
  db->stage_dead_letter(letter);
  flush();
  letters = db->dead_letters();
  CAF_REQUIRE_EQUAL(outcome(letters), "none");
  CAF_REQUIRE_EQUAL(letters->size(), 1u);
  CAF_CHECK_EQUAL((*letters)[0].retries, 1u);
  CAF_REQUIRE_EQUAL((*letters)[0].events.size(), 1u);
  CAF_CHECK_EQUAL((*letters)[0].events[0].outcome, "no session");
}

CAF_TEST(a reply for channels is recorded with its commit until delivered) {
  accept(make_accept("t1", 1, "c1", "hello", true));
  flush();
  auto commit = make_commit("t1", 1, "c1", 3, "hi there");
  commit.deliveries.push_back({"t1", 3, 1, "hi there", 77, {"crm", "ops"}});
  db->stage_commit(commit);
  flush();
  auto pending = db->deliveries();
  CAF_REQUIRE_EQUAL(outcome(pending), "none");
  CAF_REQUIRE_EQUAL(pending->size(), 1u);
  CAF_CHECK_EQUAL((*pending)[0].seq, 3u);
  CAF_CHECK_EQUAL((*pending)[0].text, "hi there");
  CAF_CHECK_EQUAL((*pending)[0].channels,
                  (std::vector<std::string>{"crm", "ops"}));
  // One channel delivered: the record keeps the other.
  auto rest = (*pending)[0];
  rest.channels = {"ops"};
  db->stage_delivery(rest);
  flush();
  pending = db->deliveries();
  CAF_REQUIRE_EQUAL(outcome(pending), "none");
  CAF_REQUIRE_EQUAL(pending->size(), 1u);
  CAF_CHECK_EQUAL((*pending)[0].channels, std::vector<std::string>{"ops"});
  // The last channel gave up: the reply moves to the dead letters in one
  // write.
  dead_letter letter{
    {"t1", 3, "", "", "hi there", 77, 0}, "channel ops: 500", 80};
  letter.channels = {"ops"};
  db->stage_dead_letter(letter);
  flush();
  CAF_CHECK(value_or(db->deliveries(), std::vector<reply_delivery>{1}).empty());
  auto letters = value_or(db->dead_letters(), std::vector<dead_letter>{});
  CAF_REQUIRE_EQUAL(letters.size(), 1u);
  CAF_CHECK_EQUAL(letters[0].channels, std::vector<std::string>{"ops"});
  // An empty channel list removes a record.
  db->stage_delivery({"t1", 5, 4, "more", 90, {"crm"}});
  flush();
  db->stage_delivery({"t1", 5, 4, "more", 90, {}});
  CAF_CHECK_EQUAL(db->staged(), 1u);
  flush();
  CAF_CHECK(value_or(db->deliveries(), std::vector<reply_delivery>{1}).empty());
}

CAF_TEST(the listing reads return everything in key order) {
  // '.' sorts before '/', '0' right after it: prefix bugs show here.
  for (auto thread : {"t1", "t1.x", "t10"})
    accept(make_accept(thread, 1, "c1", "one", true));
  accept(make_accept("t1", 2, "c2", "two"));
  spawn("t1", "t1.x.kid");
  spawn("t1", "t1.a");
  flush();
  auto commit = make_commit("t10", 1, "c1", 2, "r1");
  commit.outbox.push_back(make_outbox("t10", 2, "t1", "to t1"));
  db->stage_commit(commit);
  auto commit2 = make_commit("t1", 1, "c1", 3, "r1");
  commit2.outbox.push_back(make_outbox("t1", 3, "t1.a", "to the kid"));
  db->stage_commit(commit2);
  flush();
  auto sessions = db->sessions();
  CAF_REQUIRE_EQUAL(outcome(sessions), "none");
  std::vector<std::string> threads;
  for (auto& x : *sessions)
    threads.push_back(x.thread);
  CAF_CHECK_EQUAL(threads, (std::vector<std::string>{"t1", "t1.a", "t1.x",
                                                     "t1.x.kid", "t10"}));
  auto links = db->tree_links();
  CAF_REQUIRE_EQUAL(outcome(links), "none");
  CAF_REQUIRE_EQUAL(links->size(), 2u);
  CAF_CHECK_EQUAL((*links)[0].child, "t1.a");
  CAF_CHECK_EQUAL((*links)[1].child, "t1.x.kid");
  CAF_CHECK_EQUAL(value_or(db->children("t1"), std::vector<std::string>{}),
                  (std::vector<std::string>{"t1.a", "t1.x.kid"}));
  CAF_CHECK(
    value_or(db->children("t1.x"), std::vector<std::string>{"?"}).empty());
  auto outbox = db->outbox();
  CAF_REQUIRE_EQUAL(outcome(outbox), "none");
  CAF_REQUIRE_EQUAL(outbox->size(), 2u);
  CAF_CHECK_EQUAL((*outbox)[0].from, "t1");
  CAF_CHECK_EQUAL((*outbox)[1].from, "t10");
  auto counts = db->inbox_counts();
  CAF_REQUIRE_EQUAL(outcome(counts), "none");
  using count_list = std::vector<std::pair<std::string, uint64_t>>;
  CAF_CHECK(*counts == (count_list{{"t1.x", 1}, {"t1", 1}}));
  auto dump = db->dump_thread("t1");
  CAF_REQUIRE_EQUAL(outcome(dump), "none");
  CAF_CHECK_EQUAL(dump->thread, "t1");
  CAF_REQUIRE_EQUAL(dump->log.size(), 3u);
  CAF_CHECK_EQUAL(dump->log[2].kind, log_kind::reply);
  CAF_REQUIRE_EQUAL(dump->inbox.size(), 1u);
  CAF_CHECK_EQUAL(dump->inbox[0].seq, 2u);
  using id_list = std::vector<std::pair<std::string, seq_t>>;
  CAF_CHECK(dump->client_ids == (id_list{{"c1", 1}, {"c2", 2}}));
  CAF_REQUIRE_EQUAL(dump->outbox.size(), 1u);
  CAF_CHECK_EQUAL(dump->outbox[0].to, "t1.a");
  CAF_CHECK_EQUAL(dump->context.size(), 2u);
  auto empty = db->dump_thread("nobody");
  CAF_REQUIRE_EQUAL(outcome(empty), "none");
  CAF_CHECK(empty->log.empty() && empty->client_ids.empty());
}

CAF_TEST(a page of sessions starts right after its cursor) {
  // '.' sorts before '/', '0' right after it: a cursor that is a prefix of
  // the next thread id must not skip or repeat it.
  for (auto thread : {"t1", "t1.x", "t10"})
    accept(make_accept(thread, 1, "c1", "one", true));
  spawn("t1", "t1.x.kid");
  spawn("t1", "t1.a");
  flush();
  auto page = [&](const std::string& after, size_t limit) {
    std::vector<std::string> threads;
    auto xs = db->sessions_after(after, limit);
    CAF_REQUIRE_EQUAL(outcome(xs), "none");
    for (auto& x : *xs)
      threads.push_back(x.thread);
    return threads;
  };
  using list = std::vector<std::string>;
  CAF_CHECK_EQUAL(page("", 2), (list{"t1", "t1.a"}));
  CAF_CHECK_EQUAL(page("t1", 2), (list{"t1.a", "t1.x"}));
  CAF_CHECK_EQUAL(page("t1.x", 2), (list{"t1.x.kid", "t10"}));
  CAF_CHECK_EQUAL(page("t1.x.kid", 2), (list{"t10"}));
  CAF_CHECK(page("t10", 2).empty());
  // A cursor no longer stored (its thread gone) still says where to go on.
  CAF_CHECK_EQUAL(page("t1.b", 1), (list{"t1.x"}));
  CAF_CHECK(page("", 0).empty());
  CAF_CHECK_EQUAL(page("", 100).size(), 5u);
  auto first = db->sessions_after("", 1);
  CAF_REQUIRE_EQUAL(outcome(first), "none");
  CAF_CHECK_EQUAL(first->at(0).pool, "default");
}

CAF_TEST(lenient reads list corrupt records and return the rest) {
  accept(make_accept("t1", 1, "c1", "one", true));
  spawn("t1", "t1.a");
  flush();
  put_raw("sessions", "t0", "{");
  put_raw("tree", "t1/t1.b", encode(tree_link{"t1", "t1.c", 0}));
  put_raw("outbox", seq_key("t1", 4), encode(make_outbox("t1", 5, "x", "")));
  put_raw("log", seq_key("t1", 2), "[]");
  put_raw("client_ids", "t1/c9", "nine");
  // Strict reads fail on the first.
  CAF_CHECK_EQUAL(message_of(db->sessions()),
                  "corrupt record in sessions at t0: record is not valid "
                  "JSON");
  CAF_CHECK_EQUAL(message_of(db->tree_links()),
                  "corrupt record in tree at t1/t1.b: record links t1 -> "
                  "t1.c");
  CAF_CHECK_EQUAL(message_of(db->outbox()),
                  "corrupt record in outbox at t1/4: record is from t1/5");
  CAF_CHECK_EQUAL(error_of(db->dump_thread("t1")), ec::storage_corrupt);
  std::vector<bad_record> bad;
  auto sessions = db->sessions(bad);
  CAF_REQUIRE_EQUAL(outcome(sessions), "none");
  CAF_CHECK_EQUAL(sessions->size(), 2u);
  auto links = db->tree_links(bad);
  CAF_REQUIRE_EQUAL(outcome(links), "none");
  CAF_CHECK_EQUAL(links->size(), 1u);
  auto outbox = db->outbox(bad);
  CAF_REQUIRE_EQUAL(outcome(outbox), "none");
  CAF_CHECK(outbox->empty());
  // The thread's own records, its outbox included.
  std::vector<bad_record> thread_bad;
  auto dump = db->dump_thread("t1", thread_bad);
  CAF_REQUIRE_EQUAL(outcome(dump), "none");
  CAF_CHECK_EQUAL(dump->log.size(), 1u);
  CAF_CHECK_EQUAL(dump->client_ids.size(), 1u);
  CAF_CHECK(dump->outbox.empty());
  CAF_REQUIRE_EQUAL(bad.size(), 3u);
  auto where = [](const bad_record& x) {
    return x.column_family + " " + x.key + ": " + x.what;
  };
  CAF_CHECK_EQUAL(where(bad[0]), "sessions t0: record is not valid JSON");
  CAF_CHECK_EQUAL(where(bad[1]), "tree t1/t1.b: record links t1 -> t1.c");
  CAF_CHECK_EQUAL(where(bad[2]), "outbox t1/4: record is from t1/5");
  CAF_REQUIRE_EQUAL(thread_bad.size(), 3u);
  CAF_CHECK_EQUAL(where(thread_bad[0]),
                  "log t1/2: log entry: not a JSON object");
  CAF_CHECK_EQUAL(where(thread_bad[1]), "outbox t1/4: record is from t1/5");
  CAF_CHECK_EQUAL(where(thread_bad[2]),
                  "client_ids t1/c9: not a sequence number");
}

CAF_TEST(a read - only store reads beside a writer and refuses every write) {
  accept(make_accept("t1", 1, "c1", "hello", true));
  spawn("t1", "t1.a");
  flush();
  // The writer stays open (and holds the lock).
  store_options opts;
  opts.read_only = true;
  auto reader_res = try_open(opts);
  CAF_REQUIRE_EQUAL(outcome(reader_res), "none");
  auto& reader = **reader_res;
  CAF_CHECK_EQUAL(value_or(reader.count_sessions(), 0), 2u);
  CAF_CHECK_EQUAL(value_or(reader.children("t1"), std::vector<std::string>{}),
                  std::vector<std::string>{"t1.a"});
  auto snapshot = reader.load_thread("t1");
  CAF_REQUIRE_EQUAL(outcome(snapshot), "none");
  CAF_CHECK_EQUAL(snapshot->inbox.size(), 1u);
  auto read_only = where() + " is open read-only: cannot write";
  auto accepted = reader.stage_accept(make_accept("t1", 2, "c2", "x"));
  CAF_CHECK_EQUAL(error_of(accepted), ec::storage_io);
  CAF_CHECK_EQUAL(message_of(accepted), read_only);
  auto spawned = reader.stage_spawn(make_spawn("t1", "t1.b"));
  CAF_CHECK_EQUAL(message_of(spawned), read_only);
  reader.stage_session(make_session("t2"));
  reader.stage_commit(make_commit("t1", 1, "c1", 2, "r"));
  reader.stage_meta("k", "v");
  reader.stage_dead_letter(dead_letter{make_outbox("t1", 9, "t2", "x"), "why"});
  // The refused writes count as one: the flush must run, and fails.
  CAF_CHECK_EQUAL(reader.staged(), 1u);
  auto err = reader.flush();
  CAF_CHECK_EQUAL(err, ec::storage_io);
  CAF_CHECK_EQUAL(error_message(err), read_only);
  // Even an empty flush: nothing can ever be written through it.
  CAF_CHECK_EQUAL(error_message(reader.flush()), read_only);
  // The writer goes on.
  accept(make_accept("t1", 2, "c2", "more"));
  flush();
  CAF_CHECK_EQUAL(load("t1").inbox.size(), 2u);
  CAF_CHECK_EQUAL(error_of(db->meta("k")), ec::not_found);
}

CAF_TEST(a recovery report survives the meta round trip) {
  recovery_report report;
  report.started_at = 1700000000000;
  report.finished_at = 1700000000042;
  report.sessions = 5;
  report.roots = 2;
  report.links = 3;
  report.suspended = 1;
  report.inbox_messages = 4;
  report.inbox_threads = 2;
  report.outbox_messages = 1;
  report.roots_resumed = 2;
  report.children_resumed = 1;
  report.cancels_finished = 1;
  report.problems = {"link a -> b: b has no session"};
  report.steps = {{"read_sessions", 5, 120}, {"rebuild_tree", 3, 45}};
  db->stage_meta("last_recovery", encode(report));
  flush();
  open();
  auto text = db->meta("last_recovery");
  CAF_REQUIRE_EQUAL(outcome(text), "none");
  auto back = decode<recovery_report>(*text);
  CAF_REQUIRE_EQUAL(outcome(back), "none");
  CAF_CHECK_EQUAL(encode(*back), encode(report));
  CAF_CHECK_EQUAL(back->steps[1].name, "rebuild_tree");
  CAF_CHECK_EQUAL(back->steps[1].micros, 45);
  CAF_CHECK_EQUAL(back->cancels_finished, 1u);
  // Counters a report of an older build lacks read as 0; a bad step names
  // itself.
  auto minimal
    = decode<recovery_report>(R"({"started_at":1,"finished_at":2,"steps":[]})");
  CAF_REQUIRE_EQUAL(outcome(minimal), "none");
  CAF_CHECK_EQUAL(minimal->cancels_finished, 0u);
  auto bad_step = decode<recovery_report>(
    R"({"started_at":1,"finished_at":2,"steps":[{"name":"x"}]})");
  CAF_CHECK_EQUAL(message_of(bad_step),
                  "recovery report: steps[0]: missing field 'count'");
}

CAF_TEST_FIXTURE_SCOPE_END()
