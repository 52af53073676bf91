// The checks of a read configuration's fields against each other: each
// failure names the key that was written, at its line (or, for a value
// left at its default, the key that made it wrong).

#include <fstream>
#include <set>

#include "config_parser.hpp"

namespace keel::config_detail {

using strict_yaml::one_of;

void parser::validate(const node_config& cfg) const {
  check_gateway_limits(cfg.gateway);
  check_gateway_auth(cfg.gateway);
  check_header_values(cfg.providers);
  check_backoff_bounds(cfg.supervision);
  check_providers(cfg.providers);
  check_pools(cfg);
  check_thread_pool(cfg);
  check_tools(cfg);
  check_agents(cfg);
  check_storage(cfg);
  check_cluster(cfg);
  check_channels(cfg);
}

void parser::fail_below(int line, const std::string& path,
                        const std::string& lower_path, caf::timespan lower,
                        caf::timespan value) const {
  fail(line, path,
       "expected at least " + lower_path + " (" + render_duration(lower)
         + "), got " + render_duration(value));
}

void parser::check_gateway_limits(const gateway_config& cfg) const {
  if (cfg.max_text_bytes > cfg.max_frame_bytes)
    fail(line("gateway.max_text_bytes", "gateway.max_frame_bytes"),
         "gateway.max_text_bytes",
         "expected at most gateway.max_frame_bytes ("
           + std::to_string(cfg.max_frame_bytes) + "), got "
           + std::to_string(cfg.max_text_bytes));
  if (cfg.max_unauthenticated_per_address > cfg.max_unauthenticated)
    fail(line("gateway.max_unauthenticated_per_address",
              "gateway.max_unauthenticated"),
         "gateway.max_unauthenticated_per_address",
         "expected at most gateway.max_unauthenticated ("
           + std::to_string(cfg.max_unauthenticated) + "), got "
           + std::to_string(cfg.max_unauthenticated_per_address));
}

void parser::check_gateway_auth(const gateway_config& cfg) const {
  if (!cfg.token.empty() || cfg.allow_unauthenticated
      || is_loopback_host(cfg.host))
    return;
  fail(line("gateway.token", "gateway.host"), "gateway.token",
       "the gateway listens on " + quote(cfg.host)
         + ", which other machines can reach, but no client token is set: set "
           "gateway.token (or gateway.token_file), or set "
           "gateway.allow_unauthenticated: true to serve anyone who can "
           "connect");
}

void parser::check_header_values(
  const std::vector<provider_config>& providers) const {
  // CR or LF in a value would let it add headers or end the request early.
  auto has_line_break = [](const std::string& x) {
    return x.find_first_of("\r\n") != std::string::npos;
  };
  for (size_t i = 0; i < providers.size(); ++i) {
    auto prefix = indexed("providers", i);
    if (has_line_break(providers[i].api_key))
      fail(line(prefix + ".api_key", prefix), prefix + ".api_key",
           "the API key contains a line break (CR or LF)");
    for (auto& [name, value] : providers[i].headers)
      if (has_line_break(value)) {
        auto path = prefix + ".headers." + name;
        fail(line(path, prefix), path,
             "header values must not contain a line break (CR or LF)");
      }
  }
}

void parser::check_backoff_bounds(const supervision_config& cfg) const {
  // Checked after merging over the defaults: the file may set only one bound.
  const std::pair<const char*, const supervisor_settings*> supervisors[] = {
    {"root", &cfg.root},
    {"providers", &cfg.providers},
    {"conversations", &cfg.conversations},
  };
  for (auto [name, settings] : supervisors) {
    auto& b = settings->backoff;
    if (b.max >= b.initial)
      continue;
    auto prefix = std::string{"supervision."} + name + ".backoff";
    fail_below(line(prefix + ".max", prefix + ".initial"), prefix + ".max",
               prefix + ".initial", b.initial, b.max);
  }
}

void parser::check_providers(
  const std::vector<provider_config>& providers) const {
  if (providers_written_ && providers.empty())
    fail(line("providers"), "providers",
         "expected a non-empty list of providers, got an empty list");
  check_unique_names(providers, "providers", "provider");
}

void parser::check_channels(const node_config& cfg) const {
  auto& channels = cfg.delivery.channels;
  check_unique_names(channels, "delivery.channels", "channel");
  auto& owner = cfg.owner.channel;
  if (!owner.empty() && !cfg.delivery.find_channel(owner))
    fail(line("owner.channel"), "owner.channel",
         "expected the name of a channel of delivery.channels, got "
           + quote(owner));
  for (size_t i = 0; i < channels.size(); ++i) {
    auto path = indexed("delivery.channels", i);
    if (channels[i].threads.empty() && channels[i].name != owner)
      fail(line(path + ".threads", path), path + ".threads",
           "expected at least one thread id or prefix ending in * (channel "
             + quote(channels[i].name)
             + " is not owner.channel and would send nothing)");
  }
}

void parser::check_pools(const node_config& cfg) const {
  if (pools_written_ && cfg.pools.empty())
    fail(line("pools"), "pools",
         "expected a non-empty list of pools, got an empty list");
  check_unique_names(cfg.pools, "pools", "pool");
  for (size_t i = 0; i < cfg.pools.size(); ++i)
    check_chain(cfg, i);
}

void parser::check_chain(const node_config& cfg, size_t pool_index) const {
  // Each entry names an existing provider, and only once.
  auto prefix = indexed("pools", pool_index);
  auto& chain = cfg.pools[pool_index].chain;
  std::set<std::string> seen;
  for (size_t j = 0; j < chain.size(); ++j) {
    auto path = indexed(prefix + ".chain", j);
    auto& entry = chain[j];
    // Only a defaulted pool has no lines: blame the providers instead.
    auto at = line(path, pools_written_ ? prefix : "providers");
    if (cfg.find_provider(entry) == nullptr)
      fail(at, path,
           "unknown provider " + quote(entry) + " (expected "
             + one_of(names_of(cfg.providers)) + ")");
    if (!seen.insert(entry).second)
      fail(at, path, "provider " + quote(entry) + " is listed twice");
  }
}

void parser::check_tools(const node_config& cfg) const {
  check_unique_names(cfg.tools, "tools", "tool");
  for (size_t i = 0; i < cfg.pools.size(); ++i)
    check_tool_refs(cfg, indexed("pools", i) + ".tools", cfg.pools[i].tools);
  check_tool_refs(cfg, "threads.tools", cfg.threads.tools);
  check_tool_refs(cfg, "threads.agent_tools", cfg.threads.agent_tools);
}

void parser::check_tool_refs(const node_config& cfg, const std::string& path,
                             const std::vector<std::string>& names) const {
  std::set<std::string> seen;
  for (size_t i = 0; i < names.size(); ++i) {
    auto item_path = indexed(path, i);
    auto at = line(item_path, path);
    if (cfg.find_tool(names[i]) == nullptr)
      fail(at, item_path,
           "unknown tool " + quote(names[i])
             + (cfg.tools.empty()
                  ? std::string{" (no tools are declared: define it under "
                                "tools)"}
                  : " (expected " + one_of(names_of(cfg.tools)) + ")"));
    if (!seen.insert(names[i]).second)
      fail(at, item_path, "tool " + quote(names[i]) + " is listed twice");
  }
}

void parser::check_storage(const node_config& cfg) const {
  if (cfg.storage.backend != storage_backend::postgres)
    return;
  if (cfg.chaos.disk)
    fail(line("chaos.disk", "storage.backend"), "chaos.disk",
         "injects faults into RocksDB's file system and has no effect when "
         "storage.backend is \"postgres\" (to test database faults, stop "
         "or kill the PostgreSQL server)");
  if (!cfg.storage.postgres.url.empty())
    return;
  fail(line("storage.postgres.url", "storage.backend"), "storage.postgres.url",
       "required when storage.backend is \"postgres\" (a libpq URI such as "
       "postgresql://keel@db.example/keel; write ${KEEL_PG_URL} to take it "
       "from the environment)");
}

void parser::check_cluster(const node_config& cfg) const {
  auto& cl = cfg.cluster;
  // A cluster that is off opens nothing: its keys only need the right types.
  if (!cl.enabled)
    return;
  if (cfg.storage.backend != storage_backend::postgres)
    fail(line("cluster.enabled"), "cluster.enabled",
         "a cluster needs storage.backend \"postgres\" (every node must read "
         "every thread, so the store must be shared), but storage.backend is "
         "\"rocksdb\"");
  check_cluster_token(cl);
  if (cl.lease_ttl.count() / heartbeats_per_lease < cl.heartbeat.count())
    fail(line("cluster.lease_ttl", "cluster.heartbeat"), "cluster.lease_ttl",
         "expected at least " + std::to_string(heartbeats_per_lease)
           + " x cluster.heartbeat (" + std::to_string(heartbeats_per_lease)
           + " x " + render_duration(cl.heartbeat) + "), got "
           + render_duration(cl.lease_ttl));
  check_cluster_advertise(cl);
  check_cluster_tls(cl.tls);
  check_cluster_transport(cl);
}

void parser::check_cluster_transport(const cluster_config& cfg) const {
  if (cfg.tls.enabled())
    return;
  if (!cfg.insecure_plaintext)
    fail(line("cluster.tls", "cluster.enabled"), "cluster.tls",
         "required when cluster.enabled is true: links between nodes are "
         "mutual TLS (cert, key and ca; `keelctl cluster certs DIR` makes "
         "them), since anyone who reaches a plaintext cluster port can send "
         "the node's actors messages; a test cluster on loopback may set "
         "cluster.insecure_plaintext: true instead");
  if (!is_loopback_host(cfg.listen_host))
    fail(line("cluster.insecure_plaintext"), "cluster.insecure_plaintext",
         "allowed only when cluster.listen is a loopback address, got "
           + quote(render_host_port(cfg.listen_host, cfg.listen_port))
           + " (set cluster.tls for links that leave the machine)");
}

void parser::check_cluster_token(const cluster_config& cfg) const {
  // The token is never shown, only its length.
  if (cfg.token.empty())
    fail(line("cluster.token", "cluster.enabled"), "cluster.token",
         "required when cluster.enabled is true (a shared secret of at least "
           + std::to_string(min_cluster_token_size)
           + " characters, the same on every node; write "
             "${KEEL_CLUSTER_TOKEN} to take it from the environment)");
  if (cfg.token.size() < min_cluster_token_size)
    fail(line("cluster.token"), "cluster.token",
         "expected a shared secret of at least "
           + std::to_string(min_cluster_token_size) + " characters, got "
           + std::to_string(cfg.token.size()));
}

void parser::check_cluster_advertise(const cluster_config& cfg) const {
  if (!cfg.advertise.empty() || !is_wildcard_host(cfg.listen_host))
    return;
  fail(line("cluster.advertise", "cluster.listen"), "cluster.advertise",
       "required when cluster.listen is a wildcard address ("
         + quote(render_host_port(cfg.listen_host, cfg.listen_port))
         + "), which peers cannot connect to: set the host:port peers reach "
           "this node at");
}

void parser::check_cluster_tls(const cluster_tls_config& cfg) const {
  if (!cfg.enabled())
    return;
  std::pair<const char*, const std::string*> files[]
    = {{"cert", &cfg.cert}, {"key", &cfg.key}, {"ca", &cfg.ca}};
  for (auto [key, file] : files) {
    auto path = std::string{"cluster.tls."} + key;
    if (!std::ifstream{*file})
      fail(line(path), path,
           "expected a readable PEM file, got " + quote(*file));
  }
}

void parser::check_thread_pool(const node_config& cfg) const {
  if (cfg.find_pool(cfg.threads.pool) != nullptr)
    return;
  auto msg = "unknown pool " + quote(cfg.threads.pool) + " (expected "
             + one_of(names_of(cfg.pools)) + ")";
  if (!thread_pool_written_)
    msg += "; threads.pool defaults to \"default\", so set threads.pool "
           "or define a pool named \"default\"";
  fail(line("threads.pool", "pools"), "threads.pool", msg);
}

} // namespace keel::config_detail
