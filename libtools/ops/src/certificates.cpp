#include "keel/tools/certificates.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstring>
#include <memory>
#include <stdexcept>

#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

namespace keel {

// Named apart: libtools is compiled as one unit (keel_compile_as_one), where
// every file's anonymous namespace is the same.
namespace certificates_detail {

using key_ptr = std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)>;
using cert_ptr = std::unique_ptr<X509, decltype(&X509_free)>;
using bio_ptr = std::unique_ptr<BIO, decltype(&BIO_free)>;

[[noreturn]] void fail(const char* what) {
  throw std::runtime_error(std::string{"make_certificate: "} + what);
}

bio_ptr memory_bio(const std::string& text) {
  bio_ptr bio{BIO_new_mem_buf(text.data(), static_cast<int>(text.size())),
              BIO_free};
  if (!bio)
    fail("BIO_new_mem_buf failed");
  return bio;
}

template <class Write>
std::string to_pem(Write write) {
  bio_ptr bio{BIO_new(BIO_s_mem()), BIO_free};
  if (!bio || write(bio.get()) != 1)
    fail("PEM encoding failed");
  char* data = nullptr;
  auto len = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<size_t>(len));
}

void set_random_serial(X509* cert) {
  unsigned char serial[16];
  if (RAND_bytes(serial, sizeof(serial)) != 1)
    fail("RAND_bytes failed");
  serial[0] &= 0x7F; // Keep the serial positive.
  auto* bn = BN_bin2bn(serial, sizeof(serial), nullptr);
  if (bn == nullptr || !BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(cert)))
    fail("serial number failed");
  BN_free(bn);
}

void add_extension(X509* cert, X509* issuer, int nid, const std::string& v) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  auto* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, v.c_str());
  if (ext == nullptr || !X509_add_ext(cert, ext, -1))
    fail("a certificate extension failed");
  X509_EXTENSION_free(ext);
}

std::string joined(const std::vector<std::string>& xs) {
  std::string out;
  for (auto& x : xs)
    out += (out.empty() ? "" : ",") + x;
  return out;
}

void add_extensions(X509* cert, X509* issuer, const certificate_request& req) {
  if (req.ca) {
    add_extension(cert, issuer, NID_basic_constraints, "critical,CA:TRUE");
    add_extension(cert, issuer, NID_key_usage,
                  "critical,keyCertSign,cRLSign,digitalSignature");
  } else {
    add_extension(cert, issuer, NID_basic_constraints, "critical,CA:FALSE");
    add_extension(cert, issuer, NID_key_usage,
                  "critical,digitalSignature,keyAgreement");
    add_extension(cert, issuer, NID_ext_key_usage, "serverAuth,clientAuth");
  }
  if (!req.alt_names.empty())
    add_extension(cert, issuer, NID_subject_alt_name, joined(req.alt_names));
}

} // namespace certificates_detail

namespace cd = certificates_detail;

tls_identity make_certificate(const certificate_request& req,
                              const tls_identity* issuer) {
  cd::key_ptr key{EVP_EC_gen("P-256"), EVP_PKEY_free};
  if (!key)
    cd::fail("key generation failed");
  cd::cert_ptr cert{X509_new(), X509_free};
  if (!cert)
    cd::fail("X509_new failed");
  X509_set_version(cert.get(), 2);
  cd::set_random_serial(cert.get());
  X509_gmtime_adj(X509_getm_notBefore(cert.get()), -3600);
  X509_gmtime_adj(X509_getm_notAfter(cert.get()), 86400L * req.days);
  X509_set_pubkey(cert.get(), key.get());
  X509_NAME_add_entry_by_txt(
    X509_get_subject_name(cert.get()), "CN", MBSTRING_UTF8,
    reinterpret_cast<const unsigned char*>(req.common_name.c_str()), -1, -1, 0);
  cd::cert_ptr issuer_cert{nullptr, X509_free};
  cd::key_ptr issuer_key{nullptr, EVP_PKEY_free};
  if (issuer) {
    issuer_cert.reset(PEM_read_bio_X509(cd::memory_bio(issuer->cert_pem).get(),
                                        nullptr, nullptr, nullptr));
    issuer_key.reset(PEM_read_bio_PrivateKey(
      cd::memory_bio(issuer->key_pem).get(), nullptr, nullptr, nullptr));
    if (!issuer_cert || !issuer_key)
      cd::fail("cannot read the issuer's certificate or key");
  }
  auto* signer_cert = issuer ? issuer_cert.get() : cert.get();
  X509_set_issuer_name(cert.get(), X509_get_subject_name(signer_cert));
  cd::add_extensions(cert.get(), signer_cert, req);
  auto* signer_key = issuer ? issuer_key.get() : key.get();
  if (X509_sign(cert.get(), signer_key, EVP_sha256()) == 0)
    cd::fail("signing failed");
  tls_identity out;
  out.cert_pem
    = cd::to_pem([&](BIO* bio) { return PEM_write_bio_X509(bio, cert.get()); });
  out.key_pem = cd::to_pem([&](BIO* bio) {
    return PEM_write_bio_PrivateKey(bio, key.get(), nullptr, nullptr, 0,
                                    nullptr, nullptr);
  });
  return out;
}

tls_identity make_self_signed_identity() {
  certificate_request req;
  req.common_name = "localhost";
  req.alt_names = {"DNS:localhost", "IP:127.0.0.1"};
  req.ca = true;
  return make_certificate(req);
}

namespace certificates_detail {

bool valid_node_name(const std::string& name) {
  if (name.empty() || name.size() > 64)
    return false;
  for (unsigned char c : name)
    if (!std::isalnum(c) && c != '.' && c != '_' && c != '-')
      return false;
  return true;
}

caf::error io_error(const std::string& what, const std::string& path) {
  return caf::make_error(ec::storage_io,
                         what + " " + path + ": " + std::strerror(errno));
}

// Writes `text` to a new file `path` with `mode` (`exclusive`: refuses an
// existing file).
caf::error write_file(const std::string& path, const std::string& text,
                      mode_t mode, bool exclusive) {
  auto flags = O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC
               | (exclusive ? O_EXCL : 0);
  auto fd = ::open(path.c_str(), flags, mode);
  if (fd < 0)
    return io_error("cannot create", path);
  auto ok = ::fchmod(fd, mode) == 0
            && ::write(fd, text.data(), text.size())
                 == static_cast<ssize_t>(text.size());
  auto failed = ok ? caf::error{} : io_error("cannot write", path);
  ::close(fd);
  return failed;
}

caf::error write_identity(const tls_identity& id, const std::string& cert,
                          const std::string& key, bool exclusive) {
  if (auto err = write_file(key, id.key_pem, 0600, exclusive))
    return err;
  return write_file(cert, id.cert_pem, 0644, exclusive);
}

} // namespace certificates_detail

caf::expected<cluster_cert_files>
make_cluster_certs(const std::string& dir,
                   const std::vector<std::string>& nodes, int days) {
  if (nodes.empty())
    return caf::make_error(ec::config_invalid, "no node names given");
  for (auto& n : nodes)
    if (!cd::valid_node_name(n))
      return caf::make_error(ec::config_invalid,
                             "invalid node name '" + n
                               + "' (expected 1-64 of [A-Za-z0-9._-])");
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST)
    return cd::io_error("cannot create", dir);
  cluster_cert_files out{dir + "/ca.crt", dir + "/ca.key", {}};
  certificate_request ca_req{"Keel cluster CA", {}, true, days};
  auto ca = make_certificate(ca_req);
  // A second run must not replace the CA the nodes trust (the CA's files
  // are also created exclusively, should one appear meanwhile).
  if (::access(out.ca_key.c_str(), F_OK) == 0)
    return caf::make_error(ec::conflict, out.ca_key
                                           + " exists: a cluster's CA is made "
                                             "once; use another folder");
  if (auto err = cd::write_identity(ca, out.ca_cert, out.ca_key, true))
    return err;
  for (auto& n : nodes) {
    certificate_request req{n, {"DNS:" + n}, false, days};
    auto files = std::pair{dir + "/" + n + ".crt", dir + "/" + n + ".key"};
    if (auto err = cd::write_identity(make_certificate(req, &ca), files.first,
                                      files.second, false))
      return err;
    out.nodes.push_back(std::move(files));
  }
  return out;
}

} // namespace keel
