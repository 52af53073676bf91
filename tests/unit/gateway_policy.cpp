#define CAF_SUITE gateway_policy
#include <caf/test/unit_test.hpp>

#include "keel/gateway_policy.hpp"

#include "text_checks.hpp"

using namespace keel;

namespace {

gateway_config loopback() {
  gateway_config cfg;
  cfg.host = "127.0.0.1";
  cfg.port = 8080;
  cfg.token = "client-secret";
  cfg.admin_token = "admin-secret";
  return cfg;
}

request_facts upgrade(std::string_view auth = "Bearer client-secret") {
  request_facts req;
  req.method = "GET";
  req.target = "/ws";
  req.upgrade = true;
  req.authorization = auth;
  req.host = "127.0.0.1:8080";
  return req;
}

request_facts api(std::string_view auth, std::string_view method = "GET") {
  request_facts req;
  req.method = method;
  req.target = "/api/v1/status";
  req.authorization = auth;
  req.host = "localhost:8080";
  return req;
}

} // namespace

CAF_TEST(the client token opens websockets and the admin token both) {
  auto cfg = loopback();
  auto client = check_request(upgrade(), cfg);
  CAF_CHECK(client.allowed);
  CAF_CHECK(client.role == request_role::client);
  auto admin = check_request(upgrade("Bearer admin-secret"), cfg);
  CAF_CHECK(admin.allowed);
  CAF_CHECK(admin.role == request_role::admin);
  CAF_CHECK(check_request(api("Bearer admin-secret"), cfg).allowed);
  auto forbidden = check_request(api("Bearer client-secret"), cfg);
  CAF_CHECK_EQUAL(forbidden.status, 403u);
  CAF_CHECK_EQUAL(forbidden.code, "forbidden");
  KEEL_CHECK_CONTAINS(forbidden.message, "gateway.admin_token");
}

CAF_TEST(missing and wrong tokens get 401 with a bearer challenge) {
  auto cfg = loopback();
  for (auto auth : {"", "Bearer nope", "Basic abc", "Bearer client-secretx"}) {
    auto ws = check_request(upgrade(auth), cfg);
    CAF_CHECK_EQUAL(ws.status, 401u);
    CAF_CHECK(ws.challenge);
    CAF_CHECK_EQUAL(check_request(api(auth), cfg).status, 401u);
    CAF_CHECK_EQUAL(ws.message.find("secret"), std::string::npos);
  }
}

CAF_TEST(an empty admin token opens the api on loopback only) {
  auto cfg = loopback();
  cfg.admin_token.clear();
  // Any local process reaches loopback: the client token guards the API.
  CAF_CHECK_EQUAL(check_request(api(""), cfg).status, 401u);
  CAF_CHECK_EQUAL(check_request(api("Bearer nope"), cfg).status, 401u);
  CAF_CHECK(check_request(api("Bearer client-secret"), cfg).allowed);
  auto no_tokens = cfg;
  no_tokens.token.clear();
  CAF_CHECK(check_request(api(""), no_tokens).allowed);
  cfg.host = "10.1.2.3";
  auto req = api("Bearer client-secret");
  req.host = "10.1.2.3:8080";
  auto refused = check_request(req, cfg);
  CAF_CHECK_EQUAL(refused.status, 403u);
  KEEL_CHECK_CONTAINS(refused.message, "set gateway.admin_token");
  cfg.allow_unauthenticated = true;
  CAF_CHECK(check_request(req, cfg).allowed);
  req.authorization = "";
  CAF_CHECK_EQUAL(check_request(req, cfg).status, 401u);
}

CAF_TEST(query tokens count only when allowed) {
  auto cfg = loopback();
  auto req = upgrade("");
  req.target = "/ws?token=client-secret";
  auto refused = check_request(req, cfg);
  CAF_CHECK_EQUAL(refused.status, 401u);
  KEEL_CHECK_CONTAINS(refused.message, "query tokens (?token=) are off");
  cfg.allow_query_token = true;
  CAF_CHECK(check_request(req, cfg).allowed);
  req.target = "/ws?token=client%2Dsecret";
  CAF_CHECK(check_request(req, cfg).allowed);
}

CAF_TEST(browser origins need to be allowed or our own) {
  auto cfg = loopback();
  auto req = upgrade();
  req.origin = "http://evil.example";
  CAF_CHECK_EQUAL(check_request(req, cfg).status, 403u);
  req.origin = "http://127.0.0.1:8080";
  CAF_CHECK(check_request(req, cfg).allowed);
  req.tls = true;
  CAF_CHECK_EQUAL(check_request(req, cfg).status, 403u);
  req.origin = "https://app.example.com";
  cfg.allowed_origins = {"https://app.example.com"};
  CAF_CHECK(check_request(req, cfg).allowed);
  req.origin = "https://other.example.com";
  CAF_CHECK_EQUAL(check_request(req, cfg).status, 403u);
  cfg.allowed_origins = {"*"};
  CAF_CHECK(check_request(req, cfg).allowed);
  auto admin = api("Bearer admin-secret");
  admin.origin = "http://evil.example";
  CAF_CHECK_EQUAL(check_request(admin, loopback()).status, 403u);
}

CAF_TEST(host names are checked against the listen address) {
  auto cfg = loopback();
  for (auto host :
       {"127.0.0.1:8080", "localhost", "LOCALHOST:1", "[::1]:80", "127.0.0.1"})
    CAF_CHECK(host_allowed(host, cfg));
  for (auto host : {"evil.example", "evil.example:8080", "", "10.0.0.1"})
    CAF_CHECK(!host_allowed(host, cfg));
  auto req = upgrade();
  req.host = "evil.example";
  auto refused = check_request(req, cfg);
  CAF_CHECK_EQUAL(refused.status, 421u);
  KEEL_CHECK_CONTAINS(refused.message, "gateway.allowed_hosts");
  // The probes and static files ask check_host alone.
  CAF_CHECK_EQUAL(check_host("evil.example", cfg).status, 421u);
  CAF_CHECK(check_host("localhost:8080", cfg).allowed);
  cfg.allowed_hosts = {"evil.example"};
  CAF_CHECK(host_allowed("evil.example:8080", cfg));
  gateway_config wildcard;
  wildcard.host = "0.0.0.0";
  CAF_CHECK(host_allowed("anything.example", wildcard));
  wildcard.allowed_hosts = {"keel.example"};
  CAF_CHECK(host_allowed("keel.example", wildcard));
  CAF_CHECK(!host_allowed("anything.example", wildcard));
}

CAF_TEST(admin posts must carry json) {
  auto cfg = loopback();
  auto req = api("Bearer admin-secret", "POST");
  req.target = "/api/v1/kill";
  CAF_CHECK_EQUAL(check_request(req, cfg).status, 415u);
  req.content_type = "text/plain";
  CAF_CHECK_EQUAL(check_request(req, cfg).status, 415u);
  req.content_type = "application/x-www-form-urlencoded";
  CAF_CHECK_EQUAL(check_request(req, cfg).status, 415u);
  req.content_type = "application/json; charset=utf-8";
  CAF_CHECK(check_request(req, cfg).allowed);
}

CAF_TEST(token comparison) {
  CAF_CHECK(token_matches("s3cret", "s3cret"));
  CAF_CHECK(!token_matches("s3creT", "s3cret"));
  CAF_CHECK(!token_matches("s3cre", "s3cret"));
  CAF_CHECK(!token_matches("s3crett", "s3cret"));
  CAF_CHECK(!token_matches("", "s3cret"));
  CAF_CHECK(!token_matches("", ""));
  CAF_CHECK(!token_matches(std::string(10000, 'x'), "s3cret"));
}

CAF_TEST(the compatible api takes a client token in either header) {
  auto cfg = loopback();
  auto compat = [](std::string_view auth, std::string_view api_key = {}) {
    request_facts req;
    req.method = "POST";
    req.target = "/v1/chat/completions";
    req.compat = true;
    req.authorization = auth;
    req.api_key = api_key;
    req.host = "127.0.0.1:8080";
    req.content_type = "application/json";
    return req;
  };
  auto bearer = check_request(compat("Bearer client-secret"), cfg);
  CAF_CHECK(bearer.allowed);
  CAF_CHECK(bearer.role == request_role::client);
  CAF_CHECK(check_request(compat("", "client-secret"), cfg).allowed);
  CAF_CHECK(check_request(compat("Bearer admin-secret"), cfg).allowed);
  auto wrong = check_request(compat("", "nope"), cfg);
  CAF_CHECK_EQUAL(wrong.status, 401u);
  KEEL_CHECK_CONTAINS(wrong.message, "x-api-key");
  // x-api-key counts for this API only, never for the admin API.
  auto admin = api("");
  admin.api_key = "admin-secret";
  CAF_CHECK_EQUAL(check_request(admin, cfg).status, 401u);
  auto page = compat("Bearer client-secret");
  page.origin = "https://evil.example";
  CAF_CHECK_EQUAL(check_request(page, cfg).status, 403u);
  CAF_CHECK_EQUAL(bearer_token("Bearer  abc "), "abc");
  CAF_CHECK_EQUAL(bearer_token("Basic abc"), "");
}
