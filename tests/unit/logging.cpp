#define CAF_SUITE logging

#include "keel/logging.hpp"

#include "temp_dir.hpp"

#include <caf/test/unit_test.hpp>

#include <algorithm>
#include <fstream>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "text_checks.hpp"

using namespace keel;
using json = nlohmann::json;

namespace {

std::vector<std::string> read_lines(const std::string& path) {
  std::vector<std::string> result;
  std::ifstream in{path};
  for (std::string line; std::getline(in, line);)
    result.push_back(line);
  return result;
}

logging_config config(const std::string& format, const std::string& file,
                      const std::string& level = "trace") {
  logging_config cfg;
  cfg.level = level;
  cfg.file = file;
  cfg.format = format;
  return cfg;
}

// Logs into a file of a fresh folder; puts the test runner's own logger
// back afterwards.
struct fixture {
  fixture()
    : saved(spdlog::default_logger()),
      saved_level(spdlog::get_level()),
      file((dir.path() / "node.log").string()) {
    // nop
  }

  ~fixture() {
    spdlog::set_default_logger(saved);
    spdlog::set_level(saved_level);
  }

  void init(const std::string& format, const std::string& node = "n1") {
    if (auto err = init_logging(config(format, file), node))
      CAF_FAIL("init_logging failed: " << render(err));
  }

  /// The lines written so far.
  std::vector<std::string> lines() {
    spdlog::default_logger()->flush();
    return read_lines(file);
  }

  /// The lines written so far, each parsed as one JSON object.
  std::vector<json> events() {
    std::vector<json> result;
    for (auto& line : lines()) {
      auto j = json::parse(line, nullptr, false);
      if (j.is_discarded() || !j.is_object())
        CAF_FAIL("not one JSON object: " << line);
      result.push_back(std::move(j));
    }
    return result;
  }

  test::temp_dir dir;
  std::shared_ptr<spdlog::logger> saved;
  spdlog::level::level_enum saved_level;
  std::string file;
};

std::string str(const json& event, const char* key) {
  auto i = event.find(key);
  if (i == event.end() || !i->is_string())
    return "<no string " + std::string{key} + ">";
  return i->get<std::string>();
}

bool has(const json& event, const char* key) {
  return event.find(key) != event.end();
}

const std::regex rfc3339_ms_utc{
  R"(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z)"};

} // namespace

CAF_TEST_FIXTURE_SCOPE(logging_tests, fixture)

CAF_TEST(json writes one object per line with the fields) {
  init("json", "node-a");
  spdlog::info("no scope");
  {
    log_scope scope{"channels", "t1", 12};
    spdlog::warn("reply {} is a dead letter", 12);
  }
  {
    log_scope scope{log_component::cluster};
    spdlog::error("lost {} shards", 3);
  }
  {
    log_scope scope{"conversation", "t2"};
    spdlog::critical("critical");
    spdlog::debug("debug");
    spdlog::trace("trace");
  }
  auto xs = events();
  CAF_REQUIRE_EQUAL(xs.size(), 6u);
  for (auto& x : xs) {
    CAF_CHECK(std::regex_match(str(x, "time"), rfc3339_ms_utc));
    CAF_CHECK_EQUAL(str(x, "node"), "node-a");
    for (auto& [key, value] : x.items())
      CAF_CHECK(key == "time" || key == "level" || key == "node"
                || key == "component" || key == "thread" || key == "message"
                || key == "text");
  }
  CAF_CHECK_EQUAL(str(xs[0], "level"), "info");
  CAF_CHECK_EQUAL(str(xs[0], "component"), "node");
  CAF_CHECK(!has(xs[0], "thread"));
  CAF_CHECK(!has(xs[0], "message"));
  CAF_CHECK_EQUAL(str(xs[0], "text"), "no scope");
  CAF_CHECK_EQUAL(str(xs[1], "level"), "warn");
  CAF_CHECK_EQUAL(str(xs[1], "component"), "channels");
  CAF_CHECK_EQUAL(str(xs[1], "thread"), "t1");
  CAF_REQUIRE(has(xs[1], "message"));
  CAF_CHECK(xs[1]["message"].is_number_unsigned());
  CAF_CHECK_EQUAL(xs[1]["message"].get<uint64_t>(), 12u);
  CAF_CHECK_EQUAL(str(xs[1], "text"), "reply 12 is a dead letter");
  CAF_CHECK_EQUAL(str(xs[2], "level"), "error");
  CAF_CHECK_EQUAL(str(xs[2], "component"), "cluster");
  CAF_CHECK(!has(xs[2], "thread"));
  CAF_CHECK_EQUAL(str(xs[3], "level"), "critical");
  CAF_CHECK_EQUAL(str(xs[3], "thread"), "t2");
  CAF_CHECK(!has(xs[3], "message"));
  CAF_CHECK_EQUAL(str(xs[4], "level"), "debug");
  CAF_CHECK_EQUAL(str(xs[5], "level"), "trace");
  // The fields come in a fixed order.
  auto line = lines()[1];
  CAF_CHECK(std::regex_match(
    line, std::regex{R"(\{"time":"[^"]+","level":"warn","node":"node-a",)"
                     R"("component":"channels","thread":"t1","message":12,)"
                     R"("text":"reply 12 is a dead letter"\})"}));
}

CAF_TEST(json time is UTC with milliseconds) {
  spdlog::details::log_msg msg{"keel", spdlog::level::info, "x"};
  msg.time = spdlog::log_clock::time_point{
    std::chrono::milliseconds{1795788185123}}; // 2026-11-27T14:03:05.123Z
  spdlog::memory_buf_t buf;
  auto formatter = make_log_formatter("json", "n1");
  CAF_REQUIRE(formatter != nullptr);
  formatter->format(msg, buf);
  auto line = std::string{buf.data(), buf.size()};
  KEEL_CHECK_CONTAINS(line, R"({"time":"2026-11-27T14:03:05.123Z",)");
  CAF_CHECK_EQUAL(line.back(), '\n');
  // Another millisecond of the same second, then of the next one.
  msg.time += std::chrono::milliseconds{5};
  buf.clear();
  formatter->format(msg, buf);
  KEEL_CHECK_CONTAINS(std::string(buf.data(), buf.size()),
                      R"("time":"2026-11-27T14:03:05.128Z")");
  msg.time += std::chrono::milliseconds{900};
  buf.clear();
  formatter->format(msg, buf);
  KEEL_CHECK_CONTAINS(std::string(buf.data(), buf.size()),
                      R"("time":"2026-11-27T14:03:06.028Z")");
}

CAF_TEST(json escapes control characters and replaces bad bytes) {
  init("json", "node \"q\"");
  {
    log_scope scope{"conversation", "t\"1\n", 7};
    spdlog::info("say \"hi\"\nback\\slash\ttab\r\x01\x1f end");
  }
  spdlog::info("euro \xE2\x82\xAC, 4 bytes \xF0\x9F\x98\x80");
  spdlog::info("bad \xFF, cut \xE2\x82, surrogate \xED\xA0\x80, "
               "overlong \xC0\xAF, stray \x80, last \xF0\x9F");
  auto ls = lines();
  CAF_REQUIRE_EQUAL(ls.size(), 3u);
  // No raw control bytes: each event stays on its line.
  for (auto& line : ls)
    CAF_CHECK(std::none_of(line.begin(), line.end(), [](char c) {
      return static_cast<unsigned char>(c) < 0x20;
    }));
  auto xs = events();
  CAF_REQUIRE_EQUAL(xs.size(), 3u);
  CAF_CHECK_EQUAL(str(xs[0], "node"), "node \"q\"");
  CAF_CHECK_EQUAL(str(xs[0], "thread"), "t\"1\n");
  CAF_CHECK_EQUAL(str(xs[0], "text"),
                  "say \"hi\"\nback\\slash\ttab\r\x01\x1f end");
  KEEL_CHECK_CONTAINS(ls[0], R"(say \"hi\"\nback\\slash\ttab\r\u0001\u001f)");
  CAF_CHECK_EQUAL(str(xs[1], "text"),
                  "euro \xE2\x82\xAC, 4 bytes \xF0\x9F\x98\x80");
  // One U+FFFD per maximal ill-formed part (Unicode's recommendation).
  const std::string r = "\xEF\xBF\xBD";
  CAF_CHECK_EQUAL(str(xs[2], "text"), "bad " + r + ", cut " + r + ", surrogate "
                                        + r + r + r + ", overlong " + r + r
                                        + ", stray " + r + ", last " + r);
}

CAF_TEST(scopes nest and restore the enclosing context) {
  auto ctx = current_log_context();
  CAF_CHECK_EQUAL(std::string{ctx.component}, "node");
  CAF_CHECK(ctx.thread.empty());
  CAF_CHECK(!ctx.message);
  {
    log_scope outer{"conversation", "t1", 5};
    ctx = current_log_context();
    CAF_CHECK_EQUAL(std::string{ctx.component}, "conversation");
    CAF_CHECK_EQUAL(std::string{ctx.thread}, "t1");
    CAF_CHECK_EQUAL(ctx.message.value_or(0), 5u);
    {
      // A component alone keeps the thread and message.
      log_scope inner{"persistence"};
      ctx = current_log_context();
      CAF_CHECK_EQUAL(std::string{ctx.component}, "persistence");
      CAF_CHECK_EQUAL(std::string{ctx.thread}, "t1");
      CAF_CHECK_EQUAL(ctx.message.value_or(0), 5u);
      {
        // A thread without a message drops the message.
        log_scope innermost{"channels", "t2"};
        ctx = current_log_context();
        CAF_CHECK_EQUAL(std::string{ctx.component}, "channels");
        CAF_CHECK_EQUAL(std::string{ctx.thread}, "t2");
        CAF_CHECK(!ctx.message);
      }
      ctx = current_log_context();
      CAF_CHECK_EQUAL(std::string{ctx.component}, "persistence");
      CAF_CHECK_EQUAL(std::string{ctx.thread}, "t1");
      CAF_CHECK_EQUAL(ctx.message.value_or(0), 5u);
    }
    ctx = current_log_context();
    CAF_CHECK_EQUAL(std::string{ctx.component}, "conversation");
    CAF_CHECK_EQUAL(std::string{ctx.thread}, "t1");
  }
  ctx = current_log_context();
  CAF_CHECK_EQUAL(std::string{ctx.component}, "node");
  CAF_CHECK(ctx.thread.empty());
  CAF_CHECK(!ctx.message);
  {
    // An unknown (empty) thread makes the message unknown too.
    log_scope notice{"channels", "", 0};
    ctx = current_log_context();
    CAF_CHECK(ctx.thread.empty());
    CAF_CHECK(!ctx.message);
  }
  // The events say so too.
  init("json");
  {
    log_scope outer{"conversation", "t1", 5};
    {
      log_scope inner{"channels", "t2"};
      spdlog::info("inner");
    }
    spdlog::info("outer");
  }
  spdlog::info("none");
  auto xs = events();
  CAF_REQUIRE_EQUAL(xs.size(), 3u);
  CAF_CHECK_EQUAL(str(xs[0], "thread"), "t2");
  CAF_CHECK(!has(xs[0], "message"));
  CAF_CHECK_EQUAL(str(xs[1], "component"), "conversation");
  CAF_CHECK_EQUAL(str(xs[1], "thread"), "t1");
  CAF_CHECK_EQUAL(xs[1].value("message", uint64_t{0}), 5u);
  CAF_CHECK_EQUAL(str(xs[2], "component"), "node");
  CAF_CHECK(!has(xs[2], "thread"));
}

CAF_TEST(scopes are per thread) {
  log_scope scope{"conversation", "t1", 1};
  std::string seen;
  std::thread other{[&seen] {
    auto ctx = current_log_context();
    seen = std::string{ctx.component} + "/" + std::string{ctx.thread};
  }};
  other.join();
  CAF_CHECK_EQUAL(seen, "node/");
}

CAF_TEST(text keeps the line of before) {
  init("text");
  spdlog::warn("plain");
  {
    log_scope scope{"channels", "t1", 12};
    spdlog::info("in a scope");
  }
  auto ls = lines();
  CAF_REQUIRE_EQUAL(ls.size(), 2u);
  const std::string time = R"(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3})";
  CAF_CHECK(std::regex_match(ls[0], std::regex{time + " warning plain"}));
  CAF_CHECK(std::regex_match(ls[1], std::regex{time + " info in a scope"}));
}

CAF_TEST(the level filters events) {
  if (auto err = init_logging(config("json", file, "warn"), "n1"))
    CAF_FAIL(render(err));
  spdlog::info("dropped");
  spdlog::warn("kept");
  auto xs = events();
  CAF_REQUIRE_EQUAL(xs.size(), 1u);
  CAF_CHECK_EQUAL(str(xs[0], "text"), "kept");
}

CAF_TEST(bad settings are config_invalid naming the key) {
  auto before = spdlog::default_logger();
  auto err = init_logging(config("yaml", file), "n1");
  CAF_CHECK_EQUAL(err, ec::config_invalid);
  KEEL_CHECK_CONTAINS(render(err), "logging.format");
  KEEL_CHECK_CONTAINS(render(err), "yaml");
  err = init_logging(config("", file), "n1");
  CAF_CHECK_EQUAL(err, ec::config_invalid);
  KEEL_CHECK_CONTAINS(render(err), "logging.format");
  err = init_logging(config("json", file, "loud"), "n1");
  CAF_CHECK_EQUAL(err, ec::config_invalid);
  KEEL_CHECK_CONTAINS(render(err), "logging.level");
  // A file under a regular file cannot be made.
  { std::ofstream{dir.path() / "plain"} << "x"; }
  auto bad = (dir.path() / "plain" / "node.log").string();
  err = init_logging(config("json", bad), "n1");
  CAF_CHECK_EQUAL(err, ec::config_invalid);
  KEEL_CHECK_CONTAINS(render(err), "logging.file");
  // The logger is left as it was.
  CAF_CHECK(spdlog::default_logger() == before);
  CAF_CHECK(make_log_formatter("JSON", "n1") == nullptr);
}

CAF_TEST(the file sink appends and makes missing folders) {
  { std::ofstream{file} << "earlier line\n"; }
  init("json");
  spdlog::info("one");
  auto nested = (dir.path() / "a" / "b" / "node.log").string();
  if (auto err = init_logging(config("text", nested), "n1"))
    CAF_FAIL(render(err));
  spdlog::info("two");
  spdlog::default_logger()->flush();
  auto ls = read_lines(file);
  CAF_REQUIRE_EQUAL(ls.size(), 2u);
  CAF_CHECK_EQUAL(ls[0], "earlier line");
  KEEL_CHECK_CONTAINS(ls[1], R"("text":"one")");
  auto ns = read_lines(nested);
  CAF_REQUIRE_EQUAL(ns.size(), 1u);
  KEEL_CHECK_CONTAINS(ns[0], " info two");
}

// Below a warning nothing flushes at once: the line must still reach the
// file within the flush interval (a second), read without flushing.
CAF_TEST(an info line reaches the file within a second or two) {
  init("text");
  spdlog::info("quiet line");
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds{3};
  bool seen = false;
  while (!seen && std::chrono::steady_clock::now() < deadline) {
    auto ls = read_lines(file);
    seen = ls.size() == 1 && ls[0].find("info quiet line") != std::string::npos;
    if (!seen)
      std::this_thread::sleep_for(std::chrono::milliseconds{20});
  }
  CAF_CHECK(seen);
}

CAF_TEST(configured secrets are redacted from every event) {
  for (std::string format : {"json", "text"}) {
    if (auto err = init_logging(config(format, file), "n1",
                                {"sk-live-1234", "pro"}))
      CAF_FAIL(render(err));
    spdlog::warn("provider said: Incorrect API key provided: sk-live-1234");
    auto ls = lines();
    CAF_REQUIRE(!ls.empty());
    CAF_CHECK_EQUAL(ls.back().find("sk-live-1234"), std::string::npos);
    KEEL_CHECK_CONTAINS(ls.back(), "provided: [redacted]");
    // Too short to be looked for: ordinary words stay.
    KEEL_CHECK_CONTAINS(ls.back(), "provider");
  }
}

CAF_TEST_FIXTURE_SCOPE_END()
