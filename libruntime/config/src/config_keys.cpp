// The key tables of `node`, `gateway`, `providers`, `pools` and `tools`:
// each key's type, bounds, field and one line of text, in the order of the
// mapping's unknown-key message. Defaults live in the fields themselves
// (config.hpp); a default that depends on other keys is given as the docs
// write it.

#include "config_schema.hpp"

namespace keel::config_detail {

const key_table<node_config>& node_keys() {
  static const auto table = [] {
    key_table<node_config> t;
    t.checked_string("name", "string", &node_config::name, is_valid_id,
                     id_expected, "The node's name and id.")
      .checked_string(
        "data_dir", "string", &node_config::data_dir,
        [](const std::string& x) { return !x.empty(); },
        "a non-empty folder path", "Folder for RocksDB and other node data.")
      .choice("scheduler", scheduler_policies, &node_config::scheduler,
              "How the scheduler's workers wait for work.")
      .integer("workers", 0, 256, &node_config::workers,
               "Scheduler worker threads; 0: one per core, at least 2.");
    return t;
  }();
  return table;
}

namespace {

void add_gateway_auth(key_table<gateway_config>& t) {
  t.dedicated("token", "string (visible ASCII)", "`\"\"`",
              "The client token WebSocket upgrades must present.")
    .dedicated("token_file", "path", "none",
               "Reads the client token from the first line of this file.")
    .dedicated("admin_token", "string (visible ASCII)", "`\"\"`",
               "The admin token for /api/v1/*.")
    .dedicated("admin_token_file", "path", "none",
               "Reads the admin token from the first line of this file.")
    .boolean("allow_unauthenticated", &gateway_config::allow_unauthenticated,
             "Serve clients without a token on a non-loopback address.")
    .boolean("allow_query_token", &gateway_config::allow_query_token,
             "Also accept ?token=TOKEN in URLs.")
    .dedicated("allowed_origins",
               "list of origins (`https://host[:port]`) or `\"*\"`", "`[]`",
               "Web pages allowed to open WebSockets.")
    .dedicated("allowed_hosts", "list of host names (optionally `:port`)",
               "`[]`", "Names accepted in the Host header.");
}

void add_gateway_limits(key_table<gateway_config>& t) {
  using g = gateway_config;
  t.size("max_frame_bytes", 1024, &g::max_frame_bytes,
         "Largest WebSocket message and HTTP request body.")
    .size("max_text_bytes", 1, &g::max_text_bytes,
          "Longest message text in a send frame.")
    .integer("max_connections", 1, 1'000'000, &g::max_connections,
             "Connections that passed the token check.")
    .integer("max_unauthenticated", 1, 1'000'000, &g::max_unauthenticated,
             "Connections that have not passed the token check yet.")
    .integer("max_unauthenticated_per_address", 1, 1'000'000,
             &g::max_unauthenticated_per_address,
             "Of those, from one client address.")
    .derived("`100` (or `max_unauthenticated` when smaller and this key is "
             "not set)")
    .duration("header_timeout", positive_duration, &g::header_timeout,
              "Time an unauthenticated connection gets for each request.")
    .size("max_queued_bytes", 1024, &g::max_queued_bytes,
          "Bytes of outgoing frames queued for one client.")
    .duration("write_timeout", positive_duration, &g::write_timeout,
              "A write making no progress this long disconnects the client.")
    .size("socket_send_buffer", 0, &g::socket_send_buffer,
          "SO_SNDBUF of each client socket; 0: the kernel's autotuning.")
    .size("max_history_bytes", 1024, &g::max_history_bytes,
          "Bytes of one history page's entries.")
    .integer("max_requests_in_flight", 1, 100'000, &g::max_requests_in_flight,
             "Requests one connection may have under way.")
    .integer("max_subscriptions_per_connection", 1, 1'000'000,
             &g::max_subscriptions_per_connection,
             "Threads one connection may follow.");
}

} // namespace

const key_table<gateway_config>& gateway_keys() {
  static const auto table = [] {
    key_table<gateway_config> t;
    t.checked_string(
       "host", "string", &gateway_config::host,
       [](const std::string& x) { return !x.empty(); },
       "a non-empty host name or address", "Address the gateway listens on.")
      .integer("port", 0, 65535, &gateway_config::port,
               "TCP port; 0 picks a free port.");
    add_gateway_auth(t);
    add_gateway_limits(t);
    t.container("rate_limit", "The token bucket of each connection.")
      .integer("io_threads", 1, 64, &gateway_config::io_threads,
               "Threads running the network I/O.")
      .container("tls", "Serve wss:// and https:// only.")
      .container("compat", "The OpenAI- and Anthropic-compatible API.");
    return t;
  }();
  return table;
}

const key_table<compat_config>& compat_keys() {
  static const auto table = [] {
    using c = compat_config;
    key_table<c> t;
    t.boolean("enabled", &c::enabled, "Serve /v1/.")
      .duration("keepalive", positive_duration, &c::keepalive,
                "A stream's keep-alive interval.")
      .duration("wait_timeout", positive_duration, &c::wait_timeout,
                "How long a request waits for its outcome.")
      .duration("retry_window", positive_duration, &c::retry_window,
                "How long a keyless retry finds its first try.")
      .size("max_body_bytes", 1024, &c::max_body_bytes,
            "Largest request body under /v1/.");
    return t;
  }();
  return table;
}

const key_table<rate_limit_config>& rate_limit_keys() {
  static const auto table = [] {
    key_table<rate_limit_config> t;
    t.number("per_second", 0.0, 1e6, &rate_limit_config::per_second,
             "Frames per second refilled into the bucket; 0: no limit.")
      .integer("burst", 1, 1'000'000, &rate_limit_config::burst,
               "Frames the bucket holds.");
    return t;
  }();
  return table;
}

const key_table<tls_config>& gateway_tls_keys() {
  static const auto table = [] {
    key_table<tls_config> t;
    t.checked_string("certificate_file", "path to a PEM file",
                     &tls_config::certificate_file, is_readable_file,
                     "a readable PEM file", "The server's certificate.")
      .checked_string("key_file", "path to a PEM file", &tls_config::key_file,
                      is_readable_file, "a readable PEM file",
                      "The certificate's private key.")
      .choice("min_version", tls_versions, &tls_config::min_version,
              "Oldest TLS version accepted.");
    return t;
  }();
  return table;
}

// -- providers ----------------------------------------------------------------

const key_table<provider_config>& provider_keys() {
  static const auto table = [] {
    key_table<provider_config> t;
    t.dedicated("name", "name, **required**", "—", "Unique among providers.")
      .dedicated("kind", "`echo`, `scripted`, `openai` or `anthropic`", "—",
                 "The API the provider speaks (**required**).")
      .string("model", &provider_config::model,
              "Model name, requested from HTTP providers.")
      .dedicated("script", "list of steps", "—",
                 "The steps a scripted provider plays.")
      .custom(
        "context_window", "integer: `0` or >= 1024",
        [](reader& r, const map_reader& m, const std::string& k,
           const YAML::Node& x, provider_config& out) {
          auto path = m.path(k);
          auto value = r.read_int(x, path, 0, unbounded);
          if (value > 0 && value < min_context_window)
            r.fail(strict_yaml::line_of(x), path,
                   "expected 0 (the model's window from the table of known "
                   "models) or an integer >= "
                     + std::to_string(min_context_window) + ", got "
                     + strict_yaml::quote(std::to_string(value)));
          out.context_window = static_cast<uint64_t>(value);
        },
        [](auto& x) { return std::to_string(x.context_window); },
        "The model's context window in tokens; 0: from the table.");
    return t;
  }();
  return table;
}

const key_table<provider_config>& http_provider_keys() {
  static const auto table = [] {
    using p = provider_config;
    key_table<p> t;
    t.dedicated("base_url", "`http://` or `https://` URL, **required**", "—",
                "Scheme, host, optional port, path and query.")
      .string("api_key", &p::api_key, "The API key; empty: none is sent.")
      .dedicated("headers", "mapping of name to string", "none",
                 "Extra request headers.")
      .duration("connect_timeout", positive_duration, &p::connect_timeout,
                "TCP connect plus TLS handshake.")
      .duration("first_byte_timeout", positive_duration, &p::first_byte_timeout,
                "From the request written to the first byte of the answer.")
      .duration("total_timeout", positive_duration, &p::total_timeout,
                "The whole call.")
      .integer("max_concurrency", 1, 100000, &p::max_concurrency,
               "Calls in flight at once.")
      .checked_string(
        "ca_file", "path", &p::ca_file,
        [](const std::string& x) { return x.empty() || is_readable_file(x); },
        "a readable PEM file of CA certificates",
        "PEM file of CAs to trust instead of the system's.")
      .boolean("stream", &p::stream, "Stream answers (server-sent events).")
      .integer(
        "max_tokens", 1, 1'000'000,
        [](auto& x) -> auto& { return x.params.max_output_tokens; },
        "The older spelling of max_output_tokens.")
      .derived("—")
      .choice("token_limit_field", token_limit_fields, &p::token_limit_field,
              "The openai wire's field of the output limit.")
      .size("max_response_bytes", 1024, &p::max_response_bytes,
            "Largest response body read from the provider.");
    return t;
  }();
  return table;
}

namespace {

// `stop`: a list of non-empty texts.
void read_stop(reader& r, const map_reader& m, const std::string& key,
               const YAML::Node& x, model_params& out) {
  auto path = m.path(key);
  out.stop.clear();
  auto items = r.read_list(x, path, "a list of stop texts");
  for (size_t i = 0; i < items.size(); ++i) {
    auto item = strict_yaml::indexed(path, i);
    out.stop.push_back(r.read_string(items[i], item));
    if (out.stop.back().empty())
      r.bad_value(items[i], item, "", "a non-empty text");
  }
}

} // namespace

const key_table<model_params>& model_param_keys() {
  static const auto table = [] {
    using m = model_params;
    key_table<m> t;
    t.number("temperature", 0, 2, &m::temperature, "Sampling temperature.")
      .derived("the server's")
      .number("top_p", 0, 1, &m::top_p, "Nucleus sampling share.")
      .derived("the server's")
      .custom("stop", "list of non-empty strings", read_stop, "`[]`",
              "Texts that end an answer.")
      .integer("max_output_tokens", 1, 1'000'000, &m::max_output_tokens,
               "Most tokens of one answer.")
      .choice("reasoning_effort", reasoning_effort_names, &m::reasoning_effort,
              "How hard a reasoning model thinks.")
      .derived("not sent")
      .dedicated("extra_body", "mapping", "none",
                 "Merged into every request body last (null removes).");
    return t;
  }();
  return table;
}

const key_table<model_params>& agent_model_keys() {
  static const auto table = [] {
    auto t = model_param_keys();
    for (auto& k : model_param_keys().keys())
      t.derived(k.name.c_str(), "its provider's");
    return t;
  }();
  return table;
}

namespace {

// A step's key `k` that describes its failure, which `fail` must give.
void require_failure(reader& r, const map_reader& m, const std::string& k,
                     const scripted_step& step) {
  if (step.fail.empty())
    r.fail(m.line(k), m.path(k),
           k + " needs fail (it is part of a simulated failure)");
}

} // namespace

const key_table<scripted_step>& script_step_keys() {
  static const auto table = [] {
    using s = scripted_step;
    key_table<s> t;
    t.string("match", &s::match, "The text a message must contain.")
      .string("reply", &s::reply, "The answer.")
      .derived("—")
      .duration("delay", any_duration, &s::delay, "Simulated latency.")
      .choice("fail", failure_classes, &s::fail,
              "The provider error class the call fails with.")
      .derived("—")
      .custom(
        "retry_after", "duration >= 0",
        [](reader& r, const map_reader& m, const std::string& k,
           const YAML::Node& x, scripted_step& out) {
          require_failure(r, m, k, out);
          out.retry_after = r.read_millis(x, m.path(k), false);
        },
        "none", "With fail: the Retry-After the provider sends.")
      .boolean("crash", &s::crash, "Throw inside the provider worker.")
      .custom(
        "cut", "boolean",
        [](reader& r, const map_reader& m, const std::string& k,
           const YAML::Node& x, scripted_step& out) {
          require_failure(r, m, k, out);
          out.cut = r.read_bool(x, m.path(k));
        },
        "`false`", "With fail: the failure breaks a stream that had begun.")
      .dedicated("tool",
                 "mapping: `name` (non-empty string, **required**), "
                 "`arguments` (string, default `{}`)",
                 "none", "The answer also calls this tool.");
    return t;
  }();
  return table;
}

// -- pools --------------------------------------------------------------------

const key_table<pool_config>& pool_keys() {
  static const auto table = [] {
    key_table<pool_config> t;
    t.dedicated("name", "name, **required**", "—", "Unique among pools.")
      .dedicated("chain", "non-empty list of provider names, **required**", "—",
                 "Providers in the order they are tried.")
      .integer(
        "max_attempts", 1, 100,
        [](auto& x) -> auto& { return x.retry.max_attempts; },
        "Attempts per provider before moving to the next.")
      .container("retry", "Backoff between attempts and the retry budget.")
      .container("breaker", "The per-provider circuit breaker.")
      .dedicated("cooldowns", "mapping of error class to duration >= 0",
                 "auth `10m`, rate_limit `1m`, billing `30m`, timeout `30s`, "
                 "overloaded `2m`, model_not_found `1h`, "
                 "action_not_supported `10m`, unknown `30s`, "
                 "others `0s`",
                 "How long a provider stays skipped after a failure.")
      .number("timeout_max_tokens_factor", 0.01, 1.0,
              &pool_config::timeout_max_tokens_factor,
              "A timed-out call is retried once with max_tokens times this.")
      .names("tools", &pool_config::tools, "a list of tool names",
             "Tools of every thread this pool answers.");
    return t;
  }();
  return table;
}

const key_table<pool_config>& pool_retry_keys() {
  static const auto table = [] {
    key_table<pool_config> t;
    add_backoff_delays(
      t, [](auto& x) -> auto& { return x.retry; });
    t.duration(
       "retry_after_cap", any_duration,
       [](auto& x) -> auto& { return x.retry.retry_after_cap; },
       "Upper bound of the floor a Retry-After sets.")
      .integer("budget", 1, 10000, &pool_config::budget,
               "Attempts one request may make across the whole chain.")
      .derived("(`max_attempts` + `stream_retries`) × chain length")
      .integer("stream_retries", 0, 100, &pool_config::stream_retries,
               "Retries of a stream that broke after it began.")
      .duration("stream_delay", any_duration, &pool_config::stream_delay,
                "The first stream retry's delay; doubling.");
    return t;
  }();
  return table;
}

const key_table<breaker_config>& breaker_keys() {
  static const auto table = [] {
    key_table<breaker_config> t;
    t.integer("failure_threshold", 1, 1000, &breaker_config::failure_threshold,
              "Consecutive failures that open the breaker.")
      .duration("probe_lead", any_duration, &breaker_config::probe_lead,
                "How long before the cooldown ends the probe goes out.")
      .duration("probe_timeout", positive_duration,
                &breaker_config::probe_timeout,
                "A probe not back after this is presumed lost.");
    return t;
  }();
  return table;
}

// -- tools --------------------------------------------------------------------

const key_table<tool_config>& tool_keys() {
  static const auto table = [] {
    using c = tool_config;
    key_table<c> t;
    t.dedicated("name", "string, **required**", "—",
                "The name the model calls the tool by.")
      .dedicated("description", "non-empty string, **required**", "—",
                 "What the model is told the tool does.")
      .dedicated("parameters", "mapping (a JSON schema)",
                 "`{type: object, properties: {}}`",
                 "The schema of the arguments object.")
      .dedicated("command", "non-empty list of strings, **required**", "—",
                 "The argv of the program, with {name} placeholders.")
      .string("cwd", &c::cwd, "Working directory; empty: the node's.")
      .dedicated("loop_key", "name of a parameter", "`\"\"`",
                 "The argument naming what a call works on (file loops).")
      .dedicated("env", "list of environment variable names", "`[]`",
                 "The node's environment variables the program gets.")
      .duration("timeout", at_least_1ms, &c::timeout,
                "SIGTERM after this, SIGKILL grace later.")
      .duration("grace", any_duration, &c::grace,
                "Time between SIGTERM and SIGKILL.")
      .size("output_cap", 1, &c::output_cap,
            "Bytes of stdout, and of stderr, kept for the model.")
      .container("limits", "Resource limits of the tool's process.")
      .dedicated("user", "string (a user name or number)", "`\"\"`",
                 "The account the tool runs as; empty: the node's.")
      .dedicated("group", "string (a group name or number)", "`\"\"`",
                 "The tool's group; empty: the user's primary group.");
    return t;
  }();
  return table;
}

const key_table<tool_limits>& tool_limit_keys() {
  static const auto table = [] {
    key_table<tool_limits> t;
    t.size("memory", 0, &tool_limits::memory, "Address space (RLIMIT_AS).")
      .custom(
        "cpu_time", "duration >= 0",
        [](reader& r, const map_reader& m, const std::string& k,
           const YAML::Node& x, tool_limits& out) {
          // Whole seconds, as the kernel counts them; a fraction rounds up.
          auto ms = r.read_millis(x, m.path(k), false).count();
          out.cpu_time = std::chrono::seconds{(ms + 999) / 1000};
        },
        [](auto& x) {
          return render_duration(
            std::chrono::duration_cast<caf::timespan>(x.cpu_time));
        },
        "CPU time (RLIMIT_CPU), in whole seconds.")
      .integer("open_files", 0, unbounded, &tool_limits::open_files,
               "Open file descriptors (RLIMIT_NOFILE).")
      .integer("processes", 0, unbounded, &tool_limits::processes,
               "Processes of the tool's user (RLIMIT_NPROC).")
      .size("file_size", 0, &tool_limits::file_size,
            "Largest file the tool may write (RLIMIT_FSIZE).");
    return t;
  }();
  return table;
}

} // namespace keel::config_detail
