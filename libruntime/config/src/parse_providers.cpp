// The readers of `providers` (and their script steps) and `pools`.

#include "config_parser.hpp"

namespace keel::config_detail {

using strict_yaml::describe;
using strict_yaml::one_of;

namespace {

/// The keys only the HTTP kinds take: their own and the model parameters.
std::vector<std::string> http_known_keys() {
  auto result = http_provider_keys().known();
  auto params = model_param_keys().known();
  result.insert(result.end(), params.begin(), params.end());
  return result;
}

/// The keys of a provider: those of every kind, then the HTTP kinds'.
std::vector<std::string> provider_known_keys() {
  auto result = provider_keys().known();
  auto http = http_known_keys();
  result.insert(result.end(), http.begin(), http.end());
  return result;
}

} // namespace

// -- providers ----------------------------------------------------------------

void parser::read_providers(const map_reader& top, node_config& cfg) {
  // A list replaces the defaults as a whole.
  if (auto node = top.get("providers")) {
    providers_written_ = true;
    cfg.providers = read_each(*node, "providers", "a list of providers",
                              &parser::read_provider);
  }
}

provider_config parser::read_provider(const YAML::Node& node,
                                      const std::string& path) {
  map_reader m{*this, node, path, line_of(node), provider_known_keys()};
  provider_config result;
  result.name = read_name(required(m, "name", "a non-empty provider name"),
                          m.path("name"));
  result.kind = read_enum(required(m, "kind", one_of(provider_kinds)),
                          m.path("kind"), provider_kinds);
  provider_keys().read(*this, m, result);
  read_script(m, result);
  read_http_provider(m, result);
  return result;
}

void parser::read_script(const map_reader& m, provider_config& cfg) {
  auto script_path = m.path("script");
  if (cfg.kind == "echo" && m.has("script"))
    fail(m.line("script"), script_path, "echo providers take no script");
  if (auto x = m.get("script"))
    cfg.script = read_each(*x, script_path, "a list of script steps",
                           &parser::read_step);
  if (cfg.kind == "scripted" && cfg.script.empty())
    fail(m.line("script"), script_path,
         "a scripted provider needs a non-empty list of script steps");
}

void parser::read_http_provider(const map_reader& m, provider_config& cfg) {
  if (!is_http_kind(cfg.kind)) {
    for (auto& key : http_known_keys())
      if (m.has(key))
        fail(m.line(key), m.path(key),
             "only openai and anthropic providers take " + key
               + " (this provider is " + quote(cfg.kind) + ")");
    return;
  }
  if (m.has("script"))
    fail(m.line("script"), m.path("script"),
         cfg.kind + " providers take no script");
  read_base_url(m, cfg);
  if (cfg.model.empty())
    fail(m.line("model"), m.path("model"),
         "missing required key (expected the model name to request)");
  http_provider_keys().read(*this, m, cfg);
  if (m.has("max_tokens") && m.has("max_output_tokens"))
    fail(m.line("max_tokens"), m.path("max_tokens"),
         "set only one of max_output_tokens and max_tokens (its older "
         "spelling)");
  read_model_params(m, cfg.params);
  check_params_fit(cfg, cfg.params, m.path("reasoning_effort"));
  if (auto x = m.get("headers"))
    read_headers(*x, m.path("headers"), cfg.headers);
}

void parser::read_base_url(const map_reader& m, provider_config& cfg) {
  auto url = required(m, "base_url", "an http:// or https:// URL");
  cfg.base_url = read_string(url, m.path("base_url"));
  auto url_ok = [](const std::string& x) {
    for (std::string_view scheme : {"http://", "https://"})
      if (x.size() > scheme.size() && x.compare(0, scheme.size(), scheme) == 0)
        return true;
    return false;
  };
  if (!url_ok(cfg.base_url))
    bad_value(url, m.path("base_url"), cfg.base_url,
              "an http:// or https:// URL with a host");
}

void parser::read_headers(const YAML::Node& node, const std::string& path,
                          std::map<std::string, std::string>& cfg) {
  if (!node.IsMap())
    fail(line_of(node), path,
         "expected a mapping of header names to values, got " + describe(node));
  for (auto kv : node) {
    auto name = read_name(kv.first, path);
    cfg[name] = read_string(kv.second, path + "." + name);
  }
}

scripted_step parser::read_step(const YAML::Node& node,
                                const std::string& path) {
  auto& table = script_step_keys();
  map_reader m{*this, node, path, line_of(node), table.known()};
  scripted_step result;
  table.read(*this, m, result);
  bool has_reply = m.get("reply").has_value();
  if (auto x = m.get("tool")) {
    read_tool(*x, m.path("tool"), result);
    has_reply = true; // A tool call is an answer, with or without text.
  }
  auto outcomes = int{has_reply} + int{!result.fail.empty()}
                  + int{result.crash};
  if (outcomes == 0)
    fail(m.line(), path, "a step needs one of reply, fail or crash: true");
  if (outcomes > 1)
    fail(m.line(), path,
         "a step takes only one of reply, fail and crash: true");
  return result;
}

void parser::read_tool(const YAML::Node& node, const std::string& path,
                       scripted_step& cfg) {
  map_reader t{*this, node, path, line_of(node), {"name", "arguments"}};
  if (auto name = t.get("name"))
    cfg.tool_name = read_string(*name, t.path("name"));
  if (cfg.tool_name.empty())
    fail(t.line(), path, "a tool call needs a non-empty name");
  cfg.tool_arguments = "{}";
  if (auto args = t.get("arguments"))
    cfg.tool_arguments = read_string(*args, t.path("arguments"));
}

// -- pools --------------------------------------------------------------------

void parser::read_pools(const map_reader& top, node_config& cfg) {
  if (auto node = top.get("pools")) {
    // A list replaces the defaults as a whole.
    pools_written_ = true;
    cfg.pools = read_each(*node, "pools", "a list of pools",
                          &parser::read_pool);
  } else if (providers_written_) {
    // Providers without pools: the default pool chains all of them in order.
    cfg.pools.front().chain = names_of(cfg.providers);
  }
}

pool_config parser::read_pool(const YAML::Node& node, const std::string& path) {
  map_reader m{*this, node, path, line_of(node), pool_keys().known()};
  pool_config result;
  result.name = read_name(required(m, "name", "a non-empty pool name"),
                          m.path("name"));
  auto chain_path = m.path("chain");
  auto chain = required(m, "chain", "a non-empty list of provider names");
  result.chain = read_each(chain, chain_path, "a list of provider names",
                           &reader::read_name);
  if (result.chain.empty())
    fail(line_of(chain), chain_path,
         "expected a non-empty list of provider names, got an empty list");
  pool_keys().read(*this, m, result);
  if (auto r = read_section(m, "retry", pool_retry_keys(), result))
    check_backoff_delays(*r, result.retry);
  read_section(m, "breaker", breaker_keys(), result.breaker);
  if (auto c = section(m, "cooldowns", strict_yaml::strings(failure_classes)))
    read_cooldowns(*c, result.breaker.cooldowns);
  return result;
}

void parser::read_cooldowns(const map_reader& m, cooldown_table& cfg) {
  for (auto name : failure_classes)
    if (auto x = m.get(name))
      cfg.set(*parse_error_class(name), read_millis(*x, m.path(name), false));
}

void parser::check_backoff_delays(const map_reader& m,
                                  const retry_policy& r) const {
  if (r.max_delay >= r.base_delay)
    return;
  if (m.has("max_delay"))
    fail_below(m.line("max_delay"), m.path("max_delay"), m.path("base_delay"),
               r.base_delay, r.max_delay);
  fail(m.line("base_delay"), m.path("base_delay"),
       "expected at most " + m.path("max_delay") + " ("
         + render_duration(r.max_delay) + ", its default; set it too), got "
         + render_duration(r.base_delay));
}

} // namespace keel::config_detail
