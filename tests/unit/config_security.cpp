#define CAF_SUITE config_security

#include "keel/config.hpp"

#include "temp_dir.hpp"
#include "text_checks.hpp"

#include <caf/test/unit_test.hpp>

#include <fstream>

using namespace keel;
using keel::test::temp_dir;

namespace {

caf::expected<node_config> parse(const std::string& yaml) {
  return parse_config(yaml, "node.yaml", [](const std::string& name) {
    return name == "SECRET" ? std::optional<std::string>{"t0p-s3cret"}
                            : std::nullopt;
  });
}

std::string error_of(const std::string& yaml) {
  auto result = parse(yaml);
  if (result)
    return "<parsed without error>";
  return error_message(result.error());
}

/// All warnings joined, one per line.
std::string warnings_of(const std::string& yaml) {
  auto result = parse(yaml);
  if (!result)
    return "<error: " + error_message(result.error()) + ">";
  std::string joined;
  for (auto& w : result->warnings)
    joined += w + "\n";
  return joined;
}

void write_file(const std::filesystem::path& path, const std::string& text) {
  std::ofstream out{path};
  out << text;
}

} // namespace

CAF_TEST(a gateway beyond loopback needs a token or an explicit opt out) {
  auto err = error_of("gateway:\n  host: 0.0.0.0\n");
  KEEL_CHECK_CONTAINS(err, "node.yaml:2: gateway.token:");
  KEEL_CHECK_CONTAINS(err, "\"0.0.0.0\"");
  KEEL_CHECK_CONTAINS(err, "gateway.allow_unauthenticated: true");
  CAF_CHECK(parse("gateway:\n  host: 0.0.0.0\n  token: ${SECRET}\n"));
  auto warned = warnings_of("gateway:\n  host: 0.0.0.0\n"
                            "  allow_unauthenticated: true\n");
  KEEL_CHECK_CONTAINS(warned, "gateway.allow_unauthenticated is true");
  for (auto host : {"127.0.0.1", "127.3.2.1", "localhost", "::1"}) {
    auto cfg = parse(std::string{"gateway:\n  host: \""} + host + "\"\n");
    CAF_CHECK(cfg);
    if (cfg)
      CAF_CHECK(cfg->warnings.empty());
  }
  CAF_CHECK(!parse("gateway:\n  host: 127.0.0.1.example.com\n"));
}

CAF_TEST(tokens come from a file and never appear in errors) {
  temp_dir tmp;
  write_file(tmp.path() / "client", "file-token-1\nignored second line\n");
  write_file(tmp.path() / "admin", "adm1n\r\n");
  write_file(tmp.path() / "empty", "\n");
  auto cfg = parse("gateway:\n  token_file: " + (tmp.path() / "client").string()
                   + "\n  admin_token_file: " + (tmp.path() / "admin").string()
                   + "\n");
  CAF_REQUIRE(cfg);
  CAF_CHECK_EQUAL(cfg->gateway.token, "file-token-1");
  CAF_CHECK_EQUAL(cfg->gateway.admin_token, "adm1n");
  KEEL_CHECK_CONTAINS(error_of("gateway:\n  token: a\n  token_file: /x\n"),
                      "gateway.token_file: set only one of token and "
                      "token_file");
  KEEL_CHECK_CONTAINS(error_of("gateway:\n  token_file: "
                               + (tmp.path() / "missing").string() + "\n"),
                      "missing\": No such file or directory");
  KEEL_CHECK_CONTAINS(error_of("gateway:\n  admin_token_file: "
                               + (tmp.path() / "empty").string() + "\n"),
                      "is empty (expected the admin_token)");
  auto bad = error_of("gateway:\n  token: \"s3cret with space\"\n");
  KEEL_CHECK_CONTAINS(bad, "gateway.token: the token may hold only visible");
  CAF_CHECK_EQUAL(bad.find("s3cret"), std::string::npos);
}

CAF_TEST(header values and api keys with line breaks are refused unseen) {
  auto provider = [](const std::string& extra) {
    return "providers:\n  - name: p\n    kind: openai\n    model: m\n"
           "    base_url: https://api.example.com\n"
           + extra;
  };
  auto err = error_of(provider("    headers:\n      X-Org: \"org\\r\\nX-Evil: "
                               "k3y\"\n"));
  KEEL_CHECK_CONTAINS(err, "providers[0].headers.X-Org: header values must "
                           "not contain a line break");
  CAF_CHECK_EQUAL(err.find("k3y"), std::string::npos);
  err = error_of(provider("    api_key: \"sk-k3y\\nX: y\"\n"));
  KEEL_CHECK_CONTAINS(err, "providers[0].api_key: the API key contains a line "
                           "break");
  CAF_CHECK_EQUAL(err.find("k3y"), std::string::npos);
}

CAF_TEST(risky settings are named in warnings) {
  auto warned = warnings_of(
    "providers:\n  - name: plain\n    kind: openai\n    model: m\n"
    "    base_url: http://llm.internal:8000\n    api_key: ${SECRET}\n"
    "storage:\n  sync: false\n"
    "chaos:\n  kill: true\n  disk: true\n");
  KEEL_CHECK_CONTAINS(warned, "providers[0].base_url is http://");
  KEEL_CHECK_CONTAINS(warned, "storage.sync is false");
  KEEL_CHECK_CONTAINS(warned, "chaos.kill is true");
  KEEL_CHECK_CONTAINS(warned, "chaos.disk is true");
  CAF_CHECK_EQUAL(warned.find("t0p-s3cret"), std::string::npos);
  // Without an API key, plain http sends no secret: no warning.
  CAF_CHECK_EQUAL(warnings_of("providers:\n  - name: local\n    kind: openai\n"
                              "    model: m\n"
                              "    base_url: http://127.0.0.1:8000\n"),
                  "");
}

CAF_TEST(origins hosts tls and limits are checked) {
  KEEL_CHECK_CONTAINS(error_of("gateway:\n  allowed_origins: [example.com]\n"),
                      "gateway.allowed_origins[0]: expected an origin");
  KEEL_CHECK_CONTAINS(
    error_of("gateway:\n  allowed_origins: [\"https://a.example/path\"]\n"),
    "gateway.allowed_origins[0]: expected an origin");
  auto cfg = parse("gateway:\n  allowed_origins: [\"https://a.example:8443\", "
                   "\"*\"]\n  allowed_hosts: [keel.example, \"10.0.0.5:8080\"]"
                   "\n");
  CAF_REQUIRE(cfg);
  CAF_CHECK_EQUAL(cfg->gateway.allowed_origins.size(), 2u);
  CAF_CHECK_EQUAL(cfg->gateway.allowed_hosts.size(), 2u);
  KEEL_CHECK_CONTAINS(error_of("gateway:\n  allowed_hosts: [\"a/b\"]\n"),
                      "gateway.allowed_hosts[0]: expected a host name");
  KEEL_CHECK_CONTAINS(error_of("gateway:\n  tls:\n    certificate_file: "
                               "/etc/hostname\n"),
                      "gateway.tls.key_file: TLS needs both");
  KEEL_CHECK_CONTAINS(error_of("gateway:\n  tls:\n    min_version: \"1.1\"\n"),
                      "gateway.tls.min_version: unknown value \"1.1\"");
  KEEL_CHECK_CONTAINS(error_of("gateway:\n  rate_limit:\n    burst: 0\n"),
                      "gateway.rate_limit.burst");
  KEEL_CHECK_CONTAINS(error_of("gateway:\n  max_queued_frames: 10\n"),
                      "gateway.max_queued_frames");
  KEEL_CHECK_CONTAINS(error_of("storage:\n  fault_injection: true\n"),
                      "storage.fault_injection");
  KEEL_CHECK_CONTAINS(error_of("chaos:\n  kil: true\n"), "chaos.kil");
}

CAF_TEST(safe defaults) {
  auto cfg = default_config();
  CAF_CHECK_EQUAL(cfg.gateway.host, "127.0.0.1");
  CAF_CHECK(!cfg.gateway.allow_unauthenticated);
  CAF_CHECK(!cfg.gateway.allow_query_token);
  CAF_CHECK(!cfg.chaos.kill);
  CAF_CHECK(!cfg.chaos.disk);
  CAF_CHECK(cfg.gateway.allowed_origins.empty());
  CAF_CHECK(cfg.warnings.empty());
}
