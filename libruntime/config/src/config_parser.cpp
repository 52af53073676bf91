#include "config_parser.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>

#include "keel/config_secrets.hpp"
#include "keel/file_modes.hpp"

namespace keel::config_detail {

using strict_yaml::describe;
using strict_yaml::one_of;
using strict_yaml::strings;

void fill_cluster_defaults(node_config& cfg) {
  auto& cl = cfg.cluster;
  if (cl.node_id.empty())
    cl.node_id = cfg.name;
  if (cl.advertise.empty())
    cl.advertise = render_host_port(cl.listen_host, cl.listen_port);
}

node_config parser::run(const YAML::Node& root) {
  auto cfg = default_config();
  cfg.source = source();
  // These follow node.name and cluster.listen unless the file sets them:
  // derived again once the file is read.
  cfg.cluster.node_id.clear();
  cfg.cluster.advertise.clear();
  // An empty document (or one holding only comments) means all defaults.
  if (root.IsNull()) {
    fill_cluster_defaults(cfg);
    return cfg;
  }
  if (!root.IsMap())
    fail(line_of(root), "",
         "expected a mapping of top-level keys (" + one_of(top_level_keys)
           + "), got " + describe(root));
  map_reader top{*this, root, "", line_of(root), strings(top_level_keys)};
  read_sections(top, cfg);
  validate(cfg);
  add_agent_pools(cfg);
  fill_cluster_defaults(cfg);
  collect_warnings(cfg);
  return cfg;
}

void parser::read_sections(const map_reader& top, node_config& cfg) {
  // Mappings are read key by key over the defaults.
  read_section(top, "node", node_keys(), cfg);
  if (auto m = read_section(top, "gateway", gateway_keys(), cfg.gateway))
    read_gateway(*m, cfg.gateway);
  read_providers(top, cfg);
  read_pools(top, cfg);
  read_tools(top, cfg);
  if (auto m = read_section(top, "threads", thread_keys(), cfg.threads))
    read_threads(*m, cfg.threads);
  read_agents(top, cfg);
  if (auto m = section(top, "supervision", strings(supervisor_names)))
    read_supervision(*m, cfg.supervision);
  read_section(top, "logging", logging_keys(), cfg.logging);
  read_section(top, "shutdown", shutdown_keys(), cfg.shutdown);
  if (auto m = read_section(top, "storage", storage_keys(), cfg.storage))
    read_storage(*m, cfg.storage);
  if (auto m = read_section(top, "cluster", cluster_keys(), cfg.cluster))
    read_cluster(*m, cfg.cluster);
  read_section(top, "chaos", chaos_keys(), cfg.chaos);
  if (auto m = read_section(top, "owner", owner_keys(), cfg.owner))
    read_owner(*m, cfg.owner);
  if (auto m = read_section(top, "delivery", delivery_keys(), cfg.delivery))
    read_delivery(*m, cfg.delivery);
}

// -- gateway ------------------------------------------------------------------

void parser::read_gateway(const map_reader& m, gateway_config& cfg) {
  read_gateway_auth(m, cfg);
  if (!m.has("max_unauthenticated_per_address"))
    cfg.max_unauthenticated_per_address
      = std::min(cfg.max_unauthenticated_per_address, cfg.max_unauthenticated);
  read_section(m, "rate_limit", rate_limit_keys(), cfg.rate_limit);
  read_section(m, "compat", compat_keys(), cfg.compat);
  if (auto t = read_section(m, "tls", gateway_tls_keys(), cfg.tls))
    read_tls(*t, cfg.tls);
}

void parser::read_gateway_auth(const map_reader& m, gateway_config& cfg) {
  cfg.token = read_secret(m, "token", "token_file");
  cfg.admin_token = read_secret(m, "admin_token", "admin_token_file");
  cfg.allowed_origins = read_origins(m);
  cfg.allowed_hosts = read_hosts(m);
}

std::string parser::read_secret(const map_reader& m, const std::string& key,
                                const std::string& key_file) {
  if (m.has(key) && m.has(key_file))
    fail(m.line(key_file), m.path(key_file),
         "set only one of " + key + " and " + key_file);
  std::string result;
  if (auto x = m.get(key)) {
    result = read_string(*x, m.path(key));
  } else if (auto f = m.get(key_file)) {
    auto path = read_string(*f, m.path(key_file));
    errno = 0;
    std::ifstream in{path};
    if (!in)
      fail(m.line(key_file), m.path(key_file),
           "cannot read " + quote(path) + ": " + std::strerror(errno));
    std::getline(in, result);
    secret_files_.emplace_back(m.path(key_file), path);
    if (!result.empty() && result.back() == '\r')
      result.pop_back();
    if (result.empty())
      fail(m.line(key_file), m.path(key_file),
           "the first line of " + quote(path) + " is empty (expected the " + key
             + ")");
  }
  // A token travels in an HTTP header: visible ASCII only.
  auto visible = [](char c) { return c > ' ' && c < 0x7f; };
  if (!std::all_of(result.begin(), result.end(), visible))
    fail(m.line(m.has(key) ? key : key_file),
         m.path(m.has(key) ? key : key_file),
         "the " + key
           + " may hold only visible ASCII characters (no spaces or "
             "control characters)");
  return result;
}

std::vector<std::string>
parser::read_checked_strings(const map_reader& m, const std::string& key,
                             const std::string& list_expected,
                             const std::string& item_expected,
                             bool (*valid)(const std::string&)) {
  std::vector<std::string> result;
  auto x = m.get(key);
  if (!x)
    return result;
  auto path = m.path(key);
  auto items = read_list(*x, path, list_expected);
  for (size_t i = 0; i < items.size(); ++i) {
    auto item_path = indexed(path, i);
    auto item = read_string(items[i], item_path);
    if (!valid(item))
      bad_value(items[i], item_path, item, item_expected);
    result.push_back(std::move(item));
  }
  return result;
}

std::vector<std::string> parser::read_origins(const map_reader& m) {
  auto valid = [](const std::string& origin) {
    auto scheme_end = origin.find("://");
    return origin == "*"
           || (scheme_end != std::string::npos && scheme_end > 0
               && origin.size() > scheme_end + 3
               && origin.find('/', scheme_end + 3) == std::string::npos);
  };
  return read_checked_strings(m, "allowed_origins", "a list of origins",
                              "an origin such as \"https://app.example.com\" "
                              "(scheme, host and optional port, no path) or "
                              "\"*\"",
                              valid);
}

std::vector<std::string> parser::read_hosts(const map_reader& m) {
  auto valid = [](const std::string& host) {
    auto bad_char = [](char c) {
      return c <= ' ' || c >= 0x7f || c == '/' || c == '@';
    };
    return !host.empty() && std::none_of(host.begin(), host.end(), bad_char);
  };
  return read_checked_strings(m, "allowed_hosts", "a list of host names",
                              "a host name or address, optionally with :port",
                              valid);
}

void parser::read_tls(const map_reader& m, tls_config& cfg) {
  if (cfg.certificate_file.empty() != cfg.key_file.empty()) {
    auto missing = cfg.key_file.empty() ? "key_file" : "certificate_file";
    fail(m.line(), m.path(missing),
         "TLS needs both certificate_file and key_file");
  }
}

// -- storage and cluster ------------------------------------------------------

void parser::read_storage(const map_reader& m, storage_config& cfg) {
  read_section(m, "rocksdb", rocksdb_keys(), cfg.rocksdb);
  read_section(m, "postgres", postgres_keys(), cfg.postgres);
}

void parser::read_cluster(const map_reader& m, cluster_config& cfg) {
  read_cluster_addresses(m, cfg);
  // The token is a secret: never part of a message (check_cluster_token).
  if (auto t = read_section(m, "tls", cluster_tls_keys(), cfg.tls))
    read_cluster_tls(*t, cfg.tls);
}

void parser::read_cluster_addresses(const map_reader& m, cluster_config& cfg) {
  if (auto x = m.get("listen")) {
    auto path = m.path("listen");
    auto text = read_string(*x, path);
    auto addr = parse_host_port(text);
    if (!addr)
      bad_value(*x, path, text, host_port_expected);
    cfg.listen_host = std::move(addr->host);
    cfg.listen_port = addr->port;
  }
  if (auto x = m.get("advertise")) {
    auto path = m.path("advertise");
    cfg.advertise = read_string(*x, path);
    // Empty (the default) stands for the listen address.
    if (cfg.advertise.empty())
      return;
    auto addr = parse_host_port(cfg.advertise);
    if (!addr)
      bad_value(*x, path, cfg.advertise, host_port_expected);
    if (is_wildcard_host(addr->host))
      bad_value(*x, path, cfg.advertise,
                "the host:port peers reach this node at",
                " (a wildcard address only makes sense in cluster.listen)");
  }
}

void parser::read_cluster_tls(const map_reader& m, cluster_tls_config& cfg) {
  // Readability is checked only for an enabled cluster (check_cluster_tls).
  std::pair<const char*, std::string*> files[]
    = {{"cert", &cfg.cert}, {"key", &cfg.key}, {"ca", &cfg.ca}};
  auto given = static_cast<size_t>(
    std::count_if(std::begin(files), std::end(files),
                  [](auto& file) { return !file.second->empty(); }));
  if (given == 0 || given == std::size(files))
    return;
  for (auto [key, out] : files)
    if (out->empty())
      fail(m.line(), m.path(key),
           "missing required key (cluster TLS needs all three of cert, key "
           "and ca, or none of them)");
}

// -- owner and delivery -------------------------------------------------------

void parser::read_owner(const map_reader& m, owner_config& cfg) {
  auto n = section(m, "notices", strings(notice_kind_names));
  if (!n)
    return;
  for (auto name : notice_kind_names)
    if (auto x = n->get(name))
      cfg.notice_windows[*parse_notice_kind(name)]
        = read_millis(*x, n->path(name), false);
}

void parser::read_delivery(const map_reader& m, delivery_config& cfg) {
  read_section(m, "dead_letters", dead_letter_keys(), cfg.dead_letters);
  if (auto x = m.get("channels"))
    cfg.channels = read_each(*x, m.path("channels"), "a list of channels",
                             &parser::read_channel);
}

} // namespace keel::config_detail

// -- entry points -------------------------------------------------------------

namespace keel {

caf::expected<node_config> parse_config(const std::string& yaml,
                                        const std::string& source,
                                        const env_lookup& env) {
  auto root = strict_yaml::load_document(yaml, source);
  if (!root)
    return std::move(root.error());
  try {
    config_detail::parser p{source, env};
    return p.run(*root);
  } catch (const strict_yaml::error& err) {
    return caf::make_error(ec::config_invalid, err.message);
  } catch (const std::exception& ex) {
    // yaml-cpp may throw while walking odd documents; still one line.
    return caf::make_error(ec::config_invalid,
                           source
                             + ": cannot read the configuration: " + ex.what());
  }
}

namespace {

// Whether the text of a configuration file holds one of the secrets it
// configures as it is (not as a `${VAR}` or a token file).
bool holds_secret(const std::string& text, const node_config& cfg) {
  auto secrets = configured_secrets(cfg);
  return std::any_of(secrets.begin(), secrets.end(), [&](auto& x) {
    return text.find(x) != std::string::npos;
  });
}

} // namespace

caf::expected<node_config> load_config_file(const std::string& path,
                                            const env_lookup& env) {
  auto text = strict_yaml::read_file(path);
  if (!text)
    return std::move(text.error());
  auto cfg = parse_config(*text, path, env);
  if (cfg && holds_secret(*text, *cfg))
    if (auto w = exposed_file_warning("the configuration file", path))
      cfg->warnings.push_back(*w);
  return cfg;
}

} // namespace keel
