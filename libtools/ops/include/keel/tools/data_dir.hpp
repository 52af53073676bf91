#pragma once

// A node's data for the operator tools (`keelctl verify`, `keelctl recovery`,
// `keelctl tree --agents`): opening a stopped node's data folder, the agent
// tree, and the JSON and human forms of what they show. The JSON forms are
// the ones the node serves (GET /api/v1/agents, /api/v1/recovery), so a
// running and a stopped node print alike.

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "keel/agent_tree.hpp"
#include "keel/error.hpp"
#include "keel/json_codec.hpp"
#include "keel/store.hpp"
#include "keel/tools/verify.hpp"
#include "keel/types.hpp"

namespace keel {

/// Opens the database of a node's data folder `dir`: in `dir/db`
/// (keel-node's layout) or in `dir` itself. Read-only (the default) works
/// beside a running node; `writable` takes RocksDB's lock, so it fails
/// while a node runs on the folder. Fails with `ec::storage_open_failed`
/// naming the folder when it does not exist or holds no database, or when
/// RocksDB cannot open it.
caf::expected<std::unique_ptr<store>> open_data_dir(const std::string& dir,
                                                    bool writable = false);

/// Where a stopped (or running) node's data is: a data folder, or a
/// PostgreSQL database (a libpq URL).
struct data_source {
  std::string data_dir;
  std::string pg_url;

  /// How messages name it: the folder, or "PostgreSQL" (a URL may hold a
  /// password and is never shown).
  std::string name() const {
    return pg_url.empty() ? data_dir : "the PostgreSQL store";
  }
};

/// Opens `src` for reading only (`open_data_dir`, or the PostgreSQL store
/// read-only). Fails with `ec::storage_open_failed` naming what is wrong.
caf::expected<std::unique_ptr<store>> open_data_source(const data_source& src);

/// The agent tree, indented: every root (an agent without a parent, or one
/// whose parent is unknown) with its descendants below it, one line each
/// with state, pool, model and provider; a count line at the end.
std::string render_agent_tree(const std::vector<agent_info>& agents);

/// The recovery report for people: when it ran and how long it took, one
/// line per step (name, count, duration in ms), the counts, the problems.
std::string render_recovery_report(const recovery_report& x);

/// The oracle's report: `ok`, the counts and the violations.
nlohmann::json to_json(const verify_report& x);

/// The oracle's report for people: the counts, then one line per
/// violation, `RULE WHERE: WHAT`.
std::string render_verify_report(const verify_report& x);

/// Renders wall clock milliseconds as `YYYY-MM-DD HH:MM:SS.mmm UTC`.
std::string format_utc(millis at);

} // namespace keel
