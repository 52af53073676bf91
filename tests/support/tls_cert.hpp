#pragma once

// A self-signed certificate made at test time (libtools' certificates.hpp),
// for CN=127.0.0.1 with subjectAltName IP:127.0.0.1 (not localhost),
// written as PEM so a node can serve it and a client can trust it as its CA.

#include <fstream>
#include <stdexcept>
#include <string>

#include "keel/tools/certificates.hpp"

namespace keel::test {

struct tls_files {
  std::string certificate_file;
  std::string key_file;
};

/// Writes `dir/cert.pem` and `dir/key.pem`: a certificate valid for a day,
/// signed by its own key.
inline tls_files make_self_signed(const std::string& dir) {
  certificate_request req;
  req.common_name = "127.0.0.1";
  req.alt_names = {"IP:127.0.0.1"};
  req.ca = true;
  auto id = make_certificate(req);
  tls_files result{dir + "/cert.pem", dir + "/key.pem"};
  for (auto [path, text] : {std::pair{&result.certificate_file, &id.cert_pem},
                            std::pair{&result.key_file, &id.key_pem}}) {
    std::ofstream out{*path};
    if (!(out << *text))
      throw std::runtime_error("cannot write " + *path);
  }
  return result;
}

} // namespace keel::test
