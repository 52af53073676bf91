#define CAF_SUITE http_response

// The HTTP client's pure parts: URLs parsed into what a connection and a
// request need, and the readings of an answer (header lookup in any case,
// Retry-After in its forms, the one-line account of a refusal).

#include <caf/test/unit_test.hpp>

#include "keel/error.hpp"
#include "keel/http_response.hpp"
#include "keel/http_url.hpp"

#include "text_checks.hpp"

using namespace keel;
using namespace std::chrono_literals;

CAF_TEST(urls resolve to host port and target) {
  struct row {
    const char* url;
    bool tls;
    const char* host;
    uint16_t port;
    const char* target;
    const char* host_header;
    const char* authority;
  };
  row rows[] = {
    {"https://api.telegram.org", true, "api.telegram.org", 443, "/",
     "api.telegram.org", "api.telegram.org:443"},
    {"http://127.0.0.1:9/events?key=abc", false, "127.0.0.1", 9,
     "/events?key=abc", "127.0.0.1:9", "127.0.0.1:9"},
    {"http://hooks.local?key=abc", false, "hooks.local", 80, "/?key=abc",
     "hooks.local", "hooks.local:80"},
    {"http://[::1]:8080/a/", false, "::1", 8080, "/a/", "[::1]:8080",
     "[::1]:8080"},
    {"https://[::1]", true, "::1", 443, "/", "[::1]", "[::1]:443"},
  };
  for (auto& r : rows) {
    CAF_MESSAGE("url " << r.url);
    auto url = parse_http_url(r.url);
    CAF_REQUIRE(url);
    CAF_CHECK_EQUAL(url->tls, r.tls);
    CAF_CHECK_EQUAL(url->host, r.host);
    CAF_CHECK_EQUAL(url->port, r.port);
    CAF_CHECK_EQUAL(url->target, r.target);
    CAF_CHECK_EQUAL(url->host_header, r.host_header);
    CAF_CHECK_EQUAL(url->authority, r.authority);
  }
  struct bad_row {
    const char* url;
    const char* why;
  };
  bad_row bad[] = {
    {"ftp://x", "expected an http:// or https:// URL"},
    {"http://", "missing host"},
    {"http://:80", "missing host"},
    {"http://h:99999", ""},
    {"http://u@h", "user info"},
    {"http://h/p#frag", "a fragment is not supported"},
    {"127.0.0.1:80", "expected an http"},
  };
  for (auto& r : bad) {
    CAF_MESSAGE("bad url " << r.url);
    auto url = parse_http_url(r.url, "hook.url");
    CAF_REQUIRE(!url);
    CAF_CHECK(url.error() == ec::config_invalid);
    KEEL_CHECK_CONTAINS(error_message(url.error()),
                        std::string{"hook.url '"} + r.url + "': " + r.why);
  }
}

CAF_TEST(headers are found in any case) {
  http_client_response res;
  res.headers = {{"Content-Type", "text/plain"}, {"X-A", "1"}, {"x-a", "2"}};
  CAF_CHECK_EQUAL(res.header("content-type"), "text/plain");
  CAF_CHECK_EQUAL(res.header("X-a"), "1");
  CAF_CHECK_EQUAL(res.header("missing"), "");
}

CAF_TEST(retry after reads milliseconds seconds and dates) {
  auto now = std::chrono::system_clock::from_time_t(1700000000);
  http_client_response res;
  CAF_CHECK(!retry_after(res, now));
  res.headers = {{"Retry-After", "3"}};
  CAF_CHECK(retry_after(res, now) == std::chrono::milliseconds{3000});
  // retry-after-ms wins over Retry-After; unparseable, it is ignored.
  res.headers.emplace_back("retry-after-ms", "1500");
  CAF_CHECK(retry_after(res, now) == std::chrono::milliseconds{1500});
  res.headers.back().second = "soon";
  CAF_CHECK(retry_after(res, now) == std::chrono::milliseconds{3000});
  // An HTTP date, relative to now (1700000000 is 14 Nov 2023 22:13:20).
  res.headers = {{"Retry-After", "Tue, 14 Nov 2023 22:13:30 GMT"}};
  CAF_CHECK(retry_after(res, now) == std::chrono::milliseconds{10000});
}

CAF_TEST(a refusal is one line naming its status peer and reason) {
  http_client_response res;
  res.status = 429;
  res.body = R"({"error":{"message":"Rate limit exceeded"}})";
  CAF_CHECK_EQUAL(status_text(res, "127.0.0.1:9"),
                  "HTTP 429 from 127.0.0.1:9: Rate limit exceeded");
  res.body.clear();
  CAF_CHECK_EQUAL(status_text(res, "127.0.0.1:9"), "HTTP 429 from 127.0.0.1:9");
  CAF_CHECK_EQUAL(body_excerpt("a\nb\tc  "), "a b c");
  CAF_CHECK_EQUAL(body_excerpt(std::string(300, 'x')).size(), 203u);
}
