#include "keel/conversation_parts.hpp"

#include <algorithm>
#include <atomic>
#include <memory>

#include "keel/kill_point.hpp"
#include "keel/text.hpp"
#include "keel/tool_runner.hpp"

// Tool runs: the running turn asks for a call (`run_tool`), the call runs
// as a subprocess on a job thread, and its outcome goes back to the turn
// (`tool_finished`), which commits it as a step before the model sees it.

namespace keel::conversation_parts {

namespace {

// A tool call ended (or could not run): its result goes to the turn, which
// commits it (`commit_result`, see `make_result_step`) before the model
// sees it. `counts_failure`: a configured tool ran and failed. The user
// hears of a timeout (status `tool_timed_out`) as the result is stored.
void tool_done(self_ptr self, const tool_call& call, tool_outcome outcome,
               bool counts_failure) {
  reach(kill_point::tool_finished);
  self->state.tool_cancel.reset();
  if (outcome.timed_out)
    self->state.notices.push_back({"tool_timed_out", outcome.error});
  feed(self, tool_finished{call,
                           tool_result{std::move(outcome.text),
                                       std::move(outcome.error)},
                           counts_failure, std::chrono::steady_clock::now(),
                           self->state.closing});
}

} // namespace

// Runs `call` as a subprocess on a job thread; a call of a tool the
// thread lacks, or with arguments that do not fit, fails without running.
void run_tool(self_ptr self, const tool_call& call) {
  auto& st = self->state;
  auto& tools = st.tools();
  auto tool = std::find_if(tools.begin(), tools.end(),
                           [&call](auto& x) { return x.name == call.name; });
  if (tool == tools.end() || st.tool_disabled(call.name)) {
    auto why = "no tool named " + call.name + " is available here";
    tool_done(self, call, tool_outcome{"[" + why + "]", why, false, 0}, false);
    return;
  }
  auto run = make_tool_run(*tool, call);
  if (!run) {
    auto why = error_message(run.error());
    tool_done(self, call, tool_outcome{"[" + why + "]", why, false, 0}, true);
    return;
  }
  // The turn's time bounds the run too.
  if (auto left = st.turn_time_left(); left.count() > 0)
    run->timeout = std::min<caf::timespan>(run->timeout, left);
  reach(kill_point::tool_call_committed);
  st.tool_cancel = std::make_shared<std::atomic<bool>>(false);
  auto runner = self->spawn(tool_runner, st.tool_cancel);
  // The runner ends the run at the tool's timeout; ours only fires if the
  // runner cannot answer at all.
  self
    ->request(runner, run->timeout + run->grace + turn_timeout_grace,
              atom::run_v, *run)
    .then(
      [self, call](tool_outcome& outcome) {
        tool_done(self, call, std::move(outcome), true);
      },
      [self, call](caf::error& err) {
        auto why = call.name + " could not be run: " + render(err);
        tool_done(self, call, tool_outcome{"[" + why + "]", why, false, 0},
                  true);
      });
  // Once the tool is on its way (its outcome comes back through our own
  // mailbox, after this frame): the status frame's cost is not the run's.
  turn_status(self, "tool", "running " + call.name);
}

} // namespace keel::conversation_parts
