#include "keel/gateway_policy.hpp"

#include <algorithm>
#include <cctype>

#include <openssl/crypto.h>
#include <openssl/sha.h>

#include "field_text.hpp"

namespace keel {

request_decision request_decision::allow(request_role role) {
  request_decision result;
  result.allowed = true;
  result.role = role;
  return result;
}

request_decision request_decision::refuse(unsigned status, std::string code,
                                          std::string message, bool challenge) {
  request_decision result;
  result.status = status;
  result.code = std::move(code);
  result.message = std::move(message);
  result.challenge = challenge;
  return result;
}

namespace {

using field_text::iequal;
using field_text::trim;

int hex_value(char c) {
  if (c >= '0' && c <= '9')
    return c - '0';
  if (c >= 'a' && c <= 'f')
    return c - 'a' + 10;
  if (c >= 'A' && c <= 'F')
    return c - 'A' + 10;
  return -1;
}

std::string percent_decode(std::string_view value) {
  std::string result;
  for (size_t i = 0; i < value.size(); ++i) {
    if (value[i] == '%' && i + 2 < value.size() && hex_value(value[i + 1]) >= 0
        && hex_value(value[i + 2]) >= 0) {
      result += static_cast<char>(hex_value(value[i + 1]) * 16
                                  + hex_value(value[i + 2]));
      i += 2;
    } else {
      result += value[i] == '+' ? ' ' : value[i];
    }
  }
  return result;
}

/// The name part of a `Host` value: without port, IPv6 without brackets.
std::string_view host_name(std::string_view host) {
  if (!host.empty() && host.front() == '[') {
    auto end = host.find(']');
    return end == std::string_view::npos ? host : host.substr(1, end - 1);
  }
  auto colon = host.find(':');
  if (colon != std::string_view::npos && host.find(':', colon + 1) == host.npos)
    return host.substr(0, colon);
  return host;
}

/// No admin token is set and the gateway is loopback-only or explicitly
/// unauthenticated: the admin API takes the client token, or none when
/// there is none either.
bool admin_without_admin_token(const gateway_config& cfg) {
  return cfg.admin_token.empty()
         && (is_loopback_host(cfg.host) || cfg.allow_unauthenticated);
}

/// The token a request presents, and whether it tried a query token that
/// this gateway ignores.
struct presented_token {
  std::string value;
  bool ignored_query = false;
};

presented_token token_of(const request_facts& req, const gateway_config& cfg) {
  presented_token result;
  auto bearer = bearer_token(req.authorization);
  if (bearer.empty() && req.compat)
    bearer = trim(req.api_key); // Anthropic's SDK sends `x-api-key`.
  if (!bearer.empty()) {
    result.value = std::string{bearer};
    return result;
  }
  if (auto query = query_param(req.target, "token"); query && !query->empty()) {
    if (cfg.allow_query_token)
      result.value = std::move(*query);
    else
      result.ignored_query = true;
  }
  return result;
}

request_decision unauthorized(const gateway_config& cfg, bool ignored_query) {
  std::string msg = "missing or wrong token (send 'Authorization: Bearer "
                    "TOKEN'";
  msg += cfg.allow_query_token ? " or '?token=TOKEN')" : ")";
  if (ignored_query)
    msg += "; query tokens (?token=) are off on this node "
           "(gateway.allow_query_token)";
  return request_decision::refuse(401, "unauthorized", std::move(msg), true);
}

bool is_json(std::string_view content_type) {
  auto type = trim(content_type.substr(0, content_type.find(';')));
  return iequal(type, "application/json");
}

/// The checks an admin request passes after its token: a browser page of a
/// foreign origin cannot reach it, and a POST must carry JSON (which a
/// cross-site form or "simple request" cannot send without a preflight).
request_decision check_admin(const request_facts& req,
                             const gateway_config& cfg) {
  if (!req.origin.empty()
      && !origin_allowed(req.origin, req.host, req.tls, cfg))
    return request_decision::refuse(403, "forbidden",
                                    "admin requests from browser origin '"
                                      + std::string{req.origin}
                                      + "' are refused");
  if (!iequal(req.method, "GET") && !iequal(req.method, "HEAD")
      && !is_json(req.content_type))
    return request_decision::refuse(415, "unsupported_media_type",
                                    "admin requests other than GET must send "
                                    "'Content-Type: application/json'");
  return request_decision::allow(request_role::admin);
}

request_decision check_api(const request_facts& req, const gateway_config& cfg,
                           const presented_token& given) {
  if (token_matches(given.value, cfg.admin_token))
    return check_admin(req, cfg);
  if (admin_without_admin_token(cfg)) {
    // Any local process reaches a loopback gateway: the client token, when
    // set, keeps the ones without it out.
    if (cfg.token.empty() || token_matches(given.value, cfg.token))
      return check_admin(req, cfg);
    return unauthorized(cfg, given.ignored_query);
  }
  if (cfg.admin_token.empty())
    return request_decision::refuse(403, "forbidden",
                                    "the admin API is off on a gateway "
                                    "reachable beyond loopback; set "
                                    "gateway.admin_token to use it");
  if (token_matches(given.value, cfg.token))
    return request_decision::refuse(403, "forbidden",
                                    "the client token does not open the admin "
                                    "API; send the admin token "
                                    "(gateway.admin_token)");
  return unauthorized(cfg, given.ignored_query);
}

/// The refusal of a client request (`what`) from a browser page of an
/// origin that is neither allowed nor the gateway's own; none otherwise.
std::optional<request_decision> refuse_origin(const request_facts& req,
                                              const gateway_config& cfg,
                                              const char* what) {
  if (req.origin.empty() || origin_allowed(req.origin, req.host, req.tls, cfg))
    return std::nullopt;
  return request_decision::refuse(403, "forbidden",
                                  std::string{what} + " from browser origin '"
                                    + std::string{req.origin}
                                    + "' are refused (see "
                                      "gateway.allowed_origins)");
}

/// A request of the compatible API: a client's, like a WebSocket's (the
/// same tokens, the same browser origins), but never the admin API.
request_decision check_compat(const request_facts& req,
                              const gateway_config& cfg,
                              const presented_token& given) {
  if (auto refused = refuse_origin(req, cfg, "requests"))
    return *refused;
  if (cfg.token.empty() || token_matches(given.value, cfg.token)
      || token_matches(given.value, cfg.admin_token))
    return request_decision::allow(request_role::client);
  return request_decision::refuse(
    401, "unauthorized",
    "missing or wrong token (send 'Authorization: Bearer TOKEN' or "
    "'x-api-key: TOKEN')",
    true);
}

request_decision check_upgrade(const request_facts& req,
                               const gateway_config& cfg,
                               const presented_token& given) {
  if (auto refused = refuse_origin(req, cfg, "WebSockets"))
    return *refused;
  if (token_matches(given.value, cfg.admin_token))
    return request_decision::allow(request_role::admin);
  if (cfg.token.empty() || token_matches(given.value, cfg.token)
      || req.ticket == ticket_check::redeemed)
    return request_decision::allow(request_role::client);
  if (req.ticket == ticket_check::refused)
    return request_decision::refuse(
      401, "unauthorized",
      "the ticket is unknown, used or expired (POST "
        + std::string{ws_ticket_path} + " gives a new one, good for one "
        + "upgrade within " + std::to_string(ws_ticket_store::lifetime.count())
        + " s)",
      true);
  return unauthorized(cfg, given.ignored_query);
}

} // namespace

request_decision check_host(std::string_view host, const gateway_config& cfg) {
  if (!host_allowed(host, cfg))
    return request_decision::refuse(421, "forbidden",
                                    "Host '" + std::string{host}
                                      + "' does not name this node (see "
                                        "gateway.allowed_hosts)");
  return request_decision::allow(request_role::client);
}

request_decision check_request(const request_facts& req,
                               const gateway_config& cfg) {
  if (auto host = check_host(req.host, cfg); !host.allowed)
    return host;
  auto given = token_of(req, cfg);
  if (req.upgrade)
    return check_upgrade(req, cfg, given);
  if (req.compat)
    return check_compat(req, cfg, given);
  return check_api(req, cfg, given);
}

bool host_allowed(std::string_view host, const gateway_config& cfg) {
  if (is_wildcard_host(cfg.host) && cfg.allowed_hosts.empty())
    return true;
  auto name = host_name(host);
  if (name.empty())
    return false;
  if (iequal(name, host_name(cfg.host)) || iequal(name, cfg.host))
    return true;
  if (is_loopback_host(cfg.host) && is_loopback_host(name))
    return true;
  return std::any_of(cfg.allowed_hosts.begin(), cfg.allowed_hosts.end(),
                     [&](const std::string& allowed) {
                       return iequal(allowed, host) || iequal(allowed, name);
                     });
}

bool origin_allowed(std::string_view origin, std::string_view host, bool tls,
                    const gateway_config& cfg) {
  auto strip = [](std::string_view x) {
    while (!x.empty() && x.back() == '/')
      x.remove_suffix(1);
    return x;
  };
  origin = strip(trim(origin));
  for (auto& allowed : cfg.allowed_origins)
    if (allowed == "*" || iequal(strip(allowed), origin))
      return true;
  if (host.empty())
    return false;
  auto own = std::string{tls ? "https://" : "http://"} + std::string{host};
  return iequal(origin, own);
}

std::string_view bearer_token(std::string_view authorization) {
  constexpr std::string_view prefix = "Bearer ";
  if (authorization.size() <= prefix.size()
      || !iequal(authorization.substr(0, prefix.size()), prefix))
    return {};
  return trim(authorization.substr(prefix.size()));
}

bool token_matches(std::string_view given, std::string_view expected) {
  if (expected.empty())
    return false;
  unsigned char x[SHA256_DIGEST_LENGTH];
  unsigned char y[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(given.data()), given.size(), x);
  SHA256(reinterpret_cast<const unsigned char*>(expected.data()),
         expected.size(), y);
  return CRYPTO_memcmp(x, y, SHA256_DIGEST_LENGTH) == 0;
}

std::string_view path_of(std::string_view target) {
  return target.substr(0, target.find('?'));
}

std::optional<std::string> query_param(std::string_view target,
                                       std::string_view key) {
  auto q = target.find('?');
  if (q == std::string_view::npos)
    return std::nullopt;
  auto query = target.substr(q + 1);
  while (!query.empty()) {
    auto amp = query.find('&');
    auto part = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view{}
                                          : query.substr(amp + 1);
    auto eq = part.find('=');
    if (part.substr(0, eq) != key)
      continue;
    if (eq == std::string_view::npos)
      return std::string{};
    return percent_decode(part.substr(eq + 1));
  }
  return std::nullopt;
}

} // namespace keel
