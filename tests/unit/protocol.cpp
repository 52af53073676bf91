#define CAF_SUITE protocol
#include <caf/test/unit_test.hpp>

#include "keel/protocol.hpp"

#include <string>

#include "keel/json_codec.hpp"
#include "keel/text.hpp"

using namespace keel;
using namespace keel::protocol;
using json = nlohmann::json;

namespace {

decode_limits limits() {
  return decode_limits{};
}

client_frame decode_ok(std::string_view text,
                       const decode_limits& lim = limits()) {
  auto result = decode_client_frame(text, lim);
  if (auto err = std::get_if<frame_error>(&result))
    CAF_FAIL("expected a valid frame for " << std::string{text} << ", got "
                                           << err->code << ": "
                                           << err->message);
  return std::get<client_frame>(std::move(result));
}

frame_error decode_err(std::string_view text,
                       const decode_limits& lim = limits()) {
  auto result = decode_client_frame(text, lim);
  if (std::holds_alternative<client_frame>(result))
    CAF_FAIL("expected an error for " << std::string{text});
  return std::get<frame_error>(std::move(result));
}

json server(const std::string& text, const std::string& type) {
  auto frame = decode_server_frame(text);
  if (!frame)
    CAF_FAIL("not a server frame: " << text << ": " << render(frame.error()));
  if (frame->type != type)
    CAF_FAIL("expected type " << type << ", got " << frame->type);
  return std::move(frame->body);
}

bool has(const json& j, const char* key) {
  return j.find(key) != j.end();
}

log_entry make_entry(log_kind kind, seq_t seq, seq_t reply_to,
                     std::string client_id, std::string text) {
  log_entry x;
  x.kind = kind;
  x.seq = seq;
  x.reply_to = reply_to;
  x.client_id = std::move(client_id);
  x.text = std::move(text);
  x.at = 1700000000000;
  return x;
}

} // namespace

// -- client frames: round trips through the client encoders -------------------

CAF_TEST(send frames round trip) {
  std::string text = "hello \"world\"\\ \n\t\x01 caf\xc3\xa9 \xf0\x9f\x98\x80";
  auto frame = decode_ok(send_frame("support.42", "msg-1", text));
  CAF_CHECK(frame.type == client_frame_type::send);
  CAF_CHECK_EQUAL(frame.thread, "support.42");
  CAF_CHECK_EQUAL(frame.id, "msg-1");
  CAF_CHECK_EQUAL(frame.text, text);
}

CAF_TEST(subscribe and unsubscribe frames round trip) {
  auto sub = decode_ok(subscribe_frame("t-1", "s1"));
  CAF_CHECK(sub.type == client_frame_type::subscribe);
  CAF_CHECK_EQUAL(sub.thread, "t-1");
  CAF_CHECK_EQUAL(sub.id, "s1");
  auto sub2 = decode_ok(subscribe_frame("t-1"));
  CAF_CHECK_EQUAL(sub2.id, "");
  CAF_CHECK_EQUAL(subscribe_frame("t-1"),
                  R"({"type":"subscribe","thread":"t-1"})");
  auto unsub = decode_ok(unsubscribe_frame("t:2", "u1"));
  CAF_CHECK(unsub.type == client_frame_type::unsubscribe);
  CAF_CHECK_EQUAL(unsub.thread, "t:2");
  CAF_CHECK_EQUAL(unsub.id, "u1");
  CAF_CHECK_EQUAL(decode_ok(unsubscribe_frame("t:2")).id, "");
}

CAF_TEST(history frames round trip and default their paging) {
  auto h = decode_ok(history_request_frame("t1", "h1", 42, 7));
  CAF_CHECK(h.type == client_frame_type::history);
  CAF_CHECK_EQUAL(h.thread, "t1");
  CAF_CHECK_EQUAL(h.id, "h1");
  CAF_CHECK_EQUAL(h.after, 42u);
  CAF_CHECK_EQUAL(h.limit, 7u);
  auto d = decode_ok(R"({"type":"history","thread":"t1"})");
  CAF_CHECK_EQUAL(d.after, 0u);
  CAF_CHECK_EQUAL(d.limit, 100u);
  CAF_CHECK_EQUAL(d.id, "");
  auto big = decode_ok(
    R"({"type":"history","thread":"t1","after":18446744073709551615,"limit":1000})");
  CAF_CHECK_EQUAL(big.after, 18446744073709551615u);
  CAF_CHECK_EQUAL(big.limit, 1000u);
  CAF_CHECK_EQUAL(
    decode_ok(R"({"type":"history","thread":"t","limit":1})").limit, 1u);
}

CAF_TEST(ping frames round trip) {
  auto p = decode_ok(ping_frame("p1"));
  CAF_CHECK(p.type == client_frame_type::ping);
  CAF_CHECK_EQUAL(p.id, "p1");
  CAF_CHECK_EQUAL(ping_frame(""), R"({"type":"ping"})");
  CAF_CHECK_EQUAL(decode_ok(ping_frame("")).id, "");
  // A thread on a ping means nothing and is ignored.
  CAF_CHECK_EQUAL(decode_ok(R"({"type":"ping","thread":"t"})").thread, "");
}

CAF_TEST(spawn and cancel frames round trip) {
  auto sp = decode_ok(spawn_frame("p", "p.helper", "s1"));
  CAF_CHECK(sp.type == client_frame_type::spawn);
  CAF_CHECK_EQUAL(sp.thread, "p");
  CAF_CHECK_EQUAL(sp.child, "p.helper");
  CAF_CHECK_EQUAL(sp.id, "s1");
  auto c = decode_ok(cancel_frame("p", "x1"));
  CAF_CHECK(c.type == client_frame_type::cancel);
  CAF_CHECK_EQUAL(c.thread, "p");
  CAF_CHECK_EQUAL(c.id, "x1");
  CAF_CHECK_EQUAL(decode_ok(cancel_frame("p")).id, "");
}

CAF_TEST(spawn frames are checked field by field) {
  struct {
    const char* text;
    const char* code;
    const char* message;
  } cases[] = {
    {R"({"type":"spawn","thread":"p","child":"p.a"})", "missing_field",
     "missing field 'id'"},
    {R"({"type":"spawn","id":"s","child":"p.a"})", "missing_field",
     "missing field 'thread'"},
    {R"({"type":"spawn","id":"s","thread":"p"})", "missing_field",
     "missing field 'child'"},
    {R"({"type":"spawn","id":"s","thread":"p","child":7})", "wrong_type",
     "field 'child' must be a string"},
    {R"({"type":"spawn","id":"s","thread":"p","child":"a/b"})", "bad_value",
     nullptr},
    {R"({"type":"spawn","id":"s","thread":"p","child":"p"})", "bad_value",
     "field 'child' must differ from 'thread'"},
    {R"({"type":"cancel","id":"x"})", "missing_field",
     "missing field 'thread'"},
  };
  for (auto& c : cases) {
    auto e = decode_err(c.text);
    CAF_CHECK_EQUAL(e.code, c.code);
    if (c.message != nullptr)
      CAF_CHECK_EQUAL(e.message, c.message);
    else
      CAF_CHECK(e.message.find("field 'child' must be") == 0);
  }
}

CAF_TEST(unknown fields and null optionals are ignored) {
  auto f = decode_ok(R"({"type":"send","thread":"t","id":"m","text":"x",)"
                     R"("future":{"nested":[1,2,3]},"priority":9})");
  CAF_CHECK_EQUAL(f.text, "x");
  auto h = decode_ok(
    R"({"type":"history","thread":"t","id":null,"after":null,"limit":null})");
  CAF_CHECK_EQUAL(h.id, "");
  CAF_CHECK_EQUAL(h.after, 0u);
  CAF_CHECK_EQUAL(h.limit, 100u);
}

CAF_TEST(text up to the limit is accepted) {
  decode_limits lim;
  lim.max_text_bytes = 10;
  auto f = decode_ok(send_frame("t", "m", std::string(10, 'a')), lim);
  CAF_CHECK_EQUAL(f.text.size(), 10u);
  // The limit counts bytes of UTF-8, not characters.
  auto e = decode_err(send_frame("t", "m",
                                 "\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9"
                                 "\xc3\xa9\xc3\xa9"),
                      lim);
  CAF_CHECK_EQUAL(e.code, "too_large");
}

// -- client frames: every error code ------------------------------------------

CAF_TEST(malformed json is bad_json) {
  for (auto text : {"", "{", "nul", R"({"type":"ping",})", "{'type':'ping'}",
                    R"({"type":"ping"} trailing)"}) {
    auto e = decode_err(text);
    CAF_CHECK_EQUAL(e.code, "bad_json");
    CAF_CHECK_EQUAL(e.message.rfind("malformed JSON: ", 0), 0u);
    CAF_CHECK(e.message.find("json.exception") == std::string::npos);
  }
  // The parser's message never echoes a huge input back.
  auto e = decode_err("{\"type\":\"" + std::string(100000, 'x'));
  CAF_CHECK_EQUAL(e.code, "bad_json");
  CAF_CHECK_LESS(e.message.size(), 200u);
}

CAF_TEST(non objects are bad_frame) {
  for (auto text :
       {"[]", "42", R"("ping")", "null", "true", R"([{"type":"ping"}])"}) {
    auto e = decode_err(text);
    CAF_CHECK_EQUAL(e.code, "bad_frame");
    CAF_CHECK_EQUAL(e.message, "frame must be a JSON object");
  }
}

CAF_TEST(unknown types are unknown_type) {
  auto e = decode_err(R"({"type":"shout","id":"x1","thread":"t1"})");
  CAF_CHECK_EQUAL(e.code, "unknown_type");
  CAF_CHECK(e.message.find("'shout'") != std::string::npos);
  CAF_CHECK_EQUAL(e.id, "x1");
  CAF_CHECK_EQUAL(e.thread, "t1");
  // Case matters.
  CAF_CHECK_EQUAL(decode_err(R"({"type":"PING"})").code, "unknown_type");
}

CAF_TEST(missing fields are missing_field and named) {
  struct {
    const char* text;
    const char* message;
  } cases[] = {
    {R"({})", "missing field 'type'"},
    {R"({"type":null})", "missing field 'type'"},
    {R"({"type":"send","id":"m","text":"x"})", "missing field 'thread'"},
    {R"({"type":"send","thread":"t","text":"x"})", "missing field 'id'"},
    {R"({"type":"send","thread":"t","id":"m"})", "missing field 'text'"},
    {R"({"type":"subscribe"})", "missing field 'thread'"},
    {R"({"type":"unsubscribe","id":"u"})", "missing field 'thread'"},
    {R"({"type":"history","limit":5})", "missing field 'thread'"},
  };
  for (auto& c : cases) {
    auto e = decode_err(c.text);
    CAF_CHECK_EQUAL(e.code, "missing_field");
    CAF_CHECK_EQUAL(e.message, c.message);
  }
}

CAF_TEST(wrong json types are wrong_type and named) {
  struct {
    const char* text;
    const char* message;
  } cases[] = {
    {R"({"type":1})", "field 'type' must be a string"},
    {R"({"type":"send","thread":7,"id":"m","text":"x"})",
     "field 'thread' must be a string"},
    {R"({"type":"send","thread":"t","id":7,"text":"x"})",
     "field 'id' must be a string"},
    {R"({"type":"send","thread":"t","id":"m","text":["x"]})",
     "field 'text' must be a string"},
    {R"({"type":"ping","id":{}})", "field 'id' must be a string"},
    {R"({"type":"history","thread":"t","after":"3"})",
     "field 'after' must be a non-negative integer"},
    {R"({"type":"history","thread":"t","limit":1.5})",
     "field 'limit' must be a non-negative integer"},
    {R"({"type":"history","thread":"t","limit":true})",
     "field 'limit' must be a non-negative integer"},
  };
  for (auto& c : cases) {
    auto e = decode_err(c.text);
    CAF_CHECK_EQUAL(e.code, "wrong_type");
    CAF_CHECK_EQUAL(e.message, c.message);
  }
}

CAF_TEST(invalid values are bad_value and named) {
  struct {
    std::string text;
    const char* field;
  } cases[] = {
    {R"({"type":"send","thread":"a b","id":"m","text":"x"})", "'thread'"},
    {R"({"type":"send","thread":"","id":"m","text":"x"})", "'thread'"},
    {R"({"type":"subscribe","thread":"t/1"})", "'thread'"},
    {R"({"type":"subscribe","thread":")" + std::string(129, 't') + "\"}",
     "'thread'"},
    {R"({"type":"send","thread":"t","id":"a b","text":"x"})", "'id'"},
    {R"({"type":"send","thread":"t","id":"","text":"x"})", "'id'"},
    {R"({"type":"ping","id":")" + std::string(129, 'i') + "\"}", "'id'"},
    {R"({"type":"send","thread":"t","id":"m","text":""})", "'text'"},
    {R"({"type":"history","thread":"t","limit":0})", "'limit'"},
    {R"({"type":"history","thread":"t","limit":1001})", "'limit'"},
    {R"({"type":"history","thread":"t","limit":-5})", "'limit'"},
    {R"({"type":"history","thread":"t","after":-1})", "'after'"},
  };
  for (auto& c : cases) {
    auto e = decode_err(c.text);
    CAF_CHECK_EQUAL(e.code, "bad_value");
    CAF_CHECK(e.message.find(c.field) != std::string::npos);
  }
  auto e = decode_err(R"({"type":"history","thread":"t","limit":0})");
  CAF_CHECK_EQUAL(e.message, "field 'limit' must be between 1 and 1000");
}

CAF_TEST(ids reserved for messages between agents are bad_request) {
  // A client sending `agent:parent:7` first would make the real message from
  // thread `parent` look like its duplicate, and it would be dropped.
  for (auto type : {"send", "spawn", "cancel"}) {
    auto e = decode_err(std::string{R"({"type":")"} + type
                        + R"(","thread":"child","child":"c2",)"
                        + R"("id":"agent:parent:7","text":"x"})");
    CAF_CHECK_EQUAL(e.code, "bad_request");
    CAF_CHECK(e.message.find("'id'") != std::string::npos);
    CAF_CHECK(e.message.find("agent:") != std::string::npos);
  }
  auto ok = decode_ok(R"({"type":"send","thread":"t","id":"agent-7",)"
                      R"("text":"x"})");
  CAF_CHECK_EQUAL(ok.id, "agent-7");
}

CAF_TEST(over long text is too_large) {
  decode_limits lim;
  lim.max_text_bytes = 16;
  auto e = decode_err(send_frame("t1", "m1", std::string(17, 'x')), lim);
  CAF_CHECK_EQUAL(e.code, "too_large");
  CAF_CHECK_EQUAL(e.message, "field 'text' has 17 bytes; the limit is 16");
  CAF_CHECK_EQUAL(e.id, "m1");
  CAF_CHECK_EQUAL(e.thread, "t1");
  // The default limit is 64 KiB.
  CAF_CHECK_EQUAL(
    decode_err(send_frame("t", "m", std::string(64 * 1024 + 1, 'x'))).code,
    "too_large");
}

CAF_TEST(invalid utf8 is invalid_utf8) {
  // Raw ill-formed bytes inside and outside of strings.
  for (std::string text :
       {std::string{R"({"type":"send","thread":"t","id":"m","text":"a)"}
          + "\xff" + "\"}",
        std::string{R"({"type":"send","thread":"t","id":"m","text":"a)"}
          + "\xc0\xaf" + "\"}",
        std::string{R"({"type":"send","thread":"t","id":"m","text":"a)"}
          + "\xed\xa0\x80" + "\"}",
        std::string{"{\xfe}"}}) {
    CAF_CHECK_EQUAL(decode_err(text).code, "invalid_utf8");
  }
  // Escapes of lone surrogates decode to no valid UTF-8 at all.
  for (auto text :
       {R"({"type":"send","thread":"t","id":"m","text":"\ud800"})",
        R"({"type":"send","thread":"t","id":"m","text":"\udc00 x"})",
        R"({"type":"send","thread":"t","id":"m","text":"\ud800\u0041"})"}) {
    CAF_CHECK_EQUAL(decode_err(text).code, "invalid_utf8");
  }
  // A proper surrogate pair is fine.
  auto f = decode_ok(
    R"({"type":"send","thread":"t","id":"m","text":"\ud83d\ude00"})");
  CAF_CHECK_EQUAL(f.text, "\xf0\x9f\x98\x80");
  CAF_CHECK(valid_utf8(f.text));
}

CAF_TEST(errors carry id and thread only when usable) {
  auto e = decode_err(R"({"type":"send","thread":"t1","id":"m1","text":5})");
  CAF_CHECK_EQUAL(e.id, "m1");
  CAF_CHECK_EQUAL(e.thread, "t1");
  auto e2 = decode_err(R"({"type":"send","thread":"bad thread","id":3})");
  CAF_CHECK_EQUAL(e2.id, "");
  CAF_CHECK_EQUAL(e2.thread, "");
  auto e3 = decode_err(R"({"id":"p1"})");
  CAF_CHECK_EQUAL(e3.code, "missing_field");
  CAF_CHECK_EQUAL(e3.id, "p1");
}

CAF_TEST(deep nesting neither crashes nor blocks decoding) {
  std::string deep(100000, '[');
  deep += std::string(100000, ']');
  CAF_CHECK_EQUAL(decode_err(deep).code, "bad_frame");
  auto f = decode_ok(R"({"type":"ping","id":"p","extra":)" + deep + "}");
  CAF_CHECK_EQUAL(f.id, "p");
}

// -- server frames
// --------------------------------------------------------------

CAF_TEST(hello frames name the protocol version and node) {
  auto j = server(hello_frame("node-a"), "hello");
  CAF_CHECK_EQUAL(j["protocol"].get<int>(), 1);
  CAF_CHECK_EQUAL(j["node"].get<std::string>(), "node-a");
  CAF_CHECK_EQUAL(hello_frame("n"),
                  R"({"type":"hello","protocol":1,"node":"n"})");
}

CAF_TEST(ack frames) {
  auto j = server(ack_frame("t1", "m1", 7, false), "ack");
  CAF_CHECK_EQUAL(j["thread"].get<std::string>(), "t1");
  CAF_CHECK_EQUAL(j["id"].get<std::string>(), "m1");
  CAF_CHECK_EQUAL(j["seq"].get<uint64_t>(), 7u);
  CAF_CHECK_EQUAL(j["duplicate"].get<bool>(), false);
  CAF_CHECK_EQUAL(
    server(ack_frame("t1", "m1", 7, true), "ack")["duplicate"].get<bool>(),
    true);
  CAF_CHECK_EQUAL(ack_frame("t", "m", 18446744073709551615u, false),
                  R"({"type":"ack","thread":"t","id":"m",)"
                  R"("seq":18446744073709551615,"duplicate":false})");
}

CAF_TEST(status frames) {
  auto j = server(status_frame("t1", "m1", 3, "thinking"), "status");
  CAF_CHECK_EQUAL(j["thread"].get<std::string>(), "t1");
  CAF_CHECK_EQUAL(j["id"].get<std::string>(), "m1");
  CAF_CHECK_EQUAL(j["reply_to"].get<uint64_t>(), 3u);
  CAF_CHECK_EQUAL(j["state"].get<std::string>(), "thinking");
}

CAF_TEST(reply outcomes) {
  auto entry = make_entry(log_kind::reply, 4, 3, "m1", "echo: \"hi\"\n");
  entry.provider = "echo";
  auto j = server(outcome_frame("t1", entry), "reply");
  CAF_CHECK_EQUAL(j["thread"].get<std::string>(), "t1");
  CAF_CHECK_EQUAL(j["seq"].get<uint64_t>(), 4u);
  CAF_CHECK_EQUAL(j["reply_to"].get<uint64_t>(), 3u);
  CAF_CHECK_EQUAL(j["id"].get<std::string>(), "m1");
  CAF_CHECK_EQUAL(j["text"].get<std::string>(), "echo: \"hi\"\n");
  CAF_CHECK_EQUAL(j["provider"].get<std::string>(), "echo");
}

CAF_TEST(error outcomes) {
  auto entry = make_entry(log_kind::error, 6, 5, "m2",
                          "provider pool 'default' failed: timeout");
  entry.code = "provider_failed";
  auto j = server(outcome_frame("t1", entry), "error");
  CAF_CHECK_EQUAL(j["code"].get<std::string>(), "provider_failed");
  CAF_CHECK_EQUAL(j["message"].get<std::string>(),
                  "provider pool 'default' failed: timeout");
  CAF_CHECK_EQUAL(j["thread"].get<std::string>(), "t1");
  CAF_CHECK_EQUAL(j["seq"].get<uint64_t>(), 6u);
  CAF_CHECK_EQUAL(j["reply_to"].get<uint64_t>(), 5u);
  CAF_CHECK_EQUAL(j["id"].get<std::string>(), "m2");
  // An error entry without a code still gets one.
  entry.code.clear();
  CAF_CHECK_EQUAL(
    server(outcome_frame("t1", entry), "error")["code"].get<std::string>(),
    "turn_failed");
}

CAF_TEST(error frames) {
  auto j = server(
    error_frame("bad_value", "field 'limit' must be ...", "h1", "t1"), "error");
  CAF_CHECK_EQUAL(j["code"].get<std::string>(), "bad_value");
  CAF_CHECK_EQUAL(j["message"].get<std::string>(), "field 'limit' must be ...");
  CAF_CHECK_EQUAL(j["id"].get<std::string>(), "h1");
  CAF_CHECK_EQUAL(j["thread"].get<std::string>(), "t1");
  auto bare = server(error_frame("bad_json", "malformed JSON"), "error");
  CAF_CHECK(!has(bare, "id"));
  CAF_CHECK(!has(bare, "thread"));
  frame_error fe{"missing_field", "missing field 'text'", "m9", "t9"};
  CAF_CHECK_EQUAL(error_frame(fe),
                  error_frame("missing_field", "missing field 'text'", "m9",
                              "t9"));
  // Errors decoded from client frames encode and decode again.
  auto e = decode_err(R"({"type":"send","thread":"t1","id":"m1"})");
  auto k = server(error_frame(e), "error");
  CAF_CHECK_EQUAL(k["code"].get<std::string>(), "missing_field");
  CAF_CHECK_EQUAL(k["message"].get<std::string>(), "missing field 'text'");
  CAF_CHECK_EQUAL(k["id"].get<std::string>(), "m1");
  CAF_CHECK_EQUAL(k["thread"].get<std::string>(), "t1");
}

CAF_TEST(history frames) {
  history_page page;
  page.thread = "t1";
  page.entries.push_back(make_entry(log_kind::user, 1, 0, "m1", "hi"));
  auto reply = make_entry(log_kind::reply, 2, 1, "m1", "echo: hi");
  reply.provider = "echo";
  page.entries.push_back(reply);
  page.more = true;
  auto j = server(history_frame("h1", page), "history");
  CAF_CHECK_EQUAL(j["id"].get<std::string>(), "h1");
  CAF_CHECK_EQUAL(j["thread"].get<std::string>(), "t1");
  CAF_CHECK_EQUAL(j["more"].get<bool>(), true);
  auto& entries = j["entries"];
  CAF_REQUIRE_EQUAL(entries.size(), 2u);
  CAF_CHECK_EQUAL(entries[0].dump(), keel::to_json(page.entries[0]).dump());
  CAF_CHECK_EQUAL(entries[1].dump(), keel::to_json(page.entries[1]).dump());
  CAF_CHECK_EQUAL(entries[1]["kind"].get<std::string>(), "reply");
  CAF_CHECK_EQUAL(entries[1]["reply_to"].get<uint64_t>(), 1u);
  history_page empty;
  empty.thread = "t2";
  auto k = server(history_frame("", empty), "history");
  CAF_CHECK(k["entries"].is_array());
  CAF_CHECK(k["entries"].empty());
  CAF_CHECK_EQUAL(k["more"].get<bool>(), false);
  CAF_CHECK(!has(k, "id"));
}

CAF_TEST(spawned and cancelled frames) {
  auto j = server(spawned_frame(spawn_result{"p", "p.a", true}, "s1"),
                  "spawned");
  CAF_CHECK_EQUAL(j["id"], "s1");
  CAF_CHECK_EQUAL(j["thread"], "p");
  CAF_CHECK_EQUAL(j["child"], "p.a");
  CAF_CHECK_EQUAL(j["created"], true);
  auto c = server(cancelled_frame("p", {"p", "p.a"}, "x1"), "cancelled");
  CAF_CHECK_EQUAL(c["id"], "x1");
  CAF_CHECK_EQUAL(c["threads"], json::array({"p", "p.a"}));
  CAF_CHECK(!has(server(cancelled_frame("p", {"p"}, ""), "cancelled"), "id"));
}

CAF_TEST(pong frames) {
  CAF_CHECK_EQUAL(server(pong_frame("p1"), "pong")["id"].get<std::string>(),
                  "p1");
  CAF_CHECK_EQUAL(pong_frame(""), R"({"type":"pong"})");
}

CAF_TEST(subscribed frames) {
  auto on = server(subscribed_frame("t1", true, "s1"), "subscribed");
  CAF_CHECK_EQUAL(on["thread"].get<std::string>(), "t1");
  CAF_CHECK_EQUAL(on["subscribed"].get<bool>(), true);
  CAF_CHECK_EQUAL(on["id"].get<std::string>(), "s1");
  auto off = server(subscribed_frame("t1", false, ""), "subscribed");
  CAF_CHECK_EQUAL(off["subscribed"].get<bool>(), false);
  CAF_CHECK(!has(off, "id"));
}

CAF_TEST(server frames escape text and never carry invalid utf8) {
  std::string nasty = "quote\" backslash\\ nl\n cr\r tab\t nul";
  nasty += '\0';
  nasty += " bell\x07 del\x7f end";
  auto entry = make_entry(log_kind::reply, 2, 1, "m1", nasty);
  auto frame = outcome_frame("t", entry);
  CAF_CHECK(frame.find('\n') == std::string::npos);
  CAF_CHECK_EQUAL(server(frame, "reply")["text"].get<std::string>(), nasty);
  // A broken provider answer: bytes that are not UTF-8 become U+FFFD.
  entry.text = "bad \xff\xfe bytes";
  auto broken = outcome_frame("t", entry);
  CAF_CHECK(valid_utf8(broken));
  CAF_CHECK_EQUAL(server(broken, "reply")["text"].get<std::string>(),
                  "bad \xef\xbf\xbd\xef\xbf\xbd bytes");
  history_page page;
  page.thread = "t";
  page.entries.push_back(entry);
  CAF_CHECK(valid_utf8(history_frame("h", page)));
}

CAF_TEST(decode_server_frame rejects what is not a server frame) {
  for (auto text : {"", "nope", "[]", "{}", R"({"type":5})", "{\"type\":"}) {
    auto frame = decode_server_frame(text);
    CAF_REQUIRE(!frame);
    CAF_CHECK(frame.error() == ec::protocol_violation);
  }
  auto ok = decode_server_frame(R"({"type":"future_frame","x":1})");
  CAF_REQUIRE(ok);
  CAF_CHECK_EQUAL(ok->type, "future_frame");
}
