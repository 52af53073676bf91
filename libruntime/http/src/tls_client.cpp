#include "keel/tls_client.hpp"

#include <cerrno>
#include <cstring>
#include <fstream>

#include <boost/asio/ip/address.hpp>
#include <boost/asio/ssl/error.hpp>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>

namespace keel {

namespace ssl = boost::asio::ssl;

namespace {

/// OpenSSL's reason for `err` where asio only says "asio.ssl error".
std::string ssl_error_text(const boost::system::error_code& err) {
  if (err.category() == boost::asio::error::get_ssl_category())
    if (auto reason
        = ERR_reason_error_string(static_cast<unsigned long>(err.value())))
      return reason;
  return err.message();
}

} // namespace

caf::expected<std::unique_ptr<ssl::context>>
make_tls_client_context(const std::string& ca_file) {
  boost::system::error_code err;
  auto ctx = std::make_unique<ssl::context>(ssl::context::tls_client);
  ctx->set_options(ssl::context::default_workarounds | ssl::context::no_sslv2
                     | ssl::context::no_sslv3 | ssl::context::no_tlsv1
                     | ssl::context::no_tlsv1_1,
                   err);
  ctx->set_verify_mode(ssl::verify_peer, err);
  if (!ca_file.empty()) {
    if (std::ifstream probe{ca_file}; !probe)
      return caf::make_error(ec::config_invalid,
                             "cannot load '" + ca_file
                               + "': " + std::strerror(errno));
    ctx->load_verify_file(ca_file, err);
    if (err)
      return caf::make_error(ec::config_invalid,
                             "cannot load '" + ca_file
                               + "': " + ssl_error_text(err));
  } else {
    ctx->set_default_verify_paths(err);
    if (err)
      return caf::make_error(ec::config_invalid,
                             "cannot load the system's CA store: "
                               + ssl_error_text(err));
  }
  return ctx;
}

bool is_ip_literal(const std::string& host) {
  boost::system::error_code err;
  boost::asio::ip::make_address(host, err);
  return !err;
}

void set_tls_peer_name(SSL* native, const std::string& host) {
  if (is_ip_literal(host)) {
    X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(native), host.c_str());
  } else {
    SSL_set_tlsext_host_name(native, host.c_str());
    SSL_set1_host(native, host.c_str());
  }
}

std::string tls_failure_reason(const boost::system::error_code& err,
                               SSL* native) {
  auto reason = err.message();
  auto verify = SSL_get_verify_result(native);
  if (verify != X509_V_OK)
    reason += std::string{" ("} + X509_verify_cert_error_string(verify) + ")";
  return reason;
}

} // namespace keel
