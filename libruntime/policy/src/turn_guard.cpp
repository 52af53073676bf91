#include "keel/turn_guard.hpp"

#include <algorithm>
#include <cctype>
#include <set>
#include <vector>

namespace keel {

const char* to_string(guard_reason reason) {
  switch (reason) {
    case guard_reason::events: return "events";
    case guard_reason::tool_calls: return "tool_calls";
    case guard_reason::duration: return "duration";
    case guard_reason::tool_cap: return "tool_cap";
    case guard_reason::repeated_call: return "repeated_call";
    case guard_reason::repeated_error: return "repeated_error";
    case guard_reason::file_loop: return "file_loop";
  }
  return "unknown";
}

std::string with_separators(uint64_t n) {
  auto digits = std::to_string(n);
  std::string result;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0)
      result += ',';
    result += digits[i];
  }
  return result;
}

std::string minutes_and_seconds(std::chrono::milliseconds d) {
  auto secs = std::chrono::duration_cast<std::chrono::seconds>(d).count();
  if (secs < 0)
    secs = 0;
  return std::to_string(secs / 60) + "m " + std::to_string(secs % 60) + "s";
}

// -- near-identical answers ---------------------------------------------------

namespace {

// Lowercased words, with every run of digits as '#'.
std::vector<std::string> normalized_words(const std::string& text) {
  std::vector<std::string> words;
  std::string word;
  auto flush = [&] {
    if (!word.empty())
      words.push_back(std::move(word));
    word.clear();
  };
  for (unsigned char c : text) {
    if (std::isspace(c)) {
      flush();
    } else if (std::isdigit(c)) {
      if (word.empty() || word.back() != '#')
        word += '#';
    } else {
      word += static_cast<char>(std::tolower(c));
    }
  }
  flush();
  return words;
}

std::set<std::string> bigrams(const std::vector<std::string>& words) {
  std::set<std::string> result;
  for (size_t i = 1; i < words.size(); ++i)
    result.insert(words[i - 1] + ' ' + words[i]);
  return result;
}

} // namespace

bool near_identical(const std::string& x, const std::string& y) {
  auto xs = normalized_words(x);
  auto ys = normalized_words(y);
  if (xs == ys)
    return true;
  auto a = bigrams(xs);
  auto b = bigrams(ys);
  if (a.empty() || b.empty())
    return false;
  size_t shared = 0;
  for (auto& pair : a)
    shared += b.count(pair);
  auto all = a.size() + b.size() - shared;
  return shared * 10 >= all * 9;
}

// -- the guard ----------------------------------------------------------------

turn_guard::turn_guard(std::shared_ptr<const guard_limits> limits,
                       time_point started)
  : limits_(std::move(limits)), started_(started) {
  // nop
}

std::optional<guard_stop>
turn_guard::stop(guard_reason reason, const std::string& what, time_point now) {
  auto elapsed
    = std::chrono::duration_cast<std::chrono::milliseconds>(now - started_);
  stop_ = guard_stop{reason, "Forced stop: " + what + ". Events processed: "
                               + with_separators(events_) + " | Tool calls: "
                               + with_separators(tool_calls_)
                               + " | Elapsed: " + minutes_and_seconds(elapsed)
                               + ". Please review the work completed so far."};
  return stop_;
}

std::optional<guard_stop> turn_guard::count_event(time_point now) {
  if (stop_)
    return stop_;
  if (now - started_ >= limits_->max_duration)
    return stop(guard_reason::duration,
                "reached the time limit of "
                  + minutes_and_seconds(limits_->max_duration),
                now);
  if (events_ >= limits_->max_events)
    return stop(guard_reason::events,
                "reached maximum of " + with_separators(limits_->max_events)
                  + " events",
                now);
  ++events_;
  return std::nullopt;
}

std::optional<guard_stop> turn_guard::on_reply(const std::string& text,
                                               time_point now, bool& nudge) {
  nudge = false;
  if (auto stopped = count_event(now))
    return stopped;
  if (text.empty() || last_reply_.empty() || !near_identical(text, last_reply_))
    similar_replies_ = text.empty() ? 0 : 1;
  else
    ++similar_replies_;
  last_reply_ = text;
  if (similar_replies_ > limits_->similar_reply_limit) {
    nudge = true;
    similar_replies_ = 1; // Another run of them is needed for the next note.
  }
  return std::nullopt;
}

std::optional<guard_stop>
turn_guard::on_tool_call(const std::string& tool, const std::string& arguments,
                         time_point now, const std::string& target) {
  if (auto stopped = count_event(now))
    return stopped;
  if (tool_calls_ >= limits_->max_tool_calls)
    return stop(guard_reason::tool_calls,
                "reached maximum of " + with_separators(limits_->max_tool_calls)
                  + " tool invocations",
                now);
  if (auto cap = limits_->per_tool.find(tool);
      cap != limits_->per_tool.end() && calls_by_tool_[tool] >= cap->second)
    return stop(guard_reason::tool_cap,
                "reached maximum of " + with_separators(cap->second) + " "
                  + tool + " invocations",
                now);
  auto call = tool + '\0' + arguments;
  same_calls_ = call == last_call_ ? same_calls_ + 1 : 1;
  last_call_ = std::move(call);
  if (same_calls_ >= limits_->repeated_call_limit)
    return stop(guard_reason::repeated_call,
                tool + " was called " + std::to_string(same_calls_)
                  + " times in a row with the same arguments",
                now);
  if (!target.empty()) {
    auto n = ++calls_by_target_[tool + '\0' + target];
    if (n > limits_->file_loop_limit)
      return stop(guard_reason::file_loop,
                  tool + " was called " + std::to_string(n) + " times on "
                    + target + " (a file loop)",
                  now);
  }
  ++tool_calls_;
  ++calls_by_tool_[tool];
  return std::nullopt;
}

std::optional<guard_stop> turn_guard::on_tool_result(const std::string& tool,
                                                     const std::string& error,
                                                     time_point now) {
  if (auto stopped = count_event(now))
    return stopped;
  if (error.empty()) {
    same_errors_ = 0;
    last_error_.clear();
    return std::nullopt;
  }
  auto failure = tool + ": " + error;
  same_errors_ = failure == last_error_ ? same_errors_ + 1 : 1;
  last_error_ = std::move(failure);
  if (same_errors_ >= limits_->repeated_error_limit)
    return stop(guard_reason::repeated_error,
                "the same tool error " + std::to_string(same_errors_)
                  + " times in a row (" + last_error_ + ")",
                now);
  return std::nullopt;
}

} // namespace keel
