#include "keel/logging.hpp"

#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>

namespace keel {

caf::error init_logging(const std::string& level_name,
                        const std::string& file) {
  auto level = spdlog::level::from_str(level_name);
  if (level == spdlog::level::off && level_name != "off")
    return caf::make_error(ec::config_invalid,
                           "logging.level: unknown level '" + level_name + "'");
  try {
    std::shared_ptr<spdlog::logger> logger;
    if (file.empty())
      logger = spdlog::stderr_color_mt("keel");
    else
      logger = spdlog::basic_logger_mt("keel", file);
    spdlog::drop("keel");
    spdlog::set_default_logger(logger);
  } catch (const spdlog::spdlog_ex& e) {
    return caf::make_error(ec::config_invalid, "logging.file: cannot open '"
                                                 + file + "': " + e.what());
  }
  spdlog::set_level(level);
  spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ %v");
  spdlog::flush_on(spdlog::level::warn);
  return caf::none;
}

} // namespace keel
