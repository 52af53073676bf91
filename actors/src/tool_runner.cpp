#include "keel/tool_runner.hpp"

#include <chrono>
#include <cstdlib>

#include <caf/all.hpp>

#include "keel/run_slots.hpp"
#include "keel/tool_command.hpp"

namespace keel {

caf::expected<tool_run> make_tool_run(const tool_config& tool,
                                      const tool_call& call) {
  if (auto err = check_arguments(tool.parameters, call.arguments))
    return err;
  auto argv = expand_command(tool.command, call.arguments);
  if (!argv)
    return std::move(argv.error());
  tool_run run;
  run.tool = tool.name;
  run.argv = std::move(*argv);
  run.cwd = tool.cwd;
  auto pass = [&run](const std::string& name) {
    if (auto value = std::getenv(name.c_str()))
      run.env.push_back(name + "=" + value);
  };
  pass("PATH");
  for (auto& name : tool.env)
    if (name != "PATH")
      pass(name);
  run.timeout = tool.timeout;
  run.grace = tool.grace;
  run.output_cap = tool.output_cap;
  auto& limits = tool.limits;
  run.memory_limit = limits.memory;
  run.cpu_seconds_limit = static_cast<uint64_t>(limits.cpu_time.count());
  run.open_files_limit = limits.open_files;
  run.processes_limit = limits.processes;
  run.file_size_limit = limits.file_size;
  run.uid = tool.uid;
  run.gid = tool.gid;
  return run;
}

namespace {

// The last non-empty line of `text`, cut to 200 bytes.
std::string last_line(const std::string& text) {
  auto end = text.find_last_not_of("\r\n \t");
  if (end == std::string::npos)
    return {};
  auto begin = text.find_last_of('\n', end);
  begin = begin == std::string::npos ? 0 : begin + 1;
  return text.substr(begin, std::min<size_t>(end + 1 - begin, 200));
}

process_spec make_spec(const tool_run& run) {
  using std::chrono::duration_cast;
  using std::chrono::milliseconds;
  process_spec spec;
  spec.argv = run.argv;
  spec.cwd = run.cwd;
  spec.env.emplace();
  for (auto& var : run.env) {
    auto eq = var.find('=');
    spec.env->emplace_back(var.substr(0, eq), var.substr(eq + 1));
  }
  spec.timeout = duration_cast<milliseconds>(run.timeout);
  spec.grace = duration_cast<milliseconds>(run.grace);
  spec.output_cap = run.output_cap;
  spec.limits = {run.memory_limit, run.cpu_seconds_limit, run.open_files_limit,
                 run.processes_limit, run.file_size_limit};
  spec.identity = {run.uid, run.gid};
  return spec;
}

// An outcome telling the model its tool could not run, and why.
tool_outcome failed_outcome(std::string why) {
  tool_outcome outcome;
  outcome.error = std::move(why);
  outcome.text = "[" + outcome.error + "]\n";
  return outcome;
}

// `run_tool_process` on a job thread, which must not throw (running out of
// memory there would end the node).
tool_outcome guarded_run(const tool_run& run,
                         const std::atomic<bool>* cancel) noexcept {
  try {
    if (cancel != nullptr && cancel->load()) {
      // Cancelled while it waited for a slot: never started.
      process_result never;
      never.cancelled = true;
      tool_outcome outcome;
      outcome.text = tool_result_text(run.tool, never);
      outcome.error = tool_error(run.tool, never);
      return outcome;
    }
    return run_tool_process(run, cancel);
  } catch (const std::exception& e) {
    return failed_outcome("cannot run " + run.tool + ": " + e.what());
  }
}

} // namespace

tool_outcome run_tool_process(const tool_run& run,
                              const std::atomic<bool>* cancel) {
  auto started = std::chrono::steady_clock::now();
  tool_outcome outcome;
  if (auto result = run_process(make_spec(run), cancel)) {
    outcome.text = tool_result_text(run.tool, *result);
    outcome.error = tool_error(run.tool, *result);
    outcome.timed_out = result->timed_out;
  } else {
    outcome = failed_outcome(error_message(result.error()));
  }
  outcome.took_us = static_cast<uint64_t>(
    std::chrono::duration_cast<std::chrono::microseconds>(
      std::chrono::steady_clock::now() - started)
      .count());
  return outcome;
}

std::string tool_error(const std::string& tool, const process_result& run) {
  if (run.timed_out)
    return tool + " timed out after " + std::to_string(run.took.count() / 1000)
           + " s";
  if (run.cancelled)
    return tool + " was cancelled";
  if (run.exit_code == 0)
    return {};
  auto line = last_line(run.err);
  return tool + " exited with status " + std::to_string(run.exit_code)
         + (line.empty() ? "" : ": " + line);
}

namespace {

using runner_ptr = tool_runner_actor::stateful_pointer<tool_runner_state>;

// Hands `run` to a job thread once a tool slot is free
// (`threads.max_concurrent_tools`); the job reports to the runner (its
// handle keeps the runner alive until then). If no thread can start,
// answers now.
void start_run(runner_ptr self, tool_run run) {
  auto& st = self->state;
  auto me = caf::actor_cast<tool_runner_actor>(self);
  auto tool = run.tool;
  try {
    tool_run_slots().post([me, run = std::move(run), cancel = st.cancel] {
      caf::anon_send(me, atom::report_v, guarded_run(run, cancel.get()));
    });
  } catch (const std::exception& e) {
    st.answer.deliver(failed_outcome("cannot run " + tool + ": " + e.what()));
    self->quit();
  }
}

} // namespace

tool_runner_actor::behavior_type
tool_runner(runner_ptr self, std::shared_ptr<const std::atomic<bool>> cancel) {
  self->state.cancel = std::move(cancel);
  return {
    [self](atom::run, tool_run& run) {
      self->state.answer = self->make_response_promise<tool_outcome>();
      start_run(self, std::move(run));
      return self->state.answer;
    },
    [self](atom::report, tool_outcome& outcome) {
      self->state.answer.deliver(std::move(outcome));
      self->quit();
    },
  };
}

} // namespace keel
