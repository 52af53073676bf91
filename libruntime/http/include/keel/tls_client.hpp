#pragma once

// The TLS client setup shared by the HTTP client and the tools: TLS 1.2
// or newer, the peer's certificate verified against a CA file or the
// system's store, and its name checked against the host that was dialled.

#include <memory>
#include <string>

#include <boost/asio/ssl/context.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <boost/system/error_code.hpp>

#include "keel/error.hpp"

namespace keel {

/// A client context trusting the certificates in `ca_file` (PEM), or the
/// system's CA store when it is empty. Fails with `ec::config_invalid`
/// ("cannot load 'FILE': REASON") when the certificates cannot be loaded.
caf::expected<std::unique_ptr<boost::asio::ssl::context>>
make_tls_client_context(const std::string& ca_file);

/// Whether `host` is an IPv4 or IPv6 address rather than a name.
bool is_ip_literal(const std::string& host);

/// Sends `host` as SNI (names only, RFC 6066) and makes OpenSSL fail the
/// handshake unless the peer's certificate is for `host` (a name or an IP
/// address), so the failure names the mismatch. Call before the handshake.
void set_tls_peer_name(SSL* native, const std::string& host);

/// `set_tls_peer_name` and peer verification on `stream`, an asio or Beast
/// SSL stream.
template <class TlsStream>
void set_tls_peer(TlsStream& stream, const std::string& host) {
  set_tls_peer_name(stream.native_handle(), host);
  boost::system::error_code ignored;
  stream.set_verify_mode(boost::asio::ssl::verify_peer, ignored);
}

/// Why a TLS handshake on `native` failed with `err`: the error's message
/// and, when the certificate was refused, OpenSSL's reason for it.
std::string tls_failure_reason(const boost::system::error_code& err,
                               SSL* native);

} // namespace keel
