// The gateway's request policy (keel::check_request) on arbitrary requests
// under each kind of gateway configuration. Input: byte 0 picks the
// configuration's switches (tokens, address, query tokens, origins); the
// rest is the request, one field per line: method, target, Authorization,
// Origin, Host, Content-Type, then "upgrade"/"tls" flags. Properties: no
// exception escapes; refusals are 4xx with a code and show a token only
// where they quote what the client sent (never from Authorization);
// whatever is allowed presented a token that opens it, or the
// configuration needs none; only the admin role reaches `/api/` (other
// than by an upgrade, which the server serves only on /ws).

#include <string>
#include <vector>

#include "fuzz_check.hpp"
#include "keel/gateway_policy.hpp"

using keel::fuzz::require;

namespace {

constexpr auto client_token = "client-tok3n";
constexpr auto admin_token = "admin-tok3n";

keel::gateway_config config_for(uint8_t bits) {
  keel::gateway_config cfg;
  cfg.host = (bits & 1) != 0 ? "0.0.0.0" : "127.0.0.1";
  if ((bits & 2) != 0)
    cfg.token = client_token;
  if ((bits & 4) != 0)
    cfg.admin_token = admin_token;
  cfg.allow_unauthenticated = (bits & 8) != 0;
  cfg.allow_query_token = (bits & 16) != 0;
  if ((bits & 32) != 0)
    cfg.allowed_origins = {"https://app.example"};
  if ((bits & 64) != 0)
    cfg.allowed_origins.emplace_back("*");
  if ((bits & 128) != 0)
    cfg.allowed_hosts = {"keel.example"};
  return cfg;
}

std::vector<std::string_view> lines_of(std::string_view text) {
  std::vector<std::string_view> result;
  while (result.size() < 7) {
    auto nl = text.find('\n');
    result.push_back(text.substr(0, nl));
    if (nl == std::string_view::npos)
      break;
    text.remove_prefix(nl + 1);
  }
  result.resize(7);
  return result;
}

/// Whether the request carries `token` where the configuration looks.
bool presents(const keel::request_facts& req, const keel::gateway_config& cfg,
              std::string_view token) {
  if (req.authorization.find(token) != std::string_view::npos)
    return true;
  if (!cfg.allow_query_token)
    return false;
  auto given = keel::query_param(req.target, "token");
  return given && *given == token;
}

void check(const keel::request_facts& req, const keel::gateway_config& cfg) {
  auto decision = keel::check_request(req, cfg);
  if (!decision.allowed) {
    require(decision.status >= 400 && decision.status < 500,
            "a refusal that is not 4xx");
    require(!decision.code.empty(), "a refusal without a code");
    // A message may quote what the client sent (a Host, an Origin, a
    // path), but never the configured tokens otherwise.
    std::string quoted{req.method};
    for (auto field : {req.target, req.origin, req.host, req.content_type})
      quoted.append(field.data(), field.size()).push_back('\n');
    for (auto token : {client_token, admin_token})
      require(decision.message.find(token) == std::string::npos
                || quoted.find(token) != std::string::npos,
              "a refusal shows a token");
    return;
  }
  auto open = cfg.allow_unauthenticated || keel::is_loopback_host(cfg.host);
  // An upgrade is a WebSocket whatever its path (the server serves it only
  // on /ws); any other request under /api/ is the admin API.
  bool api = !req.upgrade && keel::path_of(req.target).substr(0, 5) == "/api/";
  if (api)
    require(decision.role == keel::request_role::admin,
            "a client role reached /api/");
  if (decision.role == keel::request_role::admin)
    require(cfg.admin_token.empty() ? open
                                    : presents(req, cfg, cfg.admin_token),
            "the admin role without the admin token");
  else if (!cfg.token.empty())
    require(presents(req, cfg, cfg.token)
              || (!cfg.admin_token.empty()
                  && presents(req, cfg, cfg.admin_token)),
            "a client without a token");
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1)
    return 0;
  return keel::fuzz::guarded([&] {
    auto cfg = config_for(data[0]);
    auto fields = lines_of(keel::fuzz::as_text(data + 1, size - 1));
    keel::request_facts req;
    req.method = fields[0];
    req.target = fields[1];
    req.authorization = fields[2];
    req.origin = fields[3];
    req.host = fields[4];
    req.content_type = fields[5];
    req.upgrade = fields[6].find("upgrade") != std::string_view::npos;
    req.tls = fields[6].find("tls") != std::string_view::npos;
    check(req, cfg);
  });
}
