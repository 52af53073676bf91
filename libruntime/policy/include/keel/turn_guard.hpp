#pragma once

// The safety guard of one message's turn loop (model -> tool calls ->
// results -> model ...): hard limits the model cannot lift, and loop
// detection. A pure state machine: the caller reports each step with the
// time by its own clock and acts on the verdict. Once the guard stopped a
// turn it stays stopped; its stop is final (a provider pool never retries
// it).

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>

namespace keel {

/// The guard's limits (`threads.guard:`); the defaults are the safety
/// guard's of the runtime Keel's turn loop follows.
struct guard_limits {
  /// Steps of one message's turn (model answers, tool calls, tool
  /// results).
  uint64_t max_events = 2000;
  /// Tool calls of one message's turn.
  uint64_t max_tool_calls = 400;
  /// Wall clock time of one message's turn.
  std::chrono::milliseconds max_duration = std::chrono::minutes{10};
  /// Calls of one tool in one message's turn, by tool name.
  std::map<std::string, uint64_t> per_tool = {
    {"edit_file", 8},
    {"delete_file", 3},
    {"run_command", 10},
    {"web_search", 8},
    {"run_terminal_command", 100},
  };
  /// The same tool with the same arguments this many times in a row is a
  /// loop: stopped.
  uint64_t repeated_call_limit = 4;
  /// The same tool error this many times in a row: stopped (retrying
  /// cannot help; the owner should look).
  uint64_t repeated_error_limit = 3;
  /// More calls than this on one target (the value of a tool's loop key:
  /// the file it edits) in one message's turn are a file loop: stopped.
  uint64_t file_loop_limit = 4;
  /// The argument naming a call's target, by tool name (`tools[].loop_key`,
  /// filled in from the tools, not a key of `threads.guard`).
  std::map<std::string, std::string> loop_keys;
  /// More near-identical model answers in a row than this: the model is
  /// told to try a different approach.
  uint64_t similar_reply_limit = 2;
};

/// Why the guard stopped a turn.
enum class guard_reason {
  events,
  tool_calls,
  duration,
  tool_cap,
  repeated_call,
  repeated_error,
  file_loop,
};

/// "events", "tool_calls", ... (for status events and logs).
const char* to_string(guard_reason reason);

/// A stopped turn: why, and the report that ends the message.
struct guard_stop {
  guard_reason reason;
  /// "Forced stop: reached maximum of 400 tool invocations. Events
  /// processed: 1,247 | Tool calls: 400 | Elapsed: 7m 23s. Please review
  /// the work completed so far."
  std::string report;
};

/// What the model is told when it repeats itself (`turn_guard::on_reply`).
constexpr const char* different_approach_note
  = "Your last answers were nearly identical and did not make progress. "
    "Try a different approach.";

/// The guard of one message's turn.
class turn_guard {
public:
  using time_point = std::chrono::steady_clock::time_point;

  /// `limits` are shared: every turn of every thread reads the node's one
  /// copy.
  turn_guard(std::shared_ptr<const guard_limits> limits, time_point started);

  /// The model answered with `text` (tool calls or not). Returns the stop
  /// if a limit is reached. Sets `nudge` when the answer is the latest of
  /// more than `similar_reply_limit` near-identical ones in a row: the
  /// caller adds `different_approach_note` for the model.
  std::optional<guard_stop> on_reply(const std::string& text, time_point now,
                                     bool& nudge);

  /// The model asked for `tool` with `arguments` (as it sent them) on
  /// `target` (the value of the tool's loop key; empty: none). Returns the
  /// stop if the call must not run.
  std::optional<guard_stop>
  on_tool_call(const std::string& tool, const std::string& arguments,
               time_point now, const std::string& target = {});

  /// A tool call ended: `error` is empty on success, else what failed
  /// (exit status, timeout, ...). Returns the stop if the same error came
  /// `repeated_error_limit` times in a row.
  std::optional<guard_stop> on_tool_result(const std::string& tool,
                                           const std::string& error,
                                           time_point now);

  /// The stop, once there is one.
  const std::optional<guard_stop>& stopped() const {
    return stop_;
  }

  uint64_t events() const {
    return events_;
  }

  uint64_t tool_calls() const {
    return tool_calls_;
  }

private:
  // Counts one step; the stop of the global limits, if one is reached.
  std::optional<guard_stop> count_event(time_point now);

  // Records `reason` with `what` (the first sentence) and returns it.
  std::optional<guard_stop> stop(guard_reason reason, const std::string& what,
                                 time_point now);

  std::shared_ptr<const guard_limits> limits_;
  time_point started_;
  uint64_t events_ = 0;
  uint64_t tool_calls_ = 0;
  std::map<std::string, uint64_t> calls_by_tool_;
  std::map<std::string, uint64_t> calls_by_target_;
  std::string last_call_;
  uint64_t same_calls_ = 0;
  std::string last_error_;
  uint64_t same_errors_ = 0;
  std::string last_reply_;
  uint64_t similar_replies_ = 0;
  std::optional<guard_stop> stop_;
};

/// Whether two model answers are near-identical: equal once lowercased
/// with runs of whitespace and digits collapsed, or sharing at least 90 %
/// of their word pairs (Jaccard similarity of word bigrams).
bool near_identical(const std::string& x, const std::string& y);

/// "1,247": `n` with thousands separators.
std::string with_separators(uint64_t n);

/// "7m 23s": a duration in whole minutes and seconds.
std::string minutes_and_seconds(std::chrono::milliseconds d);

} // namespace keel
