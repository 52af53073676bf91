#define CAF_SUITE json_codec

#include "keel/json_codec.hpp"
#include "keel/stored_form.hpp"

#include <caf/test/unit_test.hpp>

#include <cstdio>
#include <string>
#include <vector>

#include <caf/binary_deserializer.hpp>
#include <caf/binary_serializer.hpp>
#include <caf/deep_to_string.hpp>

// The JSON form of every record, pinned byte for byte: the expected strings
// were produced by the hand-written encoder the `inspect`-derived one
// replaced, so they also pin that nothing changed. The CAF forms (binary
// serialization and deep_to_string) are pinned too: the field annotations
// must not change how records travel in messages.

using namespace keel;

namespace {

// Sample records: every field set to a value that is not its default, and
// every record also in its default form (where the encoding omits fields).

session_record full_session() {
  return {"t1",          "p0",          "default",
          "gpt-x",       "openai-1",    session_state::active,
          1700000000123, 1700000000456, "opaque \"state\"\n\xc3\xa9"};
}

tree_link full_link() {
  return {"p", "p.c", 42};
}

outbox_entry full_outbox() {
  return {"p", 7, "p.c", "agent:p:7", "hello \"child\"\t\\", 1234, 2};
}

dead_letter full_dead_letter() {
  dead_letter x{full_outbox(), "target thread t9 has no session", 99};
  x.status = dead_letter_status::abandoned;
  x.retries = 5;
  x.last_attempt_at = 500;
  x.events.push_back({300, "scheduled retry", "no session"});
  return x;
}

dead_letter full_reply_letter() {
  dead_letter x{
    {"t", 9, "", "", "the reply", 1234, 0}, "channel crm: HTTP 500", 99};
  x.next_retry_at = 400;
  x.channels = {"crm", "ops"};
  x.reply_to = 8;
  return x;
}

reply_delivery full_delivery() {
  return {"t", 9, 8, "the reply", 1234, {"crm", "ops"}};
}

inbox_entry full_inbox() {
  return {3, "c1", "hi there", 55, 2};
}

log_entry user_log() {
  return {1, log_kind::user, "c0", 0, "hello", "", "", 10};
}

log_entry reply_log() {
  return {5, log_kind::reply, "c1", 3, "the answer", "", "openai-1", 77};
}

log_entry error_log() {
  return {6, log_kind::error, "c2", 4, "failed", "provider_down", "", 78};
}

context_entry full_context() {
  return {3, "assistant", "text with\nnewline"};
}

// Every field of a tool exchange at once (an entry has either its calls or
// a call it answers): they are stored apart from the entry in memory and
// must still read back from each form.
context_entry full_tool_context() {
  context_entry result{5, "assistant", "calling"};
  result.set_tool_calls({tool_call{"c1", "ls", R"({"dir":"/"})"}});
  result.set_tool_result("c0", "grep");
  result.message_seq = 4;
  return result;
}

provider_health_record full_health() {
  return {"default",   "p1", "down", "open", 3, "timeout",
          "transient", 100,  200,    10,     4};
}

recovery_step full_step() {
  return {"read_sessions", 5, 120};
}

recovery_report full_report() {
  recovery_report x;
  x.started_at = 1000;
  x.finished_at = 2000;
  x.sessions = 5;
  x.roots = 2;
  x.links = 3;
  x.suspended = 1;
  x.inbox_messages = 4;
  x.inbox_threads = 2;
  x.outbox_messages = 1;
  x.roots_resumed = 2;
  x.children_resumed = 1;
  x.cancels_finished = 1;
  x.problems = {"link a -> b: b has no session", "second"};
  x.steps = {{"read_sessions", 5, 120}, {"rebuild_tree", 3, 45}};
  return x;
}

agent_info full_agent() {
  return {"p.a", "p", "ACTIVE", "default", "m1", "pr1", 5, {"p.a.b", "p.a.c"}};
}

std::string hex(const std::vector<char>& bytes) {
  std::string result;
  for (auto c : bytes) {
    char buf[3];
    std::snprintf(buf, sizeof(buf), "%02x", static_cast<unsigned char>(c));
    result += buf;
  }
  return result;
}

std::string message_of(const caf::error& err) {
  return err ? error_message(err) : "none";
}

/// Checks the JSON, the deep_to_string and the CAF binary form of `x`, and
/// that each of them, and its stored form, reads back into the same record
/// (the JSON form also from the store, where older builds wrote it).
template <class T>
void check_pinned(T x, const std::string& json, const std::string& text,
                  const std::string& binary) {
  CAF_CHECK_EQUAL(to_json(x).dump(), json);
  CAF_CHECK_EQUAL(caf::deep_to_string(x), text);
  auto back = decode<T>(json);
  if (!back) {
    CAF_FAIL("decode failed: " << message_of(back.error()));
  }
  CAF_CHECK_EQUAL(to_json(*back).dump(), json);
  CAF_CHECK_EQUAL(caf::deep_to_string(*back), text);
  auto stored = encode(x);
  CAF_CHECK_EQUAL(stored.front(), binary_record_marker);
  auto from_store = decode<T>(stored);
  if (!from_store) {
    CAF_FAIL(
      "decode of the stored form failed: " << message_of(from_store.error()));
  }
  CAF_CHECK_EQUAL(caf::deep_to_string(*from_store), text);
  CAF_CHECK_EQUAL(encode(*from_store), stored);
  std::vector<char> bytes;
  caf::binary_serializer sink{nullptr, bytes};
  CAF_REQUIRE_EQUAL(message_of(sink(x)), "none");
  CAF_CHECK_EQUAL(hex(bytes), binary);
  T from_bytes;
  caf::binary_deserializer source{nullptr, bytes};
  CAF_REQUIRE_EQUAL(message_of(source(from_bytes)), "none");
  CAF_CHECK_EQUAL(caf::deep_to_string(from_bytes), text);
}

/// Checks that `text` decodes as a `T`.
template <class T>
void check_decodes(const std::string& text) {
  auto x = decode<T>(text);
  CAF_CHECK_EQUAL(x ? "none" : message_of(x.error()), "none");
}

/// Checks that `text` does not decode as a `T`, and why.
template <class T>
void check_error(const std::string& text, const std::string& message) {
  auto x = decode<T>(text);
  CAF_CHECK_EQUAL(x ? "none" : message_of(x.error()), message);
}

/// Checks what agents_from_json says to `text` ("" if it reads).
void check_agents(const std::string& text, const std::string& message) {
  auto x = agents_from_json(nlohmann::json::parse(text));
  CAF_CHECK_EQUAL(x ? "" : message_of(x.error()), message);
}

} // namespace

CAF_TEST(every record encodes as before and reads back) {
  check_pinned(
    full_session(),
    R"({"created_at":1700000000123,"model":"gpt-x","parent":"p0","poo)"
    R"(l":"default","provider":"openai-1","provider_state":"opaque \")"
    R"(state\"\né","recovered_at":1700000000456,"state":"ACTIVE","thr)"
    R"(ead":"t1","turn_usage":{}})",
    R"(keel::session_record("t1", "p0", "default", "gpt-x", "openai-1)"
    R"(", ACTIVE, 1700000000123, 1700000000456, "opaque \"state\"\né")"
    R"(, [], 0, "", keel::usage_count(0, 0, 0, 0), keel::usage_count()"
    R"(0, 0, 0, 0)))",
    "0274310270300764656661756c74056770742d78086f70656e61692d3100"
    "0000018bcfe5687b0000018bcfe569c8116f706171756520227374617465"
    "220ac3a90000000000000000000000000000000000000000000000000000"
    "000000000000000000000000000000000000000000000000000000000000"
    "0000");
  check_pinned(
    session_record{},
    R"({"created_at":0,"model":"","parent":"","pool":"","provider":"")"
    R"(,"provider_state":"","recovered_at":0,"state":"SUSPENDED","thr)"
    R"(ead":"","turn_usage":{}})",
    R"(keel::session_record("", "", "", "", "", SUSPENDED, 0, 0, "", )"
    R"([], 0, "", keel::usage_count(0, 0, 0, 0), keel::usage_count(0,)"
    R"( 0, 0, 0)))",
    "000000000001000000000000000000000000000000000000000000000000"
    "000000000000000000000000000000000000000000000000000000000000"
    "000000000000000000000000000000000000000000");
  check_pinned(full_link(), R"({"child":"p.c","created_at":42,"parent":"p"})",
               R"(keel::tree_link("p", "p.c", 42))",
               "017003702e63000000000000002a");
  check_pinned(
    full_outbox(),
    R"({"client_id":"agent:p:7","created_at":1234,"from":"p",)"
    R"("hops":2,"seq":7,"text":"hello \"child\"\t\\","to":"p.c"})",
    R"(keel::outbox_entry("p", 7, "p.c", "agent:p:7", "hello \"child\)"
    R"("\t\\", 1234, 2, ""))",
    "0170000000000000000703702e63096167656e743a703a370f68656c6c6f"
    "20226368696c6422095c00000000000004d20000000200");
  check_pinned(
    full_dead_letter(),
    R"({"at":99,"client_id":"agent:p:7","created_at":1234,)"
    R"("events":[{"action":"scheduled retry","at":300,)"
    R"("outcome":"no session"}],"from":"p","hops":2,)"
    R"("last_attempt_at":500,"reason":"target thread t9 has no )"
    R"(session","retries":5,"seq":7,"status":"abandoned",)"
    R"("text":"hello \"child\"\t\\","to":"p.c"})",
    R"(keel::dead_letter(keel::outbox_entry("p", 7, "p.c", "agent:p:7)"
    R"(", "hello \"child\"\t\\", 1234, 2, ""), "target thread t9 has )"
    R"(no session", 99, abandoned, 5, 500, 0, [keel::dead_letter_even)"
    R"(t(300, "scheduled retry", "no session")], [], 0))",
    "0170000000000000000703702e63096167656e743a703a370f68656c6c6f"
    "20226368696c6422095c00000000000004d200000002001f746172676574"
    "2074687265616420743920686173206e6f2073657373696f6e0000000000"
    "000063020000000500000000000001f40000000000000000010000000000"
    "00012c0f7363686564756c65642072657472790a6e6f2073657373696f6e"
    "000000000000000000");
  check_pinned(
    full_reply_letter(),
    R"({"at":99,"channels":["crm","ops"],"client_id":"",)"
    R"("created_at":1234,"from":"t","next_retry_at":400,)"
    R"("reason":"channel crm: HTTP 500","reply_to":8,"seq":9,)"
    R"("status":)"
    R"("pending","text":"the reply","to":""})",
    R"(keel::dead_letter(keel::outbox_entry("t", 9, "", "", "the repl)"
    R"(y", 1234, 0, ""), "channel crm: HTTP 500", 99, pending, 0, 0, )"
    R"(400, [], ["crm", "ops"], 8))",
    "01740000000000000009000009746865207265706c7900000000000004d2"
    "0000000000156368616e6e656c2063726d3a204854545020353030000000"
    "000000006300000000000000000000000000000000000000019000020363"
    "726d036f70730000000000000008");
  check_pinned(full_delivery(),
               R"({"at":1234,"channels":["crm","ops"],"reply_to":8,"seq":9,)"
               R"("text":"the reply","thread":"t"})",
               R"(keel::reply_delivery("t", 9, 8, "the reply", 1234,)"
               R"( ["crm", "ops"]))",
               "01740000000000000009000000000000000809746865207265706c790000"
               "0000000004d2020363726d036f7073");
  check_pinned(full_inbox(),
               R"({"accepted_at":55,"client_id":"c1","hops":2,"seq":3,)"
               R"("text":"hi there"})",
               R"(keel::inbox_entry(3, "c1", "hi there", 55, 2, ""))",
               "000000000000000302633108686920746865726500000000000000370000"
               "000200");
  check_pinned(
    user_log(),
    R"({"at":10,"client_id":"c0","kind":"user","seq":1,)"
    R"("text":"hello"})",
    R"(keel::log_entry(1, user, "c0", 0, "hello", "", "", 10, "", non)"
    R"(e, 0, 0, keel::usage_count(0, 0, 0, 0), ""))",
    "00000000000000010002633000000000000000000568656c6c6f00000000"
    "00000000000a000000000000000000000000000000000000000000000000"
    "000000000000000000000000000000");
  check_pinned(
    reply_log(),
    R"({"at":77,"client_id":"c1","kind":"reply",)"
    R"("provider":"openai-1","reply_to":3,"seq":5,)"
    R"("text":"the answer"})",
    R"(keel::log_entry(5, reply, "c1", 3, "the answer", "", "openai-1)"
    R"(", 77, "", none, 0, 0, keel::usage_count(0, 0, 0, 0), ""))",
    "00000000000000050102633100000000000000030a74686520616e737765"
    "7200086f70656e61692d31000000000000004d0000000000000000000000"
    "00000000000000000000000000000000000000000000000000000000");
  check_pinned(
    error_log(),
    R"({"at":78,"client_id":"c2","code":"provider_down",)"
    R"("kind":"error","reply_to":4,"seq":6,"text":"failed"})",
    R"(keel::log_entry(6, error, "c2", 4, "failed", "provider_down", )"
    R"("", 78, "", none, 0, 0, keel::usage_count(0, 0, 0, 0), ""))",
    "0000000000000006020263320000000000000004066661696c65640d7072"
    "6f76696465725f646f776e00000000000000004e00000000000000000000"
    "0000000000000000000000000000000000000000000000000000000000");
  check_pinned(
    log_entry{}, R"({"at":0,"client_id":"","kind":"user","seq":0,"text":""})",
    R"(keel::log_entry(0, user, "", 0, "", "", "", 0, "", none, 0, 0,)"
    R"( keel::usage_count(0, 0, 0, 0), ""))",
    "000000000000000000000000000000000000000000000000000000000000"
    "000000000000000000000000000000000000000000000000000000000000"
    "0000000000000000");
  check_pinned(full_context(),
               R"({"content":"text with\nnewline","role":"assistant","seq":3})",
               R"(keel::context_entry(3, "assistant", "text with\nnewline",)"
               R"( [], "", "", 0))",
               "000000000000000309617373697374616e74117465787420776974680a6e"
               "65776c696e650000000000000000000000");
  check_pinned(
    full_tool_context(),
    R"({"content":"calling","message_seq":4,"role":"assistant",)"
    R"("seq":5,"tool_call_id":"c0","tool_calls":[{"arguments":)"
    R"("{\"dir\":\"/\"}","id":"c1","name":"ls"}],)"
    R"("tool_name":"grep"})",
    R"(keel::context_entry(5, "assistant", "calling",)"
    R"( [keel::tool_call("c1", "ls", "{\"dir\":\"/\"}")], "c0",)"
    R"( "grep", 4))",
    "000000000000000509617373697374616e740763616c6c696e6701026331"
    "026c730b7b22646972223a222f227d02633004677265700000000000000004");
  check_pinned(full_health(),
               R"({"breaker":"open","calls":10,"consecutive_failures":3,)"
               R"("cooldown_until":200,"failures":4,"last_error":"timeout",)"
               R"("last_error_class":"transient","last_failure":0,)"
               R"("last_success":100,)"
               R"("pool":"default","provider":"p1","status":"down"})",
               R"(keel::provider_health_record("default", "p1", "down",)"
               R"( "open", 3, "timeout", "transient", 100, 200, 10, 4, 0))",
               "0764656661756c7402703104646f776e046f70656e000000030774696d65"
               "6f7574097472616e7369656e74000000000000006400000000000000c800"
               "0000000000000a00000000000000040000000000000000");
  check_pinned(provider_health_record{},
               R"({"breaker":"closed","calls":0,"consecutive_failures":0,)"
               R"("cooldown_until":0,"failures":0,"last_error":"",)"
               R"("last_error_class":"","last_failure":0,"last_success":0,)"
               R"("pool":"",)"
               R"("provider":"","status":"healthy"})",
               R"(keel::provider_health_record("", "", "healthy", "closed",)"
               R"( 0, "", "", 0, 0, 0, 0, 0))",
               "0000076865616c74687906636c6f73656400000000000000000000000000"
               "00000000000000000000000000000000000000000000000000"
               "0000000000000000");
  check_pinned(full_step(),
               R"({"count":5,"micros":120,"name":"read_sessions"})",
               R"(keel::recovery_step("read_sessions", 5, 120))",
               "0d726561645f73657373696f6e7300000000000000050000000000000078");
  check_pinned(full_report(),
               R"({"cancels_finished":1,"children_resumed":1,)"
               R"("finished_at":2000,"inbox_messages":4,"inbox_threads":2,)"
               R"("links":3,"outbox_messages":1,)"
               R"("problems":["link a -> b: b has no session","second"],)"
               R"("roots":2,"roots_resumed":2,"sessions":5,"started_at":1000,)"
               R"("steps":[{"count":5,"micros":120,"name":"read_sessions"},)"
               R"({"count":3,"micros":45,"name":"rebuild_tree"}],)"
               R"("suspended":1})",
               R"(keel::recovery_report(1000, 2000, 5, 2, 3, 1, 4, 2, 1, 2,)"
               R"( 1, 1, ["link a -> b: b has no session", "second"],)"
               R"( [keel::recovery_step("read_sessions", 5, 120),)"
               R"( keel::recovery_step("rebuild_tree", 3, 45)]))",
               "00000000000003e800000000000007d00000000000000005000000000000"
               "000200000000000000030000000000000001000000000000000400000000"
               "000000020000000000000001000000000000000200000000000000010000"
               "000000000001021d6c696e6b2061202d3e20623a206220686173206e6f20"
               "73657373696f6e067365636f6e64020d726561645f73657373696f6e7300"
               "0000000000000500000000000000780c72656275696c645f747265650000"
               "000000000003000000000000002d");
  check_pinned(recovery_report{},
               R"({"cancels_finished":0,"children_resumed":0,"finished_at":0,)"
               R"("inbox_messages":0,"inbox_threads":0,"links":0,)"
               R"("outbox_messages":0,"problems":[],"roots":0,)"
               R"("roots_resumed":0,"sessions":0,"started_at":0,"steps":[],)"
               R"("suspended":0})",
               R"(keel::recovery_report(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,)"
               R"( [], []))",
               "000000000000000000000000000000000000000000000000000000000000"
               "000000000000000000000000000000000000000000000000000000000000"
               "000000000000000000000000000000000000000000000000000000000000"
               "0000000000000000");
  check_pinned(
    full_agent(),
    R"({"agent":"","children":["p.a.b","p.a.c"],"created_at":5,"model)"
    R"(":"m1","parent":"p","pool":"default","provider":"pr1","state":)"
    R"("ACTIVE","thread":"p.a"})",
    R"(keel::agent_info("p.a", "p", "ACTIVE", "default", "m1", "pr1",)"
    R"( 5, ["p.a.b", "p.a.c"], [], 0, "", keel::usage_count(0, 0, 0, )"
    R"(0)))",
    "03702e610170064143544956450764656661756c74026d31037072310000"
    "0000000000050205702e612e6205702e612e630000000000000000000000"
    "0000000000000000000000000000000000000000000000");
  check_pinned(
    agent_info{},
    R"({"agent":"","children":[],"created_at":0,"model":"","parent":")"
    R"(","pool":"","provider":"","state":"","thread":""})",
    R"(keel::agent_info("", "", "", "", "", "", 0, [], [], 0, "", kee)"
    R"(l::usage_count(0, 0, 0, 0)))",
    "000000000000000000000000000000000000000000000000000000000000"
    "00000000000000000000000000000000000000");
}

CAF_TEST(the agent list encodes as before and reads back) {
  auto agents = agents_to_json({full_agent(), agent_info{}});
  auto expected = std::string{
    R"({"agents":[{"agent":"","children":["p.a.b","p.a.c"],"created_at":5,)"
    R"("model":"m1","parent":"p","pool":"default","provider":"pr1",)"
    R"("state":"ACTIVE","thread":"p.a"},{"agent":"","children":[],)"
    R"("created_at":0,"model":"","parent":"","pool":"","provider":"",)"
    R"("state":"","thread":""}]})"};
  CAF_CHECK_EQUAL(agents.dump(), expected);
  auto back = agents_from_json(agents);
  CAF_REQUIRE(back);
  CAF_CHECK_EQUAL(agents_to_json(*back).dump(), agents.dump());
}

CAF_TEST(the named readers are the decoders) {
  using nlohmann::json;
  auto same = [](auto x, auto y) {
    CAF_REQUIRE(x);
    CAF_REQUIRE(y);
    CAF_CHECK_EQUAL(encode(*x), encode(*y));
  };
  same(session_record_from_json(to_json(full_session())),
       decode<session_record>(encode(full_session())));
  same(tree_link_from_json(to_json(full_link())),
       decode<tree_link>(encode(full_link())));
  same(outbox_entry_from_json(to_json(full_outbox())),
       decode<outbox_entry>(encode(full_outbox())));
  same(dead_letter_from_json(to_json(full_dead_letter())),
       decode<dead_letter>(encode(full_dead_letter())));
  same(inbox_entry_from_json(to_json(full_inbox())),
       decode<inbox_entry>(encode(full_inbox())));
  same(log_entry_from_json(to_json(reply_log())),
       decode<log_entry>(encode(reply_log())));
  same(context_entry_from_json(to_json(full_context())),
       decode<context_entry>(encode(full_context())));
  same(provider_health_record_from_json(to_json(full_health())),
       decode<provider_health_record>(encode(full_health())));
  same(recovery_report_from_json(to_json(full_report())),
       decode<recovery_report>(encode(full_report())));
  same(agent_info_from_json(to_json(full_agent())),
       decode<agent_info>(encode(full_agent())));
}

CAF_TEST(session_record decode errors) {
  check_error<session_record>(R"({)", "record is not valid JSON");
  check_error<session_record>(R"([])", "session record: not a JSON object");
  check_error<session_record>(R"(42)", "session record: not a JSON object");
  check_decodes<session_record>(
    R"({"thread":"t","parent":"","pool":"p","model":"","state":"ACTIVE",)"
    R"("created_at":1,"provider_state":""})");
  check_error<session_record>(R"({})",
                              "session record: missing field 'thread'");
  check_error<session_record>(R"({"thread":"t"})",
                              "session record: missing field 'parent'");
  check_error<session_record>(
    R"({"thread":1})", "session record: field 'thread' has the wrong type");
  check_error<session_record>(
    R"({"thread":"t","parent":"","pool":"p","model":"","state":"BOGUS",)"
    R"("created_at":1,"provider_state":""})",
    "session record: field 'state' has unknown value 'BOGUS'");
  check_error<session_record>(
    R"({"thread":"t","parent":"","pool":"p","model":"","state":"BOGUS",)"
    R"("created_at":1})",
    "session record: missing field 'provider_state'");
  check_error<session_record>(
    R"({"thread":"t","parent":"","pool":"p","model":"","state":7,)"
    R"("created_at":1,"provider_state":""})",
    "session record: field 'state' has the wrong type");
  check_error<session_record>(
    R"({"thread":"t","parent":"","pool":"p","model":"","state":"ACTIVE",)"
    R"("created_at":"x","provider_state":""})",
    "session record: field 'created_at' has the wrong type");
  check_error<session_record>(
    R"({"thread":"t","parent":"","pool":"p","model":"","state":"ACTIVE",)"
    R"("created_at":1,"provider_state":"","provider":5})",
    "session record: field 'provider' has the wrong type");
  check_error<session_record>(
    R"({"thread":"t","parent":"","pool":"p","model":"","state":"ACTIVE",)"
    R"("created_at":1,"provider_state":"","recovered_at":"x"})",
    "session record: field 'recovered_at' has the wrong type");
  check_error<session_record>(
    R"({"thread":"t","parent":"","pool":"p","model":"","state":"BOGUS",)"
    R"("created_at":1,"provider_state":"","recovered_at":"x"})",
    "session record: field 'recovered_at' has the wrong type");
  check_error<session_record>(
    R"({"thread":"t","parent":"","pool":"p","model":"","state":"ACTIVE",)"
    R"("created_at":1,"provider":5})",
    "session record: missing field 'provider_state'");
}

CAF_TEST(tree_link decode errors) {
  check_error<tree_link>(R"({"parent":"p","child":"c"})",
                         "tree link: missing field 'created_at'");
  check_error<tree_link>(R"({"parent":"p","child":3,"created_at":1})",
                         "tree link: field 'child' has the wrong type");
  check_error<tree_link>(R"("x")", "tree link: not a JSON object");
}

CAF_TEST(outbox_entry decode errors) {
  check_error<outbox_entry>(
    R"({"from":"p","seq":1,"to":"c","client_id":"x","text":"y"})",
    "outbox entry: missing field 'created_at'");
  check_error<outbox_entry>(
    R"({"from":"p","seq":"1","to":"c","client_id":"x","text":"y",)"
    R"("created_at":1})",
    "outbox entry: field 'seq' has the wrong type");
  check_error<outbox_entry>(R"(null)", "outbox entry: not a JSON object");
}

CAF_TEST(dead_letter decode errors) {
  check_error<dead_letter>(
    R"({"from":"p","seq":1,"to":"c","client_id":"x","text":"y",)"
    R"("created_at":1,"reason":"r"})",
    "dead letter: missing field 'at'");
  check_error<dead_letter>(
    R"({"seq":1,"to":"c","client_id":"x","text":"y","created_at":1,)"
    R"("reason":"r","at":1})",
    "dead letter: missing field 'from'");
  check_error<dead_letter>(
    R"({"from":"p","seq":1,"to":"c","client_id":"x","text":"y",)"
    R"("created_at":1,"reason":1,"at":1})",
    "dead letter: field 'reason' has the wrong type");
  check_error<dead_letter>(
    R"({"from":"p","seq":1,"to":"c","client_id":"x","text":"y",)"
    R"("created_at":1,"reason":"r","at":1,"status":"lost"})",
    "dead letter: field 'status' has unknown value 'lost'");
}

CAF_TEST(a dead letter written before its schedule existed reads as pending) {
  auto x = decode<dead_letter>(
    R"({"from":"p","seq":1,"to":"c","client_id":"x","text":"y",)"
    R"("created_at":1,"reason":"r","at":1})");
  CAF_REQUIRE(x);
  CAF_CHECK_EQUAL(x->status, dead_letter_status::pending);
  CAF_CHECK_EQUAL(x->retries, 0u);
  CAF_CHECK_EQUAL(x->next_retry_at, 0);
}

CAF_TEST(inbox_entry decode errors) {
  check_error<inbox_entry>(R"({"seq":1,"client_id":"c","text":"t"})",
                           "inbox entry: missing field 'accepted_at'");
  check_decodes<inbox_entry>(
    R"({"seq":-1,"client_id":"c","text":"t","accepted_at":1})");
  check_decodes<inbox_entry>(
    R"({"seq":1.5,"client_id":"c","text":"t","accepted_at":1})");
  check_error<inbox_entry>(
    R"({"seq":true,"client_id":"c","text":"t","accepted_at":1})",
    "inbox entry: field 'seq' has the wrong type");
  // Integers beyond 64 bits parse as floating point; converting one that
  // does not fit is refused, never undefined.
  check_error<inbox_entry>(
    R"({"seq":118446744073709551615,"client_id":"c","text":"t",)"
    R"("accepted_at":1})",
    "inbox entry: field 'seq' has the wrong type");
  check_error<inbox_entry>(
    R"({"seq":-2.5,"client_id":"c","text":"t","accepted_at":1})",
    "inbox entry: field 'seq' has the wrong type");
  check_error<context_entry>(R"({"seq":1e300,"role":"user","content":"x"})",
                             "context entry: field 'seq' has the wrong type");
}

CAF_TEST(log_entry decode errors) {
  check_error<log_entry>(
    R"({"seq":1,"kind":"user","client_id":"c","text":"t"})",
    "log entry: missing field 'at'");
  check_error<log_entry>(
    R"({"seq":"1","kind":"user","client_id":"c","text":"t","at":1})",
    "log entry: field 'seq' has the wrong type");
  check_error<log_entry>(R"({"seq":1,"client_id":"c","text":"t","at":1})",
                         "log entry: missing field 'kind'");
  check_error<log_entry>(
    R"({"seq":1,"kind":"shout","client_id":"c","text":"t","at":1})",
    "log entry: field 'kind' has unknown value 'shout'");
  check_error<log_entry>(
    R"({"seq":1,"kind":"shout","client_id":"c","text":"t"})",
    "log entry: missing field 'at'");
  check_error<log_entry>(
    R"({"seq":1,"kind":false,"client_id":"c","text":"t","at":1})",
    "log entry: field 'kind' has the wrong type");
  check_error<log_entry>(R"([1,2])", "log entry: not a JSON object");
}

CAF_TEST(context_entry decode errors) {
  check_error<context_entry>(R"({"seq":1,"role":"user"})",
                             "context entry: missing field 'content'");
  check_error<context_entry>(R"({"seq":1,"role":[],"content":""})",
                             "context entry: field 'role' has the wrong type");
  // No build writes another role: the record is corrupt, in either form.
  check_error<context_entry>(R"({"seq":1,"role":"error","content":""})",
                             "context entry: field 'role' has unknown value "
                             "'error'");
  auto bytes = encode(context_entry{1, "user", ""});
  bytes.replace(bytes.find("user"), 4, "usex");
  check_error<context_entry>(bytes, "context entry: field 'role' has unknown "
                                    "value 'usex'");
}

CAF_TEST(provider_health_record decode errors) {
  check_error<provider_health_record>(
    R"({"pool":"p","provider":"x","status":"healthy","breaker":"closed",)"
    R"("consecutive_failures":0,"last_error":"","last_error_class":"",)"
    R"("last_success":0})",
    "provider health record: missing field 'cooldown_until'");
  check_error<provider_health_record>(
    R"({"pool":"p","provider":"x","status":"healthy","breaker":"closed",)"
    R"("consecutive_failures":"0","last_error":"","last_error_class":"",)"
    R"("last_success":0,"cooldown_until":0})",
    "provider health record: field 'consecutive_failures' has the wrong type");
  check_decodes<provider_health_record>(
    R"({"pool":"p","provider":"x","status":"healthy","breaker":"closed",)"
    R"("consecutive_failures":0,"last_error":"","last_error_class":"",)"
    R"("last_success":0,"cooldown_until":0})");
}

CAF_TEST(recovery_report decode errors) {
  check_decodes<recovery_report>(
    R"({"started_at":1,"finished_at":2,"steps":[]})");
  check_error<recovery_report>(R"({"started_at":1,"finished_at":2})",
                               "recovery report: missing field 'steps'");
  check_error<recovery_report>(R"({"started_at":1,"steps":[]})",
                               "recovery report: missing field 'finished_at'");
  check_error<recovery_report>(
    R"({"started_at":1,"finished_at":2,"steps":{}})",
    "recovery report: field 'steps' has the wrong type");
  check_error<recovery_report>(
    R"({"started_at":1,"finished_at":2,"steps":{},"roots":"x"})",
    "recovery report: field 'roots' has the wrong type");
  check_error<recovery_report>(
    R"({"started_at":1,"finished_at":2,"steps":[],"roots":"x"})",
    "recovery report: field 'roots' has the wrong type");
  check_error<recovery_report>(
    R"({"started_at":1,"finished_at":2,"steps":[],"problems":[1]})",
    "recovery report: field 'problems' has the wrong type");
  check_error<recovery_report>(
    R"({"started_at":1,"finished_at":2,"steps":[],"problems":"x"})",
    "recovery report: field 'problems' has the wrong type");
  check_error<recovery_report>(
    R"({"started_at":1,"finished_at":2,"steps":[{"name":"a","count":1,)"
    R"("micros":2},{"count":1,"micros":2}]})",
    "recovery report: steps[1]: missing field 'name'");
  check_error<recovery_report>(
    R"({"started_at":1,"finished_at":2,"steps":[{"name":"a","count":1,)"
    R"("micros":2},3]})",
    "recovery report: steps[1]: not a JSON object");
  check_error<recovery_report>(
    R"({"started_at":1,"finished_at":2,"steps":[{"name":"a","count":1,)"
    R"("micros":"2"}]})",
    "recovery report: steps[0]: field 'micros' has the wrong type");
  check_error<recovery_report>(
    R"({"started_at":1,"finished_at":2,"steps":[{"name":"x"}],"roots":"x"})",
    "recovery report: field 'roots' has the wrong type");
  check_error<recovery_report>(
    R"({"started_at":"1","finished_at":2,"steps":[]})",
    "recovery report: field 'started_at' has the wrong type");
}

// An optional field of the wrong type is an error like any other (the
// hand-written reader let nlohmann's type_error escape for these).
CAF_TEST(optional fields of the wrong type are errors) {
  check_error<log_entry>(
    R"({"seq":1,"kind":"reply","client_id":"c","text":"t","at":1,)"
    R"("reply_to":"x"})",
    "log entry: field 'reply_to' has the wrong type");
  check_error<log_entry>(
    R"({"seq":1,"kind":"reply","client_id":"c","text":"t","at":1,"code":1})",
    "log entry: field 'code' has the wrong type");
  check_error<log_entry>(
    R"({"seq":1,"kind":"reply","client_id":"c","text":"t","at":1,)"
    R"("provider":null})",
    "log entry: field 'provider' has the wrong type");
  check_error<provider_health_record>(
    R"({"pool":"p","provider":"x","status":"healthy","breaker":"closed",)"
    R"("consecutive_failures":0,"last_error":"","last_error_class":"",)"
    R"("last_success":0,"cooldown_until":0,"calls":"x"})",
    "provider health record: field 'calls' has the wrong type");
}

CAF_TEST(agent list decode errors) {
  check_agents(R"({"agents":[{"thread":"x"}]})",
               "agents[0]: agent: missing field 'parent'");
  check_agents(R"({"agents":[{"thread":"x","parent":"","state":"ACTIVE",)"
               R"("children":[]}]})",
               "");
  check_agents(R"({"agents":[{"thread":"x","parent":"","state":"ACTIVE",)"
               R"("children":[]},{"thread":"x","parent":"",)"
               R"("state":"ACTIVE"}]})",
               "agents[1]: agent: missing field 'children'");
  check_agents(R"({"agents":[{"thread":"x","parent":"","state":"ACTIVE",)"
               R"("children":[1]}]})",
               "agents[0]: agent: field 'children' has the wrong type");
  check_agents(R"({"agents":[{"thread":"x","parent":"","state":"ACTIVE",)"
               R"("children":"a"}]})",
               "agents[0]: agent: field 'children' has the wrong type");
  check_agents(R"({"agents":[{"thread":"x","parent":"","state":3,)"
               R"("children":[]}]})",
               "agents[0]: agent: field 'state' has the wrong type");
  check_agents(R"({"agents":[{"thread":"x","parent":"","state":"ACTIVE",)"
               R"("children":[],"created_at":"x"}]})",
               "agents[0]: agent: field 'created_at' has the wrong type");
  check_agents(R"({"agents":[{"thread":"x","parent":"","state":"ACTIVE",)"
               R"("pool":1}]})",
               "agents[0]: agent: missing field 'children'");
  check_agents(R"({"agents":[7]})", "agents[0]: agent: not a JSON object");
  check_agents(R"({"agents":{}})", "the agents answer has no 'agents' array");
  check_agents(R"([])", "the agents answer has no 'agents' array");
  check_agents(R"({})", "the agents answer has no 'agents' array");
}

// -- the binary stored form ---------------------------------------------------

namespace {

/// The stored bytes `hex` (pairs of hex digits) after the binary marker.
std::string stored(const std::string& hex) {
  std::string result{binary_record_marker};
  for (size_t i = 0; i + 1 < hex.size(); i += 2)
    result.push_back(
      static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  return result;
}

std::string hex_of(const std::string& bytes) {
  return hex(std::vector<char>{bytes.begin(), bytes.end()});
}

// A session record as a build without `tool_failures` and `paused_at`
// stored it: thread "t", parent "", pool "p", model "", provider "", state
// ACTIVE, created_at 1, recovered_at 0, provider_state "".
const char* nine_field_session = "09"
                                 "0174"
                                 "00"
                                 "0170"
                                 "00"
                                 "00"
                                 "06414354495645"
                                 "02"
                                 "00"
                                 "00";

} // namespace

CAF_TEST(the stored form is binary and pinned byte for byte) {
  // Marker, 3 fields, "p", "p.c", 42 (signed: zigzag, 84).
  CAF_CHECK_EQUAL(hex_of(encode(full_link())), "0103017003702e6354");
  // Signed integers are zigzag varints: -1 is 1, 300 is 600 (d8 04).
  CAF_CHECK_EQUAL(hex_of(encode(tree_link{"", "", -1})), "0103000001");
  CAF_CHECK_EQUAL(hex_of(encode(tree_link{"", "", 300})), "01030000d804");
  auto big = decode<tree_link>(encode(tree_link{"a", "b", INT64_MIN}));
  CAF_REQUIRE(big);
  CAF_CHECK_EQUAL(big->created_at, INT64_MIN);
  // A context entry's tool exchange in its fields' places: marker, 7
  // fields, 5, "assistant", "calling", one call ("c1", "ls", its
  // arguments), "c0", "grep", 4.
  CAF_CHECK_EQUAL(hex_of(encode(full_tool_context())),
                  "01070509617373697374616e740763616c6c696e670103026331026c73"
                  "0b7b22646972223a222f227d026330046772657004");
  // Far smaller than the JSON form.
  CAF_CHECK_LESS(encode(full_session()).size(),
                 to_json(full_session()).dump().size() / 2);
}

CAF_TEST(a stored record without its newest fields reads their defaults) {
  auto x = decode<session_record>(stored(nine_field_session));
  CAF_REQUIRE_EQUAL(x ? "none" : message_of(x.error()), "none");
  CAF_CHECK_EQUAL(x->thread, "t");
  CAF_CHECK_EQUAL(x->pool, "p");
  CAF_CHECK(x->state == session_state::active);
  CAF_CHECK_EQUAL(x->created_at, 1);
  CAF_CHECK(x->tool_failures.empty());
  CAF_CHECK_EQUAL(x->paused_at, 0);
  // Without `provider_state`, which every build wrote, it is corrupt.
  auto eight = stored(std::string{"08"} + (nine_field_session + 2));
  eight.pop_back();
  check_error<session_record>(eight,
                              "session record: missing field 'provider_state'");
}

CAF_TEST(a health record of an older build reads without its failure time) {
  // As builds before `last_failure` wrote it, "down" and all.
  auto x = decode<provider_health_record>(
    R"({"breaker":"open","calls":10,"consecutive_failures":3,)"
    R"("cooldown_until":200,"failures":4,"last_error":"timeout",)"
    R"("last_error_class":"transient","last_success":100,)"
    R"("pool":"default","provider":"p1","status":"down"})");
  CAF_REQUIRE_EQUAL(x ? "none" : message_of(x.error()), "none");
  CAF_CHECK_EQUAL(x->last_failure, 0);
  CAF_CHECK_EQUAL(x->cooldown_until, 200);
  CAF_CHECK(parse_health_status(x->status) == health_status::unhealthy);
}

CAF_TEST(binary decode errors name the record and the field) {
  check_error<session_record>(stored(""),
                              "session record: record is cut short");
  check_error<session_record>(
    stored("0f"),
    "session record: record has 15 fields, this build reads 14 (written by a "
    "newer build?)");
  check_error<session_record>(stored("090574"),
                              "session record: field 'thread' is cut short");
  check_error<session_record>(stored("0902fffe"),
                              "session record: field 'thread' is not valid "
                              "UTF-8");
  check_error<session_record>(
    stored("090174000170000005424f475553020000"),
    "session record: field 'state' has unknown value 'BOGUS'");
  check_error<session_record>(stored("09017400017000000641435449564502"),
                              "session record: field 'recovered_at' is cut "
                              "short");
  // tool_failures: one count of 2^33 failures, which a uint32_t cannot hold.
  check_error<session_record>(
    stored(std::string{"0a"} + (nine_field_session + 2) + "01020178"
           + "8080808020"),
    "session record: tool_failures[0]: field 'failures' is out of range");
  check_error<session_record>(
    stored(std::string{"0a"} + (nine_field_session + 2) + "05"),
    "session record: field 'tool_failures' is cut short");
  check_error<tree_link>(encode(full_link()) + "x",
                         "tree link: 1 bytes after the record");
  // A varint longer than 64 bits.
  check_error<tree_link>(stored("03000080808080808080808002"),
                         "tree link: field 'created_at' is cut short");
  // Not the marker: read as JSON, as older builds stored records.
  check_error<tree_link>("\x02", "record is not valid JSON");
}

CAF_TEST(ill - formed UTF - 8 is stored as U + FFFD) {
  context_entry x{3, "tool", "a\xff"};
  auto back = decode<context_entry>(encode(x));
  CAF_REQUIRE(back);
  CAF_CHECK_EQUAL(back->content, "a\xef\xbf\xbd");
}
