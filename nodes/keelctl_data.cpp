// keelctl verify, recovery and migrate: the oracle on a node's data (its
// folder or its PostgreSQL store), the last recovery's report from the node
// or its data, and the copy of a stopped node's RocksDB data into
// PostgreSQL.

#include <iostream>
#include <optional>

#include "keel/json_codec.hpp"
#include "keel/pg_store.hpp"
#include "keel/stored_form.hpp"
#include "keel/tools/data_dir.hpp"
#include "keel/tools/verify.hpp"
#include "keel/tools/ws_client.hpp"
#include "keelctl.hpp"

namespace keelctl {

namespace {

/// The options of the subcommands that may read a data folder.
struct data_args {
  keel::data_source source;
  bool json = false;
};

nlohmann::json epoch_audit_json(const keel::epoch_audit_summary& x) {
  if (!x.skipped.empty())
    return {{"skipped", x.skipped}};
  return {{"rows", x.rows},
          {"shards", x.shards},
          {"epochs", x.epochs},
          {"unstamped", x.unstamped},
          {"cluster_shards", x.cluster_shards},
          {"history", x.history}};
}

/// The report, with the epoch audit's line after the counts.
void print_verify_report(const keel::verify_report& report, bool as_json) {
  if (as_json) {
    auto j = keel::to_json(report);
    if (report.epoch_audit)
      j["epoch_audit"] = epoch_audit_json(*report.epoch_audit);
    std::cout << j.dump(2) << '\n';
    return;
  }
  auto text = keel::render_verify_report(report);
  if (report.epoch_audit)
    text.insert(text.find('\n') + 1,
                keel::render_epoch_audit(*report.epoch_audit));
  std::cout << text;
}

/// Verifies `db`; with `pg_url` (the PostgreSQL store `db` is), also the
/// epoch audit of its rows.
int run_verify(keel::store& db, const std::string& where, bool as_json,
               const std::string& pg_url) {
  auto report = keel::verify_store(db);
  if (report && !pg_url.empty())
    if (auto err = keel::audit_epochs(pg_url, *report))
      report = std::move(err);
  if (!report)
    return fail("cannot verify " + where + ": "
                  + keel::error_message(report.error()),
                exit_usage);
  print_verify_report(*report, as_json);
  return report->ok() ? exit_ok : exit_failed;
}

/// Prints a recovery report, or that none has run (not an error).
int print_recovery(const std::optional<keel::recovery_report>& report,
                   bool as_json) {
  if (as_json)
    std::cout << (report ? keel::to_json(*report).dump(2) : "null") << '\n';
  else if (report)
    std::cout << keel::render_recovery_report(*report);
  else
    std::cout << "no recovery has run\n";
  return exit_ok;
}

int print_stored_recovery(keel::store& db, bool as_json) {
  auto text = db.meta("last_recovery");
  if (!text && text.error() == keel::ec::not_found)
    return print_recovery(std::nullopt, as_json);
  if (!text)
    return fail(keel::error_message(text.error()), exit_usage);
  auto report = keel::decode<keel::recovery_report>(*text);
  if (!report)
    return fail("the stored recovery report cannot be read: "
                  + keel::error_message(report.error()),
                exit_usage);
  return print_recovery(*report, as_json);
}

int run_recovery(const keel::endpoint& ep, const keel::data_source& src,
                 bool as_json) {
  if (!src.data_dir.empty() || !src.pg_url.empty())
    return with_data(src, [&](keel::store& db) {
      return print_stored_recovery(db, as_json);
    });
  auto res = keel::api_call(ep, "GET", "/api/v1/recovery");
  // The node answers 404 (not_found) until a recovery has run.
  if (!res && res.error() == keel::ec::not_found)
    return print_recovery(std::nullopt, as_json);
  if (!res)
    return fail(ep, res.error());
  auto report = keel::recovery_report_from_json(*res);
  if (!report)
    return fail("the node sent an unreadable recovery report: "
                + keel::error_message(report.error()));
  return print_recovery(*report, as_json);
}

} // namespace

command add_verify_command(CLI::App& app) {
  auto args = std::make_shared<data_args>();
  auto cmd = app.add_subcommand(
    "verify", "Checks the crash recovery invariants on a stopped node's "
              "data (--data-dir or --pg; read-only; beside a running node "
              "its live threads show as ACTIVE): exit 0 if they all hold, 1 "
              "if any is violated, 2 if the data cannot be read");
  add_data_options(cmd, args->source, true);
  cmd->add_flag("--json", args->json, "Print the report as JSON");
  // Needs no node, so a bad --node / KEEL_NODE does not stop it.
  return {cmd, [args] {
            return with_data(args->source, [&](keel::store& db) {
              return run_verify(db, args->source.name(), args->json,
                                args->source.pg_url);
            });
          }};
}

int run_migrate(const std::string& data_dir, const std::string& url) {
  // Writable: RocksDB's lock proves no node runs on the folder.
  auto from = keel::open_data_dir(data_dir, true);
  if (!from)
    return fail("cannot migrate " + data_dir + ": "
                  + keel::error_message(from.error())
                  + " (a node running on it holds its LOCK: stop it first)",
                exit_usage);
  keel::pg_store_options opts;
  opts.url = url;
  auto to = keel::open_pg_store(opts);
  if (!to)
    return fail(keel::error_message(to.error()), exit_usage);
  auto copied = keel::copy_store(**from, **to);
  if (!copied)
    return fail("migration failed: " + keel::error_message(copied.error()));
  for (auto& [family, count] : copied->families)
    std::cout << "  " << family << ": " << count << '\n';
  std::cout << "copied " << copied->records
            << " records; read back, every one identical\n";
  return run_verify(**to, "the PostgreSQL store", false, url);
}

command add_migrate_command(CLI::App& app) {
  struct migrate_args {
    std::string data_dir;
    std::string url;
  };
  auto args = std::make_shared<migrate_args>();
  auto cmd = app.add_subcommand(
    "migrate", "Copies a stopped node's RocksDB data into an empty "
               "PostgreSQL store, reads every record back to compare, then "
               "checks the invariants there: exit 0 when all is copied and "
               "holds, 1 if not, 2 if either side cannot be opened");
  cmd
    ->add_option("--data-dir", args->data_dir, "The stopped node's data folder")
    ->type_name("DIR")
    ->required();
  cmd->add_option("--to", args->url, "The PostgreSQL database (a libpq URL)")
    ->type_name("URL")
    ->envname("KEEL_PG_URL")
    ->required();
  return {cmd, [args] { return run_migrate(args->data_dir, args->url); }};
}

command add_recovery_command(CLI::App& app, const node_args& node) {
  auto args = std::make_shared<data_args>();
  auto cmd = add_node_command(
    app, "recovery",
    "Prints what the last recovery on boot found and did: its steps with "
    "counts and durations, and the problems it met");
  add_data_options(cmd, args->source, false);
  cmd->add_flag("--json", args->json,
                "Print the report as JSON (null if none has run)");
  return node_command(
    cmd, node,
    [args](const keel::endpoint& ep) {
      return run_recovery(ep, args->source, args->json);
    },
    true);
}

} // namespace keelctl
