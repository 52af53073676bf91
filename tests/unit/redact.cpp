#define CAF_SUITE redact

#include "keel/redact.hpp"

#include <algorithm>

#include <caf/test/unit_test.hpp>

#include "keel/config_secrets.hpp"

using namespace keel;

namespace {

struct redact_case {
  const char* text;
  std::vector<std::string> secrets;
  const char* expected;
};

} // namespace

CAF_TEST(redact replaces every configured secret) {
  const redact_case cases[] = {
    {"no secret here", {"sk-live-1234"}, "no secret here"},
    {"Incorrect API key provided: sk-live-1234.",
     {"sk-live-1234"},
     "Incorrect API key provided: [redacted]."},
    {"sk-live-1234sk-live-1234", {"sk-live-1234"}, "[redacted][redacted]"},
    {"a tok-1 b tok-2 c", {"tok-1", "tok-2"}, "a [redacted] b [redacted] c"},
    // The longest secret wins where one contains another.
    {"key: abcd-efgh", {"abcd", "abcd-efgh"}, "key: [redacted]"},
    // Short and empty secrets are not looked for.
    {"a b c", {"", "a", "b c"}, "a b c"},
    {"https://api.telegram.org/bot123:XYZW/sendMessage",
     {"123:XYZW"},
     "https://api.telegram.org/bot[redacted]/sendMessage"},
    {"", {"secret"}, ""},
    {"secre", {"secret"}, "secre"},
  };
  for (auto& x : cases) {
    CAF_MESSAGE("text: " << x.text);
    CAF_CHECK_EQUAL(redact(x.text, secret_list(x.secrets)), x.expected);
  }
}

CAF_TEST(secret list drops short secrets and orders the longest first) {
  auto list = secret_list({"abcd", "", "xy", "abcd-efgh", "abcd"});
  CAF_CHECK_EQUAL(list, (std::vector<std::string>{"abcd-efgh", "abcd"}));
}

CAF_TEST(postgres passwords are found in uris and conninfo strings) {
  const std::pair<const char*, const char*> cases[] = {
    {"postgres://keel:pg-pass-1@db:5432/keel", "pg-pass-1"},
    {"postgresql://keel@db/keel", ""},
    {"postgres://db:5432/keel", ""},
    {"host=db user=keel password=pg-pass-2 dbname=keel", "pg-pass-2"},
    {"host=db password = 'pg pass 3' dbname=keel", "pg pass 3"},
    {"host=db dbname=keel", ""},
    {"", ""},
  };
  for (auto& [url, password] : cases) {
    CAF_MESSAGE("url: " << url);
    CAF_CHECK_EQUAL(postgres_password(url), password);
  }
}

CAF_TEST(configured secrets are every secret the config holds) {
  node_config cfg;
  cfg.gateway.token = "client-token";
  cfg.gateway.admin_token = "admin-token";
  cfg.cluster.token = "cluster-token";
  provider_config p;
  p.api_key = "sk-provider";
  p.headers = {{"X-Api-Key", "header-key"},
               {"Authorization", "Bearer bearer-key"},
               {"Content-Type", "application/json"}};
  cfg.providers.push_back(p);
  channel_config c;
  c.secret = "webhook-secret";
  c.token = "123:bot-token";
  cfg.delivery.channels.push_back(c);
  cfg.storage.postgres.url = "postgres://keel:pg-pass@db/keel";
  auto secrets = configured_secrets(cfg);
  for (auto x :
       {"client-token", "admin-token", "cluster-token", "sk-provider",
        "header-key", "Bearer bearer-key", "bearer-key", "webhook-secret",
        "123:bot-token", "pg-pass", "postgres://keel:pg-pass@db/keel"}) {
    CAF_MESSAGE("secret: " << x);
    CAF_CHECK(std::find(secrets.begin(), secrets.end(), x) != secrets.end());
  }
  CAF_CHECK(std::find(secrets.begin(), secrets.end(), "application/json")
            == secrets.end());
  CAF_CHECK(header_holds_secret("x-goog-api-key"));
  CAF_CHECK(header_holds_secret("Cookie"));
  CAF_CHECK(!header_holds_secret("OpenAI-Organization"));
}
