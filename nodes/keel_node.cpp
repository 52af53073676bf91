// keel-node: runs one Keel node from a YAML configuration.

#include <iostream>
#include <string>

#include <CLI/CLI.hpp>

#include "keel/config.hpp"
#include "keel/kill_point.hpp"
#include "keel/node.hpp"

// keel-node allocates through jemalloc (linked in): an arena per core
// instead of glibc's arenas under one lock when tens of thousands of
// conversations start or stop, and freed pages go back to the OS within a
// second (glibc keeps them until a trim). `MALLOC_CONF` in the environment
// overrides these.
extern "C" {
const char* malloc_conf
  = "percpu_arena:percpu,dirty_decay_ms:1000,muzzy_decay_ms:0";
}

namespace {

// Exit codes: 0 clean stop, 1 runtime failure, 2 bad configuration or usage.
constexpr int exit_config_error = 2;

} // namespace

int main(int argc, char** argv) {
  CLI::App app{"keel-node: a fault-tolerant runtime for LLM agent "
               "conversations"};
  std::string config_file;
  std::string check_file;
  app.add_option("-c,--config", config_file,
                 "YAML configuration (default: the embedded offline default)");
  app.add_option("--check-config", check_file,
                 "validate a configuration file and exit");
  std::string kill_at;
  app.add_option("--kill-at", kill_at,
                 "crash tests only: arm a kill point, point[:probability"
                 "[:seed]] (also env KEEL_KILL_AT)");
  app.set_version_flag("--version", KEEL_VERSION);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    auto code = app.exit(e);
    return code == 0 ? 0 : exit_config_error;
  }
  if (auto err = keel::arm_kill_point_from_env()) {
    std::cerr << "keel-node: " << keel::error_message(err) << '\n';
    return exit_config_error;
  }
  if (!kill_at.empty()) {
    auto arming = keel::parse_kill_point_arming(kill_at);
    if (!arming) {
      std::cerr << "keel-node: --kill-at: "
                << keel::error_message(arming.error()) << '\n';
      return exit_config_error;
    }
    keel::arm_kill_point(*arming);
  }
  auto env = keel::process_env();
  if (!check_file.empty()) {
    auto cfg = keel::load_config_file(check_file, env);
    if (!cfg) {
      std::cerr << "keel-node: " << keel::error_message(cfg.error()) << '\n';
      return exit_config_error;
    }
    for (auto& warning : cfg->warnings)
      std::cerr << "keel-node: " << check_file << ": warning: " << warning
                << '\n';
    std::cout << "keel-node: " << check_file << ": configuration is valid\n";
    return 0;
  }
  auto cfg = config_file.empty()
               ? caf::expected<keel::node_config>{keel::default_config()}
               : keel::load_config_file(config_file, env);
  if (!cfg) {
    std::cerr << "keel-node: " << keel::error_message(cfg.error()) << '\n';
    return exit_config_error;
  }
  return keel::run_node(*cfg);
}
