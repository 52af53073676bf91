// The key tables of `threads`, `supervision`, `logging`, `shutdown`,
// `storage`, `cluster`, `chaos`, `owner` and `delivery` (see
// config_keys.cpp), and `config_keys()`, which describes every table.

#include <limits>

#include "config_schema.hpp"

namespace keel::config_detail {

namespace {

void add_thread_limits(key_table<thread_defaults>& t) {
  using d = thread_defaults;
  t.integer("max_live", 1, unbounded, &d::max_live,
            "Conversations held in memory at once on this node.")
    .integer("max_stored_threads", 0, unbounded, &d::max_stored_threads,
             "Threads stored on this node; 0: no limit.")
    .size("max_reply_bytes", 64, &d::max_reply_bytes,
          "A longer provider reply is cut.")
    .size("max_tool_output_bytes", 64, &d::max_tool_output_bytes,
          "Longer text from a tool call is cut.")
    .names("tools", &d::tools, "a list of tool names",
           "Tools of root threads, on top of their pool's.")
    .names("agent_tools", &d::agent_tools, "a list of tool names",
           "Tools of child agents, on top of their pool's.")
    .container("guard", "The safety guard of the turn loop.")
    .integer("disable_tool_after", 1, std::numeric_limits<uint32_t>::max(),
             &d::disable_tool_after,
             "A tool failing this often in a thread is disabled there.")
    .integer("max_concurrent_tools", 1, unbounded, &d::max_concurrent_tools,
             "Tool processes running at once on the node.")
    .container("compaction", "When to warn about a full context and compact.")
    .container("agents", "Limits of agent trees.");
}

} // namespace

const key_table<thread_defaults>& thread_keys() {
  static const auto table = [] {
    using d = thread_defaults;
    key_table<d> t;
    t.string("system_prompt", &d::system_prompt,
             "Placed before the context of every turn.")
      .duration("idle_timeout", positive_duration, &d::idle_timeout,
                "An idle thread passivates after this.")
      .name("pool", &d::pool, "The provider pool answering threads.")
      .integer("max_inbox", 1, unbounded, &d::max_inbox,
               "Unanswered messages one thread may hold.")
      .duration("turn_timeout", positive_duration, &d::turn_timeout,
                "A turn taking longer ends with an error.")
      .name("default_agent", &d::default_agent,
            "The agent of threads whose first message names none.")
      .string("system_agent", &d::system_agent,
              "Answers messages naming an unknown agent; empty: refused.");
    add_thread_limits(t);
    return t;
  }();
  return table;
}

const key_table<guard_limits>& guard_keys() {
  static const auto table = [] {
    using g = guard_limits;
    key_table<g> t;
    t.integer("max_events", 1, unbounded, &g::max_events, "Steps of one turn.")
      .integer("max_tool_calls", 1, unbounded, &g::max_tool_calls,
               "Tool calls of one turn.")
      .duration("max_duration", at_least_1ms, &g::max_duration,
                "Wall clock time of one turn.")
      .dedicated("per_tool", "mapping of tool name to integer >= 1",
                 "`edit_file: 8`, `delete_file: 3`, `run_command: 10`, "
                 "`web_search: 8`, `run_terminal_command: 100`",
                 "Calls of one tool in one turn.")
      .integer("repeated_call_limit", 1, unbounded, &g::repeated_call_limit,
               "The same call this many times in a row stops the turn.")
      .integer("repeated_error_limit", 1, unbounded, &g::repeated_error_limit,
               "The same tool error this many times in a row stops it.")
      .integer("file_loop_limit", 1, unbounded, &g::file_loop_limit,
               "More calls on one loop key's target stop it (a file loop).")
      .integer("similar_reply_limit", 1, unbounded, &g::similar_reply_limit,
               "More near-identical answers in a row: try another way.");
    return t;
  }();
  return table;
}

const key_table<thread_defaults>& compaction_keys() {
  static const auto table = [] {
    key_table<thread_defaults> t;
    auto field = [](auto member) {
      return [member](auto& x) -> auto& {
        return x.compaction.*member;
      };
    };
    using c = compaction_settings;
    t.boolean("enabled", &thread_defaults::compaction_enabled,
              "false: contexts are never compacted.")
      .share("warn_at", field(&c::warn_at), "Share of the window: warn.")
      .share("compact_at", field(&c::compact_at),
             "Share of the window: compact.")
      .integer("strip_over", 1, unbounded, field(&c::strip_over),
               "Tool results longer than this are stripped first.")
      .integer("protect_last", 1, unbounded, field(&c::protect_last),
               "The latest entries, never summarized nor stripped.")
      .integer("min_entries", 1, unbounded, field(&c::min_entries),
               "Entries a context needs before anything is summarized.")
      .integer("chunk_entries", 2, unbounded, field(&c::chunk_entries),
               "Entries of one summarized chunk at most.")
      .integer("chunk_overlap", 0, unbounded, field(&c::chunk_overlap),
               "Entries each chunk shares with the one before.");
    return t;
  }();
  return table;
}

const key_table<agent_limits>& agent_keys() {
  static const auto table = [] {
    using a = agent_limits;
    key_table<a> t;
    t.integer("max_children", 1, unbounded, &a::max_children,
              "Children one thread may have.")
      .integer("max_depth", 1, unbounded, &a::max_depth,
               "Deepest level of a tree.")
      .integer("max_spawns_per_reply", 1, unbounded, &a::max_spawns_per_reply,
               "New children one model answer may spawn.")
      .integer("hop_budget", 1, unbounded, &a::hop_budget,
               "Messages within one tree for one client message.");
    return t;
  }();
  return table;
}

// -- supervision --------------------------------------------------------------

const key_table<supervisor_settings>& supervisor_keys() {
  static const auto table = [] {
    using s = supervisor_settings;
    key_table<s> t;
    t.choice("strategy", restart_strategy_names, &s::strategy,
             "What a child's crash restarts.")
      .integer("max_restarts", 0, supervision_limit, &s::max_restarts,
               "More restarts than this within period escalate.")
      .derived("see above")
      .duration("period", positive_duration, &s::period,
                "The window for max_restarts.")
      .derived("see above")
      .duration("shutdown_timeout", positive_duration, &s::shutdown_timeout,
                "How long a child may take to stop.")
      .integer("buffer", 0, supervision_limit, &s::buffer,
               "Messages held per child while it restarts.")
      .container("backoff", "Delays between restarts.");
    return t;
  }();
  return table;
}

const key_table<backoff_config>& backoff_keys() {
  static const auto table = [] {
    using b = backoff_config;
    key_table<b> t;
    t.duration("initial", any_duration, &b::initial, "The first delay.")
      .duration("max", any_duration, &b::max, "The longest delay.")
      .number("multiplier", 1.0, std::numeric_limits<double>::infinity(),
              &b::multiplier, "Growth from one delay to the next.")
      .duration("reset_after", positive_duration, &b::reset_after,
                "A child up this long restarts from initial again.")
      .number("jitter", 0.0, 1.0, &b::jitter,
              "How much each delay varies, as a fraction of it.");
    return t;
  }();
  return table;
}

// -- logging, shutdown and storage --------------------------------------------

const key_table<logging_config>& logging_keys() {
  static const auto table = [] {
    key_table<logging_config> t;
    t.choice("level", log_levels, &logging_config::level,
             "Least severe level logged.")
      .string("file", &logging_config::file, "Log file; empty: stderr.")
      .choice("format", log_formats, &logging_config::format,
              "One line of text or one JSON object per event.");
    return t;
  }();
  return table;
}

const key_table<shutdown_config>& shutdown_keys() {
  static const auto table = [] {
    key_table<shutdown_config> t;
    t.duration("drain_timeout", positive_duration,
               &shutdown_config::drain_timeout,
               "How long turns under way may finish after SIGTERM.");
    return t;
  }();
  return table;
}

const key_table<storage_config>& storage_keys() {
  static const auto table = [] {
    using s = storage_config;
    key_table<s> t;
    t.choice("backend", storage_backends, &s::backend, "Where the store lives.")
      .boolean("sync", &s::sync, "Sync the WAL before acknowledging a write.")
      .duration("request_timeout", positive_duration, &s::request_timeout,
                "How long a conversation waits for a storage request.")
      .container("rocksdb", "RocksDB's memory.")
      .container("postgres", "The PostgreSQL store.");
    return t;
  }();
  return table;
}

const key_table<rocksdb_config>& rocksdb_keys() {
  static const auto table = [] {
    key_table<rocksdb_config> t;
    t.size("memtables", 1u << 20, &rocksdb_config::memtables,
           "RocksDB's memtables, all column families together.")
      .size("block_cache", 0, &rocksdb_config::block_cache,
            "The block cache every column family shares.");
    return t;
  }();
  return table;
}

const key_table<postgres_config>& postgres_keys() {
  static const auto table = [] {
    using p = postgres_config;
    key_table<p> t;
    t.string("url", &p::url, "A libpq URI or conninfo string.")
      .integer("connections", 1, 64, &p::connections,
               "Connections the store keeps.")
      .duration("statement_timeout", {true, std::chrono::milliseconds{1}},
                &p::statement_timeout,
                "The server cancels a statement running longer.")
      .duration("startup_wait", {false, {}, std::chrono::hours{1}},
                &p::startup_wait,
                "How long a starting node waits for the server.");
    return t;
  }();
  return table;
}

} // namespace keel::config_detail
