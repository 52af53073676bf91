#include "keel/logging.hpp"

#include <charconv>
#include <chrono>
#include <csignal>
#include <ctime>
#include <filesystem>
#include <limits>
#include <utility>

#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>

#include "keel/redact.hpp"

namespace keel {

// -- scopes -------------------------------------------------------------------

namespace log_detail {

// The innermost scope alive on this thread.
thread_local const log_scope* innermost = nullptr;

} // namespace log_detail

log_scope::log_scope(std::string_view component) noexcept {
  context_.component = component;
  if (auto outer = log_detail::innermost) {
    context_.thread = outer->context().thread;
    context_.message = outer->context().message;
  }
  enter();
}

log_scope::log_scope(std::string_view component, std::string thread) noexcept
  : thread_(std::move(thread)) {
  context_.component = component;
  context_.thread = thread_;
  enter();
}

log_scope::log_scope(std::string_view component, std::string thread,
                     uint64_t message) noexcept
  : thread_(std::move(thread)) {
  context_.component = component;
  context_.thread = thread_;
  if (!thread_.empty()) // A number means nothing without its thread.
    context_.message = message;
  enter();
}

void log_scope::enter() noexcept {
  previous_ = log_detail::innermost;
  log_detail::innermost = this;
}

log_scope::~log_scope() {
  log_detail::innermost = previous_;
}

log_context current_log_context() noexcept {
  if (auto scope = log_detail::innermost)
    return scope->context();
  return log_context{log_component::node, {}, std::nullopt};
}

// -- formats ------------------------------------------------------------------

namespace log_detail {

// Today's line: local time, level, text.
constexpr const char* text_pattern = "%Y-%m-%dT%H:%M:%S.%e %^%l%$ %v";

void append(spdlog::memory_buf_t& out, std::string_view s) {
  out.append(s.data(), s.data() + s.size());
}

void append_number(spdlog::memory_buf_t& out, uint64_t n) {
  char digits[24];
  auto end = std::to_chars(digits, digits + sizeof(digits), n).ptr;
  out.append(digits, end);
}

// The length of the well-formed UTF-8 sequence of 2 to 4 bytes at s[i]; or,
// if there is none, minus the length of the ill-formed part to replace (its
// lead byte and the continuation bytes that fit it: Unicode's "maximal
// subpart", one U+FFFD each).
int utf8_sequence(std::string_view s, size_t i) {
  auto byte = [&](size_t k) -> unsigned {
    return i + k < s.size() ? static_cast<unsigned char>(s[i + k]) : 0u;
  };
  auto lead = byte(0);
  int length = 0;
  unsigned lo = 0x80;
  unsigned hi = 0xBF;
  if (lead >= 0xC2 && lead <= 0xDF) {
    length = 2;
  } else if (lead == 0xE0) {
    length = 3;
    lo = 0xA0; // No overlong forms.
  } else if ((lead >= 0xE1 && lead <= 0xEC) || lead == 0xEE || lead == 0xEF) {
    length = 3;
  } else if (lead == 0xED) {
    length = 3;
    hi = 0x9F; // No surrogates.
  } else if (lead == 0xF0) {
    length = 4;
    lo = 0x90; // No overlong forms.
  } else if (lead >= 0xF1 && lead <= 0xF3) {
    length = 4;
  } else if (lead == 0xF4) {
    length = 4;
    hi = 0x8F; // Nothing past U+10FFFF.
  } else {
    return -1; // A stray continuation byte, C0, C1 or F5..FF.
  }
  for (int k = 1; k < length; ++k) {
    auto b = byte(static_cast<size_t>(k)); // 0 past the end: not continuation.
    if (b < lo || b > hi)
      return -k;
    lo = 0x80;
    hi = 0xBF;
  }
  return length;
}

// `s` as a JSON string: quotes, backslashes and control characters escaped,
// UTF-8 kept, ill-formed UTF-8 replaced by U+FFFD.
void append_json_string(spdlog::memory_buf_t& out, std::string_view s) {
  static constexpr char hex[] = "0123456789abcdef";
  static constexpr std::string_view replacement = "\xEF\xBF\xBD";
  out.push_back('"');
  size_t i = 0;
  while (i < s.size()) {
    auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x80) {
      auto n = utf8_sequence(s, i);
      if (n > 0) {
        append(out, s.substr(i, static_cast<size_t>(n)));
        i += static_cast<size_t>(n);
      } else {
        append(out, replacement);
        i += static_cast<size_t>(-n);
      }
      continue;
    }
    ++i;
    switch (c) {
      case '"': append(out, "\\\""); break;
      case '\\': append(out, "\\\\"); break;
      case '\n': append(out, "\\n"); break;
      case '\r': append(out, "\\r"); break;
      case '\t': append(out, "\\t"); break;
      case '\b': append(out, "\\b"); break;
      case '\f': append(out, "\\f"); break;
      default:
        if (c < 0x20) {
          append(out, "\\u00");
          out.push_back(hex[c >> 4]);
          out.push_back(hex[c & 0xF]);
        } else {
          out.push_back(static_cast<char>(c));
        }
    }
  }
  out.push_back('"');
}

std::string_view level_name(spdlog::level::level_enum level) {
  switch (level) {
    case spdlog::level::trace: return "trace";
    case spdlog::level::debug: return "debug";
    case spdlog::level::info: return "info";
    case spdlog::level::warn: return "warn";
    case spdlog::level::err: return "error";
    case spdlog::level::critical: return "critical";
    default: return "off";
  }
}

// One JSON object per event and line: time (UTC, ms), level, node,
// component, thread and message (when known), text. Only these: nothing
// else of the node (no configuration) goes into an event.
class json_formatter final : public spdlog::formatter {
public:
  explicit json_formatter(std::string node) : node_(std::move(node)) {
    // nop
  }

  void format(const spdlog::details::log_msg& msg,
              spdlog::memory_buf_t& out) override {
    auto ctx = current_log_context();
    append(out, "{\"time\":\"");
    append_time(out, msg.time);
    append(out, "\",\"level\":\"");
    append(out, level_name(msg.level));
    append(out, "\",\"node\":");
    append_json_string(out, node_);
    append(out, ",\"component\":");
    append_json_string(out, ctx.component);
    if (!ctx.thread.empty()) {
      append(out, ",\"thread\":");
      append_json_string(out, ctx.thread);
    }
    if (ctx.message) {
      append(out, ",\"message\":");
      append_number(out, *ctx.message);
    }
    append(out, ",\"text\":");
    append_json_string(out, std::string_view{msg.payload.data(),
                                             msg.payload.size()});
    append(out, "}\n");
  }

  std::unique_ptr<spdlog::formatter> clone() const override {
    return std::make_unique<json_formatter>(node_);
  }

private:
  // RFC 3339 in UTC with milliseconds, without the quotes:
  // 2026-11-27T14:03:05.123Z. The part up to the seconds is kept for the
  // events of the same second.
  void append_time(spdlog::memory_buf_t& out,
                   spdlog::log_clock::time_point at) {
    using namespace std::chrono;
    auto ms = duration_cast<milliseconds>(at.time_since_epoch()).count();
    auto secs = ms / 1000;
    auto frac = ms % 1000;
    if (frac < 0) {
      frac += 1000;
      secs -= 1;
    }
    if (secs != cached_secs_) {
      auto t = static_cast<std::time_t>(secs);
      std::tm tm{};
      gmtime_r(&t, &tm);
      auto n = std::strftime(cached_, sizeof(cached_), "%Y-%m-%dT%H:%M:%S",
                             &tm);
      cached_length_ = n;
      cached_secs_ = secs;
    }
    out.append(cached_, cached_ + cached_length_);
    char tail[] = {'.', static_cast<char>('0' + frac / 100),
                   static_cast<char>('0' + frac / 10 % 10),
                   static_cast<char>('0' + frac % 10), 'Z'};
    out.append(tail, tail + sizeof(tail));
  }

  std::string node_;
  int64_t cached_secs_ = std::numeric_limits<int64_t>::min();
  char cached_[32] = {};
  size_t cached_length_ = 0;
};

// Formats each event through `inner` with its text's secrets redacted: a
// provider's or channel's error quoting a key is logged without it.
class redacting_formatter final : public spdlog::formatter {
public:
  redacting_formatter(std::unique_ptr<spdlog::formatter> inner,
                      std::shared_ptr<const std::vector<std::string>> secrets)
    : inner_(std::move(inner)), secrets_(std::move(secrets)) {
    // nop
  }

  void format(const spdlog::details::log_msg& msg,
              spdlog::memory_buf_t& out) override {
    auto text = redact({msg.payload.data(), msg.payload.size()}, *secrets_);
    auto clean = msg;
    clean.payload = spdlog::string_view_t{text.data(), text.size()};
    inner_->format(clean, out);
  }

  std::unique_ptr<spdlog::formatter> clone() const override {
    return std::make_unique<redacting_formatter>(inner_->clone(), secrets_);
  }

private:
  std::unique_ptr<spdlog::formatter> inner_;
  std::shared_ptr<const std::vector<std::string>> secrets_;
};

} // namespace log_detail

std::unique_ptr<spdlog::formatter> make_log_formatter(std::string_view format,
                                                      std::string node) {
  if (format == "text")
    return std::make_unique<spdlog::pattern_formatter>(
      log_detail::text_pattern);
  if (format == "json")
    return std::make_unique<log_detail::json_formatter>(std::move(node));
  return nullptr;
}

// -- setup --------------------------------------------------------------------

namespace {

// Flushes the sinks every second, so `tail -f` and a crash lose little
// (spdlog's flusher thread flushes the registered loggers, the default one
// too). The thread starts with every signal blocked: the node takes
// SIGTERM and SIGINT on a thread of its own, and a thread that could take
// them would let their default action end the process.
void start_flusher() {
  sigset_t all;
  sigset_t old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  spdlog::flush_every(std::chrono::seconds{1});
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
}

// Makes the folder of log file `file` (if it has one and it is missing)
// its owner's only, 0700; a failure is left to the sink to report.
void make_private_folder(const std::string& file) {
  namespace fs = std::filesystem;
  auto dir = fs::path{file}.parent_path();
  std::error_code err;
  if (!dir.empty() && fs::create_directories(dir, err))
    fs::permissions(dir, fs::perms::owner_all, err);
}

} // namespace

caf::error init_logging(const logging_config& cfg, const std::string& node,
                        std::vector<std::string> secrets) {
  auto level = spdlog::level::from_str(cfg.level);
  if (level == spdlog::level::off && cfg.level != "off")
    return caf::make_error(ec::config_invalid,
                           "logging.level: unknown level '" + cfg.level + "'");
  auto formatter = make_log_formatter(cfg.format, node);
  if (!formatter)
    return caf::make_error(ec::config_invalid,
                           "logging.format: unknown format '" + cfg.format
                             + "' (text or json)");
  // Made here rather than by spdlog's registry, which refuses a second
  // logger of the same name: init_logging may run again (tests do).
  std::shared_ptr<spdlog::logger> logger;
  make_private_folder(cfg.file);
  try {
    spdlog::sink_ptr sink;
    if (cfg.file.empty())
      sink = std::make_shared<spdlog::sinks::stderr_color_sink_mt>();
    else
      sink = std::make_shared<spdlog::sinks::basic_file_sink_mt>(cfg.file);
    logger = std::make_shared<spdlog::logger>("keel", std::move(sink));
  } catch (const spdlog::spdlog_ex& e) {
    return caf::make_error(ec::config_invalid, "logging.file: cannot open '"
                                                 + cfg.file + "': " + e.what());
  }
  // Synchronous on purpose: the formats read the caller's log_scope.
  if (auto list = secret_list(std::move(secrets)); !list.empty())
    formatter = std::make_unique<log_detail::redacting_formatter>(
      std::move(formatter),
      std::make_shared<const std::vector<std::string>>(std::move(list)));
  logger->set_formatter(std::move(formatter));
  logger->set_level(level);
  logger->flush_on(spdlog::level::warn);
  spdlog::set_default_logger(logger);
  spdlog::set_level(level);
  spdlog::flush_on(spdlog::level::warn);
  start_flusher();
  return caf::none;
}

} // namespace keel
