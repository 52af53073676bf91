#pragma once

// The reader of node configurations: `parse_config` runs one `parser` over
// a YAML document. Scalar keys come from the key tables (config_schema.hpp);
// the member functions here read what has structure of its own (lists of
// providers, pools, tools and channels, maps, secrets) and check the fields
// against each other. Split by subject over config_parser.cpp (the run and
// the top-level sections), parse_providers.cpp, parse_tools.cpp,
// parse_threads.cpp, parse_agents.cpp, config_checks.cpp and
// config_warnings.cpp.

#include <map>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>
#include <yaml-cpp/yaml.h>

#include "config_schema.hpp"
#include "keel/config.hpp"
#include "keel/strict_yaml.hpp"

namespace keel::config_detail {

using strict_yaml::indexed;
using strict_yaml::line_of;
using strict_yaml::quote;

/// Reads a YAML document into a `node_config`, throwing `strict_yaml::error`
/// at the first problem. Sections are read in the order of
/// `top_level_keys`, then `validate` checks the fields against each other.
class parser : public strict_yaml::reader {
public:
  using reader::reader;
  using reader::section;

  node_config run(const YAML::Node& root);

private:
  /// Reads the list at `path` (see `read_list`) with the member
  /// `read_item(item, item_path)` for each item.
  template <class T, class Self>
  std::vector<T>
  read_each(const YAML::Node& node, const std::string& path,
            const std::string& expected,
            T (Self::*read_item)(const YAML::Node&, const std::string&)) {
    std::vector<T> result;
    auto items = read_list(node, path, expected);
    for (size_t i = 0; i < items.size(); ++i)
      result.push_back((this->*read_item)(items[i], indexed(path, i)));
    return result;
  }

  /// The mapping under `key` of `m`, whose keys are those of `table`.
  template <class Owner>
  std::optional<map_reader> section(const map_reader& m, const std::string& key,
                                    const key_table<Owner>& table) {
    return reader::section(m, key, table.known());
  }

  /// Reads the mapping under `key` of `m` (if set) with `table` into `out`.
  template <class Owner>
  std::optional<map_reader>
  read_section(const map_reader& m, const std::string& key,
               const key_table<Owner>& table, Owner& out) {
    auto s = section(m, key, table);
    if (s)
      table.read(*this, *s, out);
    return s;
  }

  // -- sections ---------------------------------------------------------------

  void read_sections(const map_reader& top, node_config& cfg);
  void read_gateway(const map_reader& m, gateway_config& cfg);
  void read_gateway_auth(const map_reader& m, gateway_config& cfg);
  /// Reads the secret at `key` or, from its first line, the file named at
  /// `key_file`; errors never show the secret.
  std::string read_secret(const map_reader& m, const std::string& key,
                          const std::string& key_file);
  /// Reads the list at `key` (`list_expected` in errors), each item a
  /// string `valid` accepts (`item_expected` in errors).
  std::vector<std::string>
  read_checked_strings(const map_reader& m, const std::string& key,
                       const std::string& list_expected,
                       const std::string& item_expected,
                       bool (*valid)(const std::string&));
  std::vector<std::string> read_origins(const map_reader& m);
  std::vector<std::string> read_hosts(const map_reader& m);
  void read_tls(const map_reader& m, tls_config& cfg);
  void read_storage(const map_reader& m, storage_config& cfg);
  void read_cluster(const map_reader& m, cluster_config& cfg);
  void read_cluster_addresses(const map_reader& m, cluster_config& cfg);
  void read_cluster_tls(const map_reader& m, cluster_tls_config& cfg);
  void read_owner(const map_reader& m, owner_config& cfg);
  void read_delivery(const map_reader& m, delivery_config& cfg);

  // -- providers and pools ----------------------------------------------------

  void read_providers(const map_reader& top, node_config& cfg);
  provider_config read_provider(const YAML::Node& node,
                                const std::string& path);
  void read_script(const map_reader& m, provider_config& cfg);
  void read_http_provider(const map_reader& m, provider_config& cfg);
  void read_base_url(const map_reader& m, provider_config& cfg);
  void read_headers(const YAML::Node& node, const std::string& path,
                    std::map<std::string, std::string>& cfg);
  scripted_step read_step(const YAML::Node& node, const std::string& path);
  void read_tool(const YAML::Node& node, const std::string& path,
                 scripted_step& cfg);
  /// Reads the model parameters of `m` (a provider's own keys or an
  /// agent's `model:` mapping), `extra_body` as a JSON object.
  void read_model_params(const map_reader& m, model_params& out);
  /// Fails (at `effort_path`, the key that set it) if `params` cannot go
  /// on `provider`'s wire.
  void check_params_fit(const provider_config& provider,
                        const model_params& params,
                        const std::string& effort_path) const;
  /// `check_params_fit` of the agent's `model:` for each provider of its
  /// pool.
  void check_agent_params(const agent_config& agent, const std::string& path,
                          const node_config& cfg) const;
  void read_pools(const map_reader& top, node_config& cfg);
  pool_config read_pool(const YAML::Node& node, const std::string& path);
  void read_cooldowns(const map_reader& m, cooldown_table& cfg);
  /// Fails when `max_delay` is below `base_delay` (of the file or the
  /// defaults) in the retry mapping `m`.
  void check_backoff_delays(const map_reader& m, const retry_policy& r) const;

  // -- tools ------------------------------------------------------------------

  void read_tools(const map_reader& top, node_config& cfg);
  tool_config read_tool_entry(const YAML::Node& node, const std::string& path);
  void read_tool_name(const map_reader& m, tool_config& cfg);
  void read_tool_command(const map_reader& m, tool_config& cfg,
                         const nlohmann::ordered_json& parameters);
  void read_tool_account(const map_reader& m, tool_config& cfg);
  /// Reads `loop_key`, which must name a property of `parameters`.
  void read_loop_key(const map_reader& m, tool_config& cfg,
                     const nlohmann::ordered_json& parameters);
  /// Reads the JSON schema at `parameters` (a mapping with type: object).
  nlohmann::ordered_json read_parameters(const map_reader& m);
  /// Converts YAML to JSON: scalars by their plain YAML type (quoted ones
  /// are strings), lists to arrays, mappings to objects.
  nlohmann::ordered_json to_json(const YAML::Node& node,
                                 const std::string& path);
  nlohmann::ordered_json json_object(const YAML::Node& node,
                                     const std::string& path);
  nlohmann::ordered_json scalar_to_json(const YAML::Node& node,
                                        const std::string& path);
  /// Checks the `{name}` placeholders of command element `element` (at
  /// `path`) against the properties of `parameters`.
  void check_placeholders(const YAML::Node& node, const std::string& path,
                          const std::string& element,
                          const nlohmann::ordered_json& parameters) const;

  // -- agents -----------------------------------------------------------------

  /// Reads `agents` (after `threads`, `providers` and `pools`: an agent
  /// starts from the `threads` defaults and may name providers and pools).
  void read_agents(const map_reader& top, node_config& cfg);
  agent_config read_agent(const YAML::Node& node, const std::string& path,
                          const node_config& cfg);
  /// Makes the agent's own pool when its `models` or `execution.retry` /
  /// `execution.breaker` differ from its pool's (added by `add_agent_pools`
  /// once the file is checked).
  void read_agent_pool(const map_reader& m, agent_config& agent,
                       const node_config& cfg);
  std::vector<std::string> read_models(const YAML::Node& node,
                                       const std::string& path,
                                       const node_config& cfg);
  void check_agents(const node_config& cfg) const;
  /// Fails for `path` (at its line, else `line_path`'s) unless `name` is
  /// one of `known` agents.
  void check_agent_ref(const std::vector<std::string>& known,
                       const std::string& path, const std::string& name,
                       const std::string& line_path) const;
  void add_agent_pools(node_config& cfg);

  // -- threads, supervision and channels --------------------------------------

  void read_threads(const map_reader& m, thread_defaults& cfg);
  void read_per_tool(const YAML::Node& node, const std::string& path,
                     std::map<std::string, uint64_t>& cfg);
  void check_compaction(const map_reader& m,
                        const compaction_settings& cfg) const;
  void read_supervision(const map_reader& m, supervision_config& cfg);
  void read_supervisor(const map_reader& m, supervisor_settings& cfg,
                       bool dynamic);
  channel_config read_channel(const YAML::Node& node, const std::string& path);
  void read_channel_threads(const map_reader& m, channel_config& cfg);
  void read_channel_target(const map_reader& m, channel_config& cfg);
  void read_telegram_target(const map_reader& m, channel_config& cfg);

  // -- checks across fields ---------------------------------------------------

  void validate(const node_config& cfg) const;
  void check_gateway_limits(const gateway_config& cfg) const;
  void check_gateway_auth(const gateway_config& cfg) const;
  void check_header_values(const std::vector<provider_config>& providers) const;
  void collect_warnings(node_config& cfg) const;
  void collect_gateway_warnings(node_config& cfg) const;
  void collect_exposure_warnings(node_config& cfg) const;
  /// Warns of argv placeholders a value starting with '-' turns into an
  /// option (no "--" before them).
  void collect_tool_warnings(node_config& cfg) const;
  void check_backoff_bounds(const supervision_config& cfg) const;
  void check_providers(const std::vector<provider_config>& providers) const;
  void check_pools(const node_config& cfg) const;
  void check_chain(const node_config& cfg, size_t pool_index) const;
  void check_thread_pool(const node_config& cfg) const;
  void check_tools(const node_config& cfg) const;
  /// Checks that `names`, the list at `path`, are declared tools, each
  /// listed once.
  void check_tool_refs(const node_config& cfg, const std::string& path,
                       const std::vector<std::string>& names) const;
  void check_storage(const node_config& cfg) const;
  void check_channels(const node_config& cfg) const;

  /// Fails for the first item of `items`, the list at `path`, whose name an
  /// earlier item has: "duplicate WHAT name ...".
  template <class T>
  void check_unique_names(const std::vector<T>& items, const std::string& path,
                          const std::string& what) const {
    std::map<std::string, size_t> index;
    for (size_t i = 0; i < items.size(); ++i) {
      auto [pos, added] = index.emplace(items[i].name, i);
      if (added)
        continue;
      auto at = indexed(path, i) + ".name";
      fail(line(at), at,
           "duplicate " + what + " name " + quote(items[i].name) + " (also "
             + indexed(path, pos->second) + ")");
    }
  }
  void check_cluster(const node_config& cfg) const;
  void check_cluster_token(const cluster_config& cfg) const;
  void check_cluster_advertise(const cluster_config& cfg) const;
  void check_cluster_tls(const cluster_tls_config& cfg) const;
  void check_cluster_transport(const cluster_config& cfg) const;

  /// Fails for `path` because `value` is below `lower`, the value of
  /// `lower_path`.
  [[noreturn]] void fail_below(int line, const std::string& path,
                               const std::string& lower_path,
                               caf::timespan lower, caf::timespan value) const;

  /// The file replaced the default providers.
  bool providers_written_ = false;
  /// The file replaced the default pools.
  bool pools_written_ = false;
  /// The file set `threads.pool`.
  bool thread_pool_written_ = false;
  /// The pools made for agents, added after the checks.
  std::vector<pool_config> agent_pools_;
  /// The token files read: key path and file path (their modes are
  /// warned about).
  std::vector<std::pair<std::string, std::string>> secret_files_;
};

/// Fills the cluster keys whose defaults come from other keys: `node_id`
/// from `node.name`, `advertise` from `listen`.
void fill_cluster_defaults(node_config& cfg);

} // namespace keel::config_detail
