// The runner of the seeded crash fuzzer (see crash_fuzz.hpp).

#include "keel/tools/crash_fuzz.hpp"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
#include <iostream>
#include <memory>
#include <set>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "keel/protocol.hpp"
#include "keel/tools/chaos_oracle.hpp"
#include "keel/tools/json_fields.hpp"
#include "keel/tools/node_process.hpp"
#include "keel/tools/process.hpp"
#include "keel/tools/ws_client.hpp"

namespace keel::fuzz {

namespace {

using clock_type = std::chrono::steady_clock;
using json = nlohmann::json;
using namespace std::chrono_literals;

/// How long one operation may wait for its answer.
constexpr auto op_timeout = 30s;

/// Errors after which a send is safe and right to repeat (docs/protocol.md).
bool transient(const std::string& code) {
  return code == "unavailable" || code == "overloaded" || code == "storage_io"
         || code == "internal" || code == "timeout";
}

/// Opens a WebSocket client to the node and consumes its hello frame;
/// throws when either fails.
std::unique_ptr<ws_client> connect_client(const endpoint& ep) {
  auto client = ws_client::connect(ep);
  if (!client)
    throw std::runtime_error("cannot connect: " + render(client.error()));
  auto hello = (*client)->receive();
  if (!hello)
    throw std::runtime_error("no hello: " + render(hello.error()));
  return std::move(*client);
}

/// One log entry as history (and reply/error) frames show it: the outside
/// record's, whose checks (`chaos::check`) the fuzzer shares with keel-chaos.
using entry = chaos::history_entry;
using chaos::is_outcome;

/// Whether `x` and `y` are the same entry, field by field.
bool same_entry(const entry& x, const entry& y) {
  return x.seq == y.seq && x.kind == y.kind && x.client_id == y.client_id
         && x.reply_to == y.reply_to && x.text == y.text && x.code == y.code;
}

entry entry_from_history(const json& j) {
  return entry{json_number(j, {"seq"}),     json_string(j, "kind"),
               json_string(j, "client_id"), json_number(j, {"reply_to"}),
               json_string(j, "text"),      json_string(j, "code")};
}

std::string to_string(const entry& e) {
  std::string result = "#" + std::to_string(e.seq) + " " + e.kind + " "
                       + e.client_id;
  if (e.reply_to != 0)
    result += " ->#" + std::to_string(e.reply_to);
  if (!e.code.empty())
    result += " [" + e.code + "]";
  auto text = e.text.size() > 60 ? e.text.substr(0, 57) + "..." : e.text;
  return result + " \"" + text + "\"";
}

// The client frames the fuzzer sends beyond plain sends, behind one function
// each (the encoders of keel/protocol.hpp).
std::string spawn_request(const op& x) {
  return protocol::spawn_frame(x.thread, x.child, x.id);
}

std::string cancel_request(const op& x) {
  return protocol::cancel_frame(x.thread, x.id);
}

// -- the node's model and tool ----------------------------------------------

/// The folder (in a node's folder) where the tool leaves its marks.
std::string marks_dir(const std::string& node_dir) {
  return node_dir + "/marks";
}

/// What the tool prints, its result, for a message whose text is `text`
/// (`message_text`): "marked" and the text's second word, the message's id.
std::string tool_output(const std::string& text) {
  std::istringstream words{text};
  std::string first;
  std::string second;
  words >> first >> second;
  return "marked " + second + "\n";
}

/// The tool result that says the call was cut by a restart.
bool interrupted_result(const std::string& text) {
  return text.find("interrupted by a restart") != std::string::npos;
}

/// The tool result of a call cut by a cancel of its thread.
bool cancelled_result(const std::string& text) {
  return text.find("[mark was cancelled and stopped]") != std::string::npos;
}

/// The `tools:` section: `mark`, a shell line (`sh -c SCRIPT mark DIR
/// TEXT`, builtins only) that appends TEXT as a line to file DIR/TEXT (a
/// message's text has no `/`), then prints `tool_output`, which never holds
/// `tool_trigger`: the model does not call the tool again for its result.
std::string tools_yaml(const std::string& marks) {
  auto quoted = [](const std::string& x) { return json(x).dump(); };
  const std::string script = R"sh(printf '%s\n' "$2" >> "$1/$2"; )sh"
                             R"sh(set -- $2; printf 'marked %s\n' "$2")sh";
  return "tools:\n  - name: mark\n"
         "    description: Leaves a mark for a message and says it aloud.\n"
         "    parameters:\n      type: object\n"
         "      properties:\n        text: {type: string}\n"
         "      required: [text]\n"
         "    command: [sh, -c, "
         + quoted(script) + ", mark, " + quoted(marks) + ", \"{text}\"]\n";
}

/// The node's config: data in `dir`/data, a scripted model answering
/// "answer to {input}" after `delay` (the last user message or tool
/// result), and, `with_tools`, calling `mark` for a message holding
/// `tool_trigger`, with a context window of 1,024 tokens, and answering a
/// summary request with "they talked"; `extra` is appended as is, and so
/// is `storage`, the `storage:` section (`store_access::storage_yaml`).
std::string node_yaml(const std::string& name, const std::string& dir,
                      const std::string& delay, bool with_tools,
                      const std::string& extra, const std::string& storage) {
  auto quoted = [](const std::string& x) { return json(x).dump(); };
  std::string loop_steps;
  if (with_tools)
    // A compaction's summary request is the only one whose input is a
    // transcript ("user: ...").
    loop_steps
      = "    context_window: 1024\n    script:\n"
        "      - match: \"user: \"\n        reply: \"they talked\"\n"
        "      - match: "
        + quoted(tool_trigger)
        + "\n        reply: \"\"\n        tool: {name: mark, arguments: "
        + quoted(R"({"text": "{input}"})") + "}\n        delay: " + delay
        + "\n";
  else
    loop_steps = "    script:\n";
  return "node:\n  name: " + name + "\n  data_dir: " + dir
         + "/data\ngateway:\n  port: 0\n  rate_limit:\n    per_second: 0\n"
           "providers:\n  - name: fuzz-model\n    kind: scripted\n"
         + loop_steps + "      - reply: \"answer to {input}\"\n        delay: "
         + delay + "\npools:\n  - name: default\n    chain: [fuzz-model]\n"
         + (with_tools ? tools_yaml(marks_dir(dir)) : std::string{}) + storage
         + extra;
}

/// What the fuzzer knows of one thread's log and frames, beside the outside
/// record (acknowledgements, refusals, outcomes seen: `chaos::record`).
struct thread_record {
  /// The log as last read from the node (history frames).
  std::vector<entry> log;
  /// Outcome frames (reply, error with reply_to) seen live, by seq.
  std::map<uint64_t, entry> observed;
  /// reply_to -> seq of the outcome frames seen live.
  std::map<uint64_t, uint64_t> observed_outcome_of;
};

/// How a wait for the node ended.
enum class status { ok, died, failed };

class runner {
public:
  runner(const fuzz_options& opts, fuzz_stats& stats, std::string argv0)
    : opts_(opts),
      stats_(stats),
      argv0_(std::move(argv0)),
      sabotage_(opts.sabotage) {
    // nop
  }

  ~runner() {
    ws_.reset();
    node_.reset();
    ::unsetenv("KEEL_KILL_AT");
    // A sabotaged run fails on purpose: nothing to look at afterwards.
    if (remove_work_dir_ && (failures_.empty() || !opts_.sabotage.empty())) {
      std::error_code ignored;
      std::filesystem::remove_all(work_dir_, ignored);
    }
  }

  int run() {
    auto started = clock_type::now();
    if (!setup())
      return finish(started);
    gen_ = std::make_unique<generator>(opts_.seed, stats_.used, opts_.shape);
    for (uint64_t i = 0; i < opts_.iterations; ++i) {
      if (opts_.duration.count() > 0
          && clock_type::now() - started >= opts_.duration) {
        say("duration of " + std::to_string(opts_.duration.count())
            + " s reached after " + std::to_string(i) + " iterations");
        break;
      }
      auto plan = gen_->next();
      if (plan.first_of_generation
          && ((plan.index > 0 && !checkpoint()) || !new_generation(plan)))
        return finish(started);
      if (!run_iteration(plan))
        return finish(started);
      ++stats_.iterations;
      if ((i + 1) % opts_.verify_every == 0 && i + 1 < opts_.iterations
          && !checkpoint())
        return finish(started);
    }
    checkpoint();
    if (failures_.empty() && opts_.require_all)
      require_all();
    return finish(started);
  }

private:
  // -- output -----------------------------------------------------------------

  void say(const std::string& line) {
    std::cerr << "keel-crash-fuzz: " << line << std::endl;
  }

  void violation(const std::string& what) {
    ++stats_.violations;
    failures_.push_back(what);
  }

  int finish(clock_type::time_point started) {
    stats_.seconds
      = std::chrono::duration<double>(clock_type::now() - started).count();
    if (failures_.empty())
      return 0;
    report_failure();
    return 1;
  }

  void report_failure() {
    std::ostringstream out;
    out << "\n==== CRASH FUZZ FAILED (seed " << opts_.seed << ", iteration "
        << current_index_ << ") ====\n";
    if (plan_) {
      out << "iteration " << plan_->index << " (generation "
          << plan_->generation << "), plan: " << to_string(plan_->kill)
          << "\ncrash: " << (crash_.empty() ? "none yet" : crash_) << "\n"
          << "operations of this iteration (earlier ones: same seed, "
             "--verbose):\n";
      for (size_t i = 0; i < plan_->ops.size(); ++i)
        out << "  " << i << ". " << to_string(plan_->ops[i]) << "  "
            << (i < op_results_.size() && !op_results_[i].empty()
                  ? op_results_[i]
                : i == next_op_ ? "(sent, no answer)"
                                : "(not run)")
            << "\n";
    }
    out << "violations:\n";
    for (auto& f : failures_)
      out << "  - " << f << "\n";
    if (node_) {
      auto text = node_->stderr_text();
      if (text.size() > 3000)
        text = "..." + text.substr(text.size() - 3000);
      out << "node stderr (end):\n" << text << "\n";
    }
    out << "replay: " << replay_command() << "\n";
    if (opts_.sabotage.empty() || !remove_work_dir_) {
      if (opts_.store.postgres && !gen_dir_.empty())
        out << dump_database() << "\n";
      out << "work dir kept: " << work_dir_ << "\n";
    }
    std::cerr << out.str();
  }

  /// On PostgreSQL the failing generation's data is in a database that goes
  /// away with the run's server: dumps it as SQL (`pg_dump`) into the
  /// generation's folder, which the failure keeps. Says where, or why not.
  std::string dump_database() const {
    auto file = gen_dir_ + "/database.sql";
    try {
      auto res = run_command({pg_server::bin_dir() + "/pg_dump", "--file", file,
                              opts_.store.database_url(gen_dir_ + "/data")},
                             120s);
      if (res.exit_code == 0)
        return "the generation's database dumped to " + file;
      return "pg_dump failed: " + res.out + res.err;
    } catch (const std::exception& e) {
      return std::string{"cannot dump the database: "} + e.what();
    }
  }

  std::string replay_command() const {
    std::ostringstream cmd;
    cmd << argv0_ << " --seed " << opts_.seed << " --backend " << opts_.backend
        << " --iterations " << current_index_ + 1 << " --node-binary "
        << opts_.node_binary << " --keelctl-binary " << opts_.keelctl_binary
        << " --verify-every " << opts_.verify_every << " --generation-length "
        << opts_.shape.generation_length << " --min-ops " << opts_.shape.min_ops
        << " --max-ops " << opts_.shape.max_ops << " --max-threads "
        << opts_.shape.max_threads << " --tool-percent "
        << opts_.shape.tool_percent << " --provider-delay "
        << opts_.provider_delay << " --idle-timeout " << opts_.idle_timeout;
    return cmd.str();
  }

  void require_all() {
    if (!stats_.used.spawn)
      violation("--require-all: the node does not support spawn");
    if (!stats_.used.cancel)
      violation("--require-all: the node does not support cancel");
    if (!stats_.verify_available)
      violation("--require-all: keelctl has no verify command");
    if (!stats_.kill_points_available)
      violation("--require-all: keel-node has no --kill-at");
    for (auto p : all_kill_points())
      if (stats_.kill_points_fired[to_string(p)] == 0)
        violation(std::string{"--require-all: kill point "} + to_string(p)
                  + " never fired");
    if (stats_.passivations == 0)
      violation("--require-all: no thread was seen passivating");
    // Storage timeouts are not required: whether a synced write outlasts a
    // short timeout depends on the disk (on tmpfs none does); `crash_sim`
    // makes them happen deterministically.
    if (stats_.quarantined_threads == 0)
      violation("--require-all: no thread was found in quarantine");
    if (stats_.used.database_server && stats_.pg_kills == 0)
      violation("--require-all: the PostgreSQL server was never killed");
    if (!stats_.used.tools)
      violation("--require-all: the node does not run tools");
    else if (stats_.tool_results == 0 || stats_.tool_interrupted == 0)
      violation("--require-all: no tool result, or no tool call interrupted "
                "by a restart, was found in a log");
  }

  // -- setup ------------------------------------------------------------------

  bool setup() {
    if (opts_.work_dir.empty()) {
      try {
        work_dir_ = make_temp_dir("keel-crash-fuzz");
      } catch (const std::exception& e) {
        violation(e.what());
        return false;
      }
      remove_work_dir_ = true;
    } else {
      work_dir_ = opts_.work_dir;
      std::filesystem::create_directories(work_dir_);
    }
    ::unsetenv("KEEL_KILL_AT");
    stats_.used.database_server = opts_.store.postgres;
    auto help = run_command({opts_.node_binary, "--help"}, 30s);
    stats_.kill_points_available = help.out.find("--kill-at")
                                   != std::string::npos;
    auto verify = run_command({opts_.keelctl_binary, "verify", "--help"}, 30s);
    auto data_flag = opts_.store.postgres ? "--pg" : "--data-dir";
    stats_.verify_available = verify.exit_code == 0
                              && verify.out.find(data_flag)
                                   != std::string::npos;
    stats_.used.tools = node_runs_tools();
    // What the node offers is asked of a node of its own: each generation's
    // node starts with that generation's settings.
    if (!start_fresh_node(work_dir_ + "/probe", "fuzz-probe", {}) || !connect())
      return false;
    stats_.used.spawn = supports("spawn");
    stats_.used.cancel = supports("cancel");
    ws_.reset();
    node_.reset();
    say("seed " + std::to_string(opts_.seed) + "; backend " + opts_.backend
        + "; work dir " + work_dir_ + "; spawn "
        + (stats_.used.spawn ? "yes" : "NO") + ", cancel "
        + (stats_.used.cancel ? "yes" : "NO") + ", tools "
        + (stats_.used.tools ? "yes" : "NO") + ", kill points "
        + (stats_.kill_points_available ? "yes" : "NO") + ", keelctl verify "
        + (stats_.verify_available ? "yes" : "NO"));
    return failures_.empty();
  }

  // A frame type the node does not know is refused with `unknown_type`;
  // one it knows, sent without fields, with another code.
  bool supports(const std::string& type) {
    auto id = "probe-" + type;
    if (ws_->send_text(json{{"type", type}, {"id", id}}.dump()))
      return false;
    json frame;
    if (await([&](const json& j) { return json_string(j, "type") == "error"; },
              frame, 10s)
        != status::ok)
      return false;
    return json_string(frame, "code") != "unknown_type";
  }

  /// Starts `plan`'s generation: a fresh node on an empty data folder.
  bool new_generation(const iteration_plan& plan) {
    records_.clear();
    outside_ = chaos::record{};
    corrupted_.clear();
    ++stats_.generations;
    auto g = std::to_string(plan.generation);
    gen_dir_ = work_dir_ + "/gen-" + g;
    if (!plan.storage_timeout.empty())
      say("generation " + g + ": storage.request_timeout "
          + plan.storage_timeout);
    return start_fresh_node(gen_dir_, "fuzz-" + g, plan.storage_timeout);
  }

  /// The config of a node on folder `dir` (see `node_yaml`), with
  /// `storage_timeout` as `storage.request_timeout` unless empty, the tool
  /// offered to every thread if `with_tools`.
  std::string node_config(const std::string& dir, const std::string& name,
                          const std::string& storage_timeout,
                          bool with_tools) const {
    auto settings = "logging:\n  level: warn\nthreads:\n  idle_timeout: "
                    + opts_.idle_timeout + "\n";
    if (with_tools)
      settings += "  tools: [mark]\n  agent_tools: [mark]\n";
    auto storage = storage_timeout.empty()
                     ? std::string{}
                     : "  request_timeout: " + storage_timeout + "\n";
    return node_yaml(name, dir, opts_.provider_delay, with_tools, settings,
                     opts_.store.storage_yaml(dir + "/data", storage));
  }

  /// Whether the node runs configured tools: it takes a config with one
  /// (`--check-config`; in the probe node's folder, which it empties).
  bool node_runs_tools() {
    auto dir = work_dir_ + "/probe";
    std::filesystem::create_directories(marks_dir(dir));
    auto file = dir + "/node.yaml";
    std::ofstream{file} << node_config(dir, "fuzz-probe", {}, true);
    auto res = run_command({opts_.node_binary, "--check-config", file}, 30s);
    if (res.exit_code != 0 && opts_.verbose)
      say("keel-node refuses a config with a tool:\n" + res.out + res.err);
    return res.exit_code == 0;
  }

  /// Starts a node on the emptied folder `dir` (its data in `dir`/data),
  /// with `storage_timeout` as `storage.request_timeout` unless empty.
  /// False after recording why it did not come up.
  bool start_fresh_node(const std::string& dir, const std::string& name,
                        const std::string& storage_timeout) {
    ws_.reset();
    node_.reset();
    std::error_code ignored;
    std::filesystem::remove_all(dir, ignored);
    std::filesystem::create_directories(dir);
    stderr_offset_ = 0;
    node_armed_ = false;
    verified_ = false;
    passivations_seen_ = 0;
    if (stats_.used.tools)
      std::filesystem::create_directories(marks_dir(dir));
    try {
      ::unsetenv("KEEL_KILL_AT");
      node_ = std::make_unique<node_process>(
        dir, node_config(dir, name, storage_timeout, stats_.used.tools),
        opts_.node_binary);
    } catch (const std::exception& e) {
      violation(std::string{"a fresh node did not start: "} + e.what());
      return false;
    }
    return true;
  }

  // -- the node's life --------------------------------------------------------

  /// Starts the node (armed with `kill_at` if set). Returns false if it did
  /// not come up: a kill point fired during boot (recorded; `failures_`
  /// stays empty) or it failed (a violation).
  bool start_node(const std::optional<std::string>& kill_at) {
    ws_.reset();
    if (crashed_since_report_)
      sabotage_before_restart();
    if (!corrupt_context_as_planned())
      return false;
    if (kill_at)
      ::setenv("KEEL_KILL_AT", kill_at->c_str(), 1);
    stderr_offset_ = node_->stderr_text().size();
    bool up = true;
    std::string error;
    verified_ = false;
    try {
      node_->start();
    } catch (const std::exception& e) {
      up = false;
      error = e.what();
    }
    ::unsetenv("KEEL_KILL_AT");
    ++stats_.restarts;
    passivations_seen_ = 0;
    node_armed_ = up && kill_at.has_value();
    if (!up && !record_death(true, error))
      return false;
    if (up && crashed_since_report_)
      read_recovery_report();
    return up;
  }

  /// `kill_plan::corrupt_context`, while the node is down: overwrites the
  /// context record of the last reply of the first thread that a remaining
  /// send or resend of the iteration goes to and that has a reply in its log
  /// read so far (durable), with bytes no decoder reads. Once an iteration;
  /// false after a violation.
  bool corrupt_context_as_planned() {
    if (!plan_ || !plan_->kill.corrupt_context || context_corrupted_)
      return true;
    for (size_t i = next_op_; i < plan_->ops.size(); ++i) {
      auto& x = plan_->ops[i];
      if (x.kind != op_kind::send && x.kind != op_kind::resend)
        continue;
      auto& log = records_[x.thread].log;
      auto reply = std::find_if(log.rbegin(), log.rend(), [](const entry& e) {
        return e.kind == "reply";
      });
      if (reply != log.rend())
        return corrupt_context(x.thread, reply->seq);
    }
    return true;
  }

  /// Overwrites `thread`'s context record `seq` in the stopped node's data;
  /// the thread must be in quarantine at the next `keelctl verify`.
  bool corrupt_context(const std::string& thread, uint64_t seq) {
    context_corrupted_ = true;
    auto result = opts_.store.write_context_record(gen_dir_ + "/data", thread,
                                                   seq, "garbage{");
    if (result != "OK") {
      violation("cannot corrupt " + thread + "'s context record #"
                + std::to_string(seq) + ": " + result);
      return false;
    }
    corrupted_.insert(thread);
    ++stats_.corrupted_records;
    crash_ += (crash_.empty() ? "" : "; ") + std::string{"context "} + thread
              + "/" + std::to_string(seq) + " corrupted";
    return true;
  }

  // --sabotage lost / prefix (see fuzz_options::sabotage).
  void sabotage_before_restart() {
    for (auto& [thread, rec] : records_) {
      if (rec.log.empty())
        continue;
      if (sabotage_ == "lost") {
        outside_.sent(thread, "sabotage");
        outside_.acked(thread, "sabotage", rec.log.back().seq + 1);
      } else if (sabotage_ == "prefix") {
        rec.log.front().text += " (sabotaged)";
      } else {
        return;
      }
      say("sabotage: corrupted the record of " + thread + " (" + sabotage_
          + ")");
      sabotage_.clear();
      return;
    }
  }

  // --sabotage duplicate: a second outcome of one answered message.
  void sabotage_after_read() {
    if (sabotage_ != "duplicate")
      return;
    for (auto& [thread, rec] : records_) {
      for (auto& e : rec.log) {
        if (!is_outcome(e))
          continue;
        auto copy = e;
        copy.seq = rec.log.back().seq + 1;
        rec.log.push_back(copy);
        say("sabotage: a second outcome in the record of " + thread);
        sabotage_.clear();
        return;
      }
    }
  }

  /// SIGTERM, expecting exit code 0. A kill point may fire while an armed
  /// node shuts down; that counts as a kill.
  bool stop_clean() {
    ws_.reset();
    stderr_offset_ = node_->stderr_text().size();
    auto code = node_->stop();
    ++stats_.clean_stops;
    if (code == 0) {
      node_armed_ = false;
      return true;
    }
    if (node_armed_ && record_death(false, "exit code " + std::to_string(code)))
      return true;
    violation("graceful stop (SIGTERM) exited with " + std::to_string(code)
              + " instead of 0");
    return false;
  }

  void kill9(const std::string& why) {
    ws_.reset();
    node_->kill9();
    node_armed_ = false;
    ++stats_.kills;
    crash_ += (crash_.empty() ? "" : "; ") + why;
    crashed_since_report_ = true;
  }

  /// The node went away on its own: finds the kill point line. Returns
  /// false (with a violation) when there is none.
  bool record_death(bool during_boot, const std::string& detail) {
    ws_.reset();
    if (!poll_until([&] { return !node_->running(); }, 10s)) {
      violation("the connection to the node broke but the node still runs"
                + (detail.empty() ? "" : ": " + detail));
      return false;
    }
    node_armed_ = false;
    auto text = node_->stderr_text();
    text = text.size() > stderr_offset_ ? text.substr(stderr_offset_) : "";
    const std::string marker = "keel: kill point ";
    auto at = text.find(marker);
    if (at == std::string::npos) {
      violation("the node died without a kill point firing"
                + (detail.empty() ? "" : " (" + detail + ")")
                + "; its stderr since the start:\n" + text);
      return false;
    }
    auto line = text.substr(at + marker.size());
    line = line.substr(0, line.find('\n'));
    auto name = line.substr(0, line.find(' '));
    ++stats_.kills;
    ++stats_.kill_point_deaths;
    ++stats_.kill_points_fired[name];
    if (during_boot)
      ++stats_.boot_deaths;
    crash_ += (crash_.empty() ? "" : "; ") + std::string{"kill point "} + line
              + (during_boot ? " during boot" : "") + " at op "
              + std::to_string(next_op_);
    crashed_since_report_ = true;
    return true;
  }

  void read_recovery_report() {
    auto report = api_call(node_->address(), "GET", "/api/v1/recovery");
    if (!report)
      return;
    crashed_since_report_ = false;
    ++stats_.recoveries;
    auto& r = *report;
    auto body = r.contains("report") && r["report"].is_object() ? r["report"]
                                                                : r;
    stats_.recovered_inbox_messages += json_number(body, {"inbox_messages"});
    stats_.recovered_outbox_messages += json_number(body, {"outbox_messages"});
    if (body.contains("problems") && body["problems"].is_array()
        && !body["problems"].empty()) {
      stats_.recovery_problems += body["problems"].size();
      if (opts_.verbose)
        say("recovery problems: " + body["problems"].dump());
    }
  }

  /// Stops the node gracefully and runs `keelctl verify` on its data.
  bool checkpoint() {
    if (!node_)
      return false;
    if (node_->running() && !stop_clean())
      return false;
    if (!stats_.verify_available || verified_)
      return true; // Nothing changed since the last verify.
    std::vector<std::string> argv{opts_.keelctl_binary, "verify", "--json"};
    std::string where;
    for (auto& arg : opts_.store.data_args(gen_dir_ + "/data")) {
      argv.push_back(arg);
      where += " " + arg;
    }
    auto result = run_command(argv, 120s);
    ++stats_.verify_runs;
    if (opts_.verbose)
      say("keelctl verify" + where + ": exit "
          + std::to_string(result.exit_code));
    verified_ = result.exit_code == 0;
    if (result.exit_code != 0) {
      ++stats_.verify_failures;
      violation("keelctl verify" + where + " exited with "
                + std::to_string(result.exit_code) + ":\n" + result.out
                + result.err);
      return false;
    }
    return check_quarantine(json::parse(result.out, nullptr, false));
  }

  /// The threads in quarantine, as `keelctl verify --json` lists them, are
  /// exactly those whose context record the fuzzer corrupted in this
  /// generation (a thread the node quarantined by itself had a record the
  /// node wrote unreadable).
  bool check_quarantine(const json& report) {
    auto records = report.is_object() ? report.find("quarantined")
                                      : report.end();
    if (records == report.end() || !records->is_array()) {
      violation("keelctl verify --json printed no quarantined list: "
                + report.dump());
      return false;
    }
    std::set<std::string> quarantined;
    for (auto& rec : *records)
      quarantined.insert(json_string(rec, "thread"));
    for (auto& thread : corrupted_)
      if (quarantined.count(thread) == 0)
        violation("QUARANTINE: " + thread
                  + " had a context record corrupted but is not in quarantine");
    for (auto& thread : quarantined) {
      if (corrupted_.count(thread) == 0)
        violation("QUARANTINE: " + thread
                  + " has records in quarantine but none was corrupted");
      stats_.quarantined_threads
        += quarantined_.insert(gen_dir_ + ":" + thread).second ? 1 : 0;
    }
    return failures_.empty();
  }

  // -- the connection ---------------------------------------------------------

  bool connect() {
    try {
      ws_ = connect_client(node_->address());
    } catch (const std::exception& e) {
      ws_.reset();
      // An armed node may die right after it printed its address.
      if (poll_until([&] { return !node_->running(); }, 3s))
        return false; // The caller records the death.
      violation(std::string{"cannot connect to the node: "} + e.what());
      return false;
    }
    // Outcome frames of every thread drive the waits below.
    for (auto& [thread, model] : gen_threads())
      if (ws_->send_text(protocol::subscribe_frame(thread, "sub")))
        break;
    return true;
  }

  const std::map<std::string, thread_model>& gen_threads() const {
    static const std::map<std::string, thread_model> none;
    return gen_ ? gen_->threads() : none;
  }

  /// Receives one frame (and records what it shows). `closed` when the
  /// connection broke, `failed` on timeout.
  status pump(std::chrono::milliseconds timeout, json* out = nullptr) {
    if (!ws_)
      return status::died;
    auto msg = ws_->receive(timeout);
    if (!msg)
      return error_code_name(msg.error()) == "timeout" ? status::failed
                                                       : status::died;
    auto frame = json::parse(msg->payload, nullptr, false);
    if (frame.is_discarded() || !frame.is_object()) {
      violation("the node sent a frame that is not a JSON object: "
                + msg->payload);
      return status::failed;
    }
    observe(frame);
    if (out)
      *out = std::move(frame);
    return status::ok;
  }

  template <class Pred>
  status await(Pred pred, json& out, std::chrono::milliseconds timeout) {
    auto deadline = clock_type::now() + timeout;
    for (;;) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - clock_type::now());
      if (left.count() <= 0)
        return status::failed;
      json frame;
      auto st = pump(left, &frame);
      if (st == status::died)
        return st;
      if (!failures_.empty())
        return status::failed;
      if (st == status::ok && pred(frame)) {
        out = std::move(frame);
        return status::ok;
      }
    }
  }

  /// Records a live outcome frame, in the outside record too (a message
  /// of the node's own is adopted first, see `adopt_own_messages`); two
  /// different outcomes of one message are a duplicate reply the client saw.
  void observe(const json& frame) {
    count_storage_timeout(frame);
    auto type = json_string(frame, "type");
    if ((type != "reply" && type != "error") || !frame.contains("reply_to"))
      return;
    auto thread = json_string(frame, "thread");
    entry e{json_number(frame, {"seq"}),
            type,
            json_string(frame, "id"),
            json_number(frame, {"reply_to"}),
            type == "reply" ? json_string(frame, "text") : std::string{},
            json_string(frame, "code")};
    auto& rec = records_[thread];
    auto [i, added] = rec.observed_outcome_of.emplace(e.reply_to, e.seq);
    if (!added && i->second != e.seq) {
      ++stats_.duplicates;
      violation("DUPLICATE: " + thread + " message #"
                + std::to_string(e.reply_to) + " (" + e.client_id
                + ") was answered twice on the wire: "
                + to_string(rec.observed[i->second]) + " and " + to_string(e));
    }
    rec.observed[e.seq] = e;
    outside_.adopt(thread, e.client_id);
    outside_.outcome(thread, e.client_id, e);
  }

  /// Counts a storage request that timed out as the client sees it: an
  /// error answering a request (not a turn outcome), or a `retrying`
  /// status, that names `request_timeout`.
  void count_storage_timeout(const json& frame) {
    auto type = json_string(frame, "type");
    std::string what;
    if (type == "error" && !frame.contains("reply_to"))
      what = json_string(frame, "message");
    else if (type == "status" && json_string(frame, "state") == "retrying")
      what = json_string(frame, "detail");
    if (what.find("request_timeout") != std::string::npos)
      ++stats_.storage_timeouts;
  }

  /// Every this many iterations the node's threads are left idle until one
  /// passivates, so that passivations interleave with the crashes however
  /// fast the machine runs the iterations (each shorter than the idle
  /// timeout on a fast one).
  static constexpr uint64_t passivation_every = 25;

  /// Waits until the node passivates a thread (every thread is idle once
  /// the iteration settled), up to 10 s. A node still armed may die of its
  /// kill point meanwhile, so it is not waited on; an unarmed one that dies
  /// is a violation. Returns false after a violation.
  bool await_passivation() {
    if (!node_->running() || node_armed_)
      return true;
    auto before = stats_.passivations;
    auto passivated = poll_until(
      [&] {
        count_passivations();
        return stats_.passivations > before || !node_->running();
      },
      10s);
    if (!node_->running()) {
      violation("the node died while its threads were idle (no kill armed)");
      return false;
    }
    if (!passivated)
      say("no thread passivated within 10 s of idling");
    return true;
  }

  /// Adds the passivations the node counted since the last look
  /// (`threads.passivations` of GET /api/v1/status counts from the
  /// orchestrator's start, so a smaller figure means it restarted).
  void count_passivations() {
    auto status = api_call(node_->address(), "GET", "/api/v1/status");
    if (!status)
      return;
    auto now = json_number(*status, {"threads", "passivations"});
    stats_.passivations += now >= passivations_seen_ ? now - passivations_seen_
                                                     : now;
    passivations_seen_ = now;
  }

  // -- histories --------------------------------------------------------------

  /// Reads `thread`'s entries after `after` (all pages).
  status read_log(const std::string& thread, uint64_t after,
                  std::vector<entry>& out) {
    for (;;) {
      auto id = "h" + std::to_string(++history_requests_);
      if (ws_->send_text(
            protocol::history_request_frame(thread, id, after, 1000)))
        return status::died;
      json page;
      auto st = await(
        [&](const json& j) {
          return json_string(j, "type") == "history"
                 && json_string(j, "id") == id;
        },
        page, std::chrono::milliseconds{op_timeout});
      if (st == status::failed && failures_.empty())
        violation("no answer to a history request for " + thread);
      if (st != status::ok)
        return st;
      for (auto& j : page["entries"]) {
        out.push_back(entry_from_history(j));
        after = out.back().seq;
      }
      if (!page.value("more", false) || page["entries"].empty())
        return status::ok;
    }
  }

  /// Reads every thread's log afresh after a restart: the log read before
  /// must be a prefix of it, entry by entry.
  status reread_logs() {
    for (auto& [thread, model] : gen_threads()) {
      std::vector<entry> fresh;
      auto st = read_log(thread, 0, fresh);
      if (st != status::ok)
        return st;
      auto& old = records_[thread].log;
      ++stats_.prefix_checks;
      for (size_t i = 0; i < old.size(); ++i) {
        if (i >= fresh.size()) {
          violation("PREFIX: " + thread + "'s log lost its tail: it had "
                    + std::to_string(old.size()) + " entries before, now "
                    + std::to_string(fresh.size()) + "; first missing "
                    + to_string(old[i]));
          return status::failed;
        }
        if (!same_entry(old[i], fresh[i])) {
          violation("PREFIX: " + thread + "'s log changed at entry "
                    + std::to_string(i) + ": was " + to_string(old[i])
                    + ", now " + to_string(fresh[i]));
          return status::failed;
        }
      }
      old = std::move(fresh);
    }
    return status::ok;
  }

  /// Appends what is new in every thread's log.
  status refresh_logs() {
    for (auto& [thread, model] : gen_threads()) {
      auto& log = records_[thread].log;
      auto st = read_log(thread, log.empty() ? 0 : log.back().seq, log);
      if (st != status::ok)
        return st;
    }
    return status::ok;
  }

  // -- the checks -------------------------------------------------------------

  /// Checks every thread's log (its shape, tool steps, forwards) and the
  /// outside record against the logs. Definite violations are recorded at
  /// once; returns whether something is still pending (not answered, not
  /// forwarded, not read yet), which `final` turns into violations.
  bool check_all(bool final) {
    bool pending = false;
    for (auto& [thread, model] : gen_threads())
      pending |= check_thread(thread, model, final);
    return check_outside_record(final) || pending;
  }

  /// A thread's log, indexed for the checks.
  struct log_index {
    /// Client id -> seq of the user messages (the first, if stored twice).
    std::map<std::string, uint64_t> user_seq;
    /// User message seq -> seqs of its outcomes.
    std::map<uint64_t, std::vector<uint64_t>> outcomes;
    /// User message seq -> its tool steps (results of its tool calls).
    std::map<uint64_t, std::vector<const entry*>> steps;
    std::map<uint64_t, const entry*> by_seq;
  };

  bool check_thread(const std::string& thread, const thread_model& model,
                    bool final) {
    auto& rec = records_[thread];
    auto index = index_log(thread, rec.log);
    check_outcomes(thread, index);
    check_steps(thread, index);
    if (!model.parent.empty())
      return check_forwards(thread, model, rec.log, final);
    return false;
  }

  /// Indexes `log`; seqs must increase, and every entry is of a known kind.
  log_index index_log(const std::string& thread,
                      const std::vector<entry>& log) {
    log_index result;
    for (size_t i = 0; i < log.size(); ++i) {
      auto& e = log[i];
      if (i > 0 && e.seq <= log[i - 1].seq)
        violation(thread + ": log seqs not increasing: " + to_string(log[i - 1])
                  + " then " + to_string(e));
      result.by_seq[e.seq] = &e;
      if (e.kind == "user")
        result.user_seq.emplace(e.client_id, e.seq);
      else if (is_outcome(e))
        result.outcomes[e.reply_to].push_back(e.seq);
      else if (e.kind == "tool")
        result.steps[e.reply_to].push_back(&e);
      else
        violation(thread + ": unknown log entry kind: " + to_string(e));
    }
    return result;
  }

  /// Every outcome answers a user message of the thread (that it answers
  /// it once is the outside record's check).
  void check_outcomes(const std::string& thread, const log_index& index) {
    for (auto& [reply_to, seqs] : index.outcomes) {
      auto u = index.by_seq.find(reply_to);
      if (u == index.by_seq.end() || u->second->kind != "user")
        violation(thread + ": outcome #" + std::to_string(seqs.front())
                  + " answers #" + std::to_string(reply_to)
                  + ", which is no user message of the thread");
    }
  }

  /// Tool steps belong to a stored message of the thread, after it and
  /// before its outcome; only messages that ask for the tool have them
  /// (see `check_tool_message`).
  void check_steps(const std::string& thread, const log_index& index) {
    for (auto& [reply_to, steps] : index.steps) {
      auto u = index.by_seq.find(reply_to);
      auto o = index.outcomes.find(reply_to);
      for (auto step : steps) {
        if (u == index.by_seq.end() || u->second->kind != "user"
            || u->second->client_id != step->client_id)
          violation(thread + ": tool step " + to_string(*step)
                    + " answers no user message of the thread");
        else if (o != index.outcomes.end() && o->second.front() < step->seq)
          violation(thread + ": tool step " + to_string(*step)
                    + " comes after its message's outcome #"
                    + std::to_string(o->second.front()));
      }
    }
    for (auto& [client_id, seq] : index.user_seq) {
      auto& user = *index.by_seq.at(seq);
      auto s = index.steps.find(seq);
      static const std::vector<const entry*> none;
      auto& steps = s == index.steps.end() ? none : s->second;
      if (user.text.find(tool_trigger) != std::string::npos)
        check_tool_message(thread, index, user, steps);
      else if (!steps.empty())
        violation(thread + ": message " + to_string(user)
                  + " asks for no tool but has tool step "
                  + to_string(*steps.front()));
    }
  }

  /// A message that asks for the tool: at most one tool step (the model
  /// calls it once, and a call is never run again), whose result is the
  /// tool's output, "interrupted by a restart" (the call was cut by a crash
  /// or a stop, and not run again) or a cancel's note; answered by a reply,
  /// "answer to <the result>", or an error.
  void check_tool_message(const std::string& thread, const log_index& index,
                          const entry& user,
                          const std::vector<const entry*>& steps) {
    auto what = thread + " message " + to_string(user);
    if (steps.size() > 1) {
      violation("TOOL TWICE: " + what + " has " + std::to_string(steps.size())
                + " tool steps: " + to_string(*steps[0]) + " and "
                + to_string(*steps[1]));
      return;
    }
    auto step = steps.empty() ? nullptr : steps.front();
    if (step && step->text != tool_output(user.text)
        && !interrupted_result(step->text) && !cancelled_result(step->text))
      violation(what + ": unexpected tool result " + to_string(*step));
    auto o = index.outcomes.find(user.seq);
    if (o == index.outcomes.end())
      return;
    auto& outcome = *index.by_seq.at(o->second.front());
    if (outcome.kind != "reply")
      return;
    if (!step)
      violation(what
                + " was answered without its tool step: " + to_string(outcome));
    else if (outcome.text != "answer to " + step->text
             || cancelled_result(step->text))
      violation(what + ": the reply " + to_string(outcome)
                + " does not answer its tool result " + to_string(*step));
  }

  /// The outside record against the logs read so far (`chaos::check`:
  /// nothing acknowledged lost or misplaced, nothing stored or answered
  /// twice, nothing refused stored, every stored message answered, in
  /// order, and every outcome seen live in the log as it was seen). What
  /// entries after a log's end could mend is pending unless `final`.
  /// Returns whether something is pending.
  bool check_outside_record(bool final) {
    std::map<std::string, std::vector<entry>> logs;
    for (auto& [thread, rec] : records_) {
      adopt_own_messages(thread, rec.log);
      logs.emplace(thread, rec.log);
    }
    bool pending = false;
    for (auto& v : chaos::check(outside_, logs)) {
      if (v.beyond_history && !final) {
        pending = true;
        continue;
      }
      stats_.lost += v.rule == "LOST" ? 1 : 0;
      stats_.duplicates += v.rule == "DUPLICATE" ? 1 : 0;
      violation(v.rule + ": " + v.text);
    }
    return pending;
  }

  /// Adopts the node's own messages in `log` (a child's outcomes forwarded
  /// to its parent: user entries of client ids the fuzzer never sent) into
  /// the outside record, so that its checks hold them to the rules of the
  /// fuzzer's own (but ORDER).
  void adopt_own_messages(const std::string& thread,
                          const std::vector<entry>& log) {
    for (auto& e : log)
      if (e.kind == "user")
        outside_.adopt(thread, e.client_id);
  }

  /// A child's outcomes reach its parent's inbox once each, as
  /// `agent:<child>:<seq>`, where seq is one the child reserved in the
  /// outcome's commit right before the outcome's own log entry (the log has
  /// no entry with it), and text `[agent <child>] <reply>` or
  /// `[agent <child> failed] <error>`.
  bool check_forwards(const std::string& child, const thread_model& model,
                      const std::vector<entry>& log, bool final) {
    bool pending = false;
    auto prefix = forward_prefix(child);
    std::set<uint64_t> forwarded;
    for (auto& fwd : records_[model.parent].log)
      if (fwd.kind == "user" && fwd.client_id.rfind(prefix, 0) == 0)
        pending |= check_forward(child, model.parent, fwd, log, final,
                                 forwarded);
    pending |= check_owed_forwards(child, model.parent, log, forwarded, final);
    return pending;
  }

  /// How the client ids of `child`'s forwarded outcomes start.
  static std::string forward_prefix(const std::string& child) {
    return "agent:" + child + ":";
  }

  /// Checks one message `fwd` in `parent`'s log that forwards an outcome of
  /// `child` (whose log is `log`), recording the outcome's seq in
  /// `forwarded`. Returns whether the outcome is beyond the child's log read
  /// so far (a violation when `final`).
  bool check_forward(const std::string& child, const std::string& parent,
                     const entry& fwd, const std::vector<entry>& log,
                     bool final, std::set<uint64_t>& forwarded) {
    auto tail = fwd.client_id.substr(forward_prefix(child).size());
    if (tail.empty()
        || tail.find_first_not_of("0123456789") != std::string::npos) {
      violation(parent + ": malformed forwarded id " + fwd.client_id);
      return false;
    }
    auto reserved = std::stoull(tail);
    if (fwd.text.rfind("[agent " + child + "] ", 0) != 0
        && fwd.text.rfind("[agent " + child + " failed] ", 0) != 0)
      violation(parent + ": forwarded message " + to_string(fwd)
                + " does not start with [agent " + child + "]");
    // The child's first entry after the reserved seq is the outcome.
    auto out
      = std::upper_bound(log.begin(), log.end(), reserved,
                         [](uint64_t s, const entry& e) { return s < e.seq; });
    if (out != log.begin() && std::prev(out)->seq == reserved) {
      violation(parent + ": forwarded message " + fwd.client_id + " names "
                + child + "'s log entry " + to_string(*std::prev(out))
                + " (a reserved seq must not be a log entry)");
      return false;
    }
    if (out == log.end()) {
      // The child's log was read before this commit.
      if (final)
        violation(parent + ": forwarded message " + to_string(fwd)
                  + " has no outcome in " + child + "'s log after #"
                  + std::to_string(reserved));
      return true;
    }
    if (!is_outcome(*out)) {
      violation(parent + ": forwarded message " + to_string(fwd)
                + " is followed in " + child + "'s log by " + to_string(*out)
                + ", not by an outcome");
      return false;
    }
    if (!forwarded.insert(out->seq).second) {
      ++stats_.duplicates;
      violation("DUPLICATE: " + child + "'s outcome " + to_string(*out)
                + " reached " + parent + " twice");
    }
    if (fwd.text.find(out->text) == std::string::npos)
      violation(parent + ": forwarded message " + to_string(fwd)
                + " does not carry " + child + "'s outcome " + to_string(*out));
    forwarded_.insert(child + "/" + std::to_string(out->seq));
    return false;
  }

  /// Returns whether an outcome of `child` that is owed to `parent` has not
  /// reached it (a violation when `final`).
  bool check_owed_forwards(const std::string& child, const std::string& parent,
                           const std::vector<entry>& log,
                           const std::set<uint64_t>& forwarded, bool final) {
    bool pending = false;
    auto parent_closed = gen_threads().at(parent).closed;
    for (auto& e : log) {
      if (!is_outcome(e) || forwarded.count(e.seq) != 0)
        continue;
      // Not owed: the parent is closed (delivery is refused), or the
      // outcome is the child's own cancellation.
      if (parent_closed || e.code == "cancelled")
        continue;
      pending = true;
      if (final)
        violation("LOST FORWARD: " + child + "'s outcome " + to_string(e)
                  + " never reached its parent " + parent);
    }
    return pending;
  }

  /// A message that asks for the tool, with what its log shows of it.
  struct tool_message {
    const entry* user = nullptr;
    const entry* step = nullptr;
    bool answered = false;
  };

  /// The messages of `log` that ask for the tool, by seq.
  static std::map<uint64_t, tool_message>
  tool_messages(const std::vector<entry>& log) {
    std::map<uint64_t, tool_message> result;
    for (auto& e : log) {
      if (e.kind == "user" && e.text.find(tool_trigger) != std::string::npos)
        result[e.seq].user = &e;
      auto m = result.find(e.reply_to);
      if (e.reply_to == 0 || m == result.end())
        continue;
      if (e.kind == "tool")
        m->second.step = &e;
      else if (is_outcome(e))
        m->second.answered = true;
    }
    return result;
  }

  /// How many lines file `path` has (0 if there is none).
  static size_t lines_of(const std::string& path) {
    std::ifstream in{path};
    return static_cast<size_t>(std::count(std::istreambuf_iterator<char>{in},
                                          std::istreambuf_iterator<char>{},
                                          '\n'));
  }

  /// Once every message is answered: the tool ran (left a mark) at most
  /// once for each message that asks for it, exactly once when the
  /// message's tool step holds its output, and for no message that is in
  /// no log. Counts the tool's figures.
  bool check_tool_runs() {
    if (!stats_.used.tools)
      return true;
    auto dir = marks_dir(gen_dir_);
    std::set<std::string> expected;
    for (auto& [thread, rec] : records_) {
      for (auto& [seq, m] : tool_messages(rec.log)) {
        auto& file = m.user->text;
        expected.insert(file);
        auto runs = lines_of(dir + "/" + file);
        auto what = thread + " message " + to_string(*m.user);
        if (runs > 1)
          violation("TOOL RAN TWICE: the tool ran " + std::to_string(runs)
                    + " times for " + what);
        else if (runs == 0 && m.step
                 && m.step->text == tool_output(m.user->text))
          violation(what + ": the tool step " + to_string(*m.step)
                    + " holds the tool's output, but the tool never ran");
        if (m.answered
            && tool_counted_
                 .insert(gen_dir_ + ":" + thread + "/" + m.user->client_id)
                 .second)
          count_tool_message(m, runs);
      }
    }
    check_unexpected_marks(dir, expected);
    return failures_.empty();
  }

  void count_tool_message(const tool_message& m, size_t runs) {
    ++stats_.tool_messages;
    stats_.tool_runs += runs;
    if (m.step && m.step->text == tool_output(m.user->text))
      ++stats_.tool_results;
    if (m.step && interrupted_result(m.step->text))
      ++stats_.tool_interrupted;
  }

  /// Every mark is of a message in a log: the tool never runs for a message
  /// that was not stored.
  void check_unexpected_marks(const std::string& dir,
                              const std::set<std::string>& expected) {
    std::error_code ec;
    for (auto& file : std::filesystem::directory_iterator{dir, ec}) {
      auto name = file.path().filename().string();
      if (expected.count(name) == 0)
        violation("the tool ran for a message that is in no thread's log ("
                  + dir + "/" + name + ")");
    }
  }

  /// Waits until every message in every thread is answered and every
  /// child's outcome reached its parent (reading histories whenever an
  /// outcome frame arrives, or every 250 ms), bounded by settle_timeout.
  status settle() {
    auto deadline = clock_type::now() + opts_.settle_timeout;
    for (;;) {
      auto st = refresh_logs();
      if (st != status::ok)
        return st;
      sabotage_after_read();
      auto final = clock_type::now() >= deadline;
      auto pending = check_all(final);
      if (!failures_.empty())
        return status::failed;
      if (!pending)
        return status::ok;
      // Wait for the next frame (an event), then take whatever follows it.
      json frame;
      st = pump(250ms, &frame);
      while (st == status::ok)
        st = pump(5ms, &frame);
      if (st == status::died)
        return st;
      if (!failures_.empty())
        return status::failed;
    }
  }

  // -- operations -------------------------------------------------------------

  enum class op_status { done, died, failed, kill_now };

  bool answers(const op& x, const json& j) {
    auto type = json_string(j, "type");
    if (json_string(j, "id") != x.id)
      return false;
    if (type == "error")
      return !j.contains("reply_to");
    switch (x.kind) {
      case op_kind::spawn: return type == "spawned";
      case op_kind::cancel: return type == "cancelled";
      default: return type == "ack" && json_string(j, "thread") == x.thread;
    }
  }

  std::string request(const op& x) {
    switch (x.kind) {
      case op_kind::spawn: return spawn_request(x);
      case op_kind::cancel: return cancel_request(x);
      default: return protocol::send_frame(x.thread, x.id, x.text);
    }
  }

  /// Runs planned operations from `next_op_` on; stops after the k-th
  /// acknowledgement of the iteration when `kill_after` is k > 0.
  op_status execute_ops(const iteration_plan& plan, size_t kill_after) {
    for (; next_op_ < plan.ops.size(); ++next_op_) {
      auto& x = plan.ops[next_op_];
      auto st = execute(x, op_results_[next_op_]);
      if (st != op_status::done)
        return st;
      ++stats_.operations;
      if (kill_after > 0 && acks_ == kill_after
          && (x.kind == op_kind::send || x.kind == op_kind::resend)) {
        ++next_op_;
        return op_status::kill_now;
      }
    }
    return op_status::done;
  }

  /// Whether an operation answered with a transient error is sent again:
  /// up to 5 times, or, once the PostgreSQL server was killed in this
  /// iteration, until `op_timeout` has passed since its first attempt (the
  /// node refuses writes until the server is back).
  bool repeat_transient(int attempt, clock_type::time_point first) const {
    return attempt < 5
           || (database_killed_ && clock_type::now() - first < op_timeout);
  }

  op_status execute(const op& x, std::string& result) {
    auto key = x.thread + "/" + x.id;
    auto started = clock_type::now();
    for (int attempt = 0;; ++attempt) {
      auto first = attempted_.insert(key).second;
      if (x.kind != op_kind::spawn && x.kind != op_kind::cancel)
        outside_.sent(x.thread, x.id);
      if (ws_->send_text(request(x)))
        return op_status::died;
      json frame;
      auto st = await([&](const json& j) { return answers(x, j); }, frame,
                      std::chrono::milliseconds{op_timeout});
      if (st == status::died)
        return op_status::died;
      if (st == status::failed) {
        if (failures_.empty())
          violation("no answer to `" + to_string(x) + "` within "
                    + std::to_string(op_timeout.count()) + " s");
        return op_status::failed;
      }
      auto type = json_string(frame, "type");
      auto code = json_string(frame, "code");
      if (type == "error" && transient(code)
          && repeat_transient(attempt, started)) {
        // The node says to send again later; back off a little.
        std::this_thread::sleep_for(std::min(100ms * (attempt + 1), 500ms));
        continue;
      }
      result = type == "error"
                 ? "error " + code + ": " + json_string(frame, "message")
                 : frame.dump();
      return check_answer(x, frame, first) ? op_status::done
                                           : op_status::failed;
    }
  }

  /// Checks the answer `frame` to `x` (`first`: its first attempt) against
  /// the outside record, and records it.
  bool check_answer(const op& x, const json& frame, bool first) {
    switch (x.kind) {
      case op_kind::send: return check_send(x, frame, first);
      case op_kind::resend: return check_resend(x, frame);
      case op_kind::send_closed: return check_send_closed(x, frame);
      case op_kind::spawn: return check_spawn(x, frame, first);
      case op_kind::cancel: return check_cancel(x, frame, first);
    }
    return false;
  }

  /// Records that `x` was answered wrongly with `frame`; returns false.
  bool refused(const op& x, const json& frame, const std::string& what) {
    violation("`" + to_string(x) + "` " + what + ": " + frame.dump());
    return false;
  }

  /// What the outside record knows of the message `x` sends (sent, so
  /// known).
  const chaos::sent_message& recorded(const op& x) const {
    return outside_.threads().at(x.thread).at(x.id);
  }

  bool check_send(const op& x, const json& frame, bool first) {
    if (json_string(frame, "type") != "ack")
      return refused(x, frame, "was refused");
    auto seq = json_number(frame, {"seq"});
    if (frame.value("duplicate", false) && first)
      return refused(x, frame, "is new but was acknowledged as a duplicate");
    auto& msg = recorded(x);
    if (msg.acked && msg.seq != seq)
      return refused(x, frame,
                     "was acknowledged again with another seq (first "
                       + std::to_string(msg.seq) + ")");
    stats_.acked += msg.acked ? 0 : 1;
    outside_.acked(x.thread, x.id, seq);
    ++stats_.sends;
    ++acks_;
    return true;
  }

  bool check_resend(const op& x, const json& frame) {
    if (json_string(frame, "type") != "ack")
      return refused(x, frame, "was refused");
    auto seq = json_number(frame, {"seq"});
    auto& msg = recorded(x);
    if (!msg.acked)
      return refused(x, frame,
                     "resends a message that was never acknowledged "
                     "(fuzzer bug)");
    if (!frame.value("duplicate", false)) {
      ++stats_.lost;
      return refused(x, frame,
                     "LOST: the acknowledged message (seq "
                       + std::to_string(msg.seq)
                       + ") was accepted again as new");
    }
    if (seq != msg.seq)
      return refused(x, frame,
                     "names seq " + std::to_string(seq)
                       + " but the original was acknowledged with seq "
                       + std::to_string(msg.seq));
    ++stats_.resends;
    ++acks_;
    return true;
  }

  bool check_send_closed(const op& x, const json& frame) {
    if (json_string(frame, "type") == "ack")
      return refused(x, frame, "to a cancelled thread was acknowledged");
    if (json_string(frame, "code") != "thread_closed")
      return refused(x, frame,
                     "to a cancelled thread was refused with the wrong "
                     "code");
    outside_.refused(x.thread, x.id, "thread_closed");
    ++stats_.refused_sends;
    return true;
  }

  bool check_spawn(const op& x, const json& frame, bool first) {
    if (json_string(frame, "type") != "spawned")
      return refused(x, frame, "was refused");
    if (json_string(frame, "child") != x.child
        || json_string(frame, "thread") != x.thread)
      return refused(x, frame, "answered for another parent or child");
    if (first && !frame.value("created", false))
      return refused(x, frame,
                     "is the first spawn of this child but says "
                     "created:false");
    ++stats_.spawns;
    return true;
  }

  bool check_cancel(const op& x, const json& frame, bool first) {
    auto type = json_string(frame, "type");
    if (type == "error" && json_string(frame, "code") == "thread_closed"
        && !first)
      return true; // Cancelled by an attempt the crash cut short.
    if (type != "cancelled")
      return refused(x, frame, "was refused");
    std::set<std::string> subtree;
    collect_subtree(x.thread, subtree);
    bool self = false;
    auto threads = frame.find("threads");
    if (threads == frame.end() || !threads->is_array())
      return refused(x, frame, "lists no threads");
    for (auto& t : *threads) {
      auto name = t.is_string() ? t.get<std::string>() : std::string{};
      self |= name == x.thread;
      if (subtree.count(name) == 0)
        return refused(x, frame,
                       "closed " + name
                         + ", which is not in the cancelled subtree");
    }
    if (first && !self)
      return refused(x, frame, "does not list the cancelled thread");
    ++stats_.cancels;
    return true;
  }

  void collect_subtree(const std::string& thread, std::set<std::string>& out) {
    out.insert(thread);
    for (auto& c : gen_threads().at(thread).children)
      collect_subtree(c, out);
  }

  // -- one iteration
  // ------------------------------------------------------------

  /// How one life of the node (start to death) within an iteration ended.
  enum class life_end { settled, crashed, failed };

  /// After the node went away: a kill point that fired is a crash; anything
  /// else fails the run.
  life_end died(bool during_boot, const std::string& where) {
    return failures_.empty() && record_death(during_boot, where)
             ? life_end::crashed
             : life_end::failed;
  }

  /// The arming of life `life` of an iteration: the plan's point first,
  /// then (if planned) the recovery point; none after that.
  static std::optional<std::string> arming(const iteration_plan& plan,
                                           int life) {
    auto& k = plan.kill;
    if (life == 0 && k.at_point)
      return kill_at_spec(k.point, k.probability, k.node_seed);
    if (life == 1 && k.recovery_crash)
      return kill_at_spec(k.recovery_point, k.recovery_probability,
                          k.recovery_seed);
    return std::nullopt;
  }

  /// (Re)starts the node armed with `arm`, connects and checks every log
  /// against the one read before (prefix, acknowledged, seen).
  life_end boot(const std::optional<std::string>& arm) {
    if (node_->running() && !stop_clean())
      return life_end::failed;
    if (!start_node(arm))
      return failures_.empty() ? life_end::crashed : life_end::failed;
    if (!connect())
      return died(true, "at connect");
    auto st = reread_logs();
    if (st == status::ok)
      check_all(false);
    if (!failures_.empty())
      return life_end::failed;
    return st == status::died ? died(true, "reading histories")
                              : life_end::settled;
  }

  /// One life of the node: up (armed as planned), the remaining operations,
  /// the planned kill or a death, else waiting until everything is answered.
  /// A planned kill of the database server does not end it: the node lives
  /// through the outage.
  life_end live(const iteration_plan& plan, int life) {
    auto arm = arming(plan, life);
    if (!node_->running() || arm || node_armed_) {
      auto st = boot(arm);
      if (st != life_end::settled)
        return st;
    } else if (!ws_ && !connect()) {
      return died(false, "at connect");
    }
    auto kill_after = life == 0 && !plan.kill.at_point ? plan.kill.after_acks
                                                       : 0;
    auto ran = execute_ops(plan, kill_after);
    if (ran == op_status::kill_now && plan.kill.database_kill)
      ran = outlive_database_kill(plan);
    switch (ran) {
      case op_status::failed: return life_end::failed;
      case op_status::died: return died(false, "during operations");
      case op_status::kill_now: {
        auto st = read_before_kill(plan.kill);
        if (st != status::ok)
          return st == status::died ? died(false, "reading histories")
                                    : life_end::failed;
        kill9("kill -9 after ack " + std::to_string(acks_) + " (op "
              + std::to_string(next_op_ - 1) + ")");
        ++stats_.kill9_instant;
        return life_end::crashed;
      }
      case op_status::done: break;
    }
    auto settled = settle();
    if (settled != status::ok)
      return settled == status::died ? died(false, "while settling")
                                     : life_end::failed;
    if (life == 0 && plan.kill.at_point) {
      // Every operation is answered and the armed point did not fire:
      // crash anyway.
      kill9(std::string{"kill -9: armed "} + to_string(plan.kill.point)
            + " did not fire");
      ++stats_.kill9_fallback;
      return life_end::crashed;
    }
    return life_end::settled;
  }

  /// Extends the read histories right before a planned kill -9, if the
  /// plan says so.
  status read_before_kill(const kill_plan& kill) {
    return kill.snapshot_before_kill ? refresh_logs() : status::ok;
  }

  /// The planned kill -9 of the PostgreSQL server, right after the
  /// acknowledgement it waited for: the server starts again after the
  /// planned outage while the remaining operations go on (refused or
  /// unanswered ones are sent again, see `repeat_transient`). `done` once
  /// every operation is answered and the server is back; the node is never
  /// restarted, so the settling and checks that follow show that it got
  /// over the outage by itself.
  op_status outlive_database_kill(const iteration_plan& plan) {
    auto st = read_before_kill(plan.kill);
    if (st != status::ok)
      return st == status::died ? op_status::died : op_status::failed;
    auto outage = plan.kill.database_outage;
    auto& database = opts_.store.database();
    database.kill9();
    ++stats_.pg_kills;
    database_killed_ = true;
    crash_ += (crash_.empty() ? "" : "; ")
              + std::string{"kill -9 of PostgreSQL after ack "}
              + std::to_string(acks_) + " (op " + std::to_string(next_op_ - 1)
              + "), down " + std::to_string(outage.count()) + " ms";
    // The restart's own thread touches only the server, which nothing
    // else uses until it is joined below.
    auto restarted = std::async(std::launch::async, [outage, &database] {
      std::this_thread::sleep_for(outage);
      try {
        database.start();
        return std::string{};
      } catch (const std::exception& e) {
        return std::string{e.what()};
      }
    });
    auto ran = execute_ops(plan, 0);
    auto error = restarted.get();
    if (!error.empty() && failures_.empty())
      violation("PostgreSQL did not start again after its kill -9: " + error);
    return failures_.empty() ? ran : op_status::failed;
  }

  bool run_iteration(const iteration_plan& plan) {
    plan_ = &plan;
    current_index_ = plan.index;
    crash_.clear();
    context_corrupted_ = false;
    database_killed_ = false;
    next_op_ = 0;
    acks_ = 0;
    op_results_.assign(plan.ops.size(), std::string{});
    auto t0 = clock_type::now();
    auto kills_before = stats_.kills;
    if (opts_.verbose) {
      say("iteration " + std::to_string(plan.index) + " (generation "
          + std::to_string(plan.generation) + "): " + to_string(plan.kill));
      for (size_t i = 0; i < plan.ops.size(); ++i)
        say("  " + std::to_string(i) + ". " + to_string(plan.ops[i]));
    }
    if (plan.kill.at_point)
      ++stats_.kill_points_armed[to_string(plan.kill.point)];
    for (int life = 0;; ++life) {
      if (life > 5) {
        violation("the iteration needed more than 5 restarts");
        return false;
      }
      auto end = live(plan, life);
      if (end == life_end::failed)
        return false;
      if (end == life_end::settled)
        break;
    }
    if (!check_tool_runs())
      return false;
    // Everything is answered and every check held: count.
    count_passivations();
    if (plan.index % passivation_every == passivation_every - 1
        && !await_passivation())
      return false;
    if (stats_.kills > kills_before)
      stats_.kills_survived += stats_.kills - kills_before;
    for (auto& [thread, msgs] : outside_.threads())
      for (auto& [id, msg] : msgs)
        if (msg.acked)
          answered_.insert(thread + "/" + id);
    stats_.answered = answered_.size();
    stats_.forwarded = forwarded_.size();
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                clock_type::now() - t0)
                .count();
    say("iteration " + std::to_string(plan.index) + ": "
        + std::to_string(plan.ops.size()) + " ops, "
        + (crash_.empty() ? std::string{"no crash"} : crash_) + "; "
        + std::to_string(stats_.acked) + " acked, "
        + std::to_string(stats_.kills) + " kills so far (" + std::to_string(ms)
        + " ms)");
    plan_ = nullptr;
    return true;
  }

  const fuzz_options& opts_;
  fuzz_stats& stats_;
  std::string argv0_;
  std::string work_dir_;
  bool remove_work_dir_ = false;
  std::string gen_dir_;
  std::unique_ptr<generator> gen_;
  std::unique_ptr<node_process> node_;
  std::unique_ptr<ws_client> ws_;
  size_t stderr_offset_ = 0;
  bool node_armed_ = false;
  /// keelctl verify passed on the data as it is (the node has not run
  /// since).
  bool verified_ = false;
  bool crashed_since_report_ = false;
  /// `threads.passivations` as the running node last reported it.
  uint64_t passivations_seen_ = 0;
  /// Threads of this generation whose context record was corrupted.
  std::set<std::string> corrupted_;
  /// `gen-dir:thread` of every thread found in quarantine.
  std::set<std::string> quarantined_;
  std::map<std::string, thread_record> records_;
  /// What the node told the client (acknowledgements, refusals, outcomes)
  /// in this generation, checked against the logs by `chaos::check`.
  chaos::record outside_;
  /// `thread/id` of every frame sent at least once (resends are expected
  /// to find a duplicate).
  std::set<std::string> attempted_;
  std::set<std::string> answered_;
  std::set<std::string> forwarded_;
  /// `gen-dir:thread/id` of the answered tool messages counted.
  std::set<std::string> tool_counted_;
  uint64_t history_requests_ = 0;
  // The current iteration.
  const iteration_plan* plan_ = nullptr;
  uint64_t current_index_ = 0;
  size_t next_op_ = 0;
  size_t acks_ = 0;
  std::vector<std::string> op_results_;
  std::string crash_;
  bool context_corrupted_ = false;
  /// The PostgreSQL server was killed during this iteration.
  bool database_killed_ = false;
  std::vector<std::string> failures_;
  std::string sabotage_;
};

/// Every kill point with its count in `counts` (0 if it has none).
json per_kill_point(const std::map<std::string, uint64_t>& counts) {
  json result = json::object();
  for (auto p : all_kill_points()) {
    auto i = counts.find(to_string(p));
    result[to_string(p)] = i == counts.end() ? 0 : i->second;
  }
  return result;
}

} // namespace

nlohmann::json to_json(const fuzz_stats& x) {
  auto fired = per_kill_point(x.kill_points_fired);
  auto armed = per_kill_point(x.kill_points_armed);
  return json{
    {"iterations", x.iterations},
    {"generations", x.generations},
    {"seconds", x.seconds},
    {"operations", x.operations},
    {"sends", x.sends},
    {"resends", x.resends},
    {"refused_sends", x.refused_sends},
    {"spawns", x.spawns},
    {"cancels", x.cancels},
    {"kills", x.kills},
    {"kills_survived", x.kills_survived},
    {"kill9_instant", x.kill9_instant},
    {"kill9_fallback", x.kill9_fallback},
    {"kill_point_deaths", x.kill_point_deaths},
    {"boot_deaths", x.boot_deaths},
    {"pg_kills", x.pg_kills},
    {"kill_points_fired", fired},
    {"kill_points_armed", armed},
    {"restarts", x.restarts},
    {"clean_stops", x.clean_stops},
    {"recoveries", x.recoveries},
    {"recovered_inbox_messages", x.recovered_inbox_messages},
    {"recovered_outbox_messages", x.recovered_outbox_messages},
    {"recovery_problems", x.recovery_problems},
    {"passivations", x.passivations},
    {"storage_timeouts", x.storage_timeouts},
    {"corrupted_records", x.corrupted_records},
    {"quarantined_threads", x.quarantined_threads},
    {"tool_messages", x.tool_messages},
    {"tool_runs", x.tool_runs},
    {"tool_results", x.tool_results},
    {"tool_interrupted", x.tool_interrupted},
    {"acked", x.acked},
    {"answered", x.answered},
    {"forwarded", x.forwarded},
    {"lost", x.lost},
    {"duplicates", x.duplicates},
    {"prefix_checks", x.prefix_checks},
    {"verify_runs", x.verify_runs},
    {"verify_failures", x.verify_failures},
    {"violations", x.violations},
    {"features",
     {{"spawn", x.used.spawn},
      {"cancel", x.used.cancel},
      {"kill_points", x.kill_points_available},
      {"database_server", x.used.database_server},
      {"tools", x.used.tools},
      {"verify", x.verify_available}}},
  };
}

int run(const fuzz_options& opts, fuzz_stats& stats, const std::string& argv0) {
  runner r{opts, stats, argv0};
  return r.run();
}

} // namespace keel::fuzz
