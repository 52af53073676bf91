#pragma once

// The gateway's request policy as pure functions: who may open a WebSocket
// or call the admin API, which browser origins and `Host` names are
// accepted, and what an admin request must look like. No sockets: the
// server calls `check_request` with the parts of a parsed HTTP request, and
// so can a fuzzer or a unit test.

#include <optional>
#include <string>
#include <string_view>

#include "keel/config.hpp"
#include "keel/ws_ticket.hpp"

namespace keel {

/// What a request may do once the policy allowed it.
enum class request_role {
  /// Open WebSockets.
  client,
  /// Open WebSockets and call `/api/v1/*`.
  admin,
};

/// The parts of an HTTP request the policy looks at. Views into the request;
/// empty for an absent header.
struct request_facts {
  std::string_view method;
  /// The request target, query included.
  std::string_view target;
  /// Whether the request asks for a WebSocket upgrade.
  bool upgrade = false;
  /// Whether it arrived over TLS (the gateway's own origin is https then).
  bool tls = false;
  std::string_view authorization;
  /// `x-api-key` (Anthropic's SDK), taken for a `compat` request.
  std::string_view api_key;
  /// A request of the compatible API (under `/v1/`): a client's.
  bool compat = false;
  std::string_view origin;
  std::string_view host;
  std::string_view content_type;
  /// What the upgrade's `?ticket=` came to (`ws_ticket_store::check`): a
  /// redeemed ticket opens it as a client, like the client token.
  ticket_check ticket = ticket_check::none;
};

/// The policy's answer: allowed with a role, or refused with an HTTP status,
/// an error code and a message for the client. Messages never contain a
/// token.
struct request_decision {
  bool allowed = false;
  request_role role = request_role::client;
  unsigned status = 200;
  std::string code;
  std::string message;
  /// Whether the refusal asks for credentials (`WWW-Authenticate: Bearer`).
  bool challenge = false;

  static request_decision allow(request_role role);
  static request_decision refuse(unsigned status, std::string code,
                                 std::string message, bool challenge = false);
};

/// Decides a WebSocket upgrade (any path; the caller routes), a request
/// of the compatible API (`compat`: the client token or the admin token,
/// in `Authorization: Bearer` or `x-api-key`, browser origins as for
/// upgrades) or an `/api/` request under `cfg`: `Host` first (421), then, for
/// upgrades, `Origin` (403); then the token (401); then the role the path needs
/// (403) and, for admin requests, `Origin` and the content type of a POST (403,
/// 415). Other paths (`/healthz`, unknown ones) are not the policy's business.
/// Without an admin token on a loopback (or explicitly unauthenticated)
/// gateway, the admin API is open when no client token is set and takes
/// the client token when one is.
request_decision check_request(const request_facts& req,
                               const gateway_config& cfg);

/// The `Host` check alone (421 for a name that is not this gateway's, see
/// `host_allowed`), for what the server serves itself: the probes and the
/// static files. `check_request` starts with it.
request_decision check_host(std::string_view host, const gateway_config& cfg);

/// Returns whether `host` (a `Host` header: name or address, optional port,
/// IPv6 in brackets) names this gateway: the listen address, an entry of
/// `allowed_hosts`, or on a loopback gateway localhost, 127.0.0.1 or [::1].
/// A gateway on a wildcard address without `allowed_hosts` accepts any.
bool host_allowed(std::string_view host, const gateway_config& cfg);

/// Returns whether a browser page from `origin` may open a WebSocket: it is
/// listed in `allowed_origins` (or "*" is), or it is the gateway's own
/// origin (scheme of the connection plus the request's `Host`).
bool origin_allowed(std::string_view origin, std::string_view host, bool tls,
                    const gateway_config& cfg);

/// The token of an `Authorization: Bearer TOKEN` header; empty when there
/// is none.
std::string_view bearer_token(std::string_view authorization);

/// Compares a presented token with the expected one in time that depends on
/// neither where they differ nor their lengths (it compares SHA-256 digests
/// with `CRYPTO_memcmp`). An empty `expected` matches nothing.
bool token_matches(std::string_view given, std::string_view expected);

/// Returns the path of a request target (the part before `?`).
std::string_view path_of(std::string_view target);

/// Returns the percent-decoded value of query parameter `key`, if present.
std::optional<std::string> query_param(std::string_view target,
                                       std::string_view key);

} // namespace keel
