// keel-chaos: plays a chaos scenario (config/chaos/*.yaml) against real
// keel-node processes: starts the nodes, sends traffic through clients that
// reconnect and resend, plays the fault steps on time, then checks its own
// record of what the clients were told against the threads' histories and
// runs `keelctl verify` on each data folder. The work is in libtools
// (keel/tools/chaos_run.hpp); this file reads the command line.
//
// Exit codes: 0 every invariant held, 1 one was violated (each is printed),
// 2 bad arguments or an invalid scenario (one line naming the key path),
// 3 the run could not be made (a node did not start).

#include <fstream>
#include <iostream>

#include <CLI/CLI.hpp>

#include "keel/tools/chaos_run.hpp"
#include "keel/tools/process.hpp"

namespace {

constexpr int exit_violated = 1;
constexpr int exit_usage = 2;
constexpr int exit_not_run = 3;

struct args {
  std::string scenario;
  std::string json_file;
  std::string html_file;
  std::string work_dir;
  std::string sabotage;
  bool keep_database = false;
  bool check_only = false;
  bool quiet = false;
};

void add_options(CLI::App& app, args& a) {
  app.add_option("scenario", a.scenario, "The scenario file (YAML)")
    ->required()
    ->type_name("SCENARIO.yaml");
  app.add_option("--json", a.json_file, "Also write the report as JSON here")
    ->type_name("FILE");
  app
    .add_option("--html", a.html_file,
                "Also write the timeline (answers per second, latency, the "
                "fault steps marked) as a self-contained HTML page here")
    ->type_name("FILE");
  app
    .add_option("--work-dir", a.work_dir,
                "Where the nodes' folders go (default: a temporary folder, "
                "removed after a clean run)")
    ->type_name("DIR");
  app
    .add_option("--sabotage", a.sabotage,
                "Test the checker: tamper with the record (lost, duplicate "
                "or order); the run must then fail")
    ->check(CLI::IsMember({"lost", "duplicate", "order"}));
  app.add_flag("--keep-database", a.keep_database,
               "Keep a cluster run's PostgreSQL folder after a clean run too "
               "(the report names it; a failed run always keeps it)");
  app.add_flag("--check", a.check_only,
               "Only validate the scenario file, run nothing");
  app.add_flag("--quiet", a.quiet, "No progress lines on stderr");
}

int run(const args& a) {
  auto sc = keel::chaos::load_scenario(a.scenario);
  if (!sc) {
    std::cerr << "keel-chaos: " << keel::error_message(sc.error()) << '\n';
    return exit_usage;
  }
  if (a.check_only) {
    std::cout << a.scenario << ": valid (" << sc->steps.size() << " steps)\n";
    return 0;
  }
  keel::chaos::run_options opts;
  auto self = keel::own_executable();
  opts.node_binary = keel::sibling_path(self, "keel-node");
  opts.keelctl_binary = keel::sibling_path(self, "keelctl");
  opts.work_dir = a.work_dir;
  opts.sabotage = a.sabotage;
  opts.keep_database = a.keep_database;
  if (!a.quiet)
    opts.progress = [](const std::string& line) {
      std::cerr << "keel-chaos: " << line << std::endl;
    };
  auto report = keel::chaos::run_scenario(*sc, opts);
  if (!report) {
    std::cerr << "keel-chaos: " << keel::error_message(report.error()) << '\n';
    return exit_not_run;
  }
  std::cout << keel::chaos::render_text(*report);
  if (!a.json_file.empty())
    std::ofstream{a.json_file} << keel::chaos::to_json(*report).dump(2) << '\n';
  if (!a.html_file.empty())
    std::ofstream{a.html_file} << keel::chaos::render_html(*report);
  return report->clean() ? 0 : exit_violated;
}

} // namespace

int main(int argc, char** argv) {
  CLI::App app{"keel-chaos: plays a chaos scenario against real keel-node "
               "processes and checks that nothing acknowledged was lost."};
  args a;
  add_options(app, a);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : exit_usage;
  }
  return run(a);
}
