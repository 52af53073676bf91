#pragma once

// A self-signed certificate made at test time (OpenSSL's C API): a P-256 key
// and an X.509 certificate for CN=127.0.0.1 with subjectAltName IP:127.0.0.1,
// written as PEM so a node can serve it and a client can trust it as its CA.

#include <cstdio>
#include <memory>
#include <stdexcept>
#include <string>

#include <openssl/ec.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

namespace keel::test {

struct tls_files {
  std::string certificate_file;
  std::string key_file;
};

namespace detail {

inline EVP_PKEY* make_p256_key() {
  std::unique_ptr<EVP_PKEY_CTX, decltype(&EVP_PKEY_CTX_free)> ctx{
    EVP_PKEY_CTX_new_id(EVP_PKEY_EC, nullptr), EVP_PKEY_CTX_free};
  EVP_PKEY* key = nullptr;
  if (!ctx || EVP_PKEY_keygen_init(ctx.get()) <= 0
      || EVP_PKEY_CTX_set_ec_paramgen_curve_nid(ctx.get(), NID_X9_62_prime256v1)
           <= 0
      || EVP_PKEY_keygen(ctx.get(), &key) <= 0)
    throw std::runtime_error("cannot generate a P-256 key");
  return key;
}

inline void write_pem(const std::string& path, EVP_PKEY* key, X509* cert) {
  std::unique_ptr<FILE, decltype(&fclose)> f{fopen(path.c_str(), "w"), fclose};
  if (!f)
    throw std::runtime_error("cannot write " + path);
  auto ok = key ? PEM_write_PrivateKey(f.get(), key, nullptr, nullptr, 0,
                                       nullptr, nullptr)
                : PEM_write_X509(f.get(), cert);
  if (!ok)
    throw std::runtime_error("cannot write PEM to " + path);
}

} // namespace detail

/// Writes `dir/cert.pem` and `dir/key.pem`: a certificate valid for a day,
/// for CN=127.0.0.1 and subjectAltName IP:127.0.0.1, signed by its own key.
inline tls_files make_self_signed(const std::string& dir) {
  std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)> key{
    detail::make_p256_key(), EVP_PKEY_free};
  std::unique_ptr<X509, decltype(&X509_free)> cert{X509_new(), X509_free};
  X509_set_version(cert.get(), 2);
  ASN1_INTEGER_set(X509_get_serialNumber(cert.get()), 1);
  X509_gmtime_adj(X509_getm_notBefore(cert.get()), -60);
  X509_gmtime_adj(X509_getm_notAfter(cert.get()), 24 * 3600);
  X509_set_pubkey(cert.get(), key.get());
  auto name = X509_get_subject_name(cert.get());
  X509_NAME_add_entry_by_txt(
    name, "CN", MBSTRING_ASC,
    reinterpret_cast<const unsigned char*>("127.0.0.1"), -1, -1, 0);
  X509_set_issuer_name(cert.get(), name);
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, cert.get(), cert.get(), nullptr, nullptr, 0);
  for (auto [nid, value] : {std::pair{NID_subject_alt_name, "IP:127.0.0.1"},
                            std::pair{NID_basic_constraints, "CA:TRUE"}}) {
    auto ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value);
    if (!ext || !X509_add_ext(cert.get(), ext, -1))
      throw std::runtime_error("cannot add a certificate extension");
    X509_EXTENSION_free(ext);
  }
  if (X509_sign(cert.get(), key.get(), EVP_sha256()) == 0)
    throw std::runtime_error("cannot sign the certificate");
  tls_files result{dir + "/cert.pem", dir + "/key.pem"};
  detail::write_pem(result.certificate_file, nullptr, cert.get());
  detail::write_pem(result.key_file, key.get(), nullptr);
  return result;
}

} // namespace keel::test
