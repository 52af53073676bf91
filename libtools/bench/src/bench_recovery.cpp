#include "keel/tools/bench_recovery.hpp"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iomanip>
#include <iterator>
#include <memory>
#include <numeric>
#include <random>
#include <sstream>
#include <thread>

#include "keel/json_codec.hpp"
#include "keel/proc.hpp"
#include "keel/protocol.hpp"
#include "keel/store.hpp"
#include "keel/text.hpp"
#include "keel/tools/node_process.hpp"
#include "keel/tools/ws_client.hpp"

namespace keel::bench {

namespace {

namespace fs = std::filesystem;
using steady = std::chrono::steady_clock;

constexpr uint64_t no_parent = UINT64_MAX;

double ms_since(steady::time_point start) {
  return std::chrono::duration<double, std::milli>(steady::now() - start)
    .count();
}

caf::error invalid(const std::string& what) {
  return caf::make_error(ec::config_invalid, what);
}

// `bytes` of ASCII text starting with `head`: words drawn from a small
// vocabulary (seeded by `head`), so that it compresses about like prose
// rather than like a repeated phrase.
std::string filler_text(const std::string& head, size_t bytes) {
  static const char* const words[] = {
    "the",     "agent",   "plan",    "step",   "result",  "tool",    "file",
    "check",   "needs",   "update",  "before", "after",   "error",   "retry",
    "summary", "report",  "with",    "from",   "data",    "value",   "first",
    "second",  "then",    "because", "should", "could",   "would",   "test",
    "build",   "deploy",  "review",  "change", "request", "answer",  "question",
    "context", "model",   "token",   "limit",  "config",  "server",  "client",
    "thread",  "message", "reply",   "parent", "child",   "task",    "done",
    "pending", "status",  "line",    "number", "list",    "table",   "query",
    "index",   "cache",   "memory",  "disk",   "network", "latency", "budget",
    "cost"};
  uint64_t x = std::hash<std::string>{}(head) | 1;
  std::string text = head;
  while (text.size() < bytes) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    text += ' ';
    text += words[x % std::size(words)];
  }
  text.resize(std::max<size_t>(bytes, 1));
  return text;
}

// Marks `round(n * fraction)` of `n` indices, picked at random.
std::vector<bool> pick(uint64_t n, double fraction, std::mt19937_64& rng) {
  auto count = std::min<uint64_t>(
    n, static_cast<uint64_t>(std::llround(static_cast<double>(n) * fraction)));
  std::vector<uint64_t> order(n);
  std::iota(order.begin(), order.end(), uint64_t{0});
  std::shuffle(order.begin(), order.end(), rng);
  std::vector<bool> marked(n, false);
  for (uint64_t i = 0; i < count; ++i)
    marked[order[i]] = true;
  return marked;
}

uint64_t folder_bytes(const std::string& dir) {
  uint64_t total = 0;
  std::error_code err;
  for (auto i = fs::recursive_directory_iterator{dir, err};
       !err && i != fs::recursive_directory_iterator{}; i.increment(err))
    if (i->is_regular_file(err))
      total += i->file_size(err);
  return total;
}

bool holds_something(const std::string& dir) {
  std::error_code err;
  return fs::exists(dir, err)
         && (!fs::is_directory(dir, err) || !fs::is_empty(dir, err));
}

caf::error check(const populate_options& opts) {
  auto fraction = [](double x) { return x >= 0 && x <= 1; };
  if (opts.db_dir.empty())
    return invalid("no database folder given");
  if (opts.threads == 0)
    return invalid("threads: must be at least 1");
  if (!fraction(opts.children_fraction) || !fraction(opts.pending_fraction)
      || !fraction(opts.active_fraction))
    return invalid("fractions must be between 0 and 1");
  if (opts.group_ops == 0)
    return invalid("group_ops: must be at least 1");
  if (holds_something(opts.db_dir))
    return invalid(opts.db_dir
                   + " already holds data: the benchmark needs a fresh "
                     "folder");
  return {};
}

// Writes one thread: its session (a root's directly, a child's with its
// tree link through stage_spawn), `turns` answered exchanges, and the
// pending message if any. Returns the last seq written.
class populator {
public:
  populator(store& db, const populate_options& opts, population& out)
    : db_(db), opts_(opts), out_(out) {
    // The histories end now and have one turn a minute.
    base_ = wall_clock_millis() - static_cast<millis>(opts.turns + 1) * 60'000;
  }

  caf::expected<seq_t> write(uint64_t index, uint64_t parent, bool active,
                             bool pending) {
    auto rec = session(index, parent, active);
    if (auto err = stage_session(rec))
      return err;
    seq_t seq = 0;
    for (uint32_t turn = 0; turn < opts_.turns; ++turn)
      if (auto err = stage_turn(rec, turn, seq))
        return err;
    if (pending) {
      auto at = base_ + static_cast<millis>(opts_.turns) * 60'000;
      auto user = accept(rec, opts_.turns, ++seq, at);
      if (!user)
        return user.error();
      ++out_.log_entries;
    }
    if (db_.staged() >= opts_.group_ops)
      if (auto err = db_.flush())
        return err;
    return seq;
  }

private:
  session_record session(uint64_t index, uint64_t parent, bool active) {
    session_record rec;
    rec.thread = populated_thread_id(index);
    rec.pool = "default";
    rec.provider = opts_.turns > 0 ? "echo" : "";
    rec.state = active ? session_state::active : session_state::suspended;
    rec.created_at = base_;
    if (parent != no_parent)
      rec.parent = populated_thread_id(parent);
    return rec;
  }

  // Stages a root's session directly, a child's with its tree link.
  caf::error stage_session(const session_record& rec) {
    if (rec.parent.empty()) {
      db_.stage_session(rec);
      return {};
    }
    auto spawned = db_.stage_spawn(
      spawn_request{rec, tree_link{rec.parent, rec.thread, base_}});
    if (!spawned)
      return spawned.error();
    ++out_.links;
    return {};
  }

  // Stages one answered exchange: the message and its reply, committed as
  // a turn; `seq` is the last seq written.
  caf::error stage_turn(const session_record& rec, uint32_t turn, seq_t& seq) {
    auto at = base_ + static_cast<millis>(turn) * 60'000;
    auto user = accept(rec, turn, ++seq, at);
    if (!user)
      return user.error();
    turn_commit commit;
    commit.thread = rec.thread;
    commit.inbox_seq = user->seq;
    auto reply_seq = ++seq;
    auto reply = filler_text("echo: answer " + std::to_string(turn + 1) + " in "
                               + rec.thread + ":",
                             opts_.reply_bytes);
    commit.context.push_back(context_entry{user->seq, "user", user->text});
    commit.context.push_back(context_entry{reply_seq, "assistant", reply});
    log_entry entry;
    entry.seq = reply_seq;
    entry.kind = log_kind::reply;
    entry.client_id = user->client_id;
    entry.reply_to = user->seq;
    entry.text = std::move(reply);
    entry.provider = "echo";
    entry.at = at + 1500;
    commit.log.push_back(std::move(entry));
    db_.stage_commit(commit);
    out_.log_entries += 2;
    return {};
  }

  // Stages one message, as a client's (roots) or the parent's (children).
  caf::expected<inbox_entry> accept(const session_record& rec, uint32_t turn,
                                    seq_t seq, millis at) {
    accept_request req;
    req.thread = rec.thread;
    req.entry.seq = seq;
    req.entry.client_id = rec.parent.empty()
                            ? "m" + std::to_string(turn + 1)
                            : agent_client_id(rec.parent, 1000 + turn);
    req.entry.text = filler_text("message " + std::to_string(turn + 1) + " to "
                                   + rec.thread + ":",
                                 opts_.user_bytes);
    req.entry.accepted_at = at;
    auto res = db_.stage_accept(req);
    if (!res)
      return res.error();
    if (res->duplicate)
      return caf::make_error(ec::conflict, "message " + req.entry.client_id
                                             + " of " + rec.thread
                                             + " was taken as a duplicate");
    return std::move(req.entry);
  }

  store& db_;
  const populate_options& opts_;
  population& out_;
  millis base_ = 0;
};

} // namespace

std::string populated_thread_id(uint64_t index) {
  std::ostringstream out;
  out << "rb-" << std::setw(7) << std::setfill('0') << index;
  return out.str();
}

namespace {

// Which threads are children of which, ACTIVE or pending: drawn once from
// the seed, before anything is written.
struct thread_layout {
  uint64_t roots = 0;
  uint64_t children = 0;
  /// Per thread: its parent's index, or `no_parent`.
  std::vector<uint64_t> parent;
  std::vector<bool> active;
  std::vector<bool> pending;
};

thread_layout draw_layout(const populate_options& opts) {
  auto n = opts.threads;
  std::mt19937_64 rng{opts.seed};
  thread_layout x;
  x.children = std::min<uint64_t>(
    n - 1, static_cast<uint64_t>(
             std::llround(static_cast<double>(n) * opts.children_fraction)));
  x.roots = n - x.children;
  x.parent.assign(n, no_parent);
  for (auto i = x.roots; i < n; ++i)
    x.parent[i] = std::uniform_int_distribution<uint64_t>{0, i - 1}(rng);
  x.active = pick(n, opts.active_fraction, rng);
  x.pending = pick(n, opts.pending_fraction, rng);
  return x;
}

// Writes every thread of `layout`; returns the last seq of each.
caf::expected<std::vector<seq_t>> write_threads(const populate_options& opts,
                                                const thread_layout& layout,
                                                population& out) {
  auto n = opts.threads;
  std::vector<seq_t> last_seq(n, 0);
  auto db = store::open(opts.db_dir);
  if (!db)
    return db.error();
  populator writer{**db, opts, out};
  for (uint64_t i = 0; i < n; ++i) {
    auto seq = writer.write(i, layout.parent[i], layout.active[i],
                            layout.pending[i]);
    if (!seq)
      return seq.error();
    last_seq[i] = *seq;
  }
  if (auto err = (*db)->flush())
    return err;
  auto stats = (*db)->stats();
  out.operations = stats.staged_operations;
  out.flushes = stats.flushes;
  return last_seq;
}

// Counts what was written and lists what the recovery must produce: each
// pending message answered, and each answer of a child answered again by
// every ancestor.
void count_expected(const thread_layout& layout,
                    const std::vector<seq_t>& last_seq, population& out) {
  auto n = layout.parent.size();
  std::vector<uint64_t> outcomes(n, 0);
  for (uint64_t i = 0; i < n; ++i) {
    if (!layout.pending[i])
      continue;
    for (auto t = i; t != no_parent; t = layout.parent[t])
      ++outcomes[t];
  }
  for (uint64_t i = 0; i < n; ++i) {
    out.active += layout.active[i] ? 1 : 0;
    if (layout.pending[i]) {
      ++out.pending;
      out.pending_roots += layout.parent[i] == no_parent ? 1 : 0;
    }
    if (outcomes[i] > 0)
      out.expected.push_back(
        expected_outcomes{populated_thread_id(i), last_seq[i],
                          layout.pending[i] ? last_seq[i] : 0, outcomes[i]});
  }
}

} // namespace

caf::expected<population> populate_crashed_store(const populate_options& opts) {
  if (auto err = check(opts))
    return err;
  auto start = steady::now();
  population out;
  auto layout = draw_layout(opts);
  auto last_seq = write_threads(opts, layout, out);
  if (!last_seq)
    return last_seq.error();
  count_expected(layout, *last_seq, out);
  out.threads = opts.threads;
  out.roots = layout.roots;
  out.children = layout.children;
  out.disk_bytes = folder_bytes(opts.db_dir);
  out.seconds = ms_since(start) / 1000;
  return out;
}

// -- the run ------------------------------------------------------------------

bool recovery_bench_result::clean() const noexcept {
  return all_answered && duplicate_answers == 0 && errors == 0
         && report.problems.empty() && stop_exit_code == 0 && verified
         && verify.is_object() && verify.value("ok", false);
}

namespace {

// Single-quoted YAML scalar.
std::string yaml_quote(const std::string& str) {
  return "'" + replace_all(str, "'", "''") + "'";
}

// The node's gateway does not rate-limit: the benchmark reads back every
// pending thread's history over one connection, far more frames than a
// client may send by default.
std::string node_yaml(const std::string& data_dir, const std::string& token) {
  return "node:\n  name: keel-recovery-bench\n  data_dir: "
         + yaml_quote(data_dir)
         + "\ngateway:\n  host: 127.0.0.1\n  port: 0\n  token: " + token
         + "\n  rate_limit:\n    per_second: 0"
         + "\nproviders:\n  - name: echo\n    kind: echo\n"
           "pools:\n  - name: default\n    chain: [echo]\n"
           "logging:\n  level: info\n"
           "storage:\n  sync: true\n";
}

std::string tail(const std::string& text, size_t bytes) {
  return text.size() <= bytes ? text : "..." + text.substr(text.size() - bytes);
}

// Polls GET /api/v1/recovery until the report of this boot is stored.
caf::expected<recovery_report> await_report(node_process& node,
                                            millis started_at,
                                            steady::time_point deadline) {
  auto ep = node.address();
  std::string last = "no answer yet";
  while (steady::now() < deadline) {
    if (!node.running())
      return caf::make_error(ec::unavailable,
                             "keel-node exited during the recovery: "
                               + tail(node.stderr_text(), 2000));
    auto res = api_call(ep, "GET", "/api/v1/recovery", {},
                        std::chrono::seconds{5});
    if (res) {
      auto report = recovery_report_from_json(*res);
      if (!report)
        return report.error();
      // A fresh folder: no older report; the check guards a reused one.
      if (report->started_at + 1000 >= started_at)
        return std::move(*report);
      last = "an older report";
    } else {
      last = keel::render(res.error());
    }
    std::this_thread::sleep_for(std::chrono::milliseconds{20});
  }
  return caf::make_error(ec::timeout,
                         "no recovery report in time (last: " + last + ")");
}

// Progress of one watched thread.
struct watch {
  const expected_outcomes* expect = nullptr;
  seq_t after = 0;
  uint64_t seen = 0;
  uint64_t errors = 0;
  uint64_t direct = 0;
  millis direct_at = 0;
  millis last_at = 0;
};

// Reads the history of every watched thread over one WebSocket, in rounds
// of requests with `window` in flight, until each has gained its outcomes.
// The gateway refuses (`busy`) more history requests under way on one
// connection than `max_history_in_flight`, 2.
class outcome_watcher {
public:
  static constexpr size_t window = 2;

  outcome_watcher(ws_client& ws, const std::vector<expected_outcomes>& expected)
    : ws_(ws), watches_(expected.size()), open_(expected.size()) {
    for (size_t i = 0; i < expected.size(); ++i) {
      watches_[i].expect = &expected[i];
      watches_[i].after = expected[i].after;
    }
    std::iota(open_.begin(), open_.end(), size_t{0});
  }

  // True when every watched thread has gained its outcomes.
  bool done() const noexcept {
    return open_.empty();
  }

  // Asks once for the new entries of every thread still open and reads
  // the answers; then drops the threads that are complete.
  caf::error poll() {
    size_t next = 0;
    size_t in_flight = 0;
    while (next < open_.size() || in_flight > 0) {
      while (next < open_.size() && in_flight < window) {
        auto i = open_[next++];
        if (auto err = ws_.send_text(protocol::history_request_frame(
              watches_[i].expect->thread, std::to_string(i), watches_[i].after,
              protocol::max_history_limit)))
          return err;
        ++in_flight;
      }
      auto msg = ws_.receive(std::chrono::seconds{30});
      if (!msg)
        return msg.error();
      --in_flight;
      if (auto err = on_frame(*msg))
        return err;
    }
    open_.erase(std::remove_if(open_.begin(), open_.end(),
                               [&](size_t i) {
                                 return watches_[i].seen
                                        >= watches_[i].expect->outcomes;
                               }),
                open_.end());
    return {};
  }

  // Fills the result's outcome counts and times (from `started_at`).
  void summarize(millis started_at, recovery_bench_result& result) const {
    result.all_answered = done();
    millis direct_at = 0;
    millis last_at = 0;
    for (auto& w : watches_) {
      result.outcomes_expected += w.expect->outcomes;
      result.outcomes_seen += w.seen;
      result.errors += w.errors;
      result.duplicate_answers += w.direct > 1 ? 1 : 0;
      direct_at = std::max(direct_at, w.direct_at);
      last_at = std::max(last_at, w.last_at);
    }
    if (direct_at > 0)
      result.to_pending_answered_ms
        = static_cast<double>(direct_at - started_at);
    if (last_at > 0)
      result.to_quiet_ms = static_cast<double>(last_at - started_at);
  }

private:
  caf::error on_frame(const ws_message& msg) {
    auto frame = protocol::decode_server_frame(msg.payload);
    if (!frame)
      return frame.error();
    auto& body = frame->body;
    if (frame->type == "error")
      return caf::make_error(ec::protocol_violation,
                             "the node refused a history request: "
                               + body.dump());
    if (frame->type != "history")
      return {}; // Not ours (no subscriptions: should not happen).
    auto& w = watches_.at(std::stoul(body.value("id", std::string{"0"})));
    for (auto& entry : body.at("entries"))
      on_entry(w, entry);
    return {};
  }

  static void on_entry(watch& w, const nlohmann::json& entry) {
    auto seq = entry.value("seq", seq_t{0});
    w.after = std::max(w.after, seq);
    auto kind = entry.value("kind", std::string{});
    if (kind != "reply" && kind != "error")
      return;
    auto at = entry.value("at", millis{0});
    ++w.seen;
    w.errors += kind == "error" ? 1 : 0;
    w.last_at = std::max(w.last_at, at);
    if (w.expect->pending_seq != 0
        && entry.value("reply_to", seq_t{0}) == w.expect->pending_seq) {
      ++w.direct;
      w.direct_at = std::max(w.direct_at, at);
    }
  }

  ws_client& ws_;
  std::vector<watch> watches_;
  // Indices of the watches still waiting for outcomes.
  std::vector<size_t> open_;
};

// Reads the history of every watched thread until each has gained its
// outcomes or the deadline passes; fills the result's outcome counts and
// times.
caf::error await_outcomes(const endpoint& ep,
                          const std::vector<expected_outcomes>& expected,
                          millis started_at, steady::time_point deadline,
                          recovery_bench_result& result) {
  auto client = ws_client::connect(ep);
  if (!client)
    return client.error();
  auto& ws = **client;
  if (auto hello = ws.receive(); !hello)
    return hello.error();
  outcome_watcher watcher{ws, expected};
  while (!watcher.done() && steady::now() < deadline) {
    if (auto err = watcher.poll())
      return err;
    if (!watcher.done())
      std::this_thread::sleep_for(std::chrono::milliseconds{50});
  }
  watcher.summarize(started_at, result);
  return {};
}

void read_node_figures(int pid, const endpoint& ep, uint64_t& peak,
                       uint64_t* rss, double* cpu) {
  if (pid > 0) {
    if (auto mem = read_memory_usage(pid)) {
      peak = mem->peak_rss_bytes;
      if (rss)
        *rss = mem->rss_bytes;
      if (auto used = read_cpu_seconds(pid); cpu && used)
        *cpu = *used;
      return;
    }
  }
  // Without the pid: the node reports the same /proc figures itself.
  if (auto status = api_call(ep, "GET", "/api/v1/status")) {
    peak = status->value("peak_rss_bytes", uint64_t{0});
    if (rss)
      *rss = status->value("rss_bytes", uint64_t{0});
  }
}

void run_oracle(const recovery_bench_options& opts,
                recovery_bench_result& result) {
  auto start = steady::now();
  auto out = run_command({opts.keelctl_binary, "verify", "--data-dir",
                          opts.data_dir, "--json"},
                         std::chrono::minutes{15});
  result.verify_ms = ms_since(start);
  // Exit 0: every invariant holds; 1: violations (both print the report).
  if (out.exit_code == 0 || out.exit_code == 1) {
    auto json = nlohmann::json::parse(out.out, nullptr, false);
    if (json.is_object()) {
      result.verified = true;
      result.verify = std::move(json);
      return;
    }
  }
  result.verify_error = "keelctl verify exited with "
                        + std::to_string(out.exit_code) + ": "
                        + tail(out.err.empty() ? out.out : out.err, 2000);
}

// Checks the options and creates the data folder.
caf::error prepare(const recovery_bench_options& opts) {
  if (opts.data_dir.empty())
    return invalid("no data folder given");
  if (holds_something(opts.data_dir))
    return invalid(opts.data_dir
                   + " already holds data: the benchmark needs a fresh "
                     "folder");
  for (auto& bin : {opts.node_binary, opts.keelctl_binary})
    if (::access(bin.c_str(), X_OK) != 0)
      return invalid(bin + " is not an executable");
  std::error_code err;
  fs::create_directories(opts.data_dir, err);
  if (err)
    return invalid("cannot create " + opts.data_dir + ": " + err.message());
  return {};
}

using progress_fn = std::function<void(const std::string&)>;

// A node started on the populated folder.
struct started_node {
  std::unique_ptr<node_process> process;
  // When every pending message must be answered.
  steady::time_point deadline;
};

// Starts the node on the populated folder and waits for its recovery
// report; fills the times up to the recovery.
caf::expected<started_node>
start_and_recover(const recovery_bench_options& opts,
                  recovery_bench_result& result, const progress_fn& say) {
  result.load_average = read_load_average();
  result.started_at = wall_clock_millis();
  auto t0 = steady::now();
  std::unique_ptr<node_process> node;
  try {
    node = std::make_unique<node_process>(
      opts.data_dir, node_yaml(opts.data_dir, random_hex(24)),
      opts.node_binary);
  } catch (const std::exception& e) {
    return caf::make_error(ec::unavailable, e.what());
  }
  result.to_listening_ms = ms_since(t0);
  say("listening after " + fixed(result.to_listening_ms, 0)
      + " ms; waiting for the recovery report");
  auto deadline = t0 + opts.answer_timeout;
  auto report = await_report(*node, result.started_at, deadline);
  if (!report)
    return report.error();
  result.report = std::move(*report);
  result.to_recovery_started_ms
    = static_cast<double>(result.report.started_at - result.started_at);
  result.to_recovery_finished_ms
    = static_cast<double>(result.report.finished_at - result.started_at);
  read_node_figures(node->pid(), node->address(), result.peak_rss_at_recovery,
                    nullptr, nullptr);
  return started_node{std::move(node), deadline};
}

} // namespace

caf::expected<recovery_bench_result>
run_recovery_benchmark(const recovery_bench_options& opts) {
  progress_fn say = [&](const std::string& line) {
    if (opts.progress)
      opts.progress(line);
  };
  if (auto err = prepare(opts))
    return err;
  recovery_bench_result result;
  auto populate = opts.populate;
  populate.db_dir = (fs::path{opts.data_dir} / "db").string();
  say("populating " + std::to_string(populate.threads) + " threads in "
      + populate.db_dir);
  auto populated = populate_crashed_store(populate);
  if (!populated)
    return populated.error();
  result.populated = std::move(*populated);
  say("populated in " + fixed(result.populated.seconds, 1) + " s ("
      + human_bytes(result.populated.disk_bytes) + "); starting keel-node");
  auto started = start_and_recover(opts, result, say);
  if (!started)
    return started.error();
  auto& node = *started->process;
  auto pid = node.pid();
  auto ep = node.address();
  say("recovered after " + fixed(result.to_recovery_finished_ms, 0)
      + " ms; waiting for " + std::to_string(result.populated.pending)
      + " pending messages to be answered");
  if (auto err = await_outcomes(ep, result.populated.expected,
                                result.started_at, started->deadline, result))
    return caf::make_error(ec::unavailable, "cannot read the node's histories: "
                                              + keel::render(err));
  read_node_figures(pid, ep, result.peak_rss_bytes, &result.rss_bytes,
                    &result.node_cpu_seconds);
  say("stopping keel-node (SIGTERM: it drains, then stops)");
  auto stop_start = steady::now();
  result.stop_exit_code = node.drain_stop();
  result.stop_ms = ms_since(stop_start);
  say("running keelctl verify on " + opts.data_dir);
  run_oracle(opts, result);
  return result;
}

} // namespace keel::bench
