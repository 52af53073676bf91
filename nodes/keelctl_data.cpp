// keelctl verify and keelctl recovery: the oracle on a node's data folder,
// and the last recovery's report from the node or its data folder.

#include <iostream>
#include <optional>

#include "keel/json_codec.hpp"
#include "keel/tools/data_dir.hpp"
#include "keel/tools/verify.hpp"
#include "keel/tools/ws_client.hpp"
#include "keelctl.hpp"

namespace keelctl {

namespace {

/// The options of the subcommands that may read a data folder.
struct data_args {
  std::string data_dir;
  bool json = false;
};

int run_verify(keel::store& db, const std::string& data_dir, bool as_json) {
  auto report = keel::verify_store(db);
  if (!report)
    return fail("cannot verify " + data_dir + ": "
                  + keel::error_message(report.error()),
                exit_usage);
  if (as_json)
    std::cout << keel::to_json(*report).dump(2) << '\n';
  else
    std::cout << keel::render_verify_report(*report);
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

int run_recovery(const keel::endpoint& ep, const std::string& data_dir,
                 bool as_json) {
  if (!data_dir.empty())
    return with_data_dir(data_dir, [&](keel::store& db) {
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
              "data folder (read-only; beside a running node its live "
              "threads show as ACTIVE): exit 0 if they all hold, 1 if any is "
              "violated, 2 if the data cannot be read");
  cmd
    ->add_option("--data-dir", args->data_dir,
                 "The node's data folder (its database is in DIR/db)")
    ->type_name("DIR")
    ->required();
  cmd->add_flag("--json", args->json, "Print the report as JSON");
  // Needs no node, so a bad --node / KEEL_NODE does not stop it.
  return {cmd, [args] {
            return with_data_dir(args->data_dir, [&](keel::store& db) {
              return run_verify(db, args->data_dir, args->json);
            });
          }};
}

command add_recovery_command(CLI::App& app, const node_args& node) {
  auto args = std::make_shared<data_args>();
  auto cmd = add_node_command(
    app, "recovery",
    "Prints what the last recovery on boot found and did: its steps with "
    "counts and durations, and the problems it met");
  cmd
    ->add_option("--data-dir", args->data_dir,
                 "Read the report from a node's data folder rather than ask "
                 "the node")
    ->type_name("DIR");
  cmd->add_flag("--json", args->json,
                "Print the report as JSON (null if none has run)");
  return node_command(
    cmd, node,
    [args](const keel::endpoint& ep) {
      return run_recovery(ep, args->data_dir, args->json);
    },
    true);
}

} // namespace keelctl
