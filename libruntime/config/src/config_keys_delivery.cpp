// The key tables of `cluster`, `chaos`, `owner` and `delivery` (see
// config_keys.cpp), and `config_keys()`, which describes every table.

#include "config_schema.hpp"

namespace keel::config_detail {

namespace {

void add_cluster_timing(key_table<cluster_config>& t) {
  using c = cluster_config;
  t.integer("shards", 1, 65536, &c::shards, "Shards of the thread space.")
    .duration("lease_ttl", positive_duration, &c::lease_ttl,
              "A node whose lease is this old is declared dead.")
    .duration("heartbeat", {false, std::chrono::milliseconds{10}},
              &c::heartbeat, "How often a node renews its lease.")
    .duration("route_timeout", {false, std::chrono::milliseconds{100}},
              &c::route_timeout,
              "How long a message routed to another node may take.")
    .duration("handoff_timeout", {}, &c::handoff_timeout,
              "How long a shard's owner waits for its running turns.")
    .integer("rebalance_batch", 1, 65536, &c::rebalance_batch,
             "Shards moved at a time when the cluster rebalances.");
}

} // namespace

const key_table<cluster_config>& cluster_keys() {
  static const auto table = [] {
    using c = cluster_config;
    key_table<c> t;
    t.boolean("enabled", &c::enabled, "Join a cluster.")
      .checked_string("node_id", "string", &c::node_id, is_valid_id,
                      id_expected, "This node's id in the cluster.")
      .derived("`node.name`")
      .dedicated("listen", "`host:port`", "`127.0.0.1:7701`",
                 "Where the node listens for its peers.")
      .dedicated("advertise", "`host:port`", "the `listen` address",
                 "The address peers reach this node at.");
    add_cluster_timing(t);
    t.string("token", &c::token, "The shared secret between nodes.")
      .container("tls", "Mutual TLS between nodes.")
      .boolean("insecure_plaintext", &c::insecure_plaintext,
               "Plaintext links between nodes on one machine.");
    return t;
  }();
  return table;
}

const key_table<cluster_tls_config>& cluster_tls_keys() {
  static const auto table = [] {
    using c = cluster_tls_config;
    key_table<c> t;
    t.string("cert", &c::cert, "The certificate this node presents.")
      .typed("path to a PEM file")
      .string("key", &c::key, "The certificate's private key.")
      .typed("path to a PEM file")
      .string("ca", &c::ca, "The CAs peers' certificates are checked against.")
      .typed("path to a PEM file");
    return t;
  }();
  return table;
}

const key_table<chaos_config>& chaos_keys() {
  static const auto table = [] {
    key_table<chaos_config> t;
    t.boolean("kill", &chaos_config::kill, "POST /api/v1/kill kills actors.")
      .boolean("disk", &chaos_config::disk,
               "POST /api/v1/chaos/disk makes disk writes fail.");
    return t;
  }();
  return table;
}

// -- owner and delivery -------------------------------------------------------

const key_table<owner_config>& owner_keys() {
  static const auto table = [] {
    key_table<owner_config> t;
    t.string("contact", &owner_config::contact,
             "Whom users are told to contact.")
      .string("channel", &owner_config::channel,
              "The channel owner notices go to.")
      .typed("channel name")
      .dedicated("notices", "mapping of notice kind to duration >= 0",
                 "`all_models_failed` 30m; `credits_exhausted`, "
                 "`provider_unauthorized`, `channel_unhealthy`, "
                 "`dead_letter_abandoned`, `agent_stuck` 1h; "
                 "`tool_disabled`, `dead_letters_pending` 24h",
                 "The dedup window of each kind of notice.");
    return t;
  }();
  return table;
}

const key_table<delivery_config>& delivery_keys() {
  static const auto table = [] {
    key_table<delivery_config> t;
    t.container("dead_letters", "When dead letters are retried.")
      .dedicated("channels", "list", "none",
                 "Outbound channels replies are sent to.");
    return t;
  }();
  return table;
}

const key_table<dead_letter_schedule>& dead_letter_keys() {
  static const auto table = [] {
    using d = dead_letter_schedule;
    key_table<d> t;
    t.integer("max_retries", 0, unbounded, &d::max_retries,
              "Scheduled retries before a letter is abandoned.")
      .duration("interval", {false, std::chrono::milliseconds{1}}, &d::interval,
                "Between two retries of a letter.")
      .integer("batch", 1, unbounded, &d::batch,
               "Letters retried per round at most.");
    return t;
  }();
  return table;
}

const key_table<channel_config>& channel_keys() {
  static const auto table = [] {
    using c = channel_config;
    key_table<c> t;
    t.dedicated("name", "1–64 characters of `[A-Za-z0-9_-]`", "required",
                "Unique; part of every idempotency key.")
      .dedicated("kind", "`webhook` or `telegram`", "required",
                 "What the channel sends to.")
      .dedicated("url", "http(s) URL",
                 "webhook: required; telegram: `https://api.telegram.org`",
                 "Where events go.")
      .dedicated("secret", "string", "`\"\"`",
                 "webhook only: the HMAC-SHA256 key.")
      .dedicated("token", "string", "required (telegram)",
                 "telegram only: the bot token.")
      .dedicated("chat_id", "string", "required (telegram)",
                 "telegram only: the chat replies go to.")
      .dedicated("parse_mode", "`Markdown`, `MarkdownV2`, `HTML` or `\"\"`",
                 "`Markdown`", "telegram only: how texts are marked up.")
      .dedicated("threads", "list of strings",
                 "required unless the channel is `owner.channel`",
                 "The bound threads: ids, or prefixes ending in *.")
      .container("retry", "How failed sends are retried.")
      .duration(
        "timeout", positive_duration,
        [](auto& x) -> auto& { return x.retry.send_timeout; },
        "A send not answered by then counts as failed.")
      .string("ca_file", &c::ca_file, "PEM file of CAs to trust for https.")
      .typed("path");
    return t;
  }();
  return table;
}

const key_table<channel_retry>& channel_retry_keys() {
  static const auto table = [] {
    key_table<channel_retry> t;
    t.integer(
      "max_attempts", 1, 100,
      [](auto& x) -> auto& { return x.backoff.max_attempts; },
      "Sends of one reply before it becomes a dead letter.");
    add_backoff_delays(
      t, [](auto& x) -> auto& { return x.backoff; });
    t.derived("base_delay", "webhook `1s`, telegram `400ms`");
    return t;
  }();
  return table;
}

} // namespace keel::config_detail
