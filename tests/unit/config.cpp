#define CAF_SUITE config

#include "keel/config.hpp"
#include "keel/file_modes.hpp"

#include "temp_dir.hpp"

#include "source_dir.hpp"

#include <caf/test/unit_test.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>

#include <nlohmann/json.hpp>

#include "text_checks.hpp"

using namespace keel;
using namespace std::chrono_literals;

namespace {

using env_map = std::map<std::string, std::string>;

/// An environment holding exactly `vars`.
env_lookup fake_env(env_map vars) {
  return [vars{std::move(vars)}](
           const std::string& name) -> std::optional<std::string> {
    if (auto i = vars.find(name); i != vars.end())
      return i->second;
    return std::nullopt;
  };
}

caf::expected<node_config> parse(const std::string& yaml, env_map env = {}) {
  return parse_config(yaml, "node.yaml", fake_env(std::move(env)));
}

/// The message of the config_invalid error `yaml` yields, or a marker that
/// makes the comparison fail with a readable diff.
std::string error_of(const std::string& yaml, env_map env = {}) {
  auto result = parse(yaml, std::move(env));
  if (result)
    return "<parsed without error>";
  if (result.error() != ec::config_invalid)
    return "<unexpected error: " + render(result.error()) + ">";
  return error_message(result.error());
}

/// "none" for a value, else the rendered error: a readable check.
template <class T>
std::string outcome(const caf::expected<T>& x) {
  return x ? std::string{"none"} : render(x.error());
}

/// The repository's root (see `keel::test::keel_source_dir`).
std::filesystem::path source_dir() {
  return keel::test::keel_source_dir();
}

using keel::test::temp_dir;

/// Compares two supervisors' settings field by field.
void check_same(const supervisor_settings& x, const supervisor_settings& y) {
  CAF_CHECK_EQUAL(to_string(x.strategy), to_string(y.strategy));
  CAF_CHECK_EQUAL(x.max_restarts, y.max_restarts);
  CAF_CHECK_EQUAL(x.period, y.period);
  CAF_CHECK_EQUAL(x.shutdown_timeout, y.shutdown_timeout);
  CAF_CHECK_EQUAL(x.buffer, y.buffer);
  CAF_CHECK_EQUAL(x.backoff.initial, y.backoff.initial);
  CAF_CHECK_EQUAL(x.backoff.max, y.backoff.max);
  CAF_CHECK_EQUAL(x.backoff.multiplier, y.backoff.multiplier);
  CAF_CHECK_EQUAL(x.backoff.reset_after, y.backoff.reset_after);
  CAF_CHECK_EQUAL(x.backoff.jitter, y.backoff.jitter);
}

/// Compares the main fields of two configurations.
void check_same(const node_config& x, const node_config& y) {
  CAF_CHECK_EQUAL(x.name, y.name);
  CAF_CHECK_EQUAL(x.data_dir, y.data_dir);
  CAF_CHECK_EQUAL(x.gateway.host, y.gateway.host);
  CAF_CHECK_EQUAL(x.gateway.port, y.gateway.port);
  CAF_CHECK_EQUAL(x.gateway.token, y.gateway.token);
  CAF_CHECK_EQUAL(x.gateway.max_frame_bytes, y.gateway.max_frame_bytes);
  CAF_CHECK_EQUAL(x.gateway.max_text_bytes, y.gateway.max_text_bytes);
  CAF_CHECK_EQUAL(x.gateway.max_connections, y.gateway.max_connections);
  CAF_CHECK_EQUAL(x.gateway.max_queued_bytes, y.gateway.max_queued_bytes);
  CAF_CHECK_EQUAL(x.gateway.admin_token, y.gateway.admin_token);
  CAF_CHECK_EQUAL(x.gateway.allow_unauthenticated,
                  y.gateway.allow_unauthenticated);
  CAF_CHECK_EQUAL(x.gateway.write_timeout, y.gateway.write_timeout);
  CAF_CHECK_EQUAL(x.gateway.socket_send_buffer, y.gateway.socket_send_buffer);
  CAF_CHECK_EQUAL(x.gateway.max_history_bytes, y.gateway.max_history_bytes);
  CAF_CHECK_EQUAL(x.gateway.rate_limit.per_second,
                  y.gateway.rate_limit.per_second);
  CAF_CHECK_EQUAL(x.gateway.rate_limit.burst, y.gateway.rate_limit.burst);
  CAF_CHECK_EQUAL(x.threads.max_live, y.threads.max_live);
  CAF_CHECK_EQUAL(x.threads.max_stored_threads, y.threads.max_stored_threads);
  CAF_CHECK_EQUAL(x.threads.max_reply_bytes, y.threads.max_reply_bytes);
  CAF_CHECK_EQUAL(x.threads.max_tool_output_bytes,
                  y.threads.max_tool_output_bytes);
  CAF_CHECK_EQUAL(x.chaos.kill, y.chaos.kill);
  CAF_CHECK_EQUAL(x.chaos.disk, y.chaos.disk);
  CAF_CHECK_EQUAL(x.gateway.io_threads, y.gateway.io_threads);
  CAF_CHECK(x.scheduler == y.scheduler);
  CAF_CHECK_EQUAL(x.workers, y.workers);
  CAF_REQUIRE_EQUAL(x.providers.size(), y.providers.size());
  for (size_t i = 0; i < x.providers.size(); ++i) {
    CAF_CHECK_EQUAL(x.providers[i].name, y.providers[i].name);
    CAF_CHECK_EQUAL(x.providers[i].kind, y.providers[i].kind);
    CAF_CHECK_EQUAL(x.providers[i].model, y.providers[i].model);
    CAF_CHECK_EQUAL(x.providers[i].script.size(), y.providers[i].script.size());
  }
  CAF_REQUIRE_EQUAL(x.pools.size(), y.pools.size());
  for (size_t i = 0; i < x.pools.size(); ++i) {
    CAF_CHECK_EQUAL(x.pools[i].name, y.pools[i].name);
    CAF_CHECK_EQUAL(x.pools[i].chain, y.pools[i].chain);
    CAF_CHECK_EQUAL(x.pools[i].retry.max_attempts,
                    y.pools[i].retry.max_attempts);
  }
  CAF_CHECK_EQUAL(x.threads.system_prompt, y.threads.system_prompt);
  CAF_CHECK_EQUAL(x.threads.idle_timeout, y.threads.idle_timeout);
  CAF_CHECK_EQUAL(x.threads.pool, y.threads.pool);
  CAF_CHECK_EQUAL(x.threads.max_inbox, y.threads.max_inbox);
  CAF_CHECK_EQUAL(x.threads.turn_timeout, y.threads.turn_timeout);
  check_same(x.supervision.root, y.supervision.root);
  check_same(x.supervision.providers, y.supervision.providers);
  check_same(x.supervision.conversations, y.supervision.conversations);
  CAF_CHECK_EQUAL(x.logging.level, y.logging.level);
  CAF_CHECK_EQUAL(x.logging.file, y.logging.file);
  CAF_CHECK_EQUAL(x.logging.format, y.logging.format);
  CAF_CHECK_EQUAL(x.shutdown.drain_timeout, y.shutdown.drain_timeout);
  CAF_CHECK_EQUAL(x.storage.sync, y.storage.sync);
  CAF_CHECK_EQUAL(x.cluster.enabled, y.cluster.enabled);
  CAF_CHECK_EQUAL(x.cluster.node_id, y.cluster.node_id);
  CAF_CHECK_EQUAL(x.cluster.listen_host, y.cluster.listen_host);
  CAF_CHECK_EQUAL(x.cluster.listen_port, y.cluster.listen_port);
  CAF_CHECK_EQUAL(x.cluster.advertise, y.cluster.advertise);
  CAF_CHECK_EQUAL(x.cluster.shards, y.cluster.shards);
}

} // namespace

// -- defaults -----------------------------------------------------------------

CAF_TEST(the embedded default has one echo provider in pool default) {
  auto cfg = default_config();
  CAF_CHECK_EQUAL(cfg.name, "keel-1");
  CAF_CHECK_EQUAL(cfg.data_dir, "./data");
  CAF_CHECK_EQUAL(cfg.gateway.host, "127.0.0.1");
  CAF_CHECK_EQUAL(cfg.gateway.port, 8080u);
  CAF_CHECK_EQUAL(cfg.source, "<default>");
  CAF_REQUIRE_EQUAL(cfg.providers.size(), 1u);
  CAF_CHECK_EQUAL(cfg.providers[0].name, "echo");
  CAF_CHECK_EQUAL(cfg.providers[0].kind, "echo");
  CAF_REQUIRE_EQUAL(cfg.pools.size(), 1u);
  CAF_CHECK_EQUAL(cfg.pools[0].name, "default");
  CAF_CHECK_EQUAL(cfg.pools[0].chain, std::vector<std::string>{"echo"});
  CAF_CHECK_EQUAL(cfg.threads.pool, "default");
  CAF_REQUIRE(cfg.find_pool(cfg.threads.pool) != nullptr);
}

CAF_TEST(an empty document or one of comments means all defaults) {
  for (auto text : {"", "# nothing here\n", "\n\n"}) {
    auto cfg = parse(text);
    CAF_REQUIRE(cfg);
    check_same(*cfg, default_config());
    CAF_CHECK_EQUAL(cfg->source, "node.yaml");
  }
}

CAF_TEST(keys left out keep their defaults) {
  auto cfg = parse("gateway:\n  port: 9000\nthreads:\n  max_inbox: 7\n");
  CAF_REQUIRE(cfg);
  auto def = default_config();
  CAF_CHECK_EQUAL(cfg->gateway.port, 9000u);
  CAF_CHECK_EQUAL(cfg->gateway.host, def.gateway.host);
  CAF_CHECK_EQUAL(cfg->gateway.max_frame_bytes, def.gateway.max_frame_bytes);
  CAF_CHECK_EQUAL(cfg->threads.max_inbox, 7u);
  CAF_CHECK_EQUAL(cfg->threads.idle_timeout, def.threads.idle_timeout);
  CAF_CHECK_EQUAL(cfg->providers.size(), 1u);
  CAF_CHECK_EQUAL(cfg->name, "keel-1");
}

CAF_TEST(a key without a value counts as not set) {
  auto cfg = parse("logging:\ngateway:\n  token:\n  port: ~\n");
  CAF_REQUIRE(cfg);
  CAF_CHECK_EQUAL(cfg->logging.level, "info");
  CAF_CHECK_EQUAL(cfg->gateway.port, 8080u);
  CAF_CHECK_EQUAL(cfg->gateway.token, "");
}

CAF_TEST(every option is read) {
  auto cfg = parse(R"(node:
  name: n.1_x-y
  data_dir: /var/lib/keel
  scheduler: stealing
  workers: 3
gateway:
  host: 0.0.0.0
  port: 0
  token: secret
  max_frame_bytes: 2MiB
  max_text_bytes: 1024
  max_connections: 50
  max_queued_bytes: 16KiB
  socket_send_buffer: 32KiB
  io_threads: 4
providers:
  - name: s
    kind: scripted
    model: m1
    script:
      - match: hi
        reply: "hello {input}"
        delay: 250ms
      - fail: rate_limit
        delay: 1s
      - crash: true
  - name: e
    kind: echo
pools:
  - name: main
    chain: [s, e]
    max_attempts: 3
threads:
  system_prompt: Be brief.
  idle_timeout: 1h
  pool: main
  max_inbox: 5
  turn_timeout: 30s
supervision:
  root:
    strategy: rest_for_one
    max_restarts: 0
    period: 2m
    shutdown_timeout: 1s
    buffer: 0
    backoff:
      initial: 0s
      max: 0s
      multiplier: 1
      reset_after: 1m
      jitter: 0
  providers:
    strategy: one_for_all
    max_restarts: 1000000
    period: 1h
    shutdown_timeout: 250ms
    buffer: 1000000
    backoff:
      initial: 1s
      max: 1s
      multiplier: 3.5
      reset_after: 1h
      jitter: 1
  conversations:
    max_restarts: 7
    period: 3s
    shutdown_timeout: 100ms
    buffer: 5
    backoff:
      initial: 5ms
      max: 500ms
      multiplier: 1.25
      reset_after: 10s
      jitter: 0.05
logging:
  level: debug
  file: /tmp/keel.log
  format: json
shutdown:
  drain_timeout: 12s
storage:
  sync: false
)");
  CAF_REQUIRE(cfg);
  CAF_CHECK_EQUAL(cfg->name, "n.1_x-y");
  CAF_CHECK_EQUAL(cfg->data_dir, "/var/lib/keel");
  CAF_CHECK(cfg->scheduler == keel::scheduler_policy::stealing);
  CAF_CHECK_EQUAL(cfg->workers, 3u);
  CAF_CHECK_EQUAL(cfg->gateway.host, "0.0.0.0");
  CAF_CHECK_EQUAL(cfg->gateway.port, 0u);
  CAF_CHECK_EQUAL(cfg->gateway.token, "secret");
  CAF_CHECK_EQUAL(cfg->gateway.max_frame_bytes, 2u << 20);
  CAF_CHECK_EQUAL(cfg->gateway.max_text_bytes, 1024u);
  CAF_CHECK_EQUAL(cfg->gateway.max_connections, 50u);
  CAF_CHECK_EQUAL(cfg->gateway.max_queued_bytes, 16u * 1024);
  CAF_CHECK_EQUAL(cfg->gateway.socket_send_buffer, 32u * 1024);
  CAF_CHECK_EQUAL(cfg->gateway.io_threads, 4u);
  CAF_REQUIRE_EQUAL(cfg->providers.size(), 2u);
  auto& s = cfg->providers[0];
  CAF_CHECK_EQUAL(s.name, "s");
  CAF_CHECK_EQUAL(s.kind, "scripted");
  CAF_CHECK_EQUAL(s.model, "m1");
  CAF_REQUIRE_EQUAL(s.script.size(), 3u);
  CAF_CHECK_EQUAL(s.script[0].match, "hi");
  CAF_CHECK_EQUAL(s.script[0].reply, "hello {input}");
  CAF_CHECK_EQUAL(s.script[0].delay, caf::timespan{250ms});
  CAF_CHECK_EQUAL(s.script[0].fail, "");
  CAF_CHECK_EQUAL(s.script[0].crash, false);
  CAF_CHECK_EQUAL(s.script[1].fail, "rate_limit");
  CAF_CHECK_EQUAL(s.script[1].delay, caf::timespan{1s});
  CAF_CHECK_EQUAL(s.script[2].crash, true);
  CAF_CHECK_EQUAL(cfg->providers[1].kind, "echo");
  CAF_CHECK(cfg->providers[1].script.empty());
  CAF_REQUIRE_EQUAL(cfg->pools.size(), 1u);
  CAF_CHECK_EQUAL(cfg->pools[0].name, "main");
  CAF_CHECK_EQUAL(cfg->pools[0].chain, (std::vector<std::string>{"s", "e"}));
  CAF_CHECK_EQUAL(cfg->pools[0].retry.max_attempts, 3u);
  CAF_CHECK_EQUAL(cfg->threads.system_prompt, "Be brief.");
  CAF_CHECK_EQUAL(cfg->threads.idle_timeout, caf::timespan{1h});
  CAF_CHECK_EQUAL(cfg->threads.pool, "main");
  CAF_CHECK_EQUAL(cfg->threads.max_inbox, 5u);
  CAF_CHECK_EQUAL(cfg->threads.turn_timeout, caf::timespan{30s});
  auto& root = cfg->supervision.root;
  CAF_CHECK_EQUAL(to_string(root.strategy), "rest_for_one");
  CAF_CHECK_EQUAL(root.max_restarts, 0u);
  CAF_CHECK_EQUAL(root.period, caf::timespan{2min});
  CAF_CHECK_EQUAL(root.shutdown_timeout, caf::timespan{1s});
  CAF_CHECK_EQUAL(root.buffer, 0u);
  CAF_CHECK_EQUAL(root.backoff.initial, caf::timespan{0});
  CAF_CHECK_EQUAL(root.backoff.max, caf::timespan{0});
  CAF_CHECK_EQUAL(root.backoff.multiplier, 1.0);
  CAF_CHECK_EQUAL(root.backoff.reset_after, caf::timespan{1min});
  CAF_CHECK_EQUAL(root.backoff.jitter, 0.0);
  auto& prov = cfg->supervision.providers;
  CAF_CHECK_EQUAL(to_string(prov.strategy), "one_for_all");
  CAF_CHECK_EQUAL(prov.max_restarts, 1000000u);
  CAF_CHECK_EQUAL(prov.period, caf::timespan{1h});
  CAF_CHECK_EQUAL(prov.shutdown_timeout, caf::timespan{250ms});
  CAF_CHECK_EQUAL(prov.buffer, 1000000u);
  CAF_CHECK_EQUAL(prov.backoff.initial, caf::timespan{1s});
  CAF_CHECK_EQUAL(prov.backoff.max, caf::timespan{1s});
  CAF_CHECK_EQUAL(prov.backoff.multiplier, 3.5);
  CAF_CHECK_EQUAL(prov.backoff.reset_after, caf::timespan{1h});
  CAF_CHECK_EQUAL(prov.backoff.jitter, 1.0);
  auto& conv = cfg->supervision.conversations;
  CAF_CHECK_EQUAL(to_string(conv.strategy), "one_for_one");
  CAF_CHECK_EQUAL(conv.max_restarts, 7u);
  CAF_CHECK_EQUAL(conv.period, caf::timespan{3s});
  CAF_CHECK_EQUAL(conv.shutdown_timeout, caf::timespan{100ms});
  CAF_CHECK_EQUAL(conv.buffer, 5u);
  CAF_CHECK_EQUAL(conv.backoff.initial, caf::timespan{5ms});
  CAF_CHECK_EQUAL(conv.backoff.max, caf::timespan{500ms});
  CAF_CHECK_EQUAL(conv.backoff.multiplier, 1.25);
  CAF_CHECK_EQUAL(conv.backoff.reset_after, caf::timespan{10s});
  CAF_CHECK_EQUAL(conv.backoff.jitter, 0.05);
  CAF_CHECK_EQUAL(cfg->logging.level, "debug");
  CAF_CHECK_EQUAL(cfg->logging.file, "/tmp/keel.log");
  CAF_CHECK_EQUAL(cfg->logging.format, "json");
  CAF_CHECK_EQUAL(cfg->shutdown.drain_timeout, caf::timespan{12s});
  CAF_CHECK_EQUAL(cfg->storage.sync, false);
  CAF_CHECK_EQUAL(cfg->find_provider("e"), &cfg->providers[1]);
  CAF_CHECK_EQUAL(cfg->find_provider("x"), nullptr);
  CAF_CHECK_EQUAL(cfg->find_pool("main"), &cfg->pools[0]);
  CAF_CHECK_EQUAL(cfg->find_pool("default"), nullptr);
}

CAF_TEST(scalars are read by the type the key expects) {
  auto cfg = parse("node:\n  name: 123\nstorage:\n  sync: FALSE\n"
                   "gateway:\n  port: \"81\"\n  token: 0x1F\n");
  CAF_REQUIRE(cfg);
  CAF_CHECK_EQUAL(cfg->name, "123");
  CAF_CHECK_EQUAL(cfg->storage.sync, false);
  CAF_CHECK_EQUAL(cfg->gateway.port, 81u);
  CAF_CHECK_EQUAL(cfg->gateway.token, "0x1F");
}

// -- merge rules --------------------------------------------------------------

CAF_TEST(providers without pools form the default pool in order) {
  auto cfg = parse(R"(providers:
  - name: b
    kind: echo
  - name: a
    kind: echo
)");
  CAF_REQUIRE(cfg);
  CAF_CHECK(cfg->find_provider("echo") == nullptr);
  CAF_REQUIRE_EQUAL(cfg->pools.size(), 1u);
  CAF_CHECK_EQUAL(cfg->pools[0].name, "default");
  CAF_CHECK_EQUAL(cfg->pools[0].chain, (std::vector<std::string>{"b", "a"}));
}

CAF_TEST(pools without providers use the default echo provider) {
  auto cfg = parse(R"(pools:
  - name: p
    chain: [echo]
threads:
  pool: p
)");
  CAF_REQUIRE(cfg);
  CAF_CHECK_EQUAL(cfg->providers.size(), 1u);
  CAF_CHECK_EQUAL(cfg->pools.size(), 1u);
  CAF_CHECK(cfg->find_pool("default") == nullptr);
  CAF_CHECK_EQUAL(error_of("pools:\n  - name: p\n    chain: [x]\n"),
                  "node.yaml:3: pools[0].chain[0]: unknown provider \"x\" "
                  "(expected echo)");
}

// -- structure errors ---------------------------------------------------------

CAF_TEST(unknown keys are errors with a suggestion when close) {
  CAF_CHECK_EQUAL(error_of("node:\n  name: a\n\ngatway:\n  port: 1\n"),
                  "node.yaml:4: gatway: unknown key (did you mean gateway?)");
  CAF_CHECK_EQUAL(error_of("gateway:\n  max_frame_byte: 2048\n"),
                  "node.yaml:2: gateway.max_frame_byte: unknown key (did you "
                  "mean max_frame_bytes?)");
  CAF_CHECK_EQUAL(error_of("node:\n  colour: red\n"),
                  "node.yaml:2: node.colour: unknown key (expected name, "
                  "data_dir, scheduler or workers)");
  CAF_CHECK_EQUAL(error_of("providers:\n  - name: a\n    kind: echo\n"
                           "    modle: x\n"),
                  "node.yaml:4: providers[0].modle: unknown key (did you mean "
                  "model?)");
  CAF_CHECK_EQUAL(error_of(
                    "providers:\n  - name: a\n    kind: scripted\n"
                    "    script:\n      - reply: x\n        dealy: 1s\n"),
                  "node.yaml:6: providers[0].script[0].dealy: unknown key "
                  "(did you mean delay?)");
}

CAF_TEST(duplicate keys are errors) {
  CAF_CHECK_EQUAL(error_of("gateway:\n  port: 1\n  port: 2\n"),
                  "node.yaml:3: gateway.port: duplicate key (first given on "
                  "line 2)");
}

CAF_TEST(the document must be a mapping) {
  CAF_CHECK_EQUAL(
    error_of("- a\n- b\n"),
    "node.yaml:1: expected a mapping of top-level keys (node, "
    "gateway, providers, pools, tools, threads, agents, supervision, "
    "logging, shutdown, storage, cluster, chaos, owner or delivery), got a "
    "list");
  CAF_CHECK_EQUAL(
    error_of("hello\n"),
    "node.yaml:1: expected a mapping of top-level keys (node, "
    "gateway, providers, pools, tools, threads, agents, supervision, "
    "logging, shutdown, storage, cluster, chaos, owner or delivery), got "
    "\"hello\"");
}

CAF_TEST(wrong types are errors) {
  CAF_CHECK_EQUAL(error_of("gateway: 5\n"),
                  "node.yaml:1: gateway: expected a mapping, got \"5\"");
  CAF_CHECK_EQUAL(error_of("gateway:\n  host: [a, b]\n"),
                  "node.yaml:2: gateway.host: expected a string, got a list");
  CAF_CHECK_EQUAL(error_of("providers:\n  name: x\n"),
                  "node.yaml:2: providers: expected a list of providers, got "
                  "a mapping");
  CAF_CHECK_EQUAL(error_of("providers:\n  - echo\n"),
                  "node.yaml:2: providers[0]: expected a mapping, got "
                  "\"echo\"");
  CAF_CHECK_EQUAL(error_of("pools:\n  - name: p\n    chain: echo\n"),
                  "node.yaml:3: pools[0].chain: expected a list of provider "
                  "names, got \"echo\"");
  CAF_CHECK_EQUAL(error_of("pools:\n  - name: p\n    chain: [{a: 1}]\n"),
                  "node.yaml:3: pools[0].chain[0]: expected a non-empty name, "
                  "got a mapping");
  CAF_CHECK_EQUAL(error_of("storage:\n  sync: yes\n"),
                  "node.yaml:2: storage.sync: expected true or false, got "
                  "\"yes\"");
  CAF_CHECK_EQUAL(error_of("threads:\n  max_inbox: {a: 1}\n"),
                  "node.yaml:2: threads.max_inbox: expected an integer >= 1, "
                  "got a mapping");
  CAF_CHECK_EQUAL(error_of("shutdown:\n  drain_timeout: 0s\n"),
                  "node.yaml:2: shutdown.drain_timeout: expected a positive "
                  "duration such as \"250ms\", \"5s\", \"2m\" or \"1h\", "
                  "got \"0s\"");
  CAF_CHECK_EQUAL(error_of("logging:\n  format: xml\n"),
                  "node.yaml:2: logging.format: unknown value \"xml\" "
                  "(expected text or json)");
}

CAF_TEST(missing required fields point at the parent mapping) {
  CAF_CHECK_EQUAL(error_of("providers:\n  - name: a\n    kind: echo\n"
                           "  - kind: echo\n    model: m\n"),
                  "node.yaml:4: providers[1].name: missing required key "
                  "(expected a non-empty provider name)");
  CAF_CHECK_EQUAL(error_of("providers:\n  - name: a\n"),
                  "node.yaml:2: providers[0].kind: missing required key "
                  "(expected echo, scripted, openai or anthropic)");
  CAF_CHECK_EQUAL(error_of("providers:\n  - name: a\n    kind:\n"),
                  "node.yaml:3: providers[0].kind: missing required key "
                  "(expected echo, scripted, openai or anthropic)");
  CAF_CHECK_EQUAL(error_of("pools:\n  - name: p\n"),
                  "node.yaml:2: pools[0].chain: missing required key "
                  "(expected a non-empty list of provider names)");
  CAF_CHECK_EQUAL(error_of("pools:\n  - chain: [echo]\n"),
                  "node.yaml:2: pools[0].name: missing required key "
                  "(expected a non-empty pool name)");
}

CAF_TEST(yaml syntax errors name the line and the reason) {
  CAF_CHECK_EQUAL(error_of("gateway:\n  port: [1,\n"),
                  "node.yaml:3: YAML syntax error: end of sequence flow not "
                  "found");
  CAF_CHECK_EQUAL(error_of("a: b: c\n"),
                  "node.yaml:1: YAML syntax error: illegal map value");
  CAF_CHECK_EQUAL(error_of("gateway:\n  port: 1\n---\ngateway:\n  port: 2\n"),
                  "node.yaml:4: expected a single YAML document, got 2");
  // Text where no document can start: refused at once, not parsed as an
  // endless stream of empty documents.
  CAF_CHECK_EQUAL(error_of(","),
                  "node.yaml:1: YAML syntax error: unexpected ','");
  CAF_CHECK_EQUAL(error_of("node:\n  name: a\n---\n,"),
                  "node.yaml:4: YAML syntax error: unexpected ','");
}

// -- bad values ---------------------------------------------------------------

CAF_TEST(integers out of range or malformed are errors) {
  CAF_CHECK_EQUAL(error_of("node:\n  name: a\ngateway:\n  port: abc\n"),
                  "node.yaml:4: gateway.port: expected an integer in "
                  "0..65535, got \"abc\"");
  CAF_CHECK_EQUAL(error_of("gateway:\n  port: 65536\n"),
                  "node.yaml:2: gateway.port: expected an integer in "
                  "0..65535, got \"65536\"");
  CAF_CHECK_EQUAL(error_of("gateway:\n  port: -1\n"),
                  "node.yaml:2: gateway.port: expected an integer in "
                  "0..65535, got \"-1\"");
  CAF_CHECK_EQUAL(error_of("gateway:\n  port: 80.5\n"),
                  "node.yaml:2: gateway.port: expected an integer in "
                  "0..65535, got \"80.5\"");
  CAF_CHECK_EQUAL(error_of("node:\n  scheduler: fair\n"),
                  "node.yaml:2: node.scheduler: unknown value \"fair\" "
                  "(expected sharing or stealing)");
  CAF_CHECK_EQUAL(error_of("node:\n  workers: 300\n"),
                  "node.yaml:2: node.workers: expected an integer in "
                  "0..256, got \"300\"");
  CAF_CHECK_EQUAL(error_of("gateway:\n  io_threads: 0\n"),
                  "node.yaml:2: gateway.io_threads: expected an integer in "
                  "1..64, got \"0\"");
  CAF_CHECK_EQUAL(error_of("gateway:\n  io_threads: 65\n"),
                  "node.yaml:2: gateway.io_threads: expected an integer in "
                  "1..64, got \"65\"");
  CAF_CHECK_EQUAL(error_of("gateway:\n  max_connections: 0\n"),
                  "node.yaml:2: gateway.max_connections: expected an integer "
                  "in 1..1000000, got \"0\"");
  CAF_CHECK_EQUAL(error_of("threads:\n  max_inbox: 99999999999999999999\n"),
                  "node.yaml:2: threads.max_inbox: expected an integer >= 1, "
                  "got \"99999999999999999999\" (too large)");
  CAF_CHECK_EQUAL(error_of("pools:\n  - name: p\n    chain: [echo]\n"
                           "    max_attempts: 0\nthreads:\n  pool: p\n"),
                  "node.yaml:4: pools[0].max_attempts: expected an integer in "
                  "1..100, got \"0\"");
}

CAF_TEST(per connection request and subscription caps are read and checked) {
  auto defaults = parse("");
  CAF_REQUIRE_EQUAL(outcome(defaults), "none");
  CAF_CHECK_EQUAL(defaults->gateway.max_requests_in_flight, 128u);
  CAF_CHECK_EQUAL(defaults->gateway.max_subscriptions_per_connection, 1000u);
  auto cfg = parse("gateway:\n  max_requests_in_flight: 4\n"
                   "  max_subscriptions_per_connection: 10\n");
  CAF_REQUIRE_EQUAL(outcome(cfg), "none");
  CAF_CHECK_EQUAL(cfg->gateway.max_requests_in_flight, 4u);
  CAF_CHECK_EQUAL(cfg->gateway.max_subscriptions_per_connection, 10u);
  CAF_CHECK_EQUAL(error_of("gateway:\n  max_requests_in_flight: 0\n"),
                  "node.yaml:2: gateway.max_requests_in_flight: expected an "
                  "integer in 1..100000, got \"0\"");
  CAF_CHECK_EQUAL(
    error_of("gateway:\n  max_subscriptions_per_connection: 0\n"),
    "node.yaml:2: gateway.max_subscriptions_per_connection: expected an "
    "integer in 1..1000000, got \"0\"");
}

CAF_TEST(sizes take KiB MiB and GiB and have lower bounds) {
  CAF_CHECK_EQUAL(error_of("gateway:\n  max_frame_bytes: 512\n"),
                  "node.yaml:2: gateway.max_frame_bytes: expected a size in "
                  "bytes >= 1024 (an integer, or a string like \"64KiB\" or "
                  "\"1MiB\"), got \"512\"");
  CAF_CHECK_EQUAL(error_of("gateway:\n  max_frame_bytes: 64kb\n"),
                  "node.yaml:2: gateway.max_frame_bytes: expected a size in "
                  "bytes >= 1024 (an integer, or a string like \"64KiB\" or "
                  "\"1MiB\"), got \"64kb\"");
  CAF_CHECK_EQUAL(error_of("gateway:\n  max_text_bytes: 2MiB\n"),
                  "node.yaml:2: gateway.max_text_bytes: expected at most "
                  "gateway.max_frame_bytes (1048576), got 2097152");
  // The check blames the key that was written when only one of them was.
  CAF_CHECK_EQUAL(error_of("gateway:\n  host: h\n  max_frame_bytes: 32KiB\n"),
                  "node.yaml:3: gateway.max_text_bytes: expected at most "
                  "gateway.max_frame_bytes (32768), got 65536");
  auto cfg = parse("gateway:\n  max_frame_bytes: 2GiB\n"
                   "  max_text_bytes: \"4096\"\n");
  CAF_REQUIRE(cfg);
  CAF_CHECK_EQUAL(cfg->gateway.max_frame_bytes, size_t{2} << 30);
  CAF_CHECK_EQUAL(cfg->gateway.max_text_bytes, 4096u);
}

CAF_TEST(parse_size accepts integers and binary units only) {
  CAF_CHECK_EQUAL(parse_size("0"), size_t{0});
  CAF_CHECK_EQUAL(parse_size("123"), size_t{123});
  CAF_CHECK_EQUAL(parse_size("64KiB"), size_t{65536});
  CAF_CHECK_EQUAL(parse_size("1MiB"), size_t{1} << 20);
  CAF_CHECK_EQUAL(parse_size("3GiB"), size_t{3} << 30);
  for (auto bad : {"", "KiB", "-1", "+1", "1.5MiB", "64kb", "64 KiB", "64KiBs",
                   "1B", "99999999999999999999", "17179869184GiB"})
    CAF_CHECK_EQUAL(parse_size(bad), std::nullopt);
}

CAF_TEST(parse_duration requires a unit) {
  CAF_CHECK_EQUAL(parse_duration("7ns"), caf::timespan{7ns});
  CAF_CHECK_EQUAL(parse_duration("10us"), caf::timespan{10us});
  CAF_CHECK_EQUAL(parse_duration("250ms"), caf::timespan{250ms});
  CAF_CHECK_EQUAL(parse_duration("0s"), caf::timespan{0});
  CAF_CHECK_EQUAL(parse_duration("5s"), caf::timespan{5s});
  CAF_CHECK_EQUAL(parse_duration("2m"), caf::timespan{2min});
  CAF_CHECK_EQUAL(parse_duration("1h"), caf::timespan{1h});
  for (auto bad :
       {"", "5", "s", "-1s", "1.5s", "5 s", "5sec", "5S", "1d", "9999999999h"})
    CAF_CHECK_EQUAL(parse_duration(bad), std::nullopt);
}

CAF_TEST(render_duration picks the largest whole unit and reads back) {
  CAF_CHECK_EQUAL(render_duration(caf::timespan{0}), "0s");
  CAF_CHECK_EQUAL(render_duration(caf::timespan{7ns}), "7ns");
  CAF_CHECK_EQUAL(render_duration(caf::timespan{1500us}), "1500us");
  CAF_CHECK_EQUAL(render_duration(caf::timespan{10ms}), "10ms");
  CAF_CHECK_EQUAL(render_duration(caf::timespan{120s}), "2m");
  CAF_CHECK_EQUAL(render_duration(caf::timespan{90min}), "90m");
  CAF_CHECK_EQUAL(render_duration(caf::timespan{3h}), "3h");
  for (auto x : {caf::timespan{1ns}, caf::timespan{1001us}, caf::timespan{61s},
                 caf::timespan{25h}})
    CAF_CHECK_EQUAL(parse_duration(render_duration(x)), x);
}

CAF_TEST(durations must have a unit and be positive where required) {
  CAF_CHECK_EQUAL(error_of("threads:\n  idle_timeout: 300\n"),
                  "node.yaml:2: threads.idle_timeout: expected a positive "
                  "duration such as \"250ms\", \"5s\", \"2m\" or \"1h\", got "
                  "\"300\" (a unit is required)");
  CAF_CHECK_EQUAL(error_of("threads:\n  idle_timeout: soon\n"),
                  "node.yaml:2: threads.idle_timeout: expected a positive "
                  "duration such as \"250ms\", \"5s\", \"2m\" or \"1h\", got "
                  "\"soon\"");
  CAF_CHECK_EQUAL(error_of("threads:\n  idle_timeout: 0s\n"),
                  "node.yaml:2: threads.idle_timeout: expected a positive "
                  "duration such as \"250ms\", \"5s\", \"2m\" or \"1h\", got "
                  "\"0s\"");
  CAF_CHECK_EQUAL(error_of("threads:\n  turn_timeout: 0ms\n"),
                  "node.yaml:2: threads.turn_timeout: expected a positive "
                  "duration such as \"250ms\", \"5s\", \"2m\" or \"1h\", got "
                  "\"0ms\"");
  CAF_CHECK_EQUAL(error_of(
                    "providers:\n  - name: s\n    kind: scripted\n"
                    "    script:\n      - reply: x\n        delay: -5s\n"),
                  "node.yaml:6: providers[0].script[0].delay: expected a "
                  "duration such as \"250ms\", \"5s\", \"2m\" or \"1h\", got "
                  "\"-5s\"");
  // A zero delay is fine.
  CAF_CHECK(parse("providers:\n  - name: s\n    kind: scripted\n"
                  "    script:\n      - reply: x\n        delay: 0ms\n"));
}

CAF_TEST(names and strings are checked) {
  CAF_CHECK_EQUAL(error_of("node:\n  name: my node\n"),
                  "node.yaml:2: node.name: expected 1 to 64 characters from "
                  "A-Z, a-z, 0-9, '.', '_' and '-', got \"my node\"");
  CAF_CHECK_EQUAL(error_of("node:\n  name: \"\"\n"),
                  "node.yaml:2: node.name: expected 1 to 64 characters from "
                  "A-Z, a-z, 0-9, '.', '_' and '-', got \"\"");
  CAF_CHECK_EQUAL(error_of("node:\n  name: " + std::string(65, 'a') + "\n"),
                  "node.yaml:2: node.name: expected 1 to 64 characters from "
                  "A-Z, a-z, 0-9, '.', '_' and '-', got \""
                    + std::string(60, 'a') + "...\"");
  CAF_CHECK(parse("node:\n  name: " + std::string(64, 'a') + "\n"));
  // Shortened values are cut between characters, not inside one.
  CAF_CHECK_EQUAL(
    error_of("logging:\n  level: " + std::string(59, 'x') + "\xC3\xA9\n"),
    "node.yaml:2: logging.level: unknown value \"" + std::string(59, 'x')
      + "...\" (expected trace, debug, info, warn, error or "
        "off)");
  CAF_CHECK_EQUAL(error_of("node:\n  data_dir: ''\n"),
                  "node.yaml:2: node.data_dir: expected a non-empty folder "
                  "path, got \"\"");
  CAF_CHECK_EQUAL(error_of("gateway:\n  host: \"\"\n"),
                  "node.yaml:2: gateway.host: expected a non-empty host name "
                  "or address, got \"\"");
  CAF_CHECK_EQUAL(error_of("logging:\n  level: loud\n"),
                  "node.yaml:2: logging.level: unknown value \"loud\" "
                  "(expected trace, debug, info, warn, error or off)");
  // Control characters never break the one-line message.
  CAF_CHECK_EQUAL(error_of("logging:\n  level: \"a\\nb\"\n"),
                  "node.yaml:2: logging.level: unknown value \"a\\nb\" "
                  "(expected trace, debug, info, warn, error or off)");
}

CAF_TEST(providers are checked) {
  CAF_CHECK_EQUAL(error_of(R"(node:
  name: a
providers:
  - name: echo
    kind: echo
  - name: b
    kind: foo
)"),
                  "node.yaml:7: providers[1].kind: unknown value \"foo\" "
                  "(expected echo, scripted, openai or anthropic)");
  CAF_CHECK_EQUAL(error_of("providers:\n  - name: ''\n    kind: echo\n"),
                  "node.yaml:2: providers[0].name: expected a non-empty name, "
                  "got \"\"");
  CAF_CHECK_EQUAL(error_of("providers:\n  - name: a\n    kind: echo\n"
                           "  - name: a\n    kind: echo\n"),
                  "node.yaml:4: providers[1].name: duplicate provider name "
                  "\"a\" (also providers[0])");
  CAF_CHECK_EQUAL(error_of("providers: []\n"),
                  "node.yaml:1: providers: expected a non-empty list of "
                  "providers, got an empty list");
  CAF_CHECK_EQUAL(error_of("providers:\n  - name: a\n    kind: scripted\n"),
                  "node.yaml:2: providers[0].script: a scripted provider "
                  "needs a non-empty list of script steps");
  CAF_CHECK_EQUAL(error_of("providers:\n  - name: a\n    kind: scripted\n"
                           "    script: []\n"),
                  "node.yaml:4: providers[0].script: a scripted provider "
                  "needs a non-empty list of script steps");
  CAF_CHECK_EQUAL(error_of("providers:\n  - name: a\n    kind: echo\n"
                           "    script:\n      - reply: x\n"),
                  "node.yaml:4: providers[0].script: echo providers take no "
                  "script");
}

CAF_TEST(script steps are checked) {
  auto step = [](const std::string& body) {
    return error_of("providers:\n  - name: s\n    kind: scripted\n"
                    "    script:\n      - reply: ok\n"
                    + body);
  };
  CAF_CHECK_EQUAL(step("      - fail: nope\n"),
                  "node.yaml:6: providers[0].script[1].fail: unknown value "
                  "\"nope\" (expected auth, rate_limit, billing, timeout, "
                  "overloaded, model_not_found, context_overflow, "
                  "invalid_request, action_not_supported, format or unknown)");
  CAF_CHECK_EQUAL(step("      - match: x\n        delay: 1s\n"),
                  "node.yaml:6: providers[0].script[1]: a step needs one of "
                  "reply, fail or crash: true");
  CAF_CHECK_EQUAL(step("      - reply: x\n        fail: auth\n"),
                  "node.yaml:6: providers[0].script[1]: a step takes only one "
                  "of reply, fail and crash: true");
  CAF_CHECK_EQUAL(step("      - crash: maybe\n"),
                  "node.yaml:6: providers[0].script[1].crash: expected true "
                  "or false, got \"maybe\"");
  CAF_CHECK_EQUAL(step("      - 42\n"),
                  "node.yaml:6: providers[0].script[1]: expected a mapping, "
                  "got \"42\"");
  // Every failure class is accepted; crash: false with a reply is a reply.
  for (auto cls : {"auth", "rate_limit", "billing", "timeout", "overloaded",
                   "model_not_found", "context_overflow", "invalid_request",
                   "format", "unknown"})
    CAF_CHECK_EQUAL(step(std::string{"      - fail: "} + cls + "\n"),
                    "<parsed without error>");
  CAF_CHECK_EQUAL(step("      - reply: ''\n        crash: false\n"),
                  "<parsed without error>");
}

CAF_TEST(pools are checked) {
  CAF_CHECK_EQUAL(error_of("pools:\n  - name: default\n    chain: []\n"),
                  "node.yaml:3: pools[0].chain: expected a non-empty list of "
                  "provider names, got an empty list");
  CAF_CHECK_EQUAL(error_of("pools:\n  - name: default\n    chain: [echo]\n"
                           "  - name: default\n    chain: [echo]\n"),
                  "node.yaml:4: pools[1].name: duplicate pool name "
                  "\"default\" (also pools[0])");
  CAF_CHECK_EQUAL(error_of("pools:\n  - name: default\n    chain:\n"
                           "      - echo\n      - ehco\n"),
                  "node.yaml:5: pools[0].chain[1]: unknown provider \"ehco\" "
                  "(expected echo)");
  CAF_CHECK_EQUAL(error_of("pools:\n  - name: default\n"
                           "    chain: [echo, echo]\n"),
                  "node.yaml:3: pools[0].chain[1]: provider \"echo\" is "
                  "listed twice");
  CAF_CHECK_EQUAL(error_of("pools: []\n"),
                  "node.yaml:1: pools: expected a non-empty list of pools, "
                  "got an empty list");
}

CAF_TEST(threads pool must exist) {
  CAF_CHECK_EQUAL(error_of("threads:\n  pool: fast\n"),
                  "node.yaml:2: threads.pool: unknown pool \"fast\" "
                  "(expected default)");
  // Left at its default, the error points at the pools that lack it.
  CAF_CHECK_EQUAL(error_of("node:\n  name: a\npools:\n  - name: p\n"
                           "    chain: [echo]\n"),
                  "node.yaml:3: threads.pool: unknown pool \"default\" "
                  "(expected p); threads.pool defaults to \"default\", so set "
                  "threads.pool or define a pool named \"default\"");
}

// -- supervision --------------------------------------------------------------

namespace {

/// The error of a `supervision:` section holding `body` (indented by 2).
std::string supervision_error(const std::string& body) {
  return error_of("supervision:\n" + body);
}

constexpr const char* duration_examples
  = "such as \"250ms\", \"5s\", \"2m\" or \"1h\"";

} // namespace

CAF_TEST(supervision defaults ride out a few crashes per supervisor) {
  auto sup = default_config().supervision;
  CAF_CHECK_EQUAL(to_string(sup.root.strategy), "one_for_one");
  CAF_CHECK_EQUAL(sup.root.max_restarts, 3u);
  CAF_CHECK_EQUAL(sup.root.period, caf::timespan{5s});
  CAF_CHECK_EQUAL(to_string(sup.providers.strategy), "one_for_one");
  CAF_CHECK_EQUAL(sup.providers.max_restarts, 5u);
  CAF_CHECK_EQUAL(sup.providers.period, caf::timespan{10s});
  CAF_CHECK_EQUAL(to_string(sup.conversations.strategy), "one_for_one");
  CAF_CHECK_EQUAL(sup.conversations.max_restarts, 10u);
  CAF_CHECK_EQUAL(sup.conversations.period, caf::timespan{10s});
  for (auto* x : {&sup.root, &sup.providers, &sup.conversations}) {
    CAF_CHECK_EQUAL(x->shutdown_timeout, caf::timespan{5s});
    CAF_CHECK_EQUAL(x->buffer, 1000u);
    CAF_CHECK_EQUAL(x->backoff.initial, caf::timespan{10ms});
    CAF_CHECK_EQUAL(x->backoff.max, caf::timespan{2s});
    CAF_CHECK_EQUAL(x->backoff.multiplier, 2.0);
    CAF_CHECK_EQUAL(x->backoff.reset_after, caf::timespan{30s});
    CAF_CHECK_EQUAL(x->backoff.jitter, 0.2);
  }
  // A supervisor_settings on its own keeps OTP's intensity: 1 in 5 s.
  supervisor_settings otp;
  CAF_CHECK_EQUAL(otp.max_restarts, 1u);
  CAF_CHECK_EQUAL(otp.period, caf::timespan{5s});
}

CAF_TEST(restart strategies round trip through their names) {
  for (auto x : {restart_strategy::one_for_one, restart_strategy::one_for_all,
                 restart_strategy::rest_for_one}) {
    auto parsed = parse_restart_strategy(to_string(x));
    CAF_REQUIRE(parsed.has_value());
    CAF_CHECK(*parsed == x);
  }
  CAF_CHECK_EQUAL(to_string(restart_strategy::rest_for_one), "rest_for_one");
  for (auto bad : {"", "one-for-one", "ONE_FOR_ONE", "simple_one_for_one"})
    CAF_CHECK(!parse_restart_strategy(bad).has_value());
}

CAF_TEST(supervisor settings merge key by key over the defaults) {
  auto def = default_config().supervision;
  auto cfg = parse("supervision: {root: {max_restarts: 5}}\n");
  CAF_REQUIRE(cfg);
  auto expected = def.root;
  expected.max_restarts = 5;
  check_same(cfg->supervision.root, expected);
  check_same(cfg->supervision.providers, def.providers);
  check_same(cfg->supervision.conversations, def.conversations);
  // Inside backoff too; a supervisor written without a value is not set.
  cfg = parse("supervision:\n  root:\n  providers:\n    backoff:\n"
              "      max: 10s\n  conversations:\n    buffer: 0\n");
  CAF_REQUIRE(cfg);
  check_same(cfg->supervision.root, def.root);
  expected = def.providers;
  expected.backoff.max = 10s;
  check_same(cfg->supervision.providers, expected);
  expected = def.conversations;
  expected.buffer = 0;
  check_same(cfg->supervision.conversations, expected);
  // Integers are numbers; values may come from the environment.
  cfg = parse("supervision:\n  root:\n    backoff:\n      multiplier: 3\n"
              "      jitter: ${J:-0.5}\n    strategy: ${S}\n",
              {{"S", "one_for_all"}});
  CAF_REQUIRE(cfg);
  CAF_CHECK_EQUAL(cfg->supervision.root.backoff.multiplier, 3.0);
  CAF_CHECK_EQUAL(cfg->supervision.root.backoff.jitter, 0.5);
  CAF_CHECK_EQUAL(to_string(cfg->supervision.root.strategy), "one_for_all");
}

CAF_TEST(supervision names its supervisors) {
  CAF_CHECK_EQUAL(supervision_error("  workers: {}\n"),
                  "node.yaml:2: supervision.workers: unknown key (expected "
                  "root, providers or conversations)");
  CAF_CHECK_EQUAL(supervision_error("  conversation: {}\n"),
                  "node.yaml:2: supervision.conversation: unknown key (did "
                  "you mean conversations?)");
  CAF_CHECK_EQUAL(error_of("supervision: 3\n"),
                  "node.yaml:1: supervision: expected a mapping, got \"3\"");
  CAF_CHECK_EQUAL(supervision_error("  root: [a]\n"),
                  "node.yaml:2: supervision.root: expected a mapping, got a "
                  "list");
  CAF_CHECK_EQUAL(supervision_error("  root:\n    intensity: 3\n"),
                  "node.yaml:3: supervision.root.intensity: unknown key "
                  "(expected strategy, max_restarts, period, "
                  "shutdown_timeout, buffer or backoff)");
  CAF_CHECK_EQUAL(supervision_error("  root:\n    backoff:\n"
                                    "      multiplyer: 2\n"),
                  "node.yaml:4: supervision.root.backoff.multiplyer: unknown "
                  "key (did you mean multiplier?)");
  CAF_CHECK_EQUAL(supervision_error("  root:\n    backoff: 10ms\n"),
                  "node.yaml:3: supervision.root.backoff: expected a mapping, "
                  "got \"10ms\"");
}

CAF_TEST(the old flat supervision keys are rejected) {
  CAF_CHECK_EQUAL(supervision_error("  max_restarts: 3\n"),
                  "node.yaml:2: supervision.max_restarts: unknown key "
                  "(expected root, providers or conversations)");
  CAF_CHECK_EQUAL(supervision_error("  period: 5s\n"),
                  "node.yaml:2: supervision.period: unknown key (expected "
                  "root, providers or conversations)");
}

CAF_TEST(strategies are checked) {
  CAF_CHECK_EQUAL(supervision_error("  root:\n    strategy: one_for_rest\n"),
                  "node.yaml:3: supervision.root.strategy: unknown value "
                  "\"one_for_rest\" (expected one_for_one, one_for_all or "
                  "rest_for_one)");
  CAF_CHECK_EQUAL(supervision_error("  providers:\n    strategy: [a]\n"),
                  "node.yaml:3: supervision.providers.strategy: expected one "
                  "of one_for_one, one_for_all or rest_for_one, got a list");
  // The dynamic supervisor has no choice, even when written as the default.
  for (auto value : {"one_for_one", "one_for_all", ""})
    CAF_CHECK_EQUAL(
      supervision_error(std::string{"  conversations:\n    max_restarts: 1\n"
                                    "    strategy: "}
                        + value + "\n"),
      "node.yaml:4: supervision.conversations.strategy: "
      "conversations is a dynamic supervisor; its strategy is "
      "always one_for_one (remove this key)");
}

CAF_TEST(intensity shutdown and buffer are checked) {
  CAF_CHECK_EQUAL(supervision_error("  root:\n    max_restarts: -1\n"),
                  "node.yaml:3: supervision.root.max_restarts: expected an "
                  "integer in 0..1000000, got \"-1\"");
  CAF_CHECK_EQUAL(supervision_error("  providers:\n"
                                    "    max_restarts: 1000001\n"),
                  "node.yaml:3: supervision.providers.max_restarts: expected "
                  "an integer in 0..1000000, got \"1000001\"");
  CAF_CHECK_EQUAL(supervision_error("  root:\n    period: 0s\n"),
                  std::string{"node.yaml:3: supervision.root.period: "
                              "expected a positive duration "}
                    + duration_examples + ", got \"0s\"");
  CAF_CHECK_EQUAL(supervision_error("  conversations:\n    period: 5\n"),
                  std::string{"node.yaml:3: supervision.conversations.period: "
                              "expected a positive duration "}
                    + duration_examples + ", got \"5\" (a unit is required)");
  CAF_CHECK_EQUAL(supervision_error("  root:\n    shutdown_timeout: 0ms\n"),
                  std::string{"node.yaml:3: supervision.root.shutdown_timeout: "
                              "expected a positive duration "}
                    + duration_examples + ", got \"0ms\"");
  CAF_CHECK_EQUAL(supervision_error("  root:\n    buffer: -1\n"),
                  "node.yaml:3: supervision.root.buffer: expected an integer "
                  "in 0..1000000, got \"-1\"");
  CAF_CHECK_EQUAL(supervision_error("  conversations:\n    buffer: 1000001\n"),
                  "node.yaml:3: supervision.conversations.buffer: expected an "
                  "integer in 0..1000000, got \"1000001\"");
  CAF_CHECK_EQUAL(supervision_error("  root:\n    buffer: 1KiB\n"),
                  "node.yaml:3: supervision.root.buffer: expected an integer "
                  "in 0..1000000, got \"1KiB\"");
}

CAF_TEST(backoff values are checked) {
  auto backoff_error = [](const std::string& body) {
    return supervision_error("  root:\n    backoff:\n" + body);
  };
  CAF_CHECK_EQUAL(backoff_error("      initial: -1s\n"),
                  std::string{"node.yaml:4: supervision.root.backoff.initial: "
                              "expected a duration "}
                    + duration_examples + ", got \"-1s\"");
  CAF_CHECK_EQUAL(backoff_error("      max: 1.5s\n"),
                  std::string{"node.yaml:4: supervision.root.backoff.max: "
                              "expected a duration "}
                    + duration_examples + ", got \"1.5s\"");
  CAF_CHECK_EQUAL(backoff_error("      reset_after: 0s\n"),
                  std::string{"node.yaml:4: supervision.root.backoff."
                              "reset_after: expected a positive duration "}
                    + duration_examples + ", got \"0s\"");
  for (auto bad :
       {"2x", "abc", "0.5", "-2", "nan", "inf", ".inf", "1,5", "\"\""})
    CAF_CHECK_EQUAL(
      backoff_error(std::string{"      multiplier: "} + bad + "\n"),
      "node.yaml:4: supervision.root.backoff.multiplier: "
      "expected a number >= 1, got "
        + (std::string_view{bad} == "\"\"" ? std::string{"\"\""}
                                           : "\"" + std::string{bad} + "\""));
  CAF_CHECK_EQUAL(backoff_error("      multiplier: {x: 1}\n"),
                  "node.yaml:4: supervision.root.backoff.multiplier: expected "
                  "a number >= 1, got a mapping");
  for (auto bad : {"1.5", "-0.1", "20%", "1.0.0"})
    CAF_CHECK_EQUAL(backoff_error(std::string{"      jitter: "} + bad + "\n"),
                    "node.yaml:4: supervision.root.backoff.jitter: expected a "
                    "number in 0..1, got \""
                      + std::string{bad} + "\"");
  CAF_CHECK_EQUAL(error_of("supervision:\n  root:\n    backoff:\n"
                           "      jitter: ${J}\n",
                           {{"J", "2"}}),
                  "node.yaml:4: supervision.root.backoff.jitter: expected a "
                  "number in 0..1, got \"2\" (from \"${J}\")");
}

CAF_TEST(backoff max must be at least backoff initial) {
  // Both written: the error points at max.
  CAF_CHECK_EQUAL(supervision_error("  providers:\n    backoff:\n"
                                    "      initial: 2s\n      max: 1500ms\n"),
                  "node.yaml:5: supervision.providers.backoff.max: expected "
                  "at least supervision.providers.backoff.initial (2s), got "
                  "1500ms");
  // Max left at its default (2s): the error points at initial.
  CAF_CHECK_EQUAL(supervision_error("  conversations:\n    backoff:\n"
                                    "      initial: 1m\n"),
                  "node.yaml:4: supervision.conversations.backoff.max: "
                  "expected at least supervision.conversations.backoff."
                  "initial (1m), got 2s");
  // Equal bounds mean a constant delay; zero means no delay at all.
  CAF_CHECK(parse("supervision:\n  root:\n    backoff: {initial: 2s, "
                  "max: 2s}\n"));
  CAF_CHECK(parse("supervision:\n  root:\n    backoff: {initial: 0s, "
                  "max: 0s}\n"));
}

// -- environment expansion ----------------------------------------------------

CAF_TEST(env references expand in values) {
  auto cfg = parse(
    R"(node:
  name: ${NAME}
  data_dir: ${HOME_DIR}/keel-${NAME}
gateway:
  port: ${PORT:-9999}
  token: "${TOKEN:-}"
  host: ${HOST:-localhost}
threads:
  system_prompt: "costs $$5, not ${PRICE:-$1}; $HOME stays"
  idle_timeout: ${IDLE:-1m}
)",
    {{"NAME", "n1"}, {"HOME_DIR", "/srv"}, {"HOST", ""}, {"IDLE", "90s"}});
  CAF_REQUIRE(cfg);
  CAF_CHECK_EQUAL(cfg->name, "n1");
  CAF_CHECK_EQUAL(cfg->data_dir, "/srv/keel-n1");
  CAF_CHECK_EQUAL(cfg->gateway.port, 9999u);
  CAF_CHECK_EQUAL(cfg->gateway.token, "");
  // Like the shell, :- also takes the default when the variable is empty.
  CAF_CHECK_EQUAL(cfg->gateway.host, "localhost");
  CAF_CHECK_EQUAL(cfg->threads.system_prompt, "costs $5, not $1; $HOME stays");
  CAF_CHECK_EQUAL(cfg->threads.idle_timeout, caf::timespan{90s});
}

CAF_TEST(a set but empty variable expands to nothing) {
  auto cfg = parse("gateway:\n  token: ${TOKEN}\n", {{"TOKEN", ""}});
  CAF_REQUIRE(cfg);
  CAF_CHECK_EQUAL(cfg->gateway.token, "");
}

CAF_TEST(env reference errors name the variable and the key) {
  CAF_CHECK_EQUAL(error_of("node:\n  name: a\ngateway:\n"
                           "  token: ${KEEL_TOKEN}\n"),
                  "node.yaml:4: gateway.token: environment variable "
                  "KEEL_TOKEN is not set (write ${KEEL_TOKEN:-default} to "
                  "make it optional)");
  CAF_CHECK_EQUAL(error_of("providers:\n  - name: p\n    kind: scripted\n"
                           "    script:\n      - reply: \"${R\"\n"),
                  "node.yaml:5: providers[0].script[0].reply: unterminated "
                  "\"${\" (expected ${VAR} or ${VAR:-default}; write $$ for a "
                  "literal $)");
  CAF_CHECK_EQUAL(error_of("gateway:\n  token: ${1X}\n"),
                  "node.yaml:2: gateway.token: invalid environment variable "
                  "reference \"${1X}\" (expected ${VAR} or ${VAR:-default} "
                  "with VAR made of letters, digits and _)");
  CAF_CHECK_EQUAL(error_of("gateway:\n  token: ${A-B}\n"),
                  "node.yaml:2: gateway.token: invalid environment variable "
                  "reference \"${A-B}\" (expected ${VAR} or ${VAR:-default} "
                  "with VAR made of letters, digits and _)");
  // A bad expanded value shows what it came from.
  CAF_CHECK_EQUAL(error_of("gateway:\n  port: ${PORT}\n", {{"PORT", "http"}}),
                  "node.yaml:2: gateway.port: expected an integer in "
                  "0..65535, got \"http\" (from \"${PORT}\")");
  CAF_CHECK_EQUAL(error_of("logging:\n  level: ${L:-loud}\n"),
                  "node.yaml:2: logging.level: unknown value \"loud\" (from "
                  "\"${L:-loud}\") (expected trace, debug, info, warn, error "
                  "or off)");
}

CAF_TEST(keys are not expanded) {
  CAF_CHECK_EQUAL(
    error_of("${KEY}: 1\n", {{"KEY", "node"}}),
    "node.yaml:1: ${KEY}: unknown key (expected node, gateway, "
    "providers, pools, tools, threads, agents, supervision, logging, "
    "shutdown, storage, cluster, chaos, owner or delivery)");
}

CAF_TEST(process_env reads the real environment) {
  auto env = process_env();
  CAF_REQUIRE(setenv("KEEL_CONFIG_TEST_VAR", "v1", 1) == 0);
  CAF_CHECK_EQUAL(env("KEEL_CONFIG_TEST_VAR"), std::string{"v1"});
  CAF_REQUIRE(unsetenv("KEEL_CONFIG_TEST_VAR") == 0);
  CAF_CHECK_EQUAL(env("KEEL_CONFIG_TEST_VAR"), std::nullopt);
}

// -- files --------------------------------------------------------------------

CAF_TEST(an unreadable file names the path and the reason) {
  temp_dir tmp;
  auto missing = (tmp.path() / "nope.yaml").string();
  auto res = load_config_file(missing, fake_env({}));
  CAF_REQUIRE(!res);
  CAF_CHECK_EQUAL(res.error(), ec::config_unreadable);
  CAF_CHECK_EQUAL(error_message(res.error()),
                  missing
                    + ": cannot read the file: No such file or "
                      "directory");
  auto dir = tmp.path().string();
  res = load_config_file(dir, fake_env({}));
  CAF_REQUIRE(!res);
  CAF_CHECK_EQUAL(res.error(), ec::config_unreadable);
  CAF_CHECK_EQUAL(error_message(res.error()),
                  dir + ": cannot read the file: Is a directory");
}

CAF_TEST(a loaded file names itself in errors and in source) {
  temp_dir tmp;
  auto path = (tmp.path() / "node.yaml").string();
  {
    std::ofstream out{path};
    out << "gateway:\n  port: 1234\n";
  }
  auto cfg = load_config_file(path, fake_env({}));
  CAF_REQUIRE(cfg);
  CAF_CHECK_EQUAL(cfg->gateway.port, 1234u);
  CAF_CHECK_EQUAL(cfg->source, path);
  {
    std::ofstream out{path};
    out << "gateway:\n  port: x\n";
  }
  auto res = load_config_file(path, fake_env({}));
  CAF_REQUIRE(!res);
  CAF_CHECK_EQUAL(res.error(), ec::config_invalid);
  CAF_CHECK_EQUAL(error_message(res.error()),
                  path
                    + ":2: gateway.port: expected an integer in 0..65535, "
                      "got \"x\"");
}

CAF_TEST(config default yaml is the embedded default) {
  auto path = (source_dir() / "config" / "default.yaml").string();
  auto cfg = load_config_file(path, fake_env({}));
  CAF_REQUIRE_EQUAL(outcome(cfg), "none");
  check_same(*cfg, default_config());
}

CAF_TEST(every file in config is valid) {
  auto dir = source_dir() / "config";
  size_t count = 0;
  for (auto& entry : std::filesystem::directory_iterator{dir}) {
    if (entry.path().extension() != ".yaml")
      continue;
    ++count;
    CAF_MESSAGE("loading " << entry.path());
    // No variables set: every reference in a shipped file needs a default.
    auto cfg = load_config_file(entry.path().string(), fake_env({}));
    CAF_CHECK_EQUAL(outcome(cfg), "none");
  }
  // default.yaml, example.yaml and scripted.yaml at least.
  CAF_CHECK_GREATER_OR_EQUAL(count, 3u);
}

CAF_TEST(config example yaml sets every section) {
  auto path = (source_dir() / "config" / "example.yaml").string();
  auto cfg = load_config_file(path, fake_env({{"KEEL_TOKEN", "t0k"}}));
  CAF_REQUIRE_EQUAL(outcome(cfg), "none");
  CAF_CHECK_EQUAL(cfg->gateway.token, "t0k");
  CAF_CHECK_EQUAL(cfg->providers.size(), 4u);
  // Three pools, and the one made for the researcher's models.
  CAF_CHECK_EQUAL(cfg->pools.size(), 4u);
  CAF_CHECK(cfg->find_pool("agent:researcher") != nullptr);
  CAF_CHECK_EQUAL(cfg->agents.size(), 2u);
  auto actor = cfg->find_provider("actor");
  CAF_REQUIRE(actor != nullptr);
  CAF_CHECK_EQUAL(actor->script.size(), 7u);
  auto gpt = cfg->find_provider("gpt");
  CAF_REQUIRE(gpt != nullptr);
  CAF_CHECK_EQUAL(gpt->headers.size(), 1u);
  auto cloud = cfg->find_pool("cloud");
  CAF_REQUIRE(cloud != nullptr);
  CAF_CHECK_EQUAL(cloud->breaker.cooldowns.get(error_class::rate_limit), 30s);
  CAF_CHECK_EQUAL(cloud->tools, std::vector<std::string>{"list_files"});
  CAF_REQUIRE_EQUAL(cfg->tools.size(), 2u);
  auto list_files = cfg->find_tool("list_files");
  CAF_REQUIRE(list_files != nullptr);
  CAF_CHECK_EQUAL(list_files->command,
                  (std::vector<std::string>{"ls", "-1", "--", "{folder}"}));
  auto schema = nlohmann::json::parse(list_files->parameters);
  CAF_CHECK_EQUAL(schema.at("properties").at("folder").at("type"), "string");
  CAF_CHECK_EQUAL(cfg->threads.tools, std::vector<std::string>{"today"});
  CAF_CHECK_EQUAL(cfg->threads.guard.per_tool.size(), 1u);
  CAF_CHECK(cfg->threads.compaction_enabled);
  CAF_CHECK_EQUAL(cfg->threads.agents.max_depth, 4u);
  CAF_CHECK_EQUAL(cfg->owner.contact, "support@example.com");
  CAF_CHECK_EQUAL(cfg->delivery.dead_letters.max_retries, 5u);
  CAF_CHECK_EQUAL(cfg->delivery.dead_letters.interval, 5min);
  CAF_CHECK_EQUAL(cfg->delivery.dead_letters.batch, 50u);
}

CAF_TEST(the owner and the dead letter schedule are read and checked) {
  auto cfg = parse("owner:\n  contact: ops@example.com\ndelivery:\n"
                   "  dead_letters:\n    max_retries: 2\n    interval: 30s\n"
                   "    batch: 7\n");
  CAF_REQUIRE_EQUAL(outcome(cfg), "none");
  CAF_CHECK_EQUAL(cfg->owner.contact, "ops@example.com");
  CAF_CHECK_EQUAL(cfg->delivery.dead_letters.max_retries, 2u);
  CAF_CHECK_EQUAL(cfg->delivery.dead_letters.interval, 30s);
  CAF_CHECK_EQUAL(cfg->delivery.dead_letters.batch, 7u);
  auto defaults = parse("{}\n");
  CAF_REQUIRE_EQUAL(outcome(defaults), "none");
  CAF_CHECK_EQUAL(defaults->owner.contact, "");
  CAF_CHECK_EQUAL(defaults->delivery.dead_letters.max_retries, 5u);
  CAF_CHECK_EQUAL(defaults->delivery.dead_letters.interval, 5min);
  CAF_CHECK_EQUAL(defaults->delivery.dead_letters.batch, 50u);
  CAF_CHECK_EQUAL(
    error_of("delivery:\n  dead_letters:\n    batch: 0\n"),
    "node.yaml:3: delivery.dead_letters.batch: expected an integer "
    ">= 1, got \"0\"");
  CAF_CHECK_EQUAL(error_of("delivery:\n  dead_letters:\n    every: 1s\n"),
                  "node.yaml:3: delivery.dead_letters.every: unknown key "
                  "(expected max_retries, interval or batch)");
}

CAF_TEST(outbound channels are read with the retry preset of their kind) {
  auto cfg = parse("delivery:\n  channels:\n"
                   "    - name: crm\n      kind: webhook\n"
                   "      url: https://crm.example.com/hook\n"
                   "      secret: s3cret\n      threads: [\"support-*\", ops]\n"
                   "      retry: {max_attempts: 5, base_delay: 2s}\n"
                   "      timeout: 3s\n"
                   "    - name: tg\n      kind: telegram\n"
                   "      token: \"1:x\"\n      chat_id: \"42\"\n"
                   "      threads: [\"*\"]\n");
  CAF_REQUIRE_EQUAL(outcome(cfg), "none");
  auto& channels = cfg->delivery.channels;
  CAF_REQUIRE_EQUAL(channels.size(), 2u);
  CAF_CHECK_EQUAL(channels[0].secret, "s3cret");
  CAF_CHECK_EQUAL(channels[0].retry.backoff.max_attempts, 5u);
  CAF_CHECK_EQUAL(channels[0].retry.backoff.base_delay, 2s);
  CAF_CHECK_EQUAL(channels[0].retry.backoff.max_delay, 30s);
  CAF_CHECK_EQUAL(channels[0].retry.send_timeout, 3s);
  CAF_CHECK(channels[1].kind == channel_kind::telegram);
  CAF_CHECK_EQUAL(channels[1].url, "https://api.telegram.org");
  CAF_CHECK_EQUAL(channels[1].parse_mode, "Markdown");
  CAF_CHECK_EQUAL(channels[1].retry.backoff.base_delay, 400ms);
  CAF_CHECK_EQUAL(channels[1].retry.min_retry_after, 400ms);
  CAF_CHECK(channels[1].retry.plain_text_fallback);
  CAF_CHECK_EQUAL(channels[1].retry.send_timeout, 10s);
  using names = std::vector<std::string>;
  CAF_CHECK_EQUAL(cfg->delivery.channels_of("support-7"), (names{"crm", "tg"}));
  CAF_CHECK_EQUAL(cfg->delivery.channels_of("ops"), (names{"crm", "tg"}));
  CAF_CHECK_EQUAL(cfg->delivery.channels_of("opsx"), names{"tg"});
}

CAF_TEST(bad outbound channels name the key) {
  auto channel = [](const std::string& body) {
    return "delivery:\n  channels:\n    - name: c\n" + body;
  };
  CAF_CHECK_EQUAL(error_of(channel("      kind: sms\n      threads: [a]\n")),
                  "node.yaml:4: delivery.channels[0].kind: unknown value "
                  "\"sms\" (expected webhook or telegram)");
  CAF_CHECK_EQUAL(
    error_of(channel("      kind: webhook\n      threads: [a]\n")),
    "node.yaml:3: delivery.channels[0].url: missing required "
    "key (expected an http:// or https:// URL)");
  CAF_CHECK_EQUAL(
    error_of(channel("      kind: webhook\n      url: ftp://x\n"
                     "      threads: [a]\n")),
    "node.yaml:5: delivery.channels[0].url: expected an http:// or https:// "
    "URL with a host, got \"ftp://x\"");
  CAF_CHECK_EQUAL(
    error_of(channel("      kind: webhook\n      url: http://h/\n"
                     "      token: t\n      threads: [a]\n")),
    "node.yaml:6: delivery.channels[0].token: only telegram channels take "
    "token");
  CAF_CHECK_EQUAL(
    error_of(channel("      kind: webhook\n      url: http://h/\n"
                     "      threads: [\"a/b\"]\n")),
    "node.yaml:6: delivery.channels[0].threads[0]: expected a thread id or a "
    "prefix of one ending in *, got \"a/b\"");
  CAF_CHECK_EQUAL(
    error_of(
      "delivery:\n  channels:\n"
      "    - {name: c, kind: webhook, url: \"http://h\", threads: [a]}\n"
      "    - {name: c, kind: webhook, url: \"http://h\", threads: [b]}\n"),
    "node.yaml:4: delivery.channels[1].name: duplicate channel name \"c\" "
    "(also delivery.channels[0])");
  // The name is part of the idempotency key `keel:NAME:THREAD:SEQ`; thread
  // ids may hold ':', so names may not.
  CAF_CHECK_EQUAL(
    error_of("delivery:\n  channels:\n    - name: \"a:b\"\n"
             "      kind: webhook\n      url: http://h/\n      threads: [c]\n"),
    "node.yaml:3: delivery.channels[0].name: expected 1 to 64 characters of "
    "[A-Za-z0-9_-] (a channel name is part of every idempotency key), got "
    "\"a:b\"");
  CAF_CHECK_EQUAL(
    error_of(channel("      kind: webhook\n      url: http://h/\n"
                     "      threads: []\n")),
    "node.yaml:6: delivery.channels[0].threads: expected at least one thread "
    "id or prefix ending in * (channel \"c\" is not owner.channel and would "
    "send nothing)");
  CAF_CHECK_EQUAL(
    error_of(channel("      kind: telegram\n      token: \"\"\n"
                     "      chat_id: \"1\"\n      threads: [a]\n")),
    "node.yaml:5: delivery.channels[0].token: expected the bot token, got "
    "\"\"");
  auto warned = parse(channel("      kind: telegram\n      url: http://relay\n"
                              "      token: t\n      chat_id: \"1\"\n"
                              "      threads: [a]\n"));
  CAF_REQUIRE_EQUAL(outcome(warned), "none");
  CAF_REQUIRE_EQUAL(warned->warnings.size(), 1u);
  KEEL_CHECK_CONTAINS(warned->warnings[0], "bot token of channel \"c\"");
}

CAF_TEST(the owner channel and notice windows are read) {
  auto cfg = parse("owner:\n  contact: ops@example.com\n  channel: alerts\n"
                   "  notices:\n    all_models_failed: 10m\n"
                   "    tool_disabled: 0s\n"
                   "delivery:\n  channels:\n"
                   "    - {name: alerts, kind: webhook, url: \"http://h\"}\n");
  CAF_REQUIRE_EQUAL(outcome(cfg), "none");
  CAF_CHECK_EQUAL(cfg->owner.channel, "alerts");
  auto& windows = cfg->owner.notice_windows;
  CAF_CHECK_EQUAL(windows.size(), 2u);
  CAF_CHECK_EQUAL(windows.at(notice_kind::all_models_failed), 10min);
  CAF_CHECK_EQUAL(windows.at(notice_kind::tool_disabled), 0ms);
  // The owner's channel needs no threads; it is no thread's channel.
  CAF_CHECK(cfg->delivery.channels_of("t1").empty());
  CAF_CHECK_EQUAL(
    error_of("owner:\n  channel: nope\n"),
    "node.yaml:2: owner.channel: expected the name of a channel of "
    "delivery.channels, got \"nope\"");
  KEEL_CHECK_CONTAINS(error_of("owner:\n  notices:\n    bogus: 1m\n"),
                      "owner.notices.bogus");
  KEEL_CHECK_CONTAINS(error_of("owner:\n  notices:\n    agent_stuck: soon\n"),
                      "owner.notices.agent_stuck");
}

CAF_TEST(http providers take their endpoint timeouts and limits) {
  // Any readable file passes the ca_file check; TLS reads it later.
  auto ca_file = (source_dir() / "config" / "default.yaml").string();
  auto cfg = parse("providers:\n"
                   "  - name: gpt\n"
                   "    kind: openai\n"
                   "    base_url: http://127.0.0.1:4010/v1\n"
                   "    model: gpt-x\n"
                   "    api_key: ${KEY}\n"
                   "    headers:\n"
                   "      X-Team: core\n"
                   "    connect_timeout: 250ms\n"
                   "    first_byte_timeout: 2s\n"
                   "    total_timeout: 10s\n"
                   "    max_concurrency: 8\n"
                   "    ca_file: "
                     + ca_file
                     + "\n"
                       "    stream: false\n"
                       "    max_tokens: 77\n"
                       "  - name: claude\n"
                       "    kind: anthropic\n"
                       "    base_url: https://api.anthropic.com\n"
                       "    model: c\n",
                   {{"KEY", "sk-1"}});
  CAF_REQUIRE(cfg);
  auto& gpt = cfg->providers[0];
  CAF_CHECK(is_http_kind(gpt.kind));
  CAF_CHECK_EQUAL(gpt.base_url, "http://127.0.0.1:4010/v1");
  CAF_CHECK_EQUAL(gpt.api_key, "sk-1");
  CAF_CHECK_EQUAL(gpt.headers.at("X-Team"), "core");
  CAF_CHECK_EQUAL(gpt.connect_timeout, 250ms);
  CAF_CHECK_EQUAL(gpt.first_byte_timeout, 2s);
  CAF_CHECK_EQUAL(gpt.total_timeout, 10s);
  CAF_CHECK_EQUAL(gpt.max_concurrency, 8u);
  CAF_CHECK_EQUAL(gpt.ca_file, ca_file);
  CAF_CHECK(!gpt.stream);
  CAF_CHECK_EQUAL(gpt.params.max_output_tokens, 77u);
  auto& claude = cfg->providers[1];
  CAF_CHECK(claude.stream);
  CAF_CHECK_EQUAL(claude.total_timeout, 120s);
  // Without pools, the default pool chains both.
  CAF_CHECK_EQUAL(cfg->pools[0].chain,
                  (std::vector<std::string>{"gpt", "claude"}));
}

CAF_TEST(http provider mistakes are named) {
  CAF_CHECK_EQUAL(error_of("providers:\n  - name: g\n    kind: openai\n"
                           "    model: m\n"),
                  "node.yaml:2: providers[0].base_url: missing required key "
                  "(expected an http:// or https:// URL)");
  CAF_CHECK_EQUAL(error_of("providers:\n  - name: g\n    kind: openai\n"
                           "    base_url: ftp://x\n    model: m\n"),
                  "node.yaml:4: providers[0].base_url: expected an http:// or "
                  "https:// URL with a host, got \"ftp://x\"");
  CAF_CHECK_EQUAL(error_of("providers:\n  - name: g\n    kind: anthropic\n"
                           "    base_url: http://h\n"),
                  "node.yaml:2: providers[0].model: missing required key "
                  "(expected the model name to request)");
  CAF_CHECK_EQUAL(error_of("providers:\n  - name: e\n    kind: echo\n"
                           "    base_url: http://h\n"),
                  "node.yaml:4: providers[0].base_url: only openai and "
                  "anthropic providers take base_url (this provider is "
                  "\"echo\")");
  CAF_CHECK_EQUAL(error_of("providers:\n  - name: g\n    kind: openai\n"
                           "    base_url: http://h\n    model: m\n"
                           "    total_timeout: 0s\n"),
                  "node.yaml:6: providers[0].total_timeout: expected a "
                  "positive duration such as \"250ms\", \"5s\", \"2m\" or "
                  "\"1h\", got \"0s\"");
  CAF_CHECK_EQUAL(error_of("providers:\n  - name: g\n    kind: openai\n"
                           "    base_url: http://h\n    model: m\n"
                           "    ca_file: /no/such/ca.pem\n"),
                  "node.yaml:6: providers[0].ca_file: expected a readable "
                  "PEM file of CA certificates, got \"/no/such/ca.pem\"");
  CAF_CHECK_EQUAL(error_of("providers:\n  - name: g\n    kind: openai\n"
                           "    base_url: http://h\n    model: m\n"
                           "    headers: [a]\n"),
                  "node.yaml:6: providers[0].headers: expected a mapping of "
                  "header names to values, got a list");
}

CAF_TEST(pools take retry breaker and cooldown settings) {
  auto cfg = parse("pools:\n"
                   "  - name: default\n"
                   "    chain: [echo]\n"
                   "    max_attempts: 4\n"
                   "    retry:\n"
                   "      base_delay: 200ms\n"
                   "      multiplier: 3\n"
                   "      max_delay: 5s\n"
                   "      jitter: 0\n"
                   "      retry_after_cap: 9s\n"
                   "      budget: 6\n"
                   "    breaker:\n"
                   "      failure_threshold: 5\n"
                   "      probe_lead: 2s\n"
                   "      probe_timeout: 20s\n"
                   "    cooldowns:\n"
                   "      auth: 1m\n"
                   "      format: 5s\n"
                   "    timeout_max_tokens_factor: 0.25\n");
  CAF_REQUIRE(cfg);
  auto& pool = cfg->pools[0];
  CAF_CHECK_EQUAL(pool.retry.max_attempts, 4u);
  CAF_CHECK_EQUAL(pool.retry.base_delay, 200ms);
  CAF_CHECK_EQUAL(pool.retry.multiplier, 3.0);
  CAF_CHECK_EQUAL(pool.retry.max_delay, 5s);
  CAF_CHECK_EQUAL(pool.retry.jitter, 0.0);
  CAF_CHECK_EQUAL(pool.retry.retry_after_cap, 9s);
  CAF_CHECK_EQUAL(pool.budget, 6u);
  CAF_CHECK_EQUAL(pool.breaker.failure_threshold, 5u);
  CAF_CHECK_EQUAL(pool.breaker.probe_lead, 2s);
  CAF_CHECK_EQUAL(pool.breaker.probe_timeout, 20s);
  CAF_CHECK_EQUAL(pool.breaker.cooldowns.get(error_class::auth), 1min);
  CAF_CHECK_EQUAL(pool.breaker.cooldowns.get(error_class::format), 5s);
  // Unset classes keep their defaults.
  CAF_CHECK_EQUAL(pool.breaker.cooldowns.get(error_class::billing), 30min);
  CAF_CHECK_EQUAL(pool.timeout_max_tokens_factor, 0.25);
  CAF_CHECK_EQUAL(error_of("pools:\n  - name: default\n    chain: [echo]\n"
                           "    cooldowns:\n      rate_limt: 1s\n"),
                  "node.yaml:5: pools[0].cooldowns.rate_limt: unknown key "
                  "(did you mean rate_limit?)");
  CAF_CHECK_EQUAL(error_of("pools:\n  - name: default\n    chain: [echo]\n"
                           "    retry:\n      base_delay: 2s\n"
                           "      max_delay: 1s\n"),
                  "node.yaml:6: pools[0].retry.max_delay: expected at least "
                  "pools[0].retry.base_delay (2s), got 1s");
  // Only base_delay written: the error is about it, not the default.
  CAF_CHECK_EQUAL(error_of("delivery:\n  channels:\n"
                           "    - name: c\n      kind: webhook\n"
                           "      url: http://h/\n      threads: [a]\n"
                           "      retry:\n        base_delay: 1m\n"),
                  "node.yaml:8: delivery.channels[0].retry.base_delay: "
                  "expected at most delivery.channels[0].retry.max_delay "
                  "(30s, its default; set it too), got 1m");
  CAF_CHECK_EQUAL(error_of("providers:\n  - name: s\n    kind: scripted\n"
                           "    script:\n      - reply: x\n"
                           "        retry_after: 1s\n"),
                  "node.yaml:6: providers[0].script[0].retry_after: "
                  "retry_after needs fail (it is part of a simulated "
                  "failure)");
}

CAF_TEST(storage takes a postgres backend from the environment) {
  auto cfg = parse("storage:\n  backend: postgres\n  postgres:\n"
                   "    url: ${KEEL_PG_URL}\n    connections: 4\n"
                   "    statement_timeout: 2s\n    startup_wait: 0s\n",
                   {{"KEEL_PG_URL", "postgresql://keel@db/keel"}});
  CAF_REQUIRE_EQUAL(outcome(cfg), "none");
  CAF_CHECK(cfg->storage.backend == storage_backend::postgres);
  CAF_CHECK_EQUAL(cfg->storage.postgres.url, "postgresql://keel@db/keel");
  CAF_CHECK_EQUAL(cfg->storage.postgres.connections, 4u);
  CAF_CHECK_EQUAL(cfg->storage.postgres.statement_timeout,
                  caf::timespan{std::chrono::seconds{2}});
  CAF_CHECK_EQUAL(cfg->storage.postgres.startup_wait, caf::timespan{0});
  auto plain = parse("");
  CAF_REQUIRE_EQUAL(outcome(plain), "none");
  CAF_CHECK(plain->storage.backend == storage_backend::rocksdb);
  CAF_CHECK_EQUAL(plain->storage.postgres.startup_wait,
                  caf::timespan{std::chrono::seconds{30}});
}

CAF_TEST(storage sizes rocksdb memtables and block cache) {
  auto plain = parse("");
  CAF_REQUIRE_EQUAL(outcome(plain), "none");
  CAF_CHECK_EQUAL(plain->storage.rocksdb.memtables, 64u << 20);
  CAF_CHECK_EQUAL(plain->storage.rocksdb.block_cache, 32u << 20);
  auto cfg = parse("storage:\n  rocksdb:\n    memtables: 16MiB\n"
                   "    block_cache: 0\n");
  CAF_REQUIRE_EQUAL(outcome(cfg), "none");
  CAF_CHECK_EQUAL(cfg->storage.rocksdb.memtables, 16u << 20);
  CAF_CHECK_EQUAL(cfg->storage.rocksdb.block_cache, 0u);
  CAF_CHECK_EQUAL(error_of("storage:\n  rocksdb:\n    memtables: 512KiB\n"),
                  "node.yaml:3: storage.rocksdb.memtables: expected a size in "
                  "bytes >= 1048576 (an integer, or a string like \"64KiB\" "
                  "or \"1MiB\"), got \"512KiB\"");
  CAF_CHECK_EQUAL(error_of("storage:\n  rocksdb:\n    cache: 8MiB\n"),
                  "node.yaml:3: storage.rocksdb.cache: unknown key (expected "
                  "memtables or block_cache)");
}

CAF_TEST(storage mistakes are named) {
  CAF_CHECK_EQUAL(error_of("storage:\n  backend: postgres\n"),
                  "node.yaml:2: storage.postgres.url: required when "
                  "storage.backend is \"postgres\" (a libpq URI such as "
                  "postgresql://keel@db.example/keel; write ${KEEL_PG_URL} "
                  "to take it from the environment)");
  CAF_CHECK_EQUAL(error_of("storage:\n  backend: mysql\n"),
                  "node.yaml:2: storage.backend: unknown value \"mysql\" "
                  "(expected rocksdb or postgres)");
  CAF_CHECK_EQUAL(
    error_of("storage:\n  postgres:\n    statement_timeout: 500us\n"),
    "node.yaml:3: storage.postgres.statement_timeout: expected at least 1ms, "
    "got 500us");
  CAF_CHECK_EQUAL(error_of("storage:\n  postgres:\n    connections: 0\n"),
                  "node.yaml:3: storage.postgres.connections: expected an "
                  "integer in 1..64, got \"0\"");
  CAF_CHECK_EQUAL(error_of("storage:\n  postgres:\n    port: 5432\n"),
                  "node.yaml:3: storage.postgres.port: unknown key (expected "
                  "url, connections, statement_timeout or startup_wait)");
  CAF_CHECK_EQUAL(error_of("storage:\n  postgres:\n    startup_wait: -1s\n"),
                  "node.yaml:3: storage.postgres.startup_wait: expected a "
                  "duration such as \"250ms\", \"5s\", \"2m\" or \"1h\", got "
                  "\"-1s\"");
  CAF_CHECK_EQUAL(error_of("storage:\n  postgres:\n    startup_wait: 2h\n"),
                  "node.yaml:3: storage.postgres.startup_wait: expected at "
                  "most 1h, got 2h");
  CAF_CHECK_EQUAL(error_of("storage:\n  backend: postgres\n  postgres:\n"
                           "    url: x\nchaos:\n  disk: true\n"),
                  "node.yaml:6: chaos.disk: injects faults into RocksDB's "
                  "file system and has no effect when storage.backend is "
                  "\"postgres\" (to test database faults, stop or kill the "
                  "PostgreSQL server)");
}

// -- cluster ------------------------------------------------------------------

namespace {

/// A PostgreSQL store (lines 1 to 4), which an enabled cluster needs.
constexpr const char* postgres_storage = "storage:\n"
                                         "  backend: postgres\n"
                                         "  postgres:\n"
                                         "    url: postgresql://db/keel\n";

/// A cluster token long enough.
constexpr const char* good_token = "0123456789abcdef";

/// `postgres_storage` and an enabled cluster with `good_token` (lines 5 to
/// 7), followed by the cluster keys `extra` (from line 8), and, unless
/// `extra` sets TLS or the listen address, `insecure_plaintext: true` (the
/// default listen address is loopback).
std::string enabled_cluster(const std::string& extra = {}) {
  auto plaintext = extra.find("tls:") == std::string::npos
                   && extra.find("listen:") == std::string::npos;
  return std::string{postgres_storage} + "cluster:\n  enabled: true\n"
         + "  token: " + good_token + "\n" + extra
         + (plaintext ? "  insecure_plaintext: true\n" : "");
}

/// Writes `text` to `name` in `dir` and returns the file's path.
std::string write_file(const temp_dir& dir, const std::string& name,
                       const std::string& text) {
  auto path = (dir.path() / name).string();
  std::ofstream{path} << text;
  return path;
}

} // namespace

CAF_TEST(cluster is off by default and its ids and address follow node) {
  auto cfg = parse("");
  CAF_REQUIRE_EQUAL(outcome(cfg), "none");
  check_same(*cfg, default_config());
  auto& cl = cfg->cluster;
  CAF_CHECK_EQUAL(cl.enabled, false);
  CAF_CHECK_EQUAL(cl.node_id, "keel-1");
  CAF_CHECK_EQUAL(cl.listen_host, "127.0.0.1");
  CAF_CHECK_EQUAL(cl.listen_port, 7701u);
  CAF_CHECK_EQUAL(cl.advertise, "127.0.0.1:7701");
  CAF_CHECK_EQUAL(cl.shards, 256u);
  CAF_CHECK_EQUAL(cl.lease_ttl, caf::timespan{3s});
  CAF_CHECK_EQUAL(cl.heartbeat, caf::timespan{1s});
  CAF_CHECK_EQUAL(cl.route_timeout, caf::timespan{5s});
  CAF_CHECK_EQUAL(cl.handoff_timeout, caf::timespan{10s});
  CAF_CHECK_EQUAL(cl.rebalance_batch, 16u);
  CAF_CHECK_EQUAL(cl.token, "");
  CAF_CHECK(!cl.tls.enabled());
  auto named = parse("node:\n  name: n2\ncluster:\n"
                     "  listen: \"[::1]:7800\"\n");
  CAF_REQUIRE_EQUAL(outcome(named), "none");
  CAF_CHECK_EQUAL(named->cluster.node_id, "n2");
  CAF_CHECK_EQUAL(named->cluster.listen_host, "::1");
  CAF_CHECK_EQUAL(named->cluster.listen_port, 7800u);
  CAF_CHECK_EQUAL(named->cluster.advertise, "[::1]:7800");
}

CAF_TEST(cluster takes every key) {
  temp_dir tmp;
  auto cert = write_file(tmp, "node.crt", "cert");
  auto key = write_file(tmp, "node.key", "key");
  auto ca = write_file(tmp, "ca.crt", "ca");
  auto cfg = parse(enabled_cluster("  node_id: keel-a.1\n"
                                   "  listen: 0.0.0.0:7000\n"
                                   "  advertise: node-a.internal:7001\n"
                                   "  shards: 1024\n"
                                   "  lease_ttl: 900ms\n"
                                   "  heartbeat: 300ms\n"
                                   "  route_timeout: 100ms\n"
                                   "  handoff_timeout: 0s\n"
                                   "  rebalance_batch: 65536\n"
                                   "  tls:\n"
                                   "    cert: "
                                   + cert + "\n    key: " + key
                                   + "\n    ca: " + ca + "\n"));
  CAF_REQUIRE_EQUAL(outcome(cfg), "none");
  auto& cl = cfg->cluster;
  CAF_CHECK_EQUAL(cl.enabled, true);
  CAF_CHECK_EQUAL(cl.node_id, "keel-a.1");
  CAF_CHECK_EQUAL(cl.listen_host, "0.0.0.0");
  CAF_CHECK_EQUAL(cl.listen_port, 7000u);
  CAF_CHECK_EQUAL(cl.advertise, "node-a.internal:7001");
  CAF_CHECK_EQUAL(cl.shards, 1024u);
  CAF_CHECK_EQUAL(cl.lease_ttl, caf::timespan{900ms});
  CAF_CHECK_EQUAL(cl.heartbeat, caf::timespan{300ms});
  CAF_CHECK_EQUAL(cl.route_timeout, caf::timespan{100ms});
  CAF_CHECK_EQUAL(cl.handoff_timeout, caf::timespan{0});
  CAF_CHECK_EQUAL(cl.rebalance_batch, 65536u);
  CAF_CHECK_EQUAL(cl.token, good_token);
  CAF_CHECK(cl.tls.enabled());
  CAF_CHECK_EQUAL(cl.tls.cert, cert);
  CAF_CHECK_EQUAL(cl.tls.key, key);
  CAF_CHECK_EQUAL(cl.tls.ca, ca);
}

CAF_TEST(cluster keys are type checked even when the cluster is off) {
  CAF_CHECK_EQUAL(error_of("cluster:\n  enabled: yes\n"),
                  "node.yaml:2: cluster.enabled: expected true or false, got "
                  "\"yes\"");
  CAF_CHECK_EQUAL(error_of("cluster:\n  node_id: a/b\n"),
                  "node.yaml:2: cluster.node_id: expected 1 to 64 characters "
                  "from A-Z, a-z, 0-9, '.', '_' and '-', got \"a/b\"");
  CAF_CHECK_EQUAL(error_of("cluster:\n  shards: 0\n"),
                  "node.yaml:2: cluster.shards: expected an integer in "
                  "1..65536, got \"0\"");
  CAF_CHECK_EQUAL(error_of("cluster:\n  shards: 65537\n"),
                  "node.yaml:2: cluster.shards: expected an integer in "
                  "1..65536, got \"65537\"");
  CAF_CHECK_EQUAL(error_of("cluster:\n  rebalance_batch: 0\n"),
                  "node.yaml:2: cluster.rebalance_batch: expected an integer "
                  "in 1..65536, got \"0\"");
  CAF_CHECK_EQUAL(error_of("cluster:\n  lease_ttl: 0s\n"),
                  "node.yaml:2: cluster.lease_ttl: expected a positive "
                  "duration such as \"250ms\", \"5s\", \"2m\" or \"1h\", got "
                  "\"0s\"");
  CAF_CHECK_EQUAL(error_of("cluster:\n  heartbeat: 5ms\n"),
                  "node.yaml:2: cluster.heartbeat: expected at least 10ms, "
                  "got 5ms");
  CAF_CHECK_EQUAL(error_of("cluster:\n  route_timeout: 99ms\n"),
                  "node.yaml:2: cluster.route_timeout: expected at least "
                  "100ms, got 99ms");
  CAF_CHECK_EQUAL(error_of("cluster:\n  handoff_timeout: 10\n"),
                  "node.yaml:2: cluster.handoff_timeout: expected a duration "
                  "such as \"250ms\", \"5s\", \"2m\" or \"1h\", got \"10\" (a "
                  "unit is required)");
  CAF_CHECK_EQUAL(error_of("cluster:\n  token: [a]\n"),
                  "node.yaml:2: cluster.token: expected a string, got a list");
  CAF_CHECK_EQUAL(error_of("cluster:\n  shard: 4\n"),
                  "node.yaml:2: cluster.shard: unknown key (did you mean "
                  "shards?)");
  CAF_CHECK_EQUAL(error_of("cluster:\n  tls:\n    crt: x\n"),
                  "node.yaml:3: cluster.tls.crt: unknown key (did you mean "
                  "cert?)");
  CAF_CHECK_EQUAL(error_of("cluster: true\n"),
                  "node.yaml:1: cluster: expected a mapping, got \"true\"");
}

CAF_TEST(a disabled cluster is not cross checked) {
  auto cfg = parse("cluster:\n  enabled: false\n  listen: 0.0.0.0:7701\n"
                   "  token: short\n  lease_ttl: 1s\n  heartbeat: 1s\n"
                   "  tls:\n    cert: /nonexistent/a\n    key: /nonexistent/b\n"
                   "    ca: /nonexistent/c\n");
  CAF_REQUIRE_EQUAL(outcome(cfg), "none");
  CAF_CHECK_EQUAL(cfg->cluster.advertise, "0.0.0.0:7701");
  CAF_CHECK_EQUAL(outcome(parse(enabled_cluster())), "none");
}

CAF_TEST(an enabled cluster needs the postgres backend) {
  CAF_CHECK_EQUAL(error_of(std::string{"cluster:\n  enabled: true\n  token: "}
                           + good_token + "\n"),
                  "node.yaml:2: cluster.enabled: a cluster needs "
                  "storage.backend \"postgres\" (every node must read every "
                  "thread, so the store must be shared), but storage.backend "
                  "is \"rocksdb\"");
}

CAF_TEST(an enabled cluster needs a token of 16 characters or more) {
  CAF_CHECK_EQUAL(
    error_of(std::string{postgres_storage} + "cluster:\n  enabled: true\n"),
    "node.yaml:6: cluster.token: required when cluster.enabled "
    "is true (a shared secret of at least 16 characters, the "
    "same on every node; write ${KEEL_CLUSTER_TOKEN} to take it "
    "from the environment)");
  auto short_token = error_of(std::string{postgres_storage}
                              + "cluster:\n  enabled: true\n"
                                "  token: s3cr3t-short\n");
  CAF_CHECK_EQUAL(short_token, "node.yaml:7: cluster.token: expected a shared "
                               "secret of at least 16 characters, got 12");
  CAF_CHECK_EQUAL(short_token.find("s3cr3t"), std::string::npos);
}

CAF_TEST(cluster token expands from the environment) {
  auto yaml = std::string{postgres_storage}
              + "cluster:\n  enabled: true\n  token: ${KEEL_CLUSTER_TOKEN}\n"
                "  insecure_plaintext: true\n";
  auto cfg = parse(yaml, {{"KEEL_CLUSTER_TOKEN", "from-the-env-0123456789"}});
  CAF_REQUIRE_EQUAL(outcome(cfg), "none");
  CAF_CHECK_EQUAL(cfg->cluster.token, "from-the-env-0123456789");
  CAF_CHECK_EQUAL(error_of(yaml),
                  "node.yaml:7: cluster.token: environment variable "
                  "KEEL_CLUSTER_TOKEN is not set (write "
                  "${KEEL_CLUSTER_TOKEN:-default} to make it optional)");
  auto short_token = error_of(yaml, {{"KEEL_CLUSTER_TOKEN", "tiny-secret"}});
  CAF_CHECK_EQUAL(short_token, "node.yaml:7: cluster.token: expected a shared "
                               "secret of at least 16 characters, got 11");
  CAF_CHECK_EQUAL(short_token.find("tiny-secret"), std::string::npos);
}

CAF_TEST(cluster lease_ttl must cover 3 heartbeats) {
  CAF_CHECK_EQUAL(error_of(enabled_cluster("  lease_ttl: 2999ms\n")),
                  "node.yaml:8: cluster.lease_ttl: expected at least 3 x "
                  "cluster.heartbeat (3 x 1s), got 2999ms");
  // With lease_ttl left at its default, the error points at heartbeat.
  CAF_CHECK_EQUAL(error_of(enabled_cluster("  heartbeat: 2s\n")),
                  "node.yaml:8: cluster.lease_ttl: expected at least 3 x "
                  "cluster.heartbeat (3 x 2s), got 3s");
  CAF_CHECK_EQUAL(outcome(parse(enabled_cluster("  lease_ttl: 30ms\n"
                                                "  heartbeat: 10ms\n"))),
                  "none");
}

CAF_TEST(cluster listen and advertise must be host and port) {
  auto listen_error = [](const std::string& value) {
    return "node.yaml:2: cluster.listen: expected host:port with a port in "
           "1..65535 (IPv6 in brackets, as in [::1]:7701), got \""
           + value + "\"";
  };
  for (auto bad : {"127.0.0.1:70000", "127.0.0.1:0", "127.0.0.1", ":7701",
                   "::1:7701", "127.0.0.1:x", "a b:7701", "[]:7701"})
    CAF_CHECK_EQUAL(
      error_of("cluster:\n  listen: \"" + std::string{bad} + "\"\n"),
      listen_error(bad));
  CAF_CHECK_EQUAL(error_of("cluster:\n  advertise: node-a\n"),
                  "node.yaml:2: cluster.advertise: expected host:port with a "
                  "port in 1..65535 (IPv6 in brackets, as in [::1]:7701), got "
                  "\"node-a\"");
  CAF_CHECK_EQUAL(error_of("cluster:\n  advertise: 0.0.0.0:7701\n"),
                  "node.yaml:2: cluster.advertise: expected the host:port "
                  "peers reach this node at, got \"0.0.0.0:7701\" (a wildcard "
                  "address only makes sense in cluster.listen)");
  auto cfg = parse("cluster:\n  listen: \"[fe80::1]:9000\"\n"
                   "  advertise: \"[2001:db8::7]:9001\"\n");
  CAF_REQUIRE_EQUAL(outcome(cfg), "none");
  CAF_CHECK_EQUAL(cfg->cluster.listen_host, "fe80::1");
  CAF_CHECK_EQUAL(cfg->cluster.listen_port, 9000u);
  CAF_CHECK_EQUAL(cfg->cluster.advertise, "[2001:db8::7]:9001");
}

CAF_TEST(cluster advertise is required with a wildcard listen address) {
  CAF_CHECK_EQUAL(error_of(enabled_cluster("  listen: 0.0.0.0:7701\n")),
                  "node.yaml:8: cluster.advertise: required when "
                  "cluster.listen is a wildcard address (\"0.0.0.0:7701\"), "
                  "which peers cannot connect to: set the host:port peers "
                  "reach this node at");
  CAF_CHECK_EQUAL(error_of(enabled_cluster("  listen: \"[::]:7701\"\n")),
                  "node.yaml:8: cluster.advertise: required when "
                  "cluster.listen is a wildcard address (\"[::]:7701\"), "
                  "which peers cannot connect to: set the host:port peers "
                  "reach this node at");
  // A cluster beyond loopback needs TLS too.
  temp_dir tmp;
  auto pem = write_file(tmp, "x.pem", "pem");
  auto cfg = parse(enabled_cluster("  listen: 0.0.0.0:7701\n"
                                   "  advertise: 10.0.0.5:7701\n  tls:\n"
                                   "    cert: "
                                   + pem + "\n    key: " + pem
                                   + "\n    ca: " + pem + "\n"));
  CAF_REQUIRE_EQUAL(outcome(cfg), "none");
  CAF_CHECK_EQUAL(cfg->cluster.advertise, "10.0.0.5:7701");
}

CAF_TEST(cluster tls takes all three files or none) {
  CAF_CHECK_EQUAL(error_of("cluster:\n  tls:\n    cert: a.crt\n"
                           "    ca: ca.crt\n"),
                  "node.yaml:2: cluster.tls.key: missing required key "
                  "(cluster TLS needs all three of cert, key and ca, or none "
                  "of them)");
  CAF_CHECK_EQUAL(error_of("cluster:\n  tls:\n    key: a.key\n"),
                  "node.yaml:2: cluster.tls.cert: missing required key "
                  "(cluster TLS needs all three of cert, key and ca, or none "
                  "of them)");
  temp_dir tmp;
  auto cert = write_file(tmp, "node.crt", "cert");
  auto key = write_file(tmp, "node.key", "key");
  CAF_CHECK_EQUAL(
    error_of(enabled_cluster("  tls:\n    cert: " + cert + "\n    key: " + key
                             + "\n    ca: /nonexistent/ca.crt\n")),
    "node.yaml:11: cluster.tls.ca: expected a readable PEM "
    "file, got \"/nonexistent/ca.crt\"");
}

CAF_TEST(an enabled cluster needs mutual tls unless on loopback) {
  // enabled_cluster() says insecure_plaintext; without it TLS is required.
  auto plain = std::string{postgres_storage} + "cluster:\n  enabled: true\n"
               + "  token: " + good_token + "\n";
  CAF_CHECK_EQUAL(
    error_of(plain),
    "node.yaml:6: cluster.tls: required when cluster.enabled is true: links "
    "between nodes are mutual TLS (cert, key and ca; `keelctl cluster certs "
    "DIR` makes them), since anyone who reaches a plaintext cluster port can "
    "send the node's actors messages; a test cluster on loopback may set "
    "cluster.insecure_plaintext: true instead");
  CAF_CHECK_EQUAL(
    error_of(plain + "  listen: 10.0.0.5:7701\n  insecure_plaintext: true\n"),
    "node.yaml:9: cluster.insecure_plaintext: allowed only when "
    "cluster.listen is a loopback address, got \"10.0.0.5:7701\" (set "
    "cluster.tls for links that leave the machine)");
  CAF_CHECK_EQUAL(error_of("cluster:\n  insecure_plaintext: 1\n"),
                  "node.yaml:2: cluster.insecure_plaintext: expected true or "
                  "false, got \"1\"");
  auto cfg = parse(plain
                   + "  listen: 127.0.0.1:7701\n"
                     "  insecure_plaintext: true\n");
  CAF_REQUIRE_EQUAL(outcome(cfg), "none");
  CAF_CHECK(cfg->cluster.insecure_plaintext);
  std::string warned;
  for (auto& w : cfg->warnings)
    warned += w + "\n";
  KEEL_CHECK_CONTAINS(warned, "cluster.insecure_plaintext is true: links "
                              "between nodes are neither encrypted nor "
                              "authenticated");
  // With TLS there is nothing to warn about.
  temp_dir tmp;
  auto pem = write_file(tmp, "x.pem", "pem");
  std::filesystem::permissions(pem, std::filesystem::perms::owner_read
                                      | std::filesystem::perms::owner_write);
  auto tls = parse(plain + "  tls:\n    cert: " + pem + "\n    key: " + pem
                   + "\n    ca: " + pem + "\n");
  CAF_REQUIRE_EQUAL(outcome(tls), "none");
  CAF_CHECK(tls->warnings.empty());
}

// -- tools and the turn loop --------------------------------------------------

namespace {

/// A `tools:` section declaring `today` and `list_files`, for the tests of
/// tool assignment.
constexpr const char* two_tools = R"(tools:
  - name: today
    description: Today's date.
    command: [date, "+%Y-%m-%d"]
  - name: list_files
    description: Lists a folder.
    parameters:
      type: object
      properties:
        folder: {type: string}
    command: [ls, "-1", "{folder}"]
)";

/// The error of a config holding `tool` (one item of `tools:`, its lines
/// indented by 4 after the leading "  - ").
std::string tool_error(const std::string& tool) {
  return error_of("tools:\n  - " + tool);
}

} // namespace

CAF_TEST(tools take every key) {
  auto cfg = parse(R"(tools:
  - name: grep-code_1
    description: Searches the code.
    parameters:
      type: object
      properties:
        pattern: {type: string, description: "What to look for"}
        max: {type: integer, minimum: 1, default: 20}
        ratio: {type: number, default: 0.5}
        exact: {type: boolean, default: TRUE}
        tag: {type: string, default: "true"}
        nothing: {default: ~}
        list: {type: array, items: {type: string}, default: [a, 2]}
      required: [pattern]
    command: [grep, "-rn", "--max-count={max}", "{pattern}", "{{literal}}"]
    cwd: /srv/code
    env: [PATH, LANG]
    timeout: 30s
    grace: 500ms
    output_cap: 4KiB
)");
  CAF_REQUIRE_EQUAL(outcome(cfg), "none");
  CAF_REQUIRE_EQUAL(cfg->tools.size(), 1u);
  auto& tool = cfg->tools[0];
  CAF_CHECK_EQUAL(cfg->find_tool("grep-code_1"), &tool);
  CAF_CHECK_EQUAL(cfg->find_tool("grep"), nullptr);
  CAF_CHECK_EQUAL(tool.name, "grep-code_1");
  CAF_CHECK_EQUAL(tool.description, "Searches the code.");
  auto expected = nlohmann::json::parse(R"({
    "type": "object",
    "properties": {
      "pattern": {"type": "string", "description": "What to look for"},
      "max": {"type": "integer", "minimum": 1, "default": 20},
      "ratio": {"type": "number", "default": 0.5},
      "exact": {"type": "boolean", "default": true},
      "tag": {"type": "string", "default": "true"},
      "nothing": {"default": null},
      "list": {"type": "array", "items": {"type": "string"},
               "default": ["a", 2]}
    },
    "required": ["pattern"]
  })");
  CAF_CHECK_EQUAL(nlohmann::json::parse(tool.parameters).dump(),
                  expected.dump());
  // Compact text, in the order written.
  CAF_CHECK_EQUAL(
    tool.parameters.rfind(R"({"type":"object","properties":{)", 0), 0u);
  CAF_CHECK_EQUAL(tool.command,
                  (std::vector<std::string>{"grep", "-rn", "--max-count={max}",
                                            "{pattern}", "{{literal}}"}));
  CAF_CHECK_EQUAL(tool.cwd, "/srv/code");
  CAF_CHECK_EQUAL(tool.env, (std::vector<std::string>{"PATH", "LANG"}));
  CAF_CHECK_EQUAL(tool.timeout, 30s);
  CAF_CHECK_EQUAL(tool.grace, 500ms);
  CAF_CHECK_EQUAL(tool.output_cap, 4096u);
}

CAF_TEST(tools have defaults and none are declared by default) {
  CAF_CHECK(default_config().tools.empty());
  auto cfg = parse("tools:\n  - name: t\n    description: d\n"
                   "    command: [\"true\"]\n");
  CAF_REQUIRE_EQUAL(outcome(cfg), "none");
  auto& tool = cfg->tools[0];
  CAF_CHECK_EQUAL(tool.parameters, R"({"type":"object","properties":{}})");
  CAF_CHECK_EQUAL(tool.cwd, "");
  CAF_CHECK(tool.env.empty());
  CAF_CHECK_EQUAL(tool.timeout, 120s);
  CAF_CHECK_EQUAL(tool.grace, 2s);
  CAF_CHECK_EQUAL(tool.output_cap, 16u * 1024);
  // An empty list declares no tools.
  CAF_CHECK_EQUAL(outcome(parse("tools: []\n")), "none");
}

CAF_TEST(tool mistakes are named) {
  auto ok_rest = std::string{"    description: d\n    command: [x]\n"};
  CAF_CHECK_EQUAL(tool_error("name: a b\n" + ok_rest),
                  "node.yaml:2: tools[0].name: expected 1 to 64 characters "
                  "from A-Z, a-z, 0-9, '_' and '-', got \"a b\"");
  CAF_CHECK_EQUAL(tool_error("name: " + std::string(65, 'a') + "\n" + ok_rest),
                  "node.yaml:2: tools[0].name: expected 1 to 64 characters "
                  "from A-Z, a-z, 0-9, '_' and '-', got \""
                    + std::string(60, 'a') + "...\"");
  CAF_CHECK_EQUAL(tool_error("name: spawn_agent\n" + ok_rest),
                  "node.yaml:2: tools[0].name: \"spawn_agent\" is the name of "
                  "a built-in tool (spawn_agent and message_agent are "
                  "reserved)");
  CAF_CHECK_EQUAL(tool_error("name: message_agent\n" + ok_rest),
                  "node.yaml:2: tools[0].name: \"message_agent\" is the name "
                  "of a built-in tool (spawn_agent and message_agent are "
                  "reserved)");
  CAF_CHECK_EQUAL(tool_error("description: d\n    command: [x]\n"),
                  "node.yaml:2: tools[0].name: missing required key "
                  "(expected a tool name)");
  CAF_CHECK_EQUAL(
    error_of("tools:\n  - name: a\n" + ok_rest + "  - name: a\n" + ok_rest),
    "node.yaml:5: tools[1].name: duplicate tool name \"a\" "
    "(also tools[0])");
  CAF_CHECK_EQUAL(tool_error("name: a\n    command: [x]\n"),
                  "node.yaml:2: tools[0].description: missing required key "
                  "(expected a non-empty description of what the tool does)");
  CAF_CHECK_EQUAL(tool_error("name: a\n    description: ''\n"
                             "    command: [x]\n"),
                  "node.yaml:3: tools[0].description: expected a non-empty "
                  "description of what the tool does, got \"\"");
  CAF_CHECK_EQUAL(tool_error("name: a\n    description: d\n"),
                  "node.yaml:2: tools[0].command: missing required key "
                  "(expected a non-empty list of strings (the program and its "
                  "arguments))");
  CAF_CHECK_EQUAL(tool_error("name: a\n    description: d\n    command: []\n"),
                  "node.yaml:4: tools[0].command: expected a non-empty list "
                  "of strings (the program and its arguments), got an empty "
                  "list");
  CAF_CHECK_EQUAL(tool_error("name: a\n    description: d\n"
                             "    command: ls -l\n"),
                  "node.yaml:4: tools[0].command: expected a non-empty list "
                  "of strings (the program and its arguments), got \"ls -l\"");
  CAF_CHECK_EQUAL(tool_error("name: a\n    description: d\n"
                             "    command: ['', x]\n"),
                  "node.yaml:4: tools[0].command[0]: expected a program name "
                  "or path, got \"\"");
  CAF_CHECK_EQUAL(
    tool_error("name: a\n" + ok_rest + "    colour: red\n"),
    "node.yaml:5: tools[0].colour: unknown key (expected name, "
    "description, parameters, command, cwd, loop_key, env, timeout, grace, "
    "output_cap, limits, user or group)");
  CAF_CHECK_EQUAL(error_of("tools:\n  name: a\n"),
                  "node.yaml:2: tools: expected a list of tools, got a "
                  "mapping");
}

CAF_TEST(tool parameters and placeholders are checked) {
  auto tool = [](const std::string& parameters, const std::string& command) {
    return tool_error("name: a\n    description: d\n" + parameters
                      + "    command: " + command + "\n");
  };
  auto folder = std::string{"    parameters:\n      type: object\n"
                            "      properties:\n        folder: {}\n"};
  CAF_CHECK_EQUAL(tool("    parameters: [a]\n", "[x]"),
                  "node.yaml:4: tools[0].parameters: expected a JSON schema "
                  "of the arguments written as a mapping (with type: object), "
                  "got a list");
  CAF_CHECK_EQUAL(tool("    parameters:\n      properties: {}\n", "[x]"),
                  "node.yaml:5: tools[0].parameters.type: missing required "
                  "key (expected \"object\": the arguments of a tool call are "
                  "an object)");
  CAF_CHECK_EQUAL(tool("    parameters:\n      type: string\n", "[x]"),
                  "node.yaml:5: tools[0].parameters.type: expected \"object\" "
                  "(the arguments of a tool call are an object), got "
                  "\"string\"");
  CAF_CHECK_EQUAL(tool("    parameters:\n      type: object\n"
                       "      properties: [a]\n",
                       "[x]"),
                  "node.yaml:6: tools[0].parameters.properties: expected a "
                  "mapping of argument names to their schemas, got "
                  "\"[\\\"a\\\"]\"");
  CAF_CHECK_EQUAL(tool("    parameters:\n      type: object\n"
                       "      type: object\n",
                       "[x]"),
                  "node.yaml:6: tools[0].parameters.type: duplicate key "
                  "(first given on line 5)");
  CAF_CHECK_EQUAL(tool(folder, "[ls, \"{fold}\"]"),
                  "node.yaml:8: tools[0].command[1]: the placeholder {fold} "
                  "names no property of parameters (expected folder; write "
                  "{{ and }} for literal braces)");
  CAF_CHECK_EQUAL(tool("", "[echo, \"{x}\"]"),
                  "node.yaml:4: tools[0].command[1]: the placeholder {x} names "
                  "no property of parameters (expected none: parameters "
                  "declares no properties; write {{ and }} for literal "
                  "braces)");
  // A loop key names a parameter.
  CAF_CHECK_EQUAL(tool(folder + "    loop_key: path\n", "[ls]"),
                  "node.yaml:8: tools[0].loop_key: unknown parameter \"path\" "
                  "(expected folder)");
  CAF_CHECK_EQUAL(tool("    loop_key: path\n", "[ls]"),
                  "node.yaml:4: tools[0].loop_key: unknown parameter \"path\" "
                  "(expected a property of parameters)");
  CAF_CHECK_EQUAL(tool(folder + "    loop_key: folder\n", "[ls]"),
                  "<parsed without error>");
  CAF_CHECK_EQUAL(tool(folder, "[ls, \"{folder\"]"),
                  "node.yaml:8: tools[0].command[1]: \"{folder\" has a '{' "
                  "without its '}' (write {{ for a literal '{')");
  CAF_CHECK_EQUAL(tool(folder, "[ls, \"{{{folder\"]"),
                  "node.yaml:8: tools[0].command[1]: \"{{{folder\" has a '{' "
                  "without its '}' (write {{ for a literal '{')");
  // Doubled braces are literal, and a lone '}' is too.
  CAF_CHECK_EQUAL(tool(folder,
                       "[sh, \"{{folder}}\", \"}\", \"a{{{folder}}}\"]"),
                  "<parsed without error>");
}

CAF_TEST(tool limits are checked) {
  auto tool = [](const std::string& extra) {
    return tool_error("name: a\n    description: d\n    command: [x]\n"
                      + extra);
  };
  CAF_CHECK_EQUAL(tool("    timeout: 0s\n"),
                  "node.yaml:5: tools[0].timeout: expected at least 1ms, got "
                  "0s");
  CAF_CHECK_EQUAL(tool("    timeout: 30\n"),
                  "node.yaml:5: tools[0].timeout: expected a duration such as "
                  "\"250ms\", \"5s\", \"2m\" or \"1h\", got \"30\" (a unit is "
                  "required)");
  CAF_CHECK_EQUAL(tool("    grace: -1s\n"),
                  "node.yaml:5: tools[0].grace: expected a duration such as "
                  "\"250ms\", \"5s\", \"2m\" or \"1h\", got \"-1s\"");
  CAF_CHECK_EQUAL(tool("    output_cap: 0\n"),
                  "node.yaml:5: tools[0].output_cap: expected a size in bytes "
                  ">= 1 (an integer, or a string like \"64KiB\" or \"1MiB\"), "
                  "got \"0\"");
  CAF_CHECK_EQUAL(tool("    env: [PATH, 1X]\n"),
                  "node.yaml:5: tools[0].env[1]: expected an environment "
                  "variable name (letters, digits and _, not starting with a "
                  "digit), got \"1X\"");
  CAF_CHECK_EQUAL(tool("    env: PATH\n"),
                  "node.yaml:5: tools[0].env: expected a list of environment "
                  "variable names, got \"PATH\"");
  // A zero grace kills at once.
  CAF_CHECK_EQUAL(tool("    grace: 0s\n"), "<parsed without error>");
}

CAF_TEST(tool resource limits have defaults and can be set or lifted) {
  auto cfg = parse("tools:\n  - name: t\n    description: d\n"
                   "    command: [\"true\"]\n");
  CAF_REQUIRE_EQUAL(outcome(cfg), "none");
  auto& def = cfg->tools[0].limits;
  CAF_CHECK_EQUAL(def.memory, uint64_t{4} << 30);
  CAF_CHECK_EQUAL(def.cpu_time, 600s);
  CAF_CHECK_EQUAL(def.open_files, 1024u);
  CAF_CHECK_EQUAL(def.processes, 1024u);
  CAF_CHECK_EQUAL(def.file_size, uint64_t{1} << 30);
  cfg = parse("tools:\n  - name: t\n    description: d\n"
              "    command: [\"true\"]\n"
              "    limits: {memory: 512MiB, cpu_time: 1500ms, open_files: 64, "
              "processes: 0, file_size: 0}\n");
  CAF_REQUIRE_EQUAL(outcome(cfg), "none");
  auto& set = cfg->tools[0].limits;
  CAF_CHECK_EQUAL(set.memory, uint64_t{512} << 20);
  CAF_CHECK_EQUAL(set.cpu_time, 2s); // Whole seconds, rounded up.
  CAF_CHECK_EQUAL(set.open_files, 64u);
  CAF_CHECK_EQUAL(set.processes, 0u); // 0: not limited here.
  CAF_CHECK_EQUAL(set.file_size, 0u);
  auto tool = [](const std::string& limits) {
    return tool_error("name: a\n    description: d\n    command: [x]\n"
                      "    limits: "
                      + limits + "\n");
  };
  CAF_CHECK_EQUAL(tool("{cpu: 1s}"),
                  "node.yaml:5: tools[0].limits.cpu: unknown key (expected "
                  "memory, cpu_time, open_files, processes or file_size)");
  CAF_CHECK_EQUAL(tool("{open_files: -1}"),
                  "node.yaml:5: tools[0].limits.open_files: expected an "
                  "integer >= 0, got \"-1\"");
  CAF_CHECK_EQUAL(tool("{memory: lots}"),
                  "node.yaml:5: tools[0].limits.memory: expected a size in "
                  "bytes >= 0 (an integer, or a string like \"64KiB\" or "
                  "\"1MiB\"), got \"lots\"");
  CAF_CHECK_EQUAL(tool("{cpu_time: 10}"),
                  "node.yaml:5: tools[0].limits.cpu_time: expected a duration "
                  "such as \"250ms\", \"5s\", \"2m\" or \"1h\", got \"10\" "
                  "(a unit is required)");
  CAF_CHECK_EQUAL(tool("64"),
                  "node.yaml:5: tools[0].limits: expected a mapping, got "
                  "\"64\"");
}

CAF_TEST(the account of a tool is looked up when the file is read) {
  auto tool = [](const std::string& account) {
    return parse("tools:\n  - name: a\n    description: d\n"
                 "    command: [x]\n"
                 + account);
  };
  auto cfg = tool("");
  CAF_REQUIRE_EQUAL(outcome(cfg), "none");
  CAF_CHECK_EQUAL(cfg->tools[0].uid, -1); // The node's own.
  CAF_CHECK_EQUAL(cfg->tools[0].gid, -1);
  cfg = tool("    user: nobody\n");
  CAF_REQUIRE_EQUAL(outcome(cfg), "none");
  CAF_CHECK_EQUAL(cfg->tools[0].user, "nobody");
  CAF_CHECK_EQUAL(cfg->tools[0].uid, 65534);
  CAF_CHECK_EQUAL(cfg->tools[0].gid, 65534); // Its primary group.
  cfg = tool("    user: \"65534\"\n    group: \"0\"\n");
  CAF_REQUIRE_EQUAL(outcome(cfg), "none");
  CAF_CHECK_EQUAL(cfg->tools[0].uid, 65534);
  CAF_CHECK_EQUAL(cfg->tools[0].gid, 0);
  auto error = [&](const std::string& account) {
    return tool_error("name: a\n    description: d\n    command: [x]\n"
                      + account);
  };
  CAF_CHECK_EQUAL(error("    user: keel-no-such-user\n"),
                  "node.yaml:5: tools[0].user: no user named "
                  "\"keel-no-such-user\" on this machine");
  CAF_CHECK_EQUAL(error("    user: nobody\n    group: keel-no-such-group\n"),
                  "node.yaml:6: tools[0].group: no group named "
                  "\"keel-no-such-group\" on this machine");
  CAF_CHECK_EQUAL(error("    group: nogroup\n"),
                  "node.yaml:5: tools[0].group: a group needs a user (set "
                  "user: as well)");
  CAF_CHECK_EQUAL(error("    user: \"4000000\"\n"),
                  "node.yaml:5: tools[0].user: user 4000000 has no entry in "
                  "the user database, so no primary group: set group: as "
                  "well");
}

CAF_TEST(a placeholder that may be read as an option is warned about) {
  auto tool = [](const std::string& command) {
    return parse("tools:\n  - name: a\n    description: d\n"
                 "    parameters:\n      type: object\n      properties:\n"
                 "        p: {type: string}\n    command: "
                 + command + "\n");
  };
  auto cfg = tool("[rm, \"{p}\"]");
  CAF_REQUIRE_EQUAL(outcome(cfg), "none");
  CAF_REQUIRE_EQUAL(cfg->warnings.size(), 1u);
  CAF_CHECK_EQUAL(cfg->warnings[0],
                  "tools[0].command[1]: \"{p}\" starts with an argument of "
                  "the model's choosing and no \"--\" comes before it, so a "
                  "value starting with '-' is read as an option (put \"--\" "
                  "before it, or a fixed prefix such as --name={name})");
  // After "--", behind a fixed prefix, or a literal brace: no warning.
  for (auto safe : {"[rm, \"--\", \"{p}\"]", "[grep, \"--regexp={p}\"]",
                    "[echo, \"{{p}}\"]", "[echo, \"x{p}\"]"}) {
    cfg = tool(safe);
    CAF_REQUIRE_EQUAL(outcome(cfg), "none");
    CAF_CHECK_EQUAL(cfg->warnings.size(), 0u);
  }
}

CAF_TEST(tool concurrency is bounded node - wide) {
  CAF_CHECK_EQUAL(default_config().threads.max_concurrent_tools, 8u);
  auto cfg = parse("threads:\n  max_concurrent_tools: 2\n");
  CAF_REQUIRE_EQUAL(outcome(cfg), "none");
  CAF_CHECK_EQUAL(cfg->threads.max_concurrent_tools, 2u);
  CAF_CHECK_EQUAL(error_of("threads:\n  max_concurrent_tools: 0\n"),
                  "node.yaml:2: threads.max_concurrent_tools: expected an "
                  "integer >= 1, got \"0\"");
}

CAF_TEST(pools and threads assign declared tools) {
  auto cfg = parse(std::string{two_tools} + R"(pools:
  - name: default
    chain: [echo]
    tools: [today]
threads:
  tools: [list_files]
  agent_tools: [today, list_files]
)");
  CAF_REQUIRE_EQUAL(outcome(cfg), "none");
  CAF_CHECK_EQUAL(cfg->pools[0].tools, std::vector<std::string>{"today"});
  CAF_CHECK_EQUAL(cfg->threads.tools, std::vector<std::string>{"list_files"});
  CAF_CHECK_EQUAL(cfg->threads.agent_tools,
                  (std::vector<std::string>{"today", "list_files"}));
  auto def = default_config();
  CAF_CHECK(def.pools[0].tools.empty());
  CAF_CHECK(def.threads.tools.empty());
  CAF_CHECK(def.threads.agent_tools.empty());
  CAF_CHECK_EQUAL(error_of(std::string{two_tools}
                           + "pools:\n  - name: default\n    chain: [echo]\n"
                             "    tools: [today, tomorrow]\n"),
                  "node.yaml:15: pools[0].tools[1]: unknown tool "
                  "\"tomorrow\" (expected today or list_files)");
  CAF_CHECK_EQUAL(
    error_of(std::string{two_tools} + "threads:\n  tools: [today, today]\n"),
    "node.yaml:13: threads.tools[1]: tool \"today\" is listed "
    "twice");
  CAF_CHECK_EQUAL(error_of(std::string{two_tools}
                           + "threads:\n  agent_tools:\n    - lst_files\n"),
                  "node.yaml:14: threads.agent_tools[0]: unknown tool "
                  "\"lst_files\" (expected today or list_files)");
  CAF_CHECK_EQUAL(error_of("threads:\n  tools: [today]\n"),
                  "node.yaml:2: threads.tools[0]: unknown tool \"today\" (no "
                  "tools are declared: define it under tools)");
  // The built-in agent tools need no assignment: they are no tools[] entry.
  CAF_CHECK_EQUAL(error_of("threads:\n  agent_tools: [spawn_agent]\n"),
                  "node.yaml:2: threads.agent_tools[0]: unknown tool "
                  "\"spawn_agent\" (no tools are declared: define it under "
                  "tools)");
  CAF_CHECK_EQUAL(error_of("threads:\n  tools: today\n"),
                  "node.yaml:2: threads.tools: expected a list of tool names, "
                  "got \"today\"");
}

CAF_TEST(the turn guard takes every limit) {
  auto def = default_config().threads;
  CAF_CHECK_EQUAL(def.guard.max_events, 2000u);
  CAF_CHECK_EQUAL(def.guard.per_tool.size(), 5u);
  CAF_CHECK_EQUAL(def.disable_tool_after, 3u);
  auto cfg = parse(R"(threads:
  disable_tool_after: 5
  guard:
    max_events: 100
    max_tool_calls: 20
    max_duration: 90s
    per_tool:
      list_files: 3
      today: 1
    repeated_call_limit: 2
    repeated_error_limit: 1
    similar_reply_limit: 7
)");
  CAF_REQUIRE_EQUAL(outcome(cfg), "none");
  auto& g = cfg->threads.guard;
  CAF_CHECK_EQUAL(g.max_events, 100u);
  CAF_CHECK_EQUAL(g.max_tool_calls, 20u);
  CAF_CHECK_EQUAL(g.max_duration, 90s);
  // The map given replaces the default caps.
  CAF_CHECK_EQUAL(g.per_tool, (std::map<std::string, uint64_t>{
                                {"list_files", 3}, {"today", 1}}));
  CAF_CHECK_EQUAL(g.repeated_call_limit, 2u);
  CAF_CHECK_EQUAL(g.repeated_error_limit, 1u);
  CAF_CHECK_EQUAL(g.similar_reply_limit, 7u);
  CAF_CHECK_EQUAL(cfg->threads.disable_tool_after, 5u);
  // Keys left out keep their defaults, per_tool included; {} clears it.
  cfg = parse("threads:\n  guard:\n    max_events: 9\n");
  CAF_REQUIRE_EQUAL(outcome(cfg), "none");
  CAF_CHECK_EQUAL(cfg->threads.guard.max_tool_calls, def.guard.max_tool_calls);
  CAF_CHECK_EQUAL(cfg->threads.guard.per_tool, def.guard.per_tool);
  cfg = parse("threads:\n  guard:\n    per_tool: {}\n");
  CAF_REQUIRE_EQUAL(outcome(cfg), "none");
  CAF_CHECK(cfg->threads.guard.per_tool.empty());
}

CAF_TEST(turn guard mistakes are named) {
  auto guard = [](const std::string& body) {
    return error_of("threads:\n  guard:\n" + body);
  };
  for (auto key : {"max_events", "max_tool_calls", "repeated_call_limit",
                   "repeated_error_limit", "similar_reply_limit"})
    CAF_CHECK_EQUAL(guard(std::string{"    "} + key + ": 0\n"),
                    std::string{"node.yaml:3: threads.guard."} + key
                      + ": expected an integer >= 1, got \"0\"");
  CAF_CHECK_EQUAL(guard("    max_duration: 0s\n"),
                  "node.yaml:3: threads.guard.max_duration: expected at least "
                  "1ms, got 0s");
  CAF_CHECK_EQUAL(guard("    per_tool:\n      today: 0\n"),
                  "node.yaml:4: threads.guard.per_tool.today: expected an "
                  "integer >= 1, got \"0\"");
  CAF_CHECK_EQUAL(guard("    per_tool:\n      today: 1\n      today: 2\n"),
                  "node.yaml:5: threads.guard.per_tool.today: duplicate key "
                  "(first given on line 4)");
  CAF_CHECK_EQUAL(guard("    per_tool: [today]\n"),
                  "node.yaml:3: threads.guard.per_tool: expected a mapping of "
                  "tool names to call counts, got a list");
  CAF_CHECK_EQUAL(guard("    max_calls: 3\n"),
                  "node.yaml:3: threads.guard.max_calls: unknown key (expected "
                  "max_events, max_tool_calls, max_duration, per_tool, "
                  "repeated_call_limit, repeated_error_limit, "
                  "file_loop_limit or similar_reply_limit)");
  CAF_CHECK_EQUAL(error_of("threads:\n  disable_tool_after: 0\n"),
                  "node.yaml:2: threads.disable_tool_after: expected an "
                  "integer in 1..4294967295, got \"0\"");
}

CAF_TEST(compaction takes every key) {
  auto def = default_config().threads;
  CAF_CHECK(def.compaction_enabled);
  CAF_CHECK_EQUAL(def.compaction.warn_at, 0.8);
  auto cfg = parse(R"(threads:
  compaction:
    enabled: false
    warn_at: 0.5
    compact_at: 1
    strip_over: 1000
    protect_last: 2
    min_entries: 3
    chunk_entries: 2
    chunk_overlap: 1
)");
  CAF_REQUIRE_EQUAL(outcome(cfg), "none");
  auto& c = cfg->threads.compaction;
  CAF_CHECK(!cfg->threads.compaction_enabled);
  CAF_CHECK_EQUAL(c.warn_at, 0.5);
  CAF_CHECK_EQUAL(c.compact_at, 1.0);
  CAF_CHECK_EQUAL(c.strip_over, 1000u);
  CAF_CHECK_EQUAL(c.protect_last, 2u);
  CAF_CHECK_EQUAL(c.min_entries, 3u);
  CAF_CHECK_EQUAL(c.chunk_entries, 2u);
  CAF_CHECK_EQUAL(c.chunk_overlap, 1u);
  cfg = parse("threads:\n  compaction:\n    chunk_overlap: 0\n");
  CAF_REQUIRE_EQUAL(outcome(cfg), "none");
  CAF_CHECK_EQUAL(cfg->threads.compaction.chunk_overlap, 0u);
  CAF_CHECK_EQUAL(cfg->threads.compaction.chunk_entries,
                  def.compaction.chunk_entries);
  CAF_CHECK(cfg->threads.compaction_enabled);
}

CAF_TEST(compaction values and their relations are checked) {
  auto compaction = [](const std::string& body) {
    return error_of("threads:\n  compaction:\n" + body);
  };
  CAF_CHECK_EQUAL(compaction("    warn_at: 0\n"),
                  "node.yaml:3: threads.compaction.warn_at: expected a number "
                  "above 0 and at most 1, got \"0\"");
  CAF_CHECK_EQUAL(compaction("    compact_at: 1.5\n"),
                  "node.yaml:3: threads.compaction.compact_at: expected a "
                  "number in 0..1, got \"1.5\"");
  CAF_CHECK_EQUAL(compaction("    warn_at: 0.9\n"),
                  "node.yaml:3: threads.compaction.warn_at: expected less "
                  "than threads.compaction.compact_at (0.9), got 0.9");
  // With warn_at left at its default, the error points at compact_at.
  CAF_CHECK_EQUAL(compaction("    strip_over: 10\n    compact_at: 0.5\n"),
                  "node.yaml:4: threads.compaction.warn_at: expected less "
                  "than threads.compaction.compact_at (0.5), got 0.8");
  CAF_CHECK_EQUAL(compaction("    strip_over: 0\n"),
                  "node.yaml:3: threads.compaction.strip_over: expected an "
                  "integer >= 1, got \"0\"");
  CAF_CHECK_EQUAL(compaction("    protect_last: 0\n"),
                  "node.yaml:3: threads.compaction.protect_last: expected an "
                  "integer >= 1, got \"0\"");
  CAF_CHECK_EQUAL(compaction("    protect_last: 6\n"),
                  "node.yaml:3: threads.compaction.min_entries: expected more "
                  "than threads.compaction.protect_last (6), got 6");
  CAF_CHECK_EQUAL(compaction("    min_entries: 4\n"),
                  "node.yaml:3: threads.compaction.min_entries: expected more "
                  "than threads.compaction.protect_last (4), got 4");
  CAF_CHECK_EQUAL(compaction("    chunk_entries: 1\n"),
                  "node.yaml:3: threads.compaction.chunk_entries: expected an "
                  "integer >= 2, got \"1\"");
  CAF_CHECK_EQUAL(compaction("    chunk_entries: 2\n"),
                  "node.yaml:3: threads.compaction.chunk_overlap: expected "
                  "less than threads.compaction.chunk_entries (2), got 2");
  CAF_CHECK_EQUAL(compaction("    enabled: no\n"),
                  "node.yaml:3: threads.compaction.enabled: expected true or "
                  "false, got \"no\"");
  CAF_CHECK_EQUAL(compaction("    chunk_size: 3\n"),
                  "node.yaml:3: threads.compaction.chunk_size: unknown key "
                  "(expected enabled, warn_at, compact_at, strip_over, "
                  "protect_last, min_entries, chunk_entries or "
                  "chunk_overlap)");
}

CAF_TEST(agent limits take every key and must be at least 1) {
  auto def = default_config().threads.agents;
  CAF_CHECK_EQUAL(def.max_children, 16u);
  CAF_CHECK_EQUAL(def.max_depth, 4u);
  CAF_CHECK_EQUAL(def.max_spawns_per_reply, 4u);
  CAF_CHECK_EQUAL(def.hop_budget, 64u);
  auto cfg = parse("threads:\n  agents:\n    max_children: 2\n"
                   "    max_depth: 1\n    max_spawns_per_reply: 3\n"
                   "    hop_budget: 10\n");
  CAF_REQUIRE_EQUAL(outcome(cfg), "none");
  auto& a = cfg->threads.agents;
  CAF_CHECK_EQUAL(a.max_children, 2u);
  CAF_CHECK_EQUAL(a.max_depth, 1u);
  CAF_CHECK_EQUAL(a.max_spawns_per_reply, 3u);
  CAF_CHECK_EQUAL(a.hop_budget, 10u);
  for (auto key :
       {"max_children", "max_depth", "max_spawns_per_reply", "hop_budget"})
    CAF_CHECK_EQUAL(
      error_of(std::string{"threads:\n  agents:\n    "} + key + ": 0\n"),
      std::string{"node.yaml:3: threads.agents."} + key
        + ": expected an integer >= 1, got \"0\"");
  CAF_CHECK_EQUAL(error_of("threads:\n  agents:\n    max_dept: 2\n"),
                  "node.yaml:3: threads.agents.max_dept: unknown key (did you "
                  "mean max_depth?)");
}

CAF_TEST(providers take a context window override) {
  CAF_CHECK_EQUAL(default_config().providers[0].context_window, 0u);
  auto cfg = parse("providers:\n  - name: s\n    kind: scripted\n"
                   "    context_window: 2048\n    script:\n"
                   "      - reply: x\n  - name: e\n    kind: echo\n"
                   "    context_window: 0\n");
  CAF_REQUIRE_EQUAL(outcome(cfg), "none");
  CAF_CHECK_EQUAL(cfg->providers[0].context_window, 2048u);
  CAF_CHECK_EQUAL(cfg->providers[1].context_window, 0u);
  CAF_CHECK_EQUAL(error_of("providers:\n  - name: e\n    kind: echo\n"
                           "    context_window: 1023\n"),
                  "node.yaml:4: providers[0].context_window: expected 0 (the "
                  "model's window from the table of known models) or an "
                  "integer >= 1024, got \"1023\"");
  CAF_CHECK_EQUAL(error_of("providers:\n  - name: e\n    kind: echo\n"
                           "    context_window: 8k\n"),
                  "node.yaml:4: providers[0].context_window: expected an "
                  "integer >= 0, got \"8k\"");
}

CAF_TEST(a loopback client token without an admin token is warned about) {
  auto warned = parse("gateway:\n  token: t0k\n");
  CAF_REQUIRE_EQUAL(outcome(warned), "none");
  CAF_REQUIRE_EQUAL(warned->warnings.size(), 1u);
  KEEL_CHECK_CONTAINS(warned->warnings[0],
                      "gateway.admin_token is not set: the client token also "
                      "opens the admin API");
  CAF_CHECK_EQUAL(warned->warnings[0].find("t0k"), std::string::npos);
  for (auto quiet : {"gateway:\n  token: t0k\n  admin_token: a\n",
                     "gateway:\n  host: 10.0.0.1\n  token: t0k\n", ""}) {
    auto cfg = parse(quiet);
    CAF_REQUIRE_EQUAL(outcome(cfg), "none");
    CAF_CHECK(cfg->warnings.empty());
  }
}

CAF_TEST(secret files readable beyond their owner are warned about) {
  using std::filesystem::perms;
  const std::pair<mode_t, const char*> modes[] = {
    {0600, nullptr},
    {0400, nullptr},
    {0700, nullptr},
    {0610, nullptr}, // Group may only run it: it cannot read it.
    {0640, "open to its group (mode 0640)"},
    {0620, "open to its group (mode 0620)"},
    {0644, "open to every local user (mode 0644)"},
    {0604, "open to every local user (mode 0604)"},
  };
  for (auto [mode, expected] : modes) {
    CAF_MESSAGE("mode " << std::oct << mode);
    auto w = exposed_mode_warning("gateway.token_file /t", mode);
    CAF_CHECK_EQUAL(w.has_value(), expected != nullptr);
    if (w && expected) {
      KEEL_CHECK_CONTAINS(*w, "gateway.token_file /t is ");
      KEEL_CHECK_CONTAINS(*w, expected);
      KEEL_CHECK_CONTAINS(*w, "chmod 600");
    }
  }
  temp_dir tmp;
  auto token = write_file(tmp, "token", "file-token-1\n");
  auto key = write_file(tmp, "node.key", "key");
  auto cert = write_file(tmp, "node.crt", "cert");
  auto warnings = [&](const std::string& extra) {
    auto yaml = "gateway:\n  token_file: " + token + "\n" + extra;
    auto path = write_file(tmp, "node.yaml", yaml);
    auto cfg = load_config_file(path, [](auto&) { return std::nullopt; });
    CAF_REQUIRE(cfg);
    std::string all; // The file mode warnings only (not the admin API's).
    for (auto& w : cfg->warnings)
      if (w.find(" is open to ") != std::string::npos)
        all += w + "\n";
    return all;
  };
  std::filesystem::permissions(token, perms::owner_read | perms::group_read);
  KEEL_CHECK_CONTAINS(warnings(""), "gateway.token_file " + token
                                      + " is open to its group (mode 0440)");
  std::filesystem::permissions(token, perms::owner_read | perms::owner_write);
  CAF_CHECK_EQUAL(warnings(""), "");
  // A config file with a secret written in it, readable by all.
  auto inline_secret = "  admin_token: admin-inline-1\n";
  auto path = (tmp.path() / "node.yaml").string();
  auto text = warnings(inline_secret);
  KEEL_CHECK_CONTAINS(text, "the configuration file " + path
                              + " is open to every local user");
  // The same file without a secret in it: nothing to protect.
  CAF_CHECK_EQUAL(warnings(""), "");
  // The cluster's TLS key.
  std::filesystem::permissions(key, perms::owner_read | perms::others_read);
  auto cluster = std::string{postgres_storage}
                 + "cluster:\n  enabled: true\n  token: " + good_token
                 + "\n  tls:\n    cert: " + cert + "\n    key: " + key
                 + "\n    ca: " + cert + "\n";
  auto cfg = parse(cluster);
  CAF_REQUIRE(cfg);
  std::string all;
  for (auto& w : cfg->warnings)
    all += w + "\n";
  KEEL_CHECK_CONTAINS(all, "cluster.tls.key " + key
                             + " is open to every local user (mode 0404)");
}

CAF_TEST(the unauthenticated budget and the header timeout are read) {
  auto cfg = parse("gateway:\n  max_unauthenticated: 50\n"
                   "  max_unauthenticated_per_address: 5\n"
                   "  header_timeout: 3s\n");
  CAF_REQUIRE_EQUAL(outcome(cfg), "none");
  CAF_CHECK_EQUAL(cfg->gateway.max_unauthenticated, 50u);
  CAF_CHECK_EQUAL(cfg->gateway.max_unauthenticated_per_address, 5u);
  CAF_CHECK_EQUAL(cfg->gateway.header_timeout, 3s);
  auto defaults = default_config().gateway;
  CAF_CHECK_EQUAL(defaults.max_unauthenticated, 1000u);
  CAF_CHECK_EQUAL(defaults.max_unauthenticated_per_address, 100u);
  CAF_CHECK_EQUAL(defaults.header_timeout, 10s);
  // A smaller budget alone shrinks the per-address default with it.
  auto small = parse("gateway:\n  max_unauthenticated: 40\n");
  CAF_REQUIRE_EQUAL(outcome(small), "none");
  CAF_CHECK_EQUAL(small->gateway.max_unauthenticated_per_address, 40u);
  CAF_CHECK_EQUAL(
    error_of("gateway:\n  max_unauthenticated: 40\n"
             "  max_unauthenticated_per_address: 41\n"),
    "node.yaml:3: gateway.max_unauthenticated_per_address: expected at most "
    "gateway.max_unauthenticated (40), got 41");
  KEEL_CHECK_CONTAINS(error_of("gateway:\n  max_unauthenticated: 0\n"),
                      "gateway.max_unauthenticated");
  KEEL_CHECK_CONTAINS(error_of("gateway:\n  header_timeout: 0s\n"),
                      "gateway.header_timeout");
}
