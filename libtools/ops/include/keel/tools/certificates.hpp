#pragma once

// X.509 certificates made with libcrypto, for tests and small deployments:
// a self-signed identity (a TLS server in a test), and a cluster's CA with
// a certificate per node (`keelctl cluster certs DIR`), which cluster.tls
// uses for mutual TLS between nodes.

#include <string>
#include <vector>

#include "keel/error.hpp"

namespace keel {

/// A certificate and its private key, PEM encoded.
struct tls_identity {
  std::string cert_pem;
  std::string key_pem;
};

/// What a certificate says and how it is signed.
struct certificate_request {
  /// The subject's common name.
  std::string common_name;
  /// subjectAltName entries, e.g. "DNS:localhost", "IP:127.0.0.1".
  std::vector<std::string> alt_names;
  /// A CA (basicConstraints CA:TRUE, keyCertSign) or an end entity usable
  /// as a TLS server and client both (extendedKeyUsage).
  bool ca = false;
  /// How long it is valid, from an hour ago (clock skew).
  int days = 1;
};

/// Makes a P-256 key and a certificate for it: signed by `issuer` (a CA's
/// identity), or by its own key when `issuer` is null. Throws
/// `std::runtime_error` naming the step that failed.
tls_identity make_certificate(const certificate_request& req,
                              const tls_identity* issuer = nullptr);

/// A self-signed certificate valid for a day for "localhost" and
/// 127.0.0.1 (a CA too, so that a client can trust it as one).
tls_identity make_self_signed_identity();

/// The files `make_cluster_certs` wrote.
struct cluster_cert_files {
  std::string ca_cert;
  std::string ca_key;
  /// Per node, in the order given: NODE.crt and NODE.key.
  std::vector<std::pair<std::string, std::string>> nodes;
};

/// Writes a new CA (`dir/ca.crt`, `dir/ca.key`) and, signed by it, a
/// certificate and key for each of `nodes` (`dir/NODE.crt`,
/// `dir/NODE.key`; CN and subjectAltName DNS:NODE), each valid for `days`.
/// Keys are written 0600; `dir` is made 0700 if missing. Refuses to
/// overwrite an existing ca.key (a cluster's CA is made once) and node
/// names that are not 1-64 of [A-Za-z0-9._-].
caf::expected<cluster_cert_files>
make_cluster_certs(const std::string& dir,
                   const std::vector<std::string>& nodes, int days);

} // namespace keel
