#define CAF_SUITE http_client

// The HTTP client over real sockets against the fault-injecting server
// (which answers LLM requests and 404s anything else): answers of any
// status as responses, keep-alive reuse counted by the server, the one
// resend on a stale pooled connection, timeouts and budgets, cancellation,
// streamed bodies and their readers, the body limit, TLS verification and
// shutting down with exchanges in flight.

#include <caf/test/unit_test.hpp>

#include <condition_variable>
#include <fstream>
#include <mutex>
#include <optional>

#include <nlohmann/json.hpp>

#include "keel/error.hpp"
#include "keel/http_client.hpp"
#include "keel/tools/fault_llm_server.hpp"

#include "temp_dir.hpp"
#include "text_checks.hpp"

using namespace keel;
using namespace std::chrono_literals;
using keel::fault_llm::fault_llm_server;

namespace {

/// Generous upper bound for events that normally take milliseconds.
constexpr auto event_timeout = 10s;

/// Collects what one exchange reports; counts results to catch doubles.
struct probe {
  std::mutex mtx;
  std::condition_variable cv;
  std::optional<http_result> result;
  int results = 0;

  bool wait() {
    std::unique_lock<std::mutex> guard{mtx};
    return cv.wait_for(guard, event_timeout, [&] { return results > 0; });
  }

  const http_client_response* ok() {
    return result ? std::get_if<http_client_response>(&*result) : nullptr;
  }

  const http_failure* failed() {
    return result ? std::get_if<http_failure>(&*result) : nullptr;
  }
};

/// An OpenAI request whose last user message is `text` (directives such as
/// `[[fault:hang]]` steer the server).
http_client_request chat(const std::string& text, bool stream = false) {
  http_client_request req;
  req.headers = {{"Content-Type", "application/json"}};
  req.body
    = nlohmann::json{{"model", "m"},
                     {"stream", stream},
                     {"messages", {{{"role", "user"}, {"content", text}}}}}
        .dump();
  return req;
}

struct fixture {
  std::unique_ptr<fault_llm_server> server
    = std::make_unique<fault_llm_server>();
  std::unique_ptr<http_io> io = std::make_unique<http_io>(1);
  std::vector<std::shared_ptr<probe>> probes;

  ~fixture() {
    io.reset();
    // Every exchange reported exactly once, whatever the test did.
    for (auto& p : probes)
      CAF_CHECK_EQUAL(p->results, 1);
  }

  http_endpoint_config settings(const std::string& url) {
    http_endpoint_config cfg;
    cfg.name = "test.http";
    auto parsed = parse_http_url(url + "/v1/chat/completions");
    CAF_REQUIRE(parsed);
    cfg.url = *parsed;
    cfg.connect_timeout = 5s;
    cfg.first_byte_timeout = 5s;
    cfg.total_timeout = 10s;
    return cfg;
  }

  std::shared_ptr<http_endpoint> endpoint(const http_endpoint_config& cfg) {
    auto ep = http_endpoint::make(*io, cfg);
    if (!ep)
      CAF_FAIL("make failed: " << error_message(ep.error()));
    return *ep;
  }

  std::shared_ptr<http_endpoint> endpoint() {
    return endpoint(settings(server->base_url()));
  }

  /// Starts one exchange; its probe collects the result.
  std::pair<std::shared_ptr<probe>, http_canceller>
  start(http_endpoint& ep, http_client_request req) {
    auto p = std::make_shared<probe>();
    probes.push_back(p);
    auto cancel = ep.send(std::move(req), [p](http_result result) {
      std::lock_guard<std::mutex> guard{p->mtx};
      ++p->results;
      p->result = std::move(result);
      p->cv.notify_all();
    });
    return {p, cancel};
  }

  std::shared_ptr<probe> run(http_endpoint& ep, http_client_request req) {
    auto p = start(ep, std::move(req)).first;
    if (!p->wait())
      CAF_FAIL("no result within " << event_timeout.count() << " s");
    return p;
  }

  http_client_response run_ok(http_endpoint& ep, http_client_request req) {
    auto p = run(ep, std::move(req));
    if (auto f = p->failed())
      CAF_FAIL("expected a response, got: " << f->message);
    return *p->ok();
  }

  http_failure run_failing(http_endpoint& ep, http_client_request req) {
    auto p = run(ep, std::move(req));
    if (auto res = p->ok())
      CAF_FAIL("expected a failure, got HTTP " << res->status);
    return *p->failed();
  }
};

} // namespace

CAF_TEST_FIXTURE_SCOPE(http_client_tests, fixture)

CAF_TEST(answers of any status arrive as responses) {
  auto ep = endpoint();
  auto req = chat("hello");
  req.headers.emplace_back("X-Custom", "one");
  req.headers.emplace_back("x-custom", "two");
  auto res = run_ok(*ep, std::move(req));
  CAF_CHECK_EQUAL(res.status, 200u);
  CAF_CHECK(res.ok());
  KEEL_CHECK_CONTAINS(res.body, "echo: hello");
  KEEL_CHECK_CONTAINS(std::string{res.header("CONTENT-TYPE")},
                      "application/json");
  auto seen = server->last_request();
  CAF_CHECK_EQUAL(seen.method, "POST");
  CAF_CHECK_EQUAL(seen.target, "/v1/chat/completions");
  CAF_CHECK_EQUAL(seen.headers["user-agent"], "keel");
  CAF_CHECK_EQUAL(seen.headers["host"],
                  "127.0.0.1:" + std::to_string(server->port()));
  // A later field replaces an earlier one of the same name.
  CAF_CHECK_EQUAL(seen.headers["x-custom"], "two");
  // Another method and target; a 404 is an answer, not a failure.
  http_client_request get;
  get.method = "GET";
  get.target = "/nowhere";
  auto missing = run_ok(*ep, std::move(get));
  CAF_CHECK_EQUAL(missing.status, 404u);
  CAF_CHECK(!missing.ok());
  CAF_CHECK_EQUAL(error_summary(missing.body), "not found");
  CAF_CHECK_EQUAL(status_text(missing, ep->config().url.authority),
                  "HTTP 404 from 127.0.0.1:" + std::to_string(server->port())
                    + ": not found");
  CAF_CHECK_EQUAL(server->last_request().method, "GET");
  CAF_CHECK_EQUAL(server->last_request().target, "/nowhere");
}

CAF_TEST(sequential exchanges reuse one keep - alive connection) {
  auto ep = endpoint();
  for (int i = 0; i < 5; ++i)
    CAF_CHECK_EQUAL(run_ok(*ep, chat("call " + std::to_string(i))).status,
                    200u);
  CAF_CHECK_EQUAL(server->connections(), 1u);
  // An error answered in full leaves the connection usable too.
  CAF_CHECK_EQUAL(run_ok(*ep, chat("[[fault:429]]")).status, 429u);
  run_ok(*ep, chat("again"));
  CAF_CHECK_EQUAL(server->connections(), 1u);
  // `Connection: close` is obeyed: the next exchange connects anew.
  run_ok(*ep, chat("[[fault:close]]"));
  run_ok(*ep, chat("after close"));
  CAF_CHECK_EQUAL(server->connections(), 2u);
  CAF_CHECK_EQUAL(server->requests(), 9u);
}

CAF_TEST(a stale pooled connection is replaced and the request sent once more) {
  auto ep = endpoint();
  run_ok(*ep, chat("pooled"));
  // The server closes the reused connection as the request arrives.
  server->push(*keel::fault_llm::parse_fault("drop"));
  KEEL_CHECK_CONTAINS(run_ok(*ep, chat("retried")).body, "echo: retried");
  CAF_CHECK_EQUAL(server->requests(), 3u);
  CAF_CHECK_EQUAL(server->connections(), 2u);
  // Only once: a fresh connection that drops the request fails it.
  auto f = run_failing(*ep, chat("[[fault:drop]]"));
  CAF_CHECK(f.error == http_error::reset);
  KEEL_CHECK_CONTAINS(f.message, "without answering");
  CAF_CHECK(!f.cause.empty());
  CAF_CHECK(!f.partial);
}

CAF_TEST(refused connections and bad ca files fail with what went wrong) {
  auto port = keel::fault_llm::closed_port();
  auto ep = endpoint(settings("http://127.0.0.1:" + std::to_string(port)));
  auto f = run_failing(*ep, chat("hi"));
  CAF_CHECK(f.error == http_error::connect_refused);
  KEEL_CHECK_CONTAINS(f.message, "connection refused by 127.0.0.1:"
                                   + std::to_string(port));
  auto cfg = settings("https://127.0.0.1:1");
  cfg.ca_file = "/nonexistent/ca.pem";
  auto bad = http_endpoint::make(*io, cfg);
  CAF_REQUIRE(!bad);
  CAF_CHECK(bad.error() == ec::config_invalid);
  KEEL_CHECK_CONTAINS(error_message(bad.error()), "test.http.ca_file");
}

CAF_TEST(a server that never answers hits the first byte timeout) {
  auto cfg = settings(server->base_url());
  cfg.first_byte_timeout = 200ms;
  auto ep = endpoint(cfg);
  auto t0 = std::chrono::steady_clock::now();
  auto f = run_failing(*ep, chat("[[fault:hang]]"));
  auto elapsed = std::chrono::steady_clock::now() - t0;
  CAF_CHECK(f.error == http_error::timeout);
  KEEL_CHECK_CONTAINS(f.message, "within 200 ms of sending the request");
  CAF_CHECK(elapsed >= 200ms);
  CAF_CHECK(elapsed < 5s);
  CAF_CHECK(server->wait_in_flight(0));
}

CAF_TEST(the callers budget bounds an exchange below the total timeout) {
  auto ep = endpoint();
  auto req = chat("[[fault:hang]]");
  req.time_budget = 300ms;
  req.budget_owner = "its test";
  auto t0 = std::chrono::steady_clock::now();
  auto f = run_failing(*ep, std::move(req));
  auto elapsed = std::chrono::steady_clock::now() - t0;
  CAF_CHECK(f.error == http_error::timeout);
  KEEL_CHECK_CONTAINS(f.message, "the 300 ms left of its test");
  CAF_CHECK(elapsed >= 300ms);
  CAF_CHECK(elapsed < 5s);
}

CAF_TEST(waiting for a slot counts against the total timeout) {
  auto cfg = settings(server->base_url());
  cfg.max_concurrency = 1;
  cfg.total_timeout = 300ms;
  auto ep = endpoint(cfg);
  auto first = start(*ep, chat("[[fault:hang]]")).first;
  auto second = start(*ep, chat("queued [[fault:hang]]")).first;
  CAF_REQUIRE(first->wait());
  CAF_REQUIRE(second->wait());
  CAF_REQUIRE(second->failed());
  CAF_CHECK(second->failed()->error == http_error::timeout);
  CAF_CHECK_EQUAL(server->max_in_flight(), 1u);
}

CAF_TEST(a cancelled exchange fails at once and closes its connection) {
  auto ep = endpoint();
  auto [p, cancel] = start(*ep, chat("[[fault:hang]]"));
  CAF_REQUIRE(server->wait_requests(1));
  cancel("the test gave up");
  CAF_REQUIRE(p->wait());
  CAF_REQUIRE(p->failed());
  CAF_CHECK(p->failed()->error == http_error::cancelled);
  KEEL_CHECK_CONTAINS(p->failed()->message, "cancelled: the test gave up");
  CAF_CHECK(server->wait_in_flight(0));
  cancel("again"); // Harmless once done.
  CAF_CHECK_EQUAL(p->results, 1);
  // The cancelled connection is not reused.
  run_ok(*ep, chat("next"));
  CAF_CHECK_EQUAL(server->connections(), 2u);
}

CAF_TEST(a body reader gets the body as it arrives) {
  auto ep = endpoint();
  std::string streamed;
  int pieces = 0;
  auto req = chat("one two three four [[fault:drip=5ms]]", true);
  req.reader.wants = [](const http_client_response& head) {
    return head.ok()
           && head.header("content-type").find("text/event-stream")
                != std::string_view::npos;
  };
  req.reader.on_body = [&](std::string_view piece) {
    ++pieces;
    streamed.append(piece.data(), piece.size());
    return body_step::more;
  };
  auto res = run_ok(*ep, std::move(req));
  CAF_CHECK_EQUAL(res.status, 200u);
  CAF_CHECK(res.body.empty());
  KEEL_CHECK_CONTAINS(streamed, "data: [DONE]");
  CAF_CHECK_GREATER(pieces, 1);
  // A reader that does not want the body leaves it in the response.
  auto plain = chat("five", true);
  plain.reader.wants = [](const http_client_response&) { return false; };
  plain.reader.on_body = [](std::string_view) { return body_step::stop; };
  KEEL_CHECK_CONTAINS(run_ok(*ep, std::move(plain)).body, "[DONE]");
  CAF_CHECK_EQUAL(server->connections(), 1u);
}

CAF_TEST(
  a reader that has enough keeps the connection a reader that stops closes it) {
  auto ep = endpoint();
  auto reading = [](body_step step) {
    auto req = chat("a b c d e f [[fault:drip=10ms]]", true);
    req.reader.wants = [](const http_client_response&) { return true; };
    req.reader.on_body = [step](std::string_view) { return step; };
    return req;
  };
  // Enough after the first piece: the rest of the body is read within the
  // grace period and the connection goes back to the pool.
  CAF_CHECK_EQUAL(run_ok(*ep, reading(body_step::enough)).status, 200u);
  run_ok(*ep, chat("next"));
  CAF_CHECK_EQUAL(server->connections(), 1u);
  // Stop: the response at once, the connection closed.
  CAF_CHECK_EQUAL(run_ok(*ep, reading(body_step::stop)).status, 200u);
  run_ok(*ep, chat("after stop"));
  CAF_CHECK_EQUAL(server->connections(), 2u);
}

CAF_TEST(bodies past max_body_bytes fail as too large with their head) {
  std::string words;
  for (int i = 0; i < 1000; ++i)
    words += "word" + std::to_string(i % 10) + ' ';
  auto cfg = settings(server->base_url());
  cfg.max_body_bytes = 2000;
  auto ep = endpoint(cfg);
  auto f = run_failing(*ep, chat(words));
  CAF_CHECK(f.error == http_error::too_large);
  KEEL_CHECK_CONTAINS(f.message, "larger than 2000 bytes");
  // Streamed, the limit counts the bytes handed to the reader.
  size_t streamed = 0;
  auto req = chat(words, true);
  req.reader.wants = [](const http_client_response&) { return true; };
  req.reader.on_body = [&](std::string_view piece) {
    streamed += piece.size();
    return body_step::more;
  };
  auto g = run_failing(*ep, std::move(req));
  CAF_CHECK(g.error == http_error::too_large);
  CAF_REQUIRE(g.partial);
  CAF_CHECK_EQUAL(g.partial->status, 200u);
  CAF_CHECK_LESS_OR_EQUAL(streamed, 2000u);
  // An answer within the limit still comes through.
  CAF_CHECK_EQUAL(run_ok(*ep, chat("short")).status, 200u);
}

CAF_TEST(an answer cut after its header keeps its head and body so far) {
  auto ep = endpoint();
  auto f = run_failing(*ep, chat("a b c d [[fault:reset]]"));
  CAF_CHECK(f.error == http_error::reset);
  CAF_REQUIRE(f.partial);
  CAF_CHECK_EQUAL(f.partial->status, 200u);
  CAF_CHECK(!f.partial->body.empty());
  KEEL_CHECK_CONTAINS(f.message, "broke off after "
                                   + std::to_string(f.partial->body.size())
                                   + " bytes");
}

CAF_TEST(https verifies the server certificate) {
  auto identity = keel::fault_llm::make_self_signed_identity();
  keel::fault_llm::fault_server_options opts;
  opts.tls = identity;
  server = std::make_unique<fault_llm_server>(opts);
  auto untrusted = endpoint();
  auto f = run_failing(*untrusted, chat("hi"));
  CAF_CHECK(f.error == http_error::tls);
  KEEL_CHECK_CONTAINS(f.message, "TLS handshake with 127.0.0.1:");
  KEEL_CHECK_CONTAINS(f.message, "certificate");
  keel::test::temp_dir dir;
  auto ca_file = dir.str() + "/ca.pem";
  std::ofstream{ca_file} << identity.cert_pem;
  for (auto host : {"127.0.0.1", "localhost"}) {
    CAF_MESSAGE("host " << host);
    auto cfg = settings(std::string{"https://"} + host + ":"
                        + std::to_string(server->port()));
    cfg.ca_file = ca_file;
    auto trusted = endpoint(cfg);
    KEEL_CHECK_CONTAINS(run_ok(*trusted, chat("secure")).body, "echo: secure");
    KEEL_CHECK_CONTAINS(run_ok(*trusted, chat("again")).body, "echo: again");
  }
  // One untrusted attempt, then one kept-alive connection per endpoint.
  CAF_CHECK_EQUAL(server->connections(), 3u);
}

CAF_TEST(destroying the io cancels exchanges in flight) {
  auto cfg = settings(server->base_url());
  cfg.max_concurrency = 2;
  auto ep = endpoint(cfg);
  std::vector<std::shared_ptr<probe>> batch;
  for (int i = 0; i < 3; ++i)
    batch.push_back(start(*ep, chat("[[fault:hang]]")).first);
  CAF_REQUIRE(server->wait_requests(2));
  io.reset();
  for (auto& p : batch) {
    CAF_REQUIRE_EQUAL(p->results, 1);
    CAF_REQUIRE(p->failed());
    CAF_CHECK(p->failed()->error == http_error::cancelled);
    KEEL_CHECK_CONTAINS(p->failed()->message, "shutting down");
  }
  // The endpoint outlives its io: later exchanges fail at once.
  auto late = start(*ep, chat("late")).first;
  CAF_REQUIRE_EQUAL(late->results, 1);
  KEEL_CHECK_CONTAINS(late->failed()->message, "shut down");
  CAF_CHECK(server->wait_in_flight(0));
}

CAF_TEST_FIXTURE_SCOPE_END()
