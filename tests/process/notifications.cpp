#define CAF_SUITE notifications

// Owner notifications against a real node: a pool whose every provider
// fails tells the owner's webhook once per dedup window, also across a
// kill -9; the notices suppressed meanwhile are counted; a notice the
// owner's channel does not take is recorded as failed and does not hold
// the window shut; a provider error quoting the API key shows the key
// nowhere. The provider is libtools' fault_llm_server and the
// owner's receiver its channel_sink_server, both in this process.

#include <chrono>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <caf/test/unit_test.hpp>

#include <nlohmann/json.hpp>

#include "node_client.hpp"
#include "temp_dir.hpp"
#include "test_store.hpp"
#include "text_checks.hpp"

#include "keel/protocol.hpp"
#include "keel/tools/channel_sink_server.hpp"
#include "keel/tools/fault_llm_server.hpp"

using namespace keel;
using namespace keel::test;
using namespace std::chrono_literals;
using channel_sink::channel_sink_server;
using fault_llm::fault_llm_server;
using json = nlohmann::json;

namespace {

constexpr const char* secret = "owner-secret";

// One openai provider on `llm`, fast retries and no cooldowns, and the
// owner's webhook on `sink` with two quick attempts.
std::string node_yaml(const temp_dir& dir, const fault_llm_server& llm,
                      const channel_sink_server& sink,
                      const std::string& api_key = "sk-test",
                      const std::string& logging = "  level: info\n") {
  return "node:\n  name: notices-test\n  data_dir: " + dir.str()
         + "/data\ngateway:\n  port: 0\nlogging:\n" + logging
         + "providers:\n  - name: only\n    kind: openai\n    base_url: "
         + llm.base_url() + "\n    model: m\n    api_key: " + api_key
         + "\n    stream: false\n"
           "pools:\n  - name: default\n    chain: [only]\n"
           "    max_attempts: 2\n"
           "    retry: {base_delay: 10ms, max_delay: 50ms}\n"
           "    breaker: {failure_threshold: 1000}\n"
           "    cooldowns: {unknown: 0s, overloaded: 0s}\n"
           "owner:\n  contact: ops@example.com\n  channel: owner\n"
           "delivery:\n  channels:\n"
           "    - name: owner\n      kind: webhook\n      url: "
         + sink.base_url() + "/owner\n      secret: " + secret
         + "\n      retry: {max_attempts: 2, base_delay: 50ms, max_delay: "
           "100ms}\n"
         + storage_yaml(dir.str() + "/data");
}

struct fixture {
  fault_llm_server llm;
  channel_sink_server sink{{0, {}, {}, secret}};
  temp_dir dir{"keel-notices"};
  node_process node{dir.str(), node_yaml(dir, llm, sink)};

  fixture() {
    llm.set_default(fault_llm::parse_fault("status=500").value());
  }

  // Sends `text` on thread t and returns the error it is answered with.
  json fail(const std::string& id) {
    auto client = connect_client(node.address());
    CAF_REQUIRE(!client->send_text(protocol::send_frame("t", id, "hi")));
    auto outcome = receive_until(*client, [&](auto& j) {
      return (j["type"] == "error" || j["type"] == "reply")
             && j.value("id", "") == id;
    });
    CAF_REQUIRE(outcome);
    return *outcome;
  }

  json notices() {
    auto res = keelctl_at(node.address(), {"notifications", "--json"});
    CAF_REQUIRE_EQUAL(res.exit_code, 0);
    return json::parse(res.out)["notifications"];
  }

  // Waits until the notice of `kind` shows `pred`; returns it.
  json notice_when(const std::string& kind,
                   const std::function<bool(const json&)>& pred) {
    json found;
    auto seen = poll_until(
      [&] {
        for (auto& x : notices())
          if (x["kind"] == kind && pred(x)) {
            found = x;
            return true;
          }
        return false;
      },
      20s);
    CAF_REQUIRE(seen);
    return found;
  }
};

} // namespace

CAF_TEST_FIXTURE_SCOPE(notifications_tests, fixture)

CAF_TEST(failing providers tell the owner once per window across a kill) {
  auto first = fail("m1");
  CAF_CHECK_EQUAL(first["code"], "provider_failed");
  CAF_REQUIRE(sink.wait_for_delivered(1, 20s));
  auto got = sink.delivered().at(0);
  CAF_CHECK_EQUAL(got.target, "/owner");
  CAF_CHECK(got.signature_ok);
  CAF_CHECK_EQUAL(got.event, "notice");
  auto body = json::parse(got.body);
  CAF_CHECK_EQUAL(body["kind"], "all_models_failed");
  CAF_CHECK_EQUAL(body["severity"], "high");
  CAF_CHECK_EQUAL(body["subject"], "pool default");
  KEEL_CHECK_CONTAINS(body["text"].get<std::string>(), "Thread t");
  auto key = "keel:notice:all_models_failed:pool default:"
             + std::to_string(body["at"].get<int64_t>());
  CAF_CHECK_EQUAL(got.idempotency_key, key);
  auto sent = notice_when("all_models_failed",
                          [](auto& x) { return x["status"] == "sent"; });
  CAF_CHECK_EQUAL(sent["severity"], "high");
  // Within the window: suppressed and counted, not sent.
  fail("m2");
  notice_when("all_models_failed",
              [](auto& x) { return x.value("suppressed", 0) == 1; });
  // The window's state is stored: a restarted node does not send again.
  // (Suppressed counts are written within a second: a kill may lose the
  // last second's.)
  node.kill9();
  node.start();
  auto restored = notice_when("all_models_failed",
                              [](auto& x) { return x["status"] == "sent"; });
  CAF_CHECK_EQUAL(restored["at"], body["at"]);
  auto before = restored.value("suppressed", 0);
  fail("m3");
  auto counted = notice_when("all_models_failed", [&](auto& x) {
    return x.value("suppressed", 0) == before + 1;
  });
  CAF_CHECK_EQUAL(counted["at"], body["at"]);
  CAF_CHECK_EQUAL(sink.requests().size(), 1u);
  auto table = keelctl_at(node.address(), {"notifications"});
  CAF_CHECK_EQUAL(table.exit_code, 0);
  KEEL_CHECK_CONTAINS(table.out, "all_models_failed");
  KEEL_CHECK_CONTAINS(table.out, "pool default");
}

CAF_TEST(a notice the owner channel refuses is recorded and sent next time) {
  sink.set_default(*channel_sink::parse_fault("500", nullptr));
  fail("m1");
  auto failed = notice_when("all_models_failed",
                            [](auto& x) { return x["status"] == "failed"; });
  KEEL_CHECK_CONTAINS(failed["error"].get<std::string>(), "500");
  CAF_CHECK_EQUAL(sink.requests().size(), 2u); // max_attempts: 2
  sink.set_default(*channel_sink::parse_fault("ok", nullptr));
  fail("m2");
  CAF_REQUIRE(sink.wait_for_delivered(1, 20s));
  notice_when("all_models_failed",
              [](auto& x) { return x["status"] == "sent"; });
}

CAF_TEST_FIXTURE_SCOPE_END()

// A provider that quotes the request's key in its 401 answer, as OpenAI
// does: the key shows neither in the provider health, nor in the log file,
// nor in the owner's notice (listed or sent), nor in the user's error.
CAF_TEST(a provider error quoting the api key shows it nowhere) {
  const std::string key = "sk-live-5d1c0e99";
  fault_llm_server llm;
  llm.set_default(
    fault_llm::parse_fault("status=401;message=Incorrect API key provided: "
                           + key + ". Find your key elsewhere.")
      .value());
  channel_sink_server sink{{0, {}, {}, secret}};
  temp_dir dir{"keel-notices-redact"};
  auto log_file = dir.str() + "/logs/node.log";
  node_process node{dir.str(),
                    node_yaml(dir, llm, sink, key,
                              "  level: debug\n  file: " + log_file + "\n")};
  auto client = connect_client(node.address());
  CAF_REQUIRE(!client->send_text(protocol::send_frame("t", "m1", "hi")));
  auto outcome = receive_until(*client, [](auto& j) {
    return j["type"] == "error" || j["type"] == "reply";
  });
  CAF_REQUIRE(outcome);
  CAF_CHECK_EQUAL((*outcome)["type"], "error");
  CAF_REQUIRE(sink.wait_for_delivered(1, 20s));
  std::string sent;
  for (auto& x : sink.delivered())
    sent += x.body + "\n";
  auto health = api_call(node.address(), "GET", "/api/v1/providers");
  CAF_REQUIRE(health);
  auto listed = keelctl_at(node.address(), {"notifications", "--json"});
  CAF_CHECK_EQUAL(listed.exit_code, 0);
  CAF_CHECK_EQUAL(node.stop(), 0);
  std::ifstream in{log_file};
  std::string log{std::istreambuf_iterator<char>{in}, {}};
  const std::pair<std::string, std::string> places[] = {
    {"the user's error", outcome->dump()},
    {"/api/v1/providers", health->dump()},
    {"the notices listed", listed.out},
    {"the notices sent", sent},
    {"the log file", log},
    {"stderr", node.stderr_text()},
  };
  for (auto& [where, text] : places) {
    CAF_MESSAGE("looking in " << where);
    CAF_CHECK_EQUAL(text.find(key), std::string::npos);
  }
  // The error did reach them, without its key.
  KEEL_CHECK_CONTAINS(health->dump(), "Incorrect API key provided: [redacted]");
  KEEL_CHECK_CONTAINS(log, "Incorrect API key provided: [redacted]");
}
