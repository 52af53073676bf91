// The readers of `threads` (guard, compaction, agents), `supervision` and
// the items of `delivery.channels`.

#include "config_parser.hpp"

namespace keel::config_detail {

using strict_yaml::describe;
using strict_yaml::no_limit;
using strict_yaml::one_of;
using strict_yaml::render_number;
using strict_yaml::strings;

// -- threads ------------------------------------------------------------------

void parser::read_threads(const map_reader& m, thread_defaults& cfg) {
  thread_pool_written_ = m.get("pool").has_value();
  if (auto g = read_section(m, "guard", guard_keys(), cfg.guard))
    // Given, the map replaces the default caps as a whole (like a list).
    if (auto x = g->get("per_tool")) {
      cfg.guard.per_tool.clear();
      read_per_tool(*x, g->path("per_tool"), cfg.guard.per_tool);
    }
  if (auto c = read_section(m, "compaction", compaction_keys(), cfg))
    check_compaction(*c, cfg.compaction);
  read_section(m, "agents", agent_keys(), cfg.agents);
}

void parser::read_per_tool(const YAML::Node& node, const std::string& path,
                           std::map<std::string, uint64_t>& cfg) {
  if (!node.IsMap())
    fail(line_of(node), path,
         "expected a mapping of tool names to call counts, got "
           + describe(node));
  for (auto kv : node) {
    auto name = read_name(kv.first, path);
    auto key_path = path + "." + name;
    if (cfg.count(name) > 0)
      fail(line_of(kv.first), key_path,
           "duplicate key (first given on line "
             + std::to_string(line(key_path)) + ")");
    remember(key_path, line_of(kv.first));
    cfg[name]
      = static_cast<uint64_t>(read_int(kv.second, key_path, 1, no_limit));
  }
}

void parser::check_compaction(const map_reader& m,
                              const compaction_settings& cfg) const {
  // Checked over the defaults: the file may set only one key of a pair. The
  // error names the key that must change, at its line or else its peer's.
  auto out_of_order = [&](const char* key, const char* peer,
                          const std::string& peer_value,
                          const std::string& value, const char* relation) {
    fail(line(m.path(key), m.path(peer)), m.path(key),
         std::string{"expected "} + relation + " " + m.path(peer) + " ("
           + peer_value + "), got " + value);
  };
  if (cfg.warn_at >= cfg.compact_at)
    out_of_order("warn_at", "compact_at", render_number(cfg.compact_at),
                 render_number(cfg.warn_at), "less than");
  if (cfg.min_entries <= cfg.protect_last)
    out_of_order("min_entries", "protect_last",
                 std::to_string(cfg.protect_last),
                 std::to_string(cfg.min_entries), "more than");
  if (cfg.chunk_overlap >= cfg.chunk_entries)
    out_of_order("chunk_overlap", "chunk_entries",
                 std::to_string(cfg.chunk_entries),
                 std::to_string(cfg.chunk_overlap), "less than");
}

// -- supervision --------------------------------------------------------------

void parser::read_supervision(const map_reader& m, supervision_config& cfg) {
  auto sub = [&](const char* name, supervisor_settings& settings,
                 bool dynamic) {
    if (auto s = section(m, name, supervisor_keys()))
      read_supervisor(*s, settings, dynamic);
  };
  sub("root", cfg.root, false);
  sub("providers", cfg.providers, false);
  sub("conversations", cfg.conversations, true);
}

void parser::read_supervisor(const map_reader& m, supervisor_settings& cfg,
                             bool dynamic) {
  // A dynamic supervisor's children are alike and independent; any other
  // strategy would let one thread's crash restart the others.
  if (dynamic && m.has("strategy"))
    fail(m.line("strategy"), m.path("strategy"),
         "conversations is a dynamic supervisor; its strategy is always "
         "one_for_one (remove this key)");
  supervisor_keys().read(*this, m, cfg);
  read_section(m, "backoff", backoff_keys(), cfg.backoff);
}

// -- channels -----------------------------------------------------------------

channel_config parser::read_channel(const YAML::Node& node,
                                    const std::string& path) {
  map_reader m{*this, node, path, line_of(node), channel_keys().known()};
  channel_config result;
  auto name = required(m, "name", "a channel name of [A-Za-z0-9_-]");
  result.name = read_name(name, m.path("name"));
  if (!is_plain_name(result.name))
    bad_value(name, m.path("name"), result.name,
              "1 to 64 characters of [A-Za-z0-9_-] (a channel name is part "
              "of every idempotency key)");
  auto kind = read_enum(required(m, "kind", one_of(channel_kinds)),
                        m.path("kind"), channel_kinds);
  result.kind = *parse_channel_kind(kind);
  result.retry = channel_retry_preset(result.kind);
  read_channel_target(m, result);
  read_channel_threads(m, result);
  if (auto r = read_section(m, "retry", channel_retry_keys(), result.retry))
    check_backoff_delays(*r, result.retry.backoff);
  channel_keys().read(*this, m, result);
  return result;
}

void parser::read_channel_threads(const map_reader& m, channel_config& cfg) {
  auto threads = m.get("threads");
  if (!threads)
    return;
  cfg.threads = read_each(*threads, m.path("threads"),
                          "a list of thread ids or prefixes ending in *",
                          &reader::read_string);
  for (size_t i = 0; i < cfg.threads.size(); ++i) {
    auto& x = cfg.threads[i];
    auto id = x.empty() || x.back() != '*' ? x : x.substr(0, x.size() - 1);
    if (x.empty() || (id.empty() ? x != "*" : !valid_thread_id(id)))
      fail(line_of((*threads)[i]), indexed(m.path("threads"), i),
           "expected a thread id or a prefix of one ending in *, got "
             + quote(x));
  }
}

void parser::read_channel_target(const map_reader& m, channel_config& cfg) {
  auto only = [&](const char* key, channel_kind kind) {
    if (m.has(key) && cfg.kind != kind)
      fail(m.line(key), m.path(key),
           std::string{"only "} + to_string(kind) + " channels take " + key);
  };
  only("secret", channel_kind::webhook);
  only("token", channel_kind::telegram);
  only("chat_id", channel_kind::telegram);
  only("parse_mode", channel_kind::telegram);
  if (cfg.kind == channel_kind::webhook) {
    auto url = required(m, "url", "an http:// or https:// URL");
    cfg.url = read_string(url, m.path("url"));
    if (auto x = m.get("secret"))
      cfg.secret = read_string(*x, m.path("secret"));
  } else {
    read_telegram_target(m, cfg);
  }
  auto scheme_ok = cfg.url.rfind("http://", 0) == 0
                   || cfg.url.rfind("https://", 0) == 0;
  if (!scheme_ok || cfg.url.find("://") + 3 >= cfg.url.size())
    fail(m.line("url"), m.path("url"),
         "expected an http:// or https:// URL with a host, got "
           + quote(cfg.url));
}

void parser::read_telegram_target(const map_reader& m, channel_config& cfg) {
  cfg.url = "https://api.telegram.org";
  if (auto x = m.get("url"))
    cfg.url = read_string(*x, m.path("url"));
  auto token = required(m, "token", "the bot token");
  cfg.token = read_string(token, m.path("token"));
  auto chat = required(m, "chat_id", "the chat to send to");
  cfg.chat_id = read_string(chat, m.path("chat_id"));
  // Never show the token, not even in an error.
  if (cfg.token.empty())
    fail(line_of(token), m.path("token"), "expected the bot token, got \"\"");
  if (cfg.chat_id.empty())
    bad_value(chat, m.path("chat_id"), cfg.chat_id, "the chat to send to");
  if (auto x = m.get("parse_mode"))
    cfg.parse_mode = read_enum(*x, m.path("parse_mode"), telegram_parse_modes);
}

} // namespace keel::config_detail
