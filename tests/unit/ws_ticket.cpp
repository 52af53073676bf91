#define CAF_SUITE ws_ticket
#include <caf/test/unit_test.hpp>

#include "keel/gateway_policy.hpp"
#include "keel/ws_ticket.hpp"

#include <set>

#include <nlohmann/json.hpp>

#include "text_checks.hpp"

using namespace keel;
using namespace std::chrono_literals;

namespace {

using clock_type = ws_ticket_store::clock;

const clock_type::time_point t0{std::chrono::hours{1}};

} // namespace

CAF_TEST(a ticket opens one upgrade within its lifetime) {
  ws_ticket_store store;
  auto ticket = store.issue(t0);
  CAF_CHECK_EQUAL(ticket.size(), 64u);
  CAF_CHECK(!store.redeem(ticket + "0", t0));
  CAF_CHECK(store.redeem(ticket, t0 + 29s));
  CAF_CHECK(!store.redeem(ticket, t0 + 29s));
  auto late = store.issue(t0);
  CAF_CHECK(!store.redeem(late, t0 + ws_ticket_store::lifetime));
  CAF_CHECK_EQUAL(store.size(), 0u);
  std::set<std::string> seen;
  for (int i = 0; i < 100; ++i)
    seen.insert(store.issue(t0));
  CAF_CHECK_EQUAL(seen.size(), 100u);
}

CAF_TEST(the query names the ticket) {
  ws_ticket_store store;
  auto ticket = store.issue(t0);
  CAF_CHECK(store.check("/ws", t0) == ticket_check::none);
  CAF_CHECK(store.check("/ws?ticket=nope", t0) == ticket_check::refused);
  CAF_CHECK(store.check("/ws?x=1&ticket=" + ticket, t0)
            == ticket_check::redeemed);
  CAF_CHECK(store.check("/ws?ticket=" + ticket, t0) == ticket_check::refused);
}

CAF_TEST(outstanding tickets are bounded and expired ones dropped) {
  ws_ticket_store store;
  auto first = store.issue(t0);
  for (size_t i = 1; i < ws_ticket_store::max_outstanding; ++i)
    store.issue(t0 + 1s);
  CAF_CHECK_EQUAL(store.size(), ws_ticket_store::max_outstanding);
  auto newest = store.issue(t0 + 2s);
  CAF_CHECK_EQUAL(store.size(), ws_ticket_store::max_outstanding);
  CAF_CHECK(!store.redeem(first, t0 + 2s)); // the oldest made room
  CAF_CHECK(store.redeem(newest, t0 + 2s));
  store.issue(t0 + 40s); // the rest expired meanwhile
  CAF_CHECK_EQUAL(store.size(), 1u);
}

CAF_TEST(only a post issues a ticket) {
  ws_ticket_store store;
  auto got = store.answer_request("GET", t0);
  CAF_CHECK_EQUAL(got.status, 405u);
  KEEL_CHECK_CONTAINS(got.body, "use POST /api/v1/ws-ticket");
  got = store.answer_request("POST", t0);
  CAF_CHECK_EQUAL(got.status, 200u);
  auto j = nlohmann::json::parse(got.body);
  CAF_CHECK_EQUAL(j["expires_in_ms"], 30000);
  CAF_CHECK(store.redeem(j["ticket"].get<std::string>(), t0));
}

CAF_TEST(a redeemed ticket opens a websocket as a client and nothing else) {
  gateway_config cfg;
  cfg.host = "127.0.0.1";
  cfg.port = 8080;
  cfg.token = "client-secret";
  cfg.admin_token = "admin-secret";
  request_facts req;
  req.method = "GET";
  req.target = "/ws?ticket=t";
  req.upgrade = true;
  req.host = "127.0.0.1:8080";
  req.ticket = ticket_check::redeemed;
  auto ok = check_request(req, cfg);
  CAF_CHECK(ok.allowed);
  CAF_CHECK(ok.role == request_role::client);
  req.ticket = ticket_check::refused;
  auto refused = check_request(req, cfg);
  CAF_CHECK_EQUAL(refused.status, 401u);
  KEEL_CHECK_CONTAINS(refused.message, "the ticket is unknown, used or "
                                       "expired");
  // Origin and Host checks come first.
  req.ticket = ticket_check::redeemed;
  req.origin = "https://evil.example";
  CAF_CHECK_EQUAL(check_request(req, cfg).status, 403u);
  req.origin = {};
  req.host = "evil.example";
  CAF_CHECK_EQUAL(check_request(req, cfg).status, 421u);
  // A ticket is no admin token for the API.
  request_facts api;
  api.method = "GET";
  api.target = "/api/v1/status?ticket=t";
  api.host = "127.0.0.1:8080";
  api.ticket = ticket_check::redeemed;
  CAF_CHECK_EQUAL(check_request(api, cfg).status, 401u);
}
