#pragma once

// The seeded crash fuzzer: one generator of operations and kill plans driven by
// a single std::mt19937_64, and a runner that plays them against real keel-node
// processes, kills them (kill -9 at an instant, or an armed kill point),
// restarts them and checks the contract against its own record of
// acknowledgements, kept outside the node. On PostgreSQL (`--backend
// postgres`) it also kills the database server mid-traffic and starts it
// again; the node is not restarted and must carry on by itself.
//
// Tools: the fuzzer's node declares one tool, `mark` (a shell line that
// appends a line per run to a file named after the message and prints
// "marked <the message's id>"), and its scripted model calls it for every
// message whose text holds `tool_trigger`, then answers "answer to <the
// result>". A share of the planned messages carries the trigger, so kills
// land before, during and after tool runs (the kill points
// `tool_call_committed` and `tool_finished` included). The model's context
// window is the smallest a config allows and the other messages are long:
// threads are compacted (summaries by the same model), and kills land
// between a compaction's summaries and its commit (`compaction_summarized`).
//
// The generator is header-only and needs no node (a unit test checks that the
// same seed gives the same plan); the runner is in crash_fuzz.cpp, and the
// program that runs it (keel-crash-fuzz) gives it the nodes' store
// (`store_access`).
//
// Determinism: the whole plan (every operation, its thread, tree shape,
// cancels, resends, which messages call the tool, the kill mode, the kill
// point, its probability and seed, the number of acknowledgements before a
// kill -9 (of the node, or of its PostgreSQL server, and how long that stays
// down), whether a context record is corrupted before a restart, each
// generation's storage timeout) is a function of the seed alone: the generator
// tracks the model it expects (threads, tree, closed threads) and never looks
// at what the node did. The runner completes every planned operation of an
// iteration after the crash (resending the ones that got no answer), so the
// state after each iteration is the planned one, and only where the crash fell
// within an iteration (and so which thread's context is corrupted) depends on
// timing.

#include <array>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "keel/kill_point.hpp"
#include "keel/tools/pg_server.hpp"

namespace keel::fuzz {

// -- the plan ----------------------------------------------------------------

/// What one planned operation does.
enum class op_kind : uint8_t {
  /// A new message to an open thread (its first creates a root thread):
  /// must be acknowledged.
  send,
  /// The same client id again (contract 6): must be acknowledged as a
  /// duplicate with the original's seq.
  resend,
  /// A message to a cancelled thread: must be refused with `thread_closed`
  /// and never stored.
  send_closed,
  /// A child agent of `thread` named `child`: must answer `spawned`.
  spawn,
  /// Closes `thread` and its descendants: must answer `cancelled`.
  cancel,
};

inline const char* to_string(op_kind x) {
  switch (x) {
    case op_kind::send: return "send";
    case op_kind::resend: return "resend";
    case op_kind::send_closed: return "send-closed";
    case op_kind::spawn: return "spawn";
    default: return "cancel";
  }
}

/// What a message's text holds to make the fuzzer's scripted model call
/// its tool (see `message_text`).
inline constexpr const char* tool_trigger = "please call the mark tool";

/// The text of message `id`: with `tool`, one that asks for the tool;
/// else one long enough (about 60 tokens) that a thread passes its model's
/// small context window within about 8 exchanges and is compacted.
inline std::string message_text(const std::string& id, bool tool) {
  if (tool)
    return "fuzz " + id + " " + tool_trigger;
  return "fuzz " + id
         + " and some words more, so that every message takes its share of "
           "the model's context window and a thread of the fuzzer reaches "
           "its compaction after a few exchanges";
}

/// One planned operation.
struct op {
  op_kind kind = op_kind::send;
  /// The target thread (the parent for a spawn).
  std::string thread;
  /// Spawn: the child's thread id.
  std::string child;
  /// The frame's id: the message's client id for sends.
  std::string id;
  /// Sends: the text.
  std::string text;
  /// Sends: the text holds `tool_trigger` (the model calls the tool).
  bool tool = false;
};

/// One line, e.g. `send r0-1/m3.2`, `send r0-1/m3.4 +tool` (a message
/// that calls the tool) or `spawn r0-1>k0-4`.
inline std::string to_string(const op& x) {
  std::string result = to_string(x.kind);
  result += ' ';
  result += x.thread;
  if (x.kind == op_kind::spawn)
    return result + ">" + x.child;
  if (x.kind == op_kind::cancel)
    return result;
  return result + "/" + x.id + (x.tool ? " +tool" : "");
}

/// Where a planned crash falls.
struct kill_plan {
  /// True: arm `point`; false: kill -9 after `after_acks` acknowledgements.
  bool at_point = false;
  size_t after_acks = 0;
  /// With `at_point` false: the kill -9 after `after_acks` hits the
  /// PostgreSQL server, not the node. The server stays down for
  /// `database_outage`, then starts again while the remaining operations go
  /// on; the node is never restarted for it. No recovery crash and no
  /// corrupted record go with it (both need a restart of the node).
  bool database_kill = false;
  std::chrono::milliseconds database_outage{0};
  kill_point point = kill_point::batch_written;
  double probability = 1.0;
  uint64_t node_seed = 1;
  /// Whether the read histories are extended right before a kill -9.
  bool snapshot_before_kill = false;
  /// Also arm the first restart (a crash during recovery).
  bool recovery_crash = false;
  kill_point recovery_point = kill_point::batch_written;
  double recovery_probability = 1.0;
  uint64_t recovery_seed = 1;
  /// While the node is down before a restart of this iteration, overwrite
  /// one context record of a thread that a remaining send goes to with
  /// bytes no decoder reads (once per iteration): that send loads the
  /// thread, which moves its context to quarantine.
  bool corrupt_context = false;
};

/// The `KEEL_KILL_AT` value for a point, probability and seed.
inline std::string kill_at_spec(kill_point point, double probability,
                                uint64_t seed) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", probability);
  return std::string{to_string(point)} + ":" + buf + ":" + std::to_string(seed);
}

/// One line, e.g. `kill -9 after ack 7`, `kill point batch_written:0.5:9` or
/// `kill -9 of PostgreSQL after ack 3, down 250 ms`.
inline std::string to_string(const kill_plan& x) {
  std::string result;
  if (x.at_point)
    result = "kill point " + kill_at_spec(x.point, x.probability, x.node_seed);
  else if (x.database_kill)
    result = "kill -9 of PostgreSQL after ack " + std::to_string(x.after_acks)
             + ", down " + std::to_string(x.database_outage.count()) + " ms";
  else
    result = "kill -9 after ack " + std::to_string(x.after_acks);
  if (!x.at_point && x.snapshot_before_kill)
    result += " (histories read first)";
  if (x.recovery_crash)
    result += ", then kill point "
              + kill_at_spec(x.recovery_point, x.recovery_probability,
                             x.recovery_seed)
              + " armed during recovery";
  if (x.corrupt_context)
    result += ", a context record corrupted before the restart";
  return result;
}

/// One crash/restart cycle.
struct iteration_plan {
  uint64_t index = 0;
  /// A generation is one data folder; a new one starts empty.
  uint64_t generation = 0;
  bool first_of_generation = false;
  /// The generation's `storage.request_timeout` (empty: the node's
  /// default); a short one makes synced writes time out now and then.
  std::string storage_timeout;
  std::vector<op> ops;
  kill_plan kill;
};

// -- the model the generator expects ------------------------------------------

/// What the generator knows of one thread.
struct thread_model {
  /// Empty for a root.
  std::string parent;
  std::vector<std::string> children;
  int depth = 0;
  bool closed = false;
  /// Client ids of the messages planned for it (resend candidates).
  std::vector<std::string> sent;
  /// Those of them that call the tool.
  std::set<std::string> tool_sent;
};

/// What the node offers; the generator plans only what it can use.
struct features {
  bool spawn = true;
  bool cancel = true;
  /// The node's store is on a PostgreSQL server the fuzzer runs (and may
  /// kill).
  bool database_server = false;
  /// The node runs the turn loop: messages may call the fuzzer's tool, the
  /// model's small context window makes threads compact, and the kill
  /// points of tool steps and compactions are armed.
  bool tools = true;
};

/// Shape of the traffic.
struct generator_options {
  size_t min_ops = 8;
  size_t max_ops = 20;
  /// Threads (roots and children) per generation.
  size_t max_threads = 32;
  /// Depth of the deepest child (a root has depth 0).
  int max_depth = 3;
  /// Iterations per generation (data folder).
  uint64_t generation_length = 10;
  /// Percent of generations with a short storage timeout.
  unsigned short_storage_timeout_percent = 50;
  /// Percent of iterations that corrupt a context record (see
  /// `kill_plan::corrupt_context`).
  unsigned corrupt_context_percent = 15;
  /// Percent of new messages that call the tool, and in iterations armed at
  /// a tool kill point.
  unsigned tool_percent = 20;
  unsigned tool_percent_at_tool_point = 60;
};

/// Draws iteration plans from one seeded std::mt19937_64.
class generator {
public:
  generator(uint64_t seed, features feats, generator_options opts = {})
    : rng_(seed), features_(feats), opts_(opts) {
    // The first round visits every kill mode once (kill -9 at an instant,
    // each kill point, and on PostgreSQL kill -9 of the server), in a seeded
    // order; later ones are drawn with a bias toward the interesting points.
    // Without a database server the plans are those of a generator that
    // knows no database kill: the same draws in the same order.
    first_round_.push_back(kill9_node);
    for (auto p : all_kill_points())
      if (features_.tools || !tool_point(p))
        first_round_.push_back(static_cast<int>(p));
    if (features_.database_server)
      first_round_.push_back(kill9_database);
    for (size_t i = first_round_.size(); i > 1; --i)
      std::swap(first_round_[i - 1], first_round_[uniform(0, i - 1)]);
  }

  /// The next iteration's plan (advances the model).
  iteration_plan next() {
    iteration_plan plan;
    plan.index = iteration_++;
    if (plan.index > 0 && plan.index % opts_.generation_length == 0) {
      ++generation_;
      threads_.clear();
      order_.clear();
    }
    plan.generation = generation_;
    plan.first_of_generation = plan.index % opts_.generation_length == 0;
    if (plan.first_of_generation)
      storage_timeout_ = draw_storage_timeout();
    plan.storage_timeout = storage_timeout_;
    plan.kill = draw_kill(plan.index);
    auto n = uniform(opts_.min_ops, opts_.max_ops);
    size_t acks = 0;
    for (size_t k = 0; k < n; ++k) {
      plan.ops.push_back(draw_op(plan, k));
      auto kind = plan.ops.back().kind;
      if (kind == op_kind::send || kind == op_kind::resend)
        ++acks;
    }
    if (acks == 0) {
      plan.ops.push_back(new_message(plan, n, pick_open_or_new_root()));
      ++acks;
    }
    if (!plan.kill.at_point)
      plan.kill.after_acks = uniform(1, acks);
    return plan;
  }

  /// The model after the plans drawn so far (this generation).
  const std::map<std::string, thread_model>& threads() const {
    return threads_;
  }

private:
  // Uniform in [lo, hi]; our own so that plans do not depend on the
  // standard library's distributions.
  size_t uniform(size_t lo, size_t hi) {
    return lo + static_cast<size_t>(rng_() % (hi - lo + 1));
  }

  bool chance(unsigned percent) {
    return uniform(0, 99) < percent;
  }

  template <class T>
  const T& pick(const std::vector<T>& xs) {
    return xs[uniform(0, xs.size() - 1)];
  }

  static double draw_from(std::initializer_list<double> xs, size_t i) {
    return *(xs.begin() + static_cast<std::ptrdiff_t>(i % xs.size()));
  }

  /// A generation's storage timeout: the default, or one short enough that
  /// some synced writes outlast it (and long enough that most do not).
  std::string draw_storage_timeout() {
    static const std::vector<std::string> short_ones{"5ms", "10ms", "20ms"};
    if (!chance(opts_.short_storage_timeout_percent))
      return {};
    return pick(short_ones);
  }

  /// Kill modes as the generator draws them: a kill point's number, or one
  /// of these.
  static constexpr int kill9_node = -1;
  static constexpr int kill9_database = -2;

  /// Whether `p` is reached only by the turn loop (tool runs, compaction).
  static bool tool_point(kill_point p) {
    return p == kill_point::tool_call_committed
           || p == kill_point::tool_finished
           || p == kill_point::compaction_summarized;
  }

  /// A kill mode after the first round. Weights: instant 3;
  /// session_created 2, session_written 2, provider_call 2, call_completed
  /// 3, message_enqueued 3, tree_link_written 3, batch_written 3,
  /// tool_call_committed 3, tool_finished 3, compaction_summarized 3 (0, 0
  /// and 0 without tools); the
  /// database server 3 (0 without one: the draws are those of a generator
  /// that knows no database kill).
  int draw_later_mode() {
    int weights[] = {3, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3};
    static_assert(sizeof(weights) / sizeof(weights[0]) == 11,
                  "instant and every kill point");
    if (!features_.tools)
      weights[8] = weights[9] = weights[10] = 0;
    auto database_weight = features_.database_server ? 3 : 0;
    auto total = database_weight;
    for (auto w : weights)
      total += w;
    auto x = static_cast<int>(uniform(0, static_cast<size_t>(total - 1)));
    auto mode = kill9_node;
    for (auto w : weights) {
      if (x < w)
        return mode;
      x -= w;
      ++mode;
    }
    return kill9_database;
  }

  /// How long a killed database server stays down before it starts again
  /// (starting takes a moment more: crash recovery from its WAL).
  std::chrono::milliseconds draw_database_outage() {
    static const std::vector<int> outages_ms{0, 250, 1000, 2500};
    return std::chrono::milliseconds{pick(outages_ms)};
  }

  kill_plan draw_kill(uint64_t index) {
    kill_plan k;
    auto mode = index < first_round_.size() ? first_round_[index]
                                            : draw_later_mode();
    k.at_point = mode >= 0;
    k.database_kill = mode == kill9_database;
    if (k.at_point) {
      k.point = static_cast<kill_point>(mode);
      // The first round fires at the first chance: every point is hit.
      k.probability = index < first_round_.size() ? 1.0
                                                  : probability_for(k.point);
      k.node_seed = rng_() | 1;
    }
    if (k.database_kill)
      k.database_outage = draw_database_outage();
    k.snapshot_before_kill = chance(50);
    k.recovery_crash = !k.database_kill && chance(20);
    if (k.recovery_crash) {
      // Recovery resumes interrupted turns: their next model call, and the
      // tool calls of messages not begun yet (never those a crash cut).
      static const std::vector<kill_point> at_recovery{
        kill_point::batch_written,   kill_point::provider_call,
        kill_point::call_completed,  kill_point::message_enqueued,
        kill_point::session_written, kill_point::tool_call_committed,
        kill_point::tool_finished,   kill_point::compaction_summarized};
      static const std::vector<kill_point> at_recovery_without_tools{
        at_recovery.begin(), at_recovery.end() - 3};
      k.recovery_point = pick(features_.tools ? at_recovery
                                              : at_recovery_without_tools);
      k.recovery_probability = probability_for(k.recovery_point);
      k.recovery_seed = rng_() | 1;
    }
    k.corrupt_context = !k.database_kill
                        && chance(opts_.corrupt_context_percent);
    return k;
  }

  double probability_for(kill_point p) {
    switch (p) {
      case kill_point::provider_call:
      case kill_point::call_completed:
      case kill_point::batch_written:
        // Reached several times a turn: often fire later.
        return draw_from({1.0, 0.5, 0.2, 0.1, 0.05}, uniform(0, 4));
      default: return draw_from({1.0, 0.5, 0.34}, uniform(0, 2));
    }
  }

  std::vector<std::string> open_threads(bool with_room_for_child) const {
    std::vector<std::string> result;
    for (auto& t : order_) {
      auto& m = threads_.at(t);
      if (!m.closed && (!with_room_for_child || m.depth < opts_.max_depth))
        result.push_back(t);
    }
    return result;
  }

  std::vector<std::string> closed_threads() const {
    std::vector<std::string> result;
    for (auto& t : order_)
      if (threads_.at(t).closed)
        result.push_back(t);
    return result;
  }

  /// Whether a new thread fits; plans armed at a point only new threads
  /// reach may go a little over.
  bool room() const {
    return threads_.size() < opts_.max_threads + (wants_new_ ? 12 : 0);
  }

  std::string new_root() {
    auto id = "r" + std::to_string(generation_) + "-"
              + std::to_string(threads_.size());
    threads_[id] = thread_model{};
    order_.push_back(id);
    return id;
  }

  std::string pick_open_or_new_root() {
    auto open = open_threads(false);
    if (open.empty() || (room() && chance(10)))
      return new_root();
    return pick(open);
  }

  /// Whether a new message of `plan` calls the tool: more often when the
  /// plan arms a tool kill point.
  bool draw_tool(const iteration_plan& plan) {
    if (!features_.tools)
      return false;
    auto at_tool_point = plan.kill.at_point && tool_point(plan.kill.point);
    return chance(at_tool_point ? opts_.tool_percent_at_tool_point
                                : opts_.tool_percent);
  }

  op new_message(const iteration_plan& plan, size_t k,
                 const std::string& thread) {
    op x;
    x.kind = op_kind::send;
    x.thread = thread;
    x.id = "m" + std::to_string(plan.index) + "." + std::to_string(k);
    x.tool = draw_tool(plan);
    x.text = message_text(x.id, x.tool);
    auto& model = threads_[thread];
    model.sent.push_back(x.id);
    if (x.tool)
      model.tool_sent.insert(x.id);
    return x;
  }

  /// The weights of the operation kinds, in the order of `op_choice`.
  enum op_choice : size_t {
    choose_new_root,
    choose_send,
    choose_child_send,
    choose_spawn,
    choose_cancel,
    choose_resend,
    choose_send_closed,
    op_choices,
  };

  /// The threads each operation kind may target.
  struct op_targets {
    std::vector<std::string> open;
    /// Open threads with room for a child.
    std::vector<std::string> parents;
    /// Open children.
    std::vector<std::string> children;
    /// Open threads with a message to resend.
    std::vector<std::string> resendable;
    std::vector<std::string> closed;
  };

  // Draws an operation kind, with weights biased toward what reaches the
  // planned kill point, among those that have a target.
  op draw_op(const iteration_plan& plan, size_t k) {
    auto point = plan.kill.at_point ? std::optional<kill_point>{plan.kill.point}
                                    : std::nullopt;
    wants_new_ = point == kill_point::session_created
                 || point == kill_point::session_written
                 || point == kill_point::tree_link_written;
    auto targets = op_targets_now();
    auto weights = op_weights(point, targets);
    unsigned total = 0;
    for (auto w : weights)
      total += w;
    if (total == 0)
      return new_message(plan, k, new_root());
    auto x = static_cast<unsigned>(uniform(0, total - 1));
    size_t choice = 0;
    while (x >= weights[choice])
      x -= weights[choice++];
    switch (choice) {
      case choose_new_root: return new_message(plan, k, new_root());
      case choose_send: return new_message(plan, k, pick(targets.open));
      case choose_child_send:
        return new_message(plan, k, pick(targets.children));
      case choose_spawn: return draw_spawn(plan, k, targets.parents);
      case choose_cancel: return draw_cancel(plan, k, targets);
      case choose_resend: return draw_resend(targets.resendable);
      default: return draw_send_closed(plan, k, targets.closed);
    }
  }

  op_targets op_targets_now() const {
    op_targets result;
    result.open = open_threads(false);
    result.parents = open_threads(true);
    for (auto& t : result.open) {
      if (!threads_.at(t).parent.empty())
        result.children.push_back(t);
      if (!threads_.at(t).sent.empty())
        result.resendable.push_back(t);
    }
    result.closed = closed_threads();
    return result;
  }

  /// The weight of each `op_choice`: zero for the kinds without a target.
  std::array<unsigned, op_choices> op_weights(std::optional<kill_point> point,
                                              const op_targets& targets) const {
    std::array<unsigned, op_choices> w{};
    w[choose_new_root] = 4;
    w[choose_send] = 50;
    w[choose_child_send] = 0;
    w[choose_spawn] = features_.spawn ? 6 : 0;
    w[choose_cancel] = features_.cancel ? 3 : 0;
    w[choose_resend] = 6;
    w[choose_send_closed] = features_.cancel ? 4 : 0;
    // A session is created by a new root's first message (spawned children
    // get theirs with the spawn); its first provider call follows.
    if (point == kill_point::session_created)
      w[choose_new_root] = 30;
    if (point == kill_point::session_written) {
      w[choose_new_root] = 20;
      w[choose_spawn] *= 3;
    }
    if (point == kill_point::tree_link_written)
      w[choose_spawn] *= 4;
    if (point == kill_point::message_enqueued || features_.spawn)
      w[choose_child_send] = point == kill_point::message_enqueued ? 40 : 20;
    if (!room()) {
      w[choose_new_root] = 0;
      w[choose_spawn] = 0;
    }
    if (targets.open.empty())
      w[choose_send] = w[choose_cancel] = 0;
    if (targets.children.empty())
      w[choose_child_send] = 0;
    if (targets.parents.empty())
      w[choose_spawn] = 0;
    if (targets.resendable.empty())
      w[choose_resend] = 0;
    if (targets.closed.empty())
      w[choose_send_closed] = 0;
    // Keep at least one root open so traffic never stops.
    if (targets.open.size() < 2)
      w[choose_cancel] = 0;
    return w;
  }

  op draw_spawn(const iteration_plan& plan, size_t k,
                const std::vector<std::string>& parents) {
    // Prefer the newest possible parents: deeper trees.
    auto& parent = chance(50) ? parents.back() : pick(parents);
    op s;
    s.kind = op_kind::spawn;
    s.thread = parent;
    s.child = "k" + std::to_string(generation_) + "-"
              + std::to_string(threads_.size());
    s.id = "s" + std::to_string(plan.index) + "." + std::to_string(k);
    auto& child = threads_[s.child];
    child.parent = parent;
    child.depth = threads_[parent].depth + 1;
    threads_[parent].children.push_back(s.child);
    order_.push_back(s.child);
    return s;
  }

  op draw_cancel(const iteration_plan& plan, size_t k,
                 const op_targets& targets) {
    op c;
    c.kind = op_kind::cancel;
    // Mostly children: cancelling a root closes a whole tree.
    c.thread = !targets.children.empty() && chance(80) ? pick(targets.children)
                                                       : pick(targets.open);
    c.id = "x" + std::to_string(plan.index) + "." + std::to_string(k);
    close(c.thread);
    return c;
  }

  op draw_resend(const std::vector<std::string>& resendable) {
    op r;
    r.kind = op_kind::resend;
    r.thread = pick(resendable);
    r.id = pick(threads_[r.thread].sent);
    r.tool = threads_[r.thread].tool_sent.count(r.id) > 0;
    r.text = message_text(r.id, r.tool);
    return r;
  }

  op draw_send_closed(const iteration_plan& plan, size_t k,
                      const std::vector<std::string>& closed) {
    op c;
    c.kind = op_kind::send_closed;
    c.thread = pick(closed);
    c.id = "c" + std::to_string(plan.index) + "." + std::to_string(k);
    c.tool = draw_tool(plan);
    c.text = message_text(c.id, c.tool);
    return c;
  }

  void close(const std::string& thread) {
    auto& m = threads_[thread];
    m.closed = true;
    for (auto& c : m.children)
      close(c);
  }

  std::mt19937_64 rng_;
  features features_;
  generator_options opts_;
  std::vector<int> first_round_;
  bool wants_new_ = false;
  uint64_t iteration_ = 0;
  uint64_t generation_ = 0;
  std::string storage_timeout_;
  std::map<std::string, thread_model> threads_;
  /// Thread ids in creation order (picks by index stay deterministic).
  std::vector<std::string> order_;
};

// -- the runner ---------------------------------------------------------------

/// How the runner reaches the store under its nodes, which the program
/// that runs it sets up (a folder per node on RocksDB, or a database per
/// node on a PostgreSQL server of its own).
struct store_access {
  /// The nodes' data is on `database` (else in RocksDB folders).
  bool postgres = false;
  /// The `storage:` section of a node on `data_dir`, with `extra` (more
  /// `storage:` keys, indented) in it; empty for none.
  std::function<std::string(const std::string& data_dir,
                            const std::string& extra)>
    storage_yaml;
  /// The keelctl arguments that read the data of the node on `data_dir`.
  std::function<std::vector<std::string>(const std::string& data_dir)>
    data_args;
  /// Writes `value` as context record `seq` of `thread` in the data of the
  /// stopped node on `data_dir`, behind the store's back. Returns "OK" or
  /// why not.
  std::function<std::string(const std::string& data_dir,
                            const std::string& thread, uint64_t seq,
                            const std::string& value)>
    write_context_record;
  /// The URL of the database of the node on `data_dir` (`postgres` only).
  std::function<std::string(const std::string& data_dir)> database_url;
  /// The PostgreSQL server (`postgres` only; started on first use), which
  /// plans kill and start again.
  std::function<pg_server&()> database;
};

/// What a run does (keel-crash-fuzz's command line).
struct fuzz_options {
  uint64_t seed = 0;
  /// Where the nodes keep their data: "rocksdb" (a folder each) or
  /// "postgres" (a database each on a PostgreSQL server the run starts for
  /// itself; adds kill -9 of that server to the plans).
  std::string backend = "rocksdb";
  uint64_t iterations = 20;
  /// Stop starting iterations after this long (0: no limit).
  std::chrono::seconds duration{0};
  std::string node_binary;
  std::string keelctl_binary;
  /// Where data folders go; empty: a fresh temp folder, removed after a
  /// passing run.
  std::string work_dir;
  bool json = false;
  bool verbose = false;
  /// Stop gracefully and run `keelctl verify` every this many iterations
  /// (and after the last one).
  uint64_t verify_every = 5;
  /// The scripted provider's latency (so kills land mid-turn).
  std::string provider_delay = "3ms";
  /// The node's `threads.idle_timeout`: short, so threads passivate between
  /// operations and later sends bring them back.
  std::string idle_timeout = "200ms";
  /// How long a restarted node may take to answer everything.
  std::chrono::seconds settle_timeout{60};
  /// Fail unless spawn, cancel, tools, kill points, verify, passivation,
  /// quarantine and (on PostgreSQL) a kill of the database server were all
  /// exercised.
  bool require_all = false;
  /// Tests the fuzzer itself: corrupts its own record once ("lost": an
  /// acknowledgement the node never gave; "prefix": a log entry read before
  /// a crash; "duplicate": a second outcome of one message), so that the
  /// run must fail with that violation.
  std::string sabotage;
  generator_options shape;
  /// The nodes' store (set by the program, not by the command line).
  store_access store;
};

/// The figures of a run (`--json`).
struct fuzz_stats {
  uint64_t iterations = 0;
  uint64_t generations = 0;
  uint64_t operations = 0;
  uint64_t sends = 0;
  uint64_t resends = 0;
  uint64_t refused_sends = 0;
  uint64_t spawns = 0;
  uint64_t cancels = 0;
  /// Deaths: kill -9 by the fuzzer plus kill points that fired.
  uint64_t kills = 0;
  uint64_t kill9_instant = 0;
  /// kill -9 after an armed point did not fire.
  uint64_t kill9_fallback = 0;
  uint64_t kill_point_deaths = 0;
  /// Kill point deaths while the node was booting (recovering).
  uint64_t boot_deaths = 0;
  /// kill -9 of the PostgreSQL server (not counted in `kills`: the node
  /// lives on).
  uint64_t pg_kills = 0;
  /// Kills after which the restarted node answered everything and every
  /// check held.
  uint64_t kills_survived = 0;
  std::map<std::string, uint64_t> kill_points_fired;
  std::map<std::string, uint64_t> kill_points_armed;
  uint64_t restarts = 0;
  uint64_t clean_stops = 0;
  /// Recoveries reported by GET /api/v1/recovery after a crash.
  uint64_t recoveries = 0;
  uint64_t recovered_inbox_messages = 0;
  uint64_t recovered_outbox_messages = 0;
  uint64_t recovery_problems = 0;
  /// Conversations stopped for being idle, as `GET /api/v1/status` counts
  /// them at the end of each iteration (those of a life cut short by a
  /// crash after its last count are missed).
  uint64_t passivations = 0;
  /// Storage requests the client saw time out (`storage.request_timeout`):
  /// errors answering a request that name `request_timeout`, and `retrying`
  /// status frames that do.
  uint64_t storage_timeouts = 0;
  /// Context records the fuzzer corrupted, and the threads `keelctl verify`
  /// found in quarantine (those and only those with a corrupted record).
  uint64_t corrupted_records = 0;
  uint64_t quarantined_threads = 0;
  /// Answered messages that asked for the tool; the tool's runs (marks it
  /// left); tool steps in the logs with its output, and with "interrupted
  /// by a restart" (a call cut by a crash or stop, not run again).
  uint64_t tool_messages = 0;
  uint64_t tool_runs = 0;
  uint64_t tool_results = 0;
  uint64_t tool_interrupted = 0;
  uint64_t acked = 0;
  uint64_t answered = 0;
  uint64_t forwarded = 0;
  uint64_t lost = 0;
  uint64_t duplicates = 0;
  uint64_t prefix_checks = 0;
  uint64_t verify_runs = 0;
  uint64_t verify_failures = 0;
  uint64_t violations = 0;
  double seconds = 0;
  features used;
  bool kill_points_available = false;
  bool verify_available = false;
};

nlohmann::json to_json(const fuzz_stats& x);

/// Runs the fuzzer; prints progress (and, on failure, the seed, the
/// operations, the crash point and a replay command) to stderr. Returns 0
/// when every check held.
int run(const fuzz_options& opts, fuzz_stats& stats, const std::string& argv0);

} // namespace keel::fuzz
