#pragma once

// Tool calls as subprocesses: from a configured tool and the model's call
// to a `tool_run` (pure, so tested by table), and the runner actor that
// runs it on one of the process's job threads.

#include <atomic>
#include <memory>

#include <caf/expected.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_response_promise.hpp>

#include "keel/actors.hpp"
#include "keel/config.hpp"
#include "keel/run_process.hpp"

namespace keel {

/// The run of `call` with `tool`: the argv template expanded with the
/// call's arguments, the environment of the tool's allow-list (`PATH`
/// always, so a tool's own scripts find their programs) read from ours.
/// Fails with `ec::provider_bad_answer` naming what is wrong with the
/// call's arguments.
caf::expected<tool_run> make_tool_run(const tool_config& tool,
                                      const tool_call& call);

/// Runs `run` to completion on the calling thread (blocking it); `cancel`
/// ends it early when set.
tool_outcome run_tool_process(const tool_run& run,
                              const std::atomic<bool>* cancel = nullptr);

/// What failed in `run`, in one line; empty if it succeeded.
std::string tool_error(const std::string& tool, const process_result& run);

/// State of a tool runner.
struct tool_runner_state {
  static inline const char* name = "keel.tool_runner";
  /// Set by the spawner to end the run early (SIGTERM, then SIGKILL, to
  /// the whole process group).
  std::shared_ptr<const std::atomic<bool>> cancel;
  /// The answer to the `run`, once its job reports.
  caf::typed_response_promise<tool_outcome> answer;
};

/// Runs the tool on `tool_run_slots()` (a job thread, once a slot is
/// free), whose thread is blocked until the tool's processes are gone (the
/// runner itself is an ordinary actor).
/// Answers one `run`, then quits.
tool_runner_actor::behavior_type
tool_runner(tool_runner_actor::stateful_pointer<tool_runner_state> self,
            std::shared_ptr<const std::atomic<bool>> cancel);

} // namespace keel
