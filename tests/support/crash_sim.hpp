#pragma once

// The in-process deterministic crash simulation: a whole node tree
// on CAF's test coordinator with a scripted provider, driven by a random
// sequence of operations drawn from one seed — client messages, resends,
// spawns, cancels, kills of conversations, orchestrator, persistence and
// provider pools, node crashes and restarts, moves of the clock — then
// settled and checked against the contract: every acknowledged message has
// exactly one outcome, nothing is processed twice, cancelled threads stay
// closed, children's outcomes reach their parents, and the stopped store
// passes the oracle (`verify_store`).
//
// The same seed gives the same operations, the same interleaving and the
// same trace hash. Opening RocksDB costs more than a whole simulated run, so
// seeds run in batches on one node: each seed has threads of its own (ids
// prefixed `s<seed>-`), the run settles (every message and timer done,
// every thread passivated) and the clock moves past every restart backoff
// before the next seed starts, so a seed does the same alone or in a batch.
// The oracle runs on the store once the batch's node has stopped.

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <caf/all.hpp>

#include "keel/agent_tools.hpp"
#include "keel/lookup.hpp"
#include "keel/orchestrator.hpp"
#include "keel/store.hpp"
#include "keel/text.hpp"
#include "keel/tools/verify.hpp"
#include "node_fixture.hpp"
#include "store_fixture.hpp"
#include "temp_dir.hpp"

namespace keel::sim {

using namespace std::chrono_literals;

// -- operations ---------------------------------------------------------------

enum class op_kind : uint8_t {
  /// A client message with a new client id.
  route,
  /// A client message again, with the id and text of an earlier one.
  resend,
  /// A child agent spawned by the client (orchestrator `atom::spawn`).
  spawn,
  /// A cancel of a thread and its descendants.
  cancel,
  /// An actor killed through the root supervisor (`atom::kill_child`).
  kill,
  /// The clock moves.
  advance,
  /// The whole node dies at once (untrappable kill of the root) and boots
  /// again on the same data: the in-process kill -9.
  crash,
  /// The node stops cleanly and boots again.
  restart,
  /// Persistence answers nothing for `delay`, longer than the
  /// conversations' storage timeout, while everything else runs and the
  /// clock moves: requests to it time out, then land late.
  stall,
  /// The node dies as with `crash`; while it is down, context entry `seq`
  /// of `thread` is overwritten with bytes no decoder reads (a bad disk, a
  /// bad restore); then it boots. The next load of the thread moves its
  /// context to quarantine and starts it fresh.
  corrupt,
};

inline const char* to_string(op_kind x) {
  static constexpr const char* names[]
    = {"route",   "resend", "spawn",   "cancel", "kill",
       "advance", "crash",  "restart", "stall",  "corrupt"};
  return names[static_cast<size_t>(x)];
}

/// One operation of a run.
struct op {
  op_kind kind = op_kind::route;
  /// route/resend: the thread; spawn: the parent; cancel: the thread.
  std::string thread;
  /// route/resend: the client id; spawn: the child; kill: the path.
  std::string arg;
  /// route/resend: the text.
  std::string text;
  /// advance, stall: how far the clock moves.
  caf::timespan delay{0};
  /// corrupt: the seq of the context entry overwritten.
  uint64_t seq = 0;
  /// Scheduler steps (one message each) run after the operation; 0 runs
  /// until no message is left (the clock stays).
  uint32_t steps = 0;
};

inline std::string to_string(const op& x) {
  std::string result = to_string(x.kind);
  auto add = [&](const std::string& s) {
    if (!s.empty())
      result += " " + s;
  };
  add(x.thread);
  add(x.arg);
  if (!x.text.empty())
    result += " \"" + x.text + "\"";
  if (x.kind == op_kind::corrupt)
    result += " context/" + std::to_string(x.seq);
  if (x.kind == op_kind::advance || x.kind == op_kind::stall)
    result += " "
              + std::to_string(
                std::chrono::duration_cast<std::chrono::milliseconds>(x.delay)
                  .count())
              + "ms";
  result += x.steps == 0 ? " (run all)"
                         : " (" + std::to_string(x.steps) + " steps)";
  return result;
}

/// Words in message texts and what the scripted provider does with them
/// (`sim_config`). Only matched steps: a text without one is echoed at
/// once, and no step depends on what the provider answered before.
namespace words {

constexpr const char* later = "#later";    // Reply after 2 s.
constexpr const char* slow1 = "#s1";       // Reply after 1 s.
constexpr const char* slow8 = "#s8";       // Reply after 8 s.
constexpr const char* spawn_a = "#spawnA"; // spawn_agent "a" ("do work").
constexpr const char* spawn_b = "#spawnB"; // spawn_agent "b" (spawns "a").
constexpr const char* fail = "#fail";      // Provider error (overloaded).
constexpr const char* bad = "#bad";        // Provider error (invalid_request).
constexpr const char* crash = "#crash";    // The provider worker crashes.

} // namespace words

/// How long a conversation waits for each storage request in the
/// simulation (`storage.request_timeout`); every stall lasts longer.
constexpr caf::timespan storage_timeout = 2s;

/// The prefix of every thread id of seed `seed`.
inline std::string thread_prefix(uint64_t seed) {
  return "s" + std::to_string(seed) + "-";
}

/// Draws the operations of one run from a seed. The plan does not depend on
/// outcomes, so it is printed and replayed as it is.
class generator {
public:
  explicit generator(uint64_t seed) : rng_(seed), prefix_(thread_prefix(seed)) {
    // nop
  }

  std::vector<op> plan() {
    std::vector<op> result;
    auto root_count = 2 + pick(3);
    for (size_t i = 0; i < root_count; ++i) {
      auto r = prefix_ + "r" + std::to_string(i);
      roots_.push_back(r);
      // Children the scripted spawn_agent calls create.
      tool_children_.push_back(r + ".a");
      tool_children_.push_back(r + ".b");
      tool_children_.push_back(r + ".b.a");
    }
    auto count = 25 + pick(31);
    for (size_t i = 0; i < count; ++i)
      result.push_back(next());
    return result;
  }

private:
  size_t pick(size_t n) {
    return static_cast<size_t>(rng_() % n);
  }

  bool chance(size_t percent) {
    return pick(100) < percent;
  }

  template <class T>
  const T& any(const std::vector<T>& xs) {
    return xs[pick(xs.size())];
  }

  // Mostly roots; sometimes a child spawned by the client, or one a tool
  // call may have spawned (before or after its parent spawned it: a client
  // message first makes it a root, and the parent's spawn is then refused).
  std::string thread() {
    auto r = pick(100);
    if (r < 20 && !spawned_.empty())
      return any(spawned_);
    if (r < 35)
      return any(tool_children_);
    return any(roots_);
  }

  std::string text(const std::string& id) {
    static const std::vector<std::string> kinds
      = {"hello",      "hello",      "hello",        words::later,
         words::slow1, words::slow8, words::spawn_a, words::spawn_b,
         words::fail,  words::bad,   words::crash};
    return any(kinds) + " " + id;
  }

  // A kill target: half the time a conversation (maybe a child a tool call
  // spawned); RocksDB reopens (a kill of persistence) cost the most, so
  // they come less often than the others. Killing the conversations
  // supervisor kills every conversation at once: the orchestrator must
  // start those with pending work again.
  std::string kill_path() {
    if (chance(50))
      return "conversations/" + (chance(30) ? any(tool_children_) : thread());
    std::vector<std::string> paths = {"orchestrator",
                                      "orchestrator",
                                      "persistence",
                                      "providers/default",
                                      "providers/default",
                                      "providers/default/router",
                                      "providers/default/router",
                                      "providers/default/script",
                                      "providers/default/script",
                                      "conversations",
                                      "dead_letters"};
    return any(paths);
  }

  op next() {
    op x;
    auto r = pick(1000);
    if (r < 400) {
      x.kind = op_kind::route;
      x.thread = thread();
      x.arg = "c" + std::to_string(++ids_);
      x.text = text(x.arg);
      sent_.push_back(x);
    } else if (r < 470 && !sent_.empty()) {
      auto& earlier = any(sent_);
      x.kind = op_kind::resend;
      x.thread = earlier.thread;
      x.arg = earlier.arg;
      x.text = earlier.text;
    } else if (r < 520) {
      x.kind = op_kind::spawn;
      x.thread = chance(70) ? any(roots_) : thread();
      x.arg = x.thread + ".k" + std::to_string(++spawns_);
      spawned_.push_back(x.arg);
    } else if (r < 550) {
      x.kind = op_kind::cancel;
      x.thread = chance(50) ? any(tool_children_) : thread();
    } else if (r < 660) {
      x.kind = op_kind::kill;
      x.arg = kill_path();
    } else if (r < 982) {
      x.kind = op_kind::advance;
      static const std::vector<caf::timespan> delays
        = {10ms, 100ms, 500ms, 1s, 2s, 5s, 9s, 25s};
      x.delay = any(delays);
    } else if (r < 992) {
      stall(x);
    } else if (r < 996 || (r < 997 && sent_.empty())) {
      x.kind = op_kind::crash;
    } else if (r < 997) {
      // A thread the run sent to: the run's final reads load it, so its
      // quarantine happens within the run whatever comes after.
      x.kind = op_kind::corrupt;
      x.thread = any(sent_).thread;
      x.seq = 1 + pick(3);
    } else {
      x.kind = op_kind::restart;
    }
    // Half of the operations let only a few messages through before the
    // next one, so operations overlap with turns, commits and restarts.
    x.steps = chance(50) ? 0 : static_cast<uint32_t>(1 + pick(40));
    return x;
  }

  // A stall a little past the storage timeout (answers to requests sent
  // just before it arrive late) or long enough that the reads back after
  // the first timeouts time out as well.
  void stall(op& x) {
    static const std::vector<caf::timespan> delays = {2500ms, 3s, 5s, 9s};
    static_assert(storage_timeout < 2500ms);
    x.kind = op_kind::stall;
    x.delay = any(delays);
  }

  std::mt19937_64 rng_;
  std::string prefix_;
  std::vector<std::string> roots_;
  std::vector<std::string> tool_children_;
  std::vector<std::string> spawned_;
  std::vector<op> sent_;
  uint64_t ids_ = 0;
  uint64_t spawns_ = 0;
};

// -- the node -----------------------------------------------------------------

/// The scripted provider's steps (by the words above) and a node tuned for
/// the simulation: no retries, breakers that never open, no jitter (it
/// draws from std::random_device), restart intensities no run reaches, a
/// short idle timeout so that threads passivate, a short storage timeout
/// (stalls exceed it).
inline node_config sim_config(const std::string& data_dir) {
  auto step = [](std::string match, std::string reply, caf::timespan delay) {
    scripted_step s;
    s.match = std::move(match);
    s.reply = std::move(reply);
    s.delay = delay;
    return s;
  };
  auto failing = [&](std::string match, std::string fail, caf::timespan delay) {
    auto s = step(std::move(match), "", delay);
    s.fail = std::move(fail);
    return s;
  };
  auto spawning = [&](std::string match, std::string name, std::string task) {
    auto s = step(std::move(match), "asked " + name, 500ms);
    s.tool_name = spawn_agent_tool;
    s.tool_arguments = R"({"name": ")" + name + R"(", "task": ")" + task
                       + R"("})";
    return s;
  };
  auto crashing = step(words::crash, "", 300ms);
  crashing.crash = true;
  std::vector<scripted_step> steps{
    step(words::later, "later: {input}", 2s),
    step(words::slow1, "slow1: {input}", 1s),
    step(words::slow8, "slow8: {input}", 8s),
    spawning(words::spawn_a, "a", "do work"),
    spawning(words::spawn_b, "b", std::string{words::spawn_a} + " deeper"),
    failing(words::fail, "overloaded", 300ms),
    failing(words::bad, "invalid_request", 0s),
    crashing,
  };
  auto cfg = test::scripted_config(data_dir, std::move(steps));
  // Writes reach the OS before they are acknowledged either way; fsync only
  // matters when the machine dies, which no simulated crash does.
  cfg.storage.sync = false;
  auto& pool = cfg.pools.front();
  pool.retry.max_attempts = 1;
  pool.breaker.failure_threshold = 1000000;
  pool.breaker.open_on_fatal = false;
  cfg.threads.idle_timeout = 20s;
  cfg.storage.request_timeout = storage_timeout;
  auto tune = [](supervisor_settings& s, caf::timespan initial) {
    s.max_restarts = 1000000;
    s.backoff.initial = initial;
    s.backoff.max = 1s;
    s.backoff.jitter = 0;
  };
  tune(cfg.supervision.root, 100ms);
  tune(cfg.supervision.providers, 50ms);
  tune(cfg.supervision.conversations, 20ms);
  return cfg;
}

/// Between two seeds the clock moves this far: past every backoff's
/// `reset_after`, so no restart delay carries over.
constexpr caf::timespan seed_gap = std::chrono::minutes{1};

/// What became of one operation's request.
struct outcome {
  bool issued = false;
  bool answered = false;
  bool ok = false;
  /// The node incarnation the request went to.
  uint64_t generation = 0;
  /// Index of the operation running when the answer arrived (the op count
  /// once the run settles).
  size_t answered_during = 0;
  /// The error's code name, if any.
  std::string error;
  /// True if the request's own timeout fired: nobody answered it. (A
  /// `request_timeout` error passed on from a conversation whose storage
  /// request timed out is an answer.)
  bool timed_out = false;
  accept_result ack;
  bool created = false;
  std::vector<std::string> closed;
};

/// The test's record of requests and answers, shared with the request
/// actors.
struct journal {
  std::vector<outcome> results;
  size_t current_op = 0;

  void answer(size_t i, const caf::error& err, bool own_timeout = false) {
    auto& r = results[i];
    r.answered = true;
    r.answered_during = current_op;
    r.ok = !err;
    r.timed_out = own_timeout && err == caf::sec::request_timeout;
    if (!err)
      return;
    if (err.category() == error_category)
      r.error = error_code_name(err);
    else if (err.category() == caf::atom("system"))
      r.error = caf::to_string(static_cast<caf::sec>(err.code()));
    else
      r.error = caf::to_string(err.category()) + ":"
                + std::to_string(err.code());
  }
};

using journal_ptr = std::shared_ptr<journal>;

/// 64-bit FNV-1a.
class fnv1a {
public:
  void add(const std::string& x) {
    for (auto c : x)
      mix(static_cast<uint8_t>(c));
    mix(0xff); // A separator: ("ab", "c") and ("a", "bc") differ.
  }

  void add(uint64_t x) {
    add(std::to_string(x));
  }

  uint64_t value() const {
    return hash_;
  }

private:
  void mix(uint8_t x) {
    hash_ ^= x;
    hash_ *= 1099511628211ull;
  }

  uint64_t hash_ = 14695981039346656037ull;
};

/// Everything a run produced.
struct run_report {
  uint64_t seed = 0;
  std::vector<op> ops;
  std::vector<outcome> results;
  /// Broken invariants, "invariant: details".
  std::vector<std::string> violations;
  /// The final histories and sessions of the run's threads.
  std::map<std::string, std::vector<log_entry>> logs;
  std::map<std::string, session_record> sessions;
  /// FNV-1a over the operations' results, the histories, the sessions and
  /// the dead letters, with the seed's thread prefix taken out (so that
  /// different seeds can be compared).
  uint64_t trace_hash = 0;
  fnv1a trace;
  /// Figures for the summary.
  uint64_t acks = 0;
  uint64_t outcomes = 0;
  uint64_t agent_messages = 0;
  uint64_t dead_letters = 0;
  /// Conversations stopped for being idle while the clock moved (advance
  /// operations; the settling at the end passivates every thread anyway).
  uint64_t passivations = 0;
  /// Status frames saying that a storage request timed out (`retrying`
  /// after an unsure commit).
  uint64_t storage_timeouts = 0;
  /// Status frames `history_reset`: a conversation loaded its thread after
  /// its records moved to quarantine.
  uint64_t history_resets = 0;
  /// The run's threads with records in quarantine once the batch stopped.
  uint64_t quarantined_threads = 0;

  bool ok() const {
    return violations.empty();
  }

  /// Adds `x` to the trace, without the thread prefix.
  void hash(const std::string& x) {
    trace.add(replace_all(x, thread_prefix(seed), ""));
  }

  void hash(uint64_t x) {
    trace.add(x);
  }

  /// The seed, the operations with their results, the broken invariants and
  /// the final histories.
  std::string describe() const {
    std::ostringstream out;
    out << "seed " << seed << ": " << violations.size() << " violation(s)\n";
    out << "  " << passivations << " passivation(s), " << storage_timeouts
        << " storage timeout(s), " << history_resets << " history reset(s), "
        << quarantined_threads << " quarantined thread(s)\n";
    for (auto& v : violations)
      out << "  VIOLATION " << v << '\n';
    out << "operations:\n";
    for (size_t i = 0; i < ops.size(); ++i) {
      out << "  #" << i << ' ' << to_string(ops[i]);
      if (i < results.size() && results[i].issued) {
        auto& r = results[i];
        out << " -> ";
        if (!r.answered)
          out << "no answer";
        else if (!r.ok)
          out << "error " << r.error;
        else if (ops[i].kind == op_kind::route
                 || ops[i].kind == op_kind::resend)
          out << "ack seq " << r.ack.seq << (r.ack.duplicate ? " dup" : "");
        else
          out << "ok";
        if (r.answered)
          out << " (during #" << r.answered_during << ")";
      }
      out << '\n';
    }
    out << "histories (seq kind client-id reply-to text):\n";
    for (auto& [thread, log] : logs) {
      auto s = sessions.find(thread);
      out << "  " << thread << " ("
          << (s == sessions.end() ? "no session"
                                  : keel::to_string(s->second.state))
          << (s != sessions.end() && !s->second.parent.empty()
                ? ", child of " + s->second.parent
                : std::string{})
          << "):\n";
      for (auto& e : log)
        out << "    " << e.seq << ' ' << keel::to_string(e.kind) << ' '
            << e.client_id << ' ' << e.reply_to << " \"" << e.text.substr(0, 60)
            << "\"\n";
    }
    out << "replay: KEEL_SIM_SEED=" << seed
        << " keel-unit-test -s '^crash_sim$'\n";
    return out.str();
  }
};

// -- checks -------------------------------------------------------------------

namespace detail {

inline bool is_agent_id(const std::string& client_id) {
  return client_id.rfind("agent:", 0) == 0;
}

inline bool is_route(const op& x) {
  return x.kind == op_kind::route || x.kind == op_kind::resend;
}

/// Checks one thread's history: unique client ids, exactly one outcome per
/// user entry, outcomes after and in the order of their messages.
inline void check_history(const std::string& thread,
                          const std::vector<log_entry>& log,
                          std::vector<std::string>& out) {
  std::map<seq_t, const log_entry*> users;
  std::map<std::string, seq_t> ids;
  std::map<seq_t, size_t> answers;
  seq_t last_answered = 0;
  for (auto& e : log) {
    auto where = thread + "/" + std::to_string(e.seq);
    if (e.kind == log_kind::user) {
      users.emplace(e.seq, &e);
      if (!ids.emplace(e.client_id, e.seq).second)
        out.push_back("processed once: " + where + " repeats client id "
                      + e.client_id + " of seq "
                      + std::to_string(ids[e.client_id]));
      continue;
    }
    auto u = users.find(e.reply_to);
    if (u == users.end()) {
      out.push_back("outcome answers a message: " + where + " answers seq "
                    + std::to_string(e.reply_to) + ", no earlier user message");
      continue;
    }
    if (u->second->client_id != e.client_id)
      out.push_back("outcome names its message: " + where + " has client id "
                    + e.client_id + ", its message " + u->second->client_id);
    if (++answers[e.reply_to] > 1)
      out.push_back("exactly one outcome: " + thread + "/"
                    + std::to_string(e.reply_to) + " answered again by seq "
                    + std::to_string(e.seq));
    if (e.reply_to <= last_answered)
      out.push_back("per-thread order: " + where + " answers seq "
                    + std::to_string(e.reply_to) + " after seq "
                    + std::to_string(last_answered) + " was answered");
    last_answered = std::max(last_answered, e.reply_to);
  }
  for (auto& [seq, entry] : users)
    if (answers.count(seq) == 0)
      out.push_back("every message answered: " + thread + "/"
                    + std::to_string(seq) + " (" + entry->client_id
                    + ") has no outcome after settling");
}

/// Checks the acknowledgements against each other and the logs: one seq
/// per client id, at most one first acknowledgement, and every
/// acknowledged message in its thread's log under its seq.
inline void check_acks(run_report& rep) {
  struct acked {
    seq_t seq = 0;
    size_t first = 0;
    size_t firsts = 0;
  };
  auto& out = rep.violations;
  std::map<std::pair<std::string, std::string>, acked> acks;
  for (size_t i = 0; i < rep.ops.size(); ++i) {
    auto& x = rep.ops[i];
    auto& r = rep.results[i];
    if (!is_route(x) || !r.ok)
      continue;
    ++rep.acks;
    auto [it, fresh] = acks.emplace(std::make_pair(x.thread, x.arg),
                                    acked{r.ack.seq, i, 0});
    if (!fresh && it->second.seq != r.ack.seq)
      out.push_back("one seq per client id: #" + std::to_string(i) + " "
                    + x.thread + "/" + x.arg + " acked with seq "
                    + std::to_string(r.ack.seq) + ", #"
                    + std::to_string(it->second.first) + " with seq "
                    + std::to_string(it->second.seq));
    if (!r.ack.duplicate && ++it->second.firsts > 1)
      out.push_back("processed once: #" + std::to_string(i) + " " + x.thread
                    + "/" + x.arg + " acknowledged as new a second time");
  }
  for (auto& [key, a] : acks) {
    auto& [thread, id] = key;
    auto& log = rep.logs[thread];
    auto found = std::find_if(log.begin(), log.end(), [&](const log_entry& e) {
      return e.kind == log_kind::user && e.seq == a.seq;
    });
    if (found == log.end())
      out.push_back("acknowledged means durable: " + thread + "/" + id
                    + " acked with seq " + std::to_string(a.seq)
                    + ", not in the log");
    else if (found->client_id != id)
      out.push_back("acknowledged means durable: " + thread + "/" + id
                    + " acked with seq " + std::to_string(a.seq)
                    + ", which holds " + found->client_id);
  }
  // And no client message in a log that no client sent there.
  std::set<std::pair<std::string, std::string>> sent;
  for (auto& x : rep.ops)
    if (is_route(x))
      sent.emplace(x.thread, x.arg);
  for (auto& [t, log] : rep.logs)
    for (auto& e : log)
      if (e.kind == log_kind::user && !is_agent_id(e.client_id)
          && sent.count({t, e.client_id}) == 0)
        out.push_back("no phantom messages: " + t + "/" + std::to_string(e.seq)
                      + " has client id " + e.client_id
                      + ", which no client sent there");
}

/// A thread a confirmed cancel closed is CLOSED and acknowledges nothing
/// routed after the cancel was confirmed.
inline void check_cancels_hold(run_report& rep) {
  auto& out = rep.violations;
  auto& ops = rep.ops;
  auto& results = rep.results;
  auto& sessions = rep.sessions;
  for (size_t c = 0; c < ops.size(); ++c) {
    if (ops[c].kind != op_kind::cancel || !results[c].ok)
      continue;
    std::set<std::string> closed(results[c].closed.begin(),
                                 results[c].closed.end());
    for (auto& t : closed) {
      auto s = sessions.find(t);
      if (s == sessions.end() || s->second.state != session_state::closed)
        out.push_back("cancelled stays closed: #" + std::to_string(c)
                      + " closed " + t + ", whose session is "
                      + (s == sessions.end() ? std::string{"missing"}
                                             : to_string(s->second.state)));
    }
    for (size_t i = results[c].answered_during + 1; i < ops.size(); ++i)
      if (is_route(ops[i]) && closed.count(ops[i].thread) > 0 && results[i].ok)
        out.push_back("cancelled stays closed: #" + std::to_string(i) + " "
                      + ops[i].thread + "/" + ops[i].arg
                      + " acknowledged after #" + std::to_string(c)
                      + " closed the thread");
  }
}

/// No open thread stays below a CLOSED one, unless a cancel of a thread
/// between them failed.
inline void check_subtrees_closed(run_report& rep) {
  auto& ops = rep.ops;
  auto& results = rep.results;
  auto& sessions = rep.sessions;
  // A cancel that failed (a conversation of the subtree was killed under
  // it: "cancel again") may have closed only part of the subtree; the
  // client is told so, and the recovery finishes it at the next boot.
  std::set<std::string> interrupted;
  for (size_t c = 0; c < ops.size(); ++c)
    if (ops[c].kind == op_kind::cancel && results[c].answered && !results[c].ok)
      interrupted.insert(ops[c].thread);
  for (auto& [t, s] : sessions) {
    if (s.state == session_state::closed)
      continue;
    std::set<std::string> seen{t};
    std::string closed_above;
    bool excused = false;
    for (auto p = s.parent; !p.empty() && seen.insert(p).second;) {
      auto ps = sessions.find(p);
      if (ps == sessions.end())
        break;
      if (closed_above.empty() && ps->second.state == session_state::closed)
        closed_above = p;
      if (!closed_above.empty() && interrupted.count(p) > 0)
        excused = true;
      p = ps->second.parent;
    }
    if (!closed_above.empty() && !excused)
      rep.violations.push_back("a cancel closes the subtree: " + t + " is "
                               + to_string(s.state) + " below CLOSED "
                               + closed_above);
  }
}

/// A child the client spawned stays under its parent.
inline void check_spawns_hold(run_report& rep) {
  auto& ops = rep.ops;
  auto& sessions = rep.sessions;
  for (size_t i = 0; i < ops.size(); ++i) {
    if (ops[i].kind != op_kind::spawn || !rep.results[i].ok)
      continue;
    auto s = sessions.find(ops[i].arg);
    if (s == sessions.end() || s->second.parent != ops[i].thread)
      rep.violations.push_back(
        "a spawned child stays under its parent: #" + std::to_string(i)
        + " spawned " + ops[i].arg + " under " + ops[i].thread
        + "; its session names "
        + (s == sessions.end() ? std::string{"nothing"}
                               : "parent '" + s->second.parent + "'"));
  }
}

/// Checks cancels and spawns against the final sessions.
inline void check_tree(run_report& rep) {
  check_cancels_hold(rep);
  check_subtrees_closed(rep);
  check_spawns_hold(rep);
}

/// Adds the run's trace to its hash: operation results, histories and
/// sessions.
inline void hash_trace(run_report& rep) {
  for (size_t i = 0; i < rep.ops.size(); ++i) {
    auto& r = rep.results[i];
    rep.hash(i);
    rep.hash(to_string(rep.ops[i]));
    rep.hash(std::string{r.answered ? "answered" : "silent"}
             + (r.ok ? " ok" : " ") + r.error);
    rep.hash(r.ack.seq);
    rep.hash(r.ack.duplicate ? "dup" : "new");
    rep.hash(r.created ? "created" : "");
    for (auto& t : r.closed)
      rep.hash(t);
  }
  for (auto& [t, log] : rep.logs) {
    rep.hash(t);
    for (auto& e : log) {
      rep.hash(e.seq);
      rep.hash(to_string(e.kind));
      rep.hash(e.client_id);
      rep.hash(e.reply_to);
      rep.hash(e.text);
      rep.hash(e.code);
    }
  }
  for (auto& [t, s] : rep.sessions) {
    rep.hash(t);
    rep.hash(s.parent);
    rep.hash(to_string(s.state));
  }
}

/// Checks that every outcome of a child reached its parent: an outcome of
/// seq S reserved seq S - 1 for its message to the parent
/// (`finish_commit`), which is in the parent's log or a dead letter.
inline void
check_forwarding(run_report& rep,
                 const std::set<std::pair<std::string, seq_t>>& dead) {
  std::map<std::string, std::set<std::string>> received;
  for (auto& [t, log] : rep.logs)
    for (auto& e : log)
      if (e.kind == log_kind::user && is_agent_id(e.client_id))
        received[t].insert(e.client_id);
  for (auto& [t, s] : rep.sessions) {
    if (s.parent.empty())
      continue;
    for (auto& e : rep.logs[t]) {
      if (e.kind == log_kind::user)
        continue;
      auto id = agent_client_id(t, e.seq - 1);
      if (received[s.parent].count(id) == 0 && dead.count({t, e.seq - 1}) == 0)
        rep.violations.push_back("a child's outcome reaches its parent: " + t
                                 + "/" + std::to_string(e.seq) + " (" + id
                                 + ") is neither in " + s.parent
                                 + "'s log nor a dead letter");
    }
  }
}

} // namespace detail

// -- the simulation -----------------------------------------------------------

/// A node on a fresh data folder (removed afterwards) that runs seeds one
/// after another, then checks the store of all of them.
class simulation : public test::node_fixture {
public:
  simulation() : node_fixture(sim_config(data_dir())) {
    // nop
  }

  ~simulation() override {
    stop();
    std::error_code ignored;
    std::filesystem::remove_all(config.data_dir, ignored);
  }

  static std::string data_dir() {
    static test::temp_dir root{"keel-sim"};
    static uint64_t n = 0;
    return (root.path() / std::to_string(n++)).string();
  }

  /// Runs one seed on the running node: its operations, then until the
  /// node is idle; checks what the running node shows.
  run_report run(uint64_t seed) {
    run_report rep;
    rep.seed = seed;
    rep.ops = generator{seed}.plan();
    journal_ = std::make_shared<journal>();
    journal_->results.resize(rep.ops.size());
    count_passivations();
    auto passivations_before = passivations_;
    for (size_t i = 0; i < rep.ops.size(); ++i) {
      journal_->current_op = i;
      apply(i, rep.ops[i]);
    }
    journal_->current_op = rep.ops.size();
    count_passivations();
    rep.passivations = passivations_ - passivations_before;
    if (!settle())
      rep.violations.push_back("the run settles: still busy after "
                               + std::to_string(max_timeouts) + " timers");
    rep.results = journal_->results;
    take_counts(rep);
    check_live(rep);
    // Nothing of this seed may reach into the next one.
    pass_time(seed_gap);
    count_events();
    history_resets_ = storage_timeouts_ = 0;
    return rep;
  }

  /// Stops the node (no session stays live) and checks the store: the
  /// oracle, the outbox, and that children's outcomes reached their
  /// parents. Violations go to the run whose threads they name.
  void finish(std::vector<run_report>& reps);

private:
  static constexpr size_t max_timeouts = 20000;

  // -- running ----------------------------------------------------------------

  void apply(size_t i, const op& x) {
    switch (x.kind) {
      case op_kind::route:
      case op_kind::resend:
        issue<accept_result>(i, names::orchestrator, atom::route_v, x.thread,
                             x.arg, x.text, std::string{});
        break;
      case op_kind::spawn:
        issue<spawn_result>(i, names::orchestrator, atom::spawn_v, x.thread,
                            x.arg, std::string{});
        break;
      case op_kind::cancel:
        issue<std::vector<std::string>>(i, names::orchestrator, atom::cancel_v,
                                        x.thread);
        break;
      case op_kind::kill:
        issue<caf::ok_atom>(i, names::root, atom::kill_child_v, x.arg,
                            caf::make_error(ec::killed, "simulation"));
        break;
      case op_kind::advance: pass_time(x.delay); break;
      case op_kind::crash: crash(); break;
      case op_kind::restart: restart(); break;
      case op_kind::stall: stall(x.delay); break;
      case op_kind::corrupt: crash_and_corrupt(x.thread, x.seq); break;
    }
    if (x.steps == 0) {
      consume_messages();
      return;
    }
    for (uint32_t n = 0; n < x.steps; ++n)
      if (!consume_message())
        break;
  }

  // Sends a request from a fresh actor (through the root supervisor while
  // the target restarts) and records its answer in the journal.
  template <class Result, class... Ts>
  void issue(size_t i, caf::atom_value target, Ts... xs) {
    auto& r = journal_->results[i];
    r.issued = true;
    r.generation = generation_;
    sys.spawn([j = journal_, i, target, xs...](caf::event_based_actor* self) {
      // An hour of actor time: a request still unanswered when the run has
      // settled times out, and the check reports the silence.
      request_component(self, target, std::chrono::hours{1}, xs...)
        .then(
          [j, i](Result& res) {
            j->answer(i, {});
            record(j->results[i], res);
          },
          [j, i](caf::error& err) { j->answer(i, err); });
    });
  }

  static void record(outcome&, caf::ok_atom) {
    // nop
  }

  static void record(outcome& r, const accept_result& res) {
    r.ack = res;
  }

  static void record(outcome& r, const spawn_result& res) {
    r.created = res.created;
  }

  static void record(outcome& r, const std::vector<std::string>& closed) {
    r.closed = closed;
  }

  // A clean stop, then a boot on the same data.
  void restart() {
    count_passivations();
    count_events();
    stop();
    forget_names();
    ++generation_;
    start();
  }

  // The whole node dies at once, as with kill -9: CAF's untrappable kill
  // reaches every actor before any can write or answer; staged writes are
  // dropped with the store. Then the node boots on the same data.
  void crash() {
    die();
    start();
  }

  // Dies as `crash` does; while the node is down, context entry `seq` of
  // `thread` becomes bytes no decoder reads; then the node boots.
  void crash_and_corrupt(const std::string& thread, uint64_t seq) {
    die();
    test::put_raw_record(config.data_dir + "/db", "context",
                         test::seq_key(thread, seq), "garbage{");
    start();
  }

  void die() {
    count_passivations();
    count_events();
    caf::anon_send_exit(root, caf::exit_reason::kill);
    caf::anon_send_exit(sink, caf::exit_reason::kill);
    consume_messages();
    root = nullptr;
    forget_names();
    ++generation_;
  }

  // Moves the clock by `d` while persistence runs nothing: every request
  // to it waits, those with a shorter timeout time out; then persistence
  // works off its backlog and the late answers land.
  void stall(caf::timespan d) {
    // (While persistence restarts, nothing answers anyway.)
    auto hdl = lookup<persistence_actor>(sys, names::persistence);
    auto db = hdl ? dynamic_cast<caf::resumable*>(
                caf::actor_cast<caf::abstract_actor*>(hdl))
                  : nullptr;
    pass_time(d, [&] {
      sched.run_jobs_filtered([db](caf::resumable* job) { return job != db; });
    });
    consume_messages();
  }

  // Adds the passivations of the running orchestrator to the total (it
  // counts from zero again after a crash or restart).
  void count_passivations() {
    auto hdl = lookup<orchestrator_actor>(sys, names::orchestrator);
    if (!hdl)
      return;
    auto& count
      = deref<orchestrator_actor::stateful_base<orchestrator_state>>(hdl)
          .state.passivations;
    passivations_ += count;
    count = 0;
  }

  // The registry keeps a name's first actor (`put` does not replace it):
  // names of a dead tree must go before the next one starts.
  void forget_names() {
    for (auto name : names::all)
      components_of(sys).erase(name);
  }

  // Moves the clock by `d` as time passes for real: one timer at a time, in
  // the order they fall due, each followed by every message it causes (a
  // real scheduler never lets a ready message wait for seconds). Moving
  // the clock in one step would fire a late timer (a request timeout)
  // before the messages an early one (a provider's answer) sets off.
  void pass_time(caf::timespan d) {
    pass_time(d, [this] { consume_messages(); });
  }

  // As above, running messages with `run`.
  template <class Run>
  void pass_time(caf::timespan d, Run run) {
    auto& clock = sched.clock();
    auto target = clock.now() + d;
    run();
    while (!clock.schedule().empty()
           && clock.schedule().begin()->first <= target) {
      trigger_timeout();
      run();
    }
    if (clock.now() < target)
      advance_time(target - clock.now());
  }

  // Runs every message and every timer until nothing is left (the clock
  // jumps from timer to timer), at most `max_timeouts` timers.
  bool settle() {
    for (size_t n = 0; n < max_timeouts; ++n) {
      consume_messages();
      if (!trigger_timeout())
        return true;
    }
    return false;
  }

  // -- reading the running node -----------------------------------------------

  // Asks persistence; on an error, records it as a violation.
  template <class F, class... Ts>
  void ask(run_report& rep, const char* what, F on_result, Ts&&... xs) {
    auto hdl = self->request(persistence(), caf::infinite,
                             std::forward<Ts>(xs)...);
    consume_messages();
    hdl.receive(on_result, [&](caf::error& err) {
      rep.violations.push_back(std::string{"persistence answers "} + what + ": "
                               + render(err));
    });
  }

  /// Checks the run's live state (requests, inboxes, outboxes, histories,
  /// sessions) after settling, and hashes its trace.
  void check_live(run_report& rep);

  void check_requests_answered(run_report& rep);

  void check_inboxes_empty(run_report& rep);

  /// Reads the sessions and histories of the run's threads into `rep`,
  /// checking that their outboxes are empty.
  void read_run_threads(run_report& rep);

  // Counts and drops the events the sink holds (each sink starts empty).
  void count_events() {
    auto& events
      = deref<gateway_bridge_actor::stateful_base<test::event_sink_state>>(sink)
          .state.events;
    for (auto& ev : events) {
      auto has = [&](const char* what) {
        return ev.frame.find(what) != std::string::npos;
      };
      if (has("\"history_reset\""))
        ++history_resets_;
      else if (has("\"retrying\"") && has("request_timeout"))
        ++storage_timeouts_;
    }
    events.clear();
  }

  // The run's event counters: everything counted since the run began.
  void take_counts(run_report& rep) {
    count_events();
    rep.history_resets = std::exchange(history_resets_, 0);
    rep.storage_timeouts = std::exchange(storage_timeouts_, 0);
    for (auto& r : journal_->results)
      if (r.error == "request_timeout" && !r.timed_out)
        ++rep.storage_timeouts;
  }

  journal_ptr journal_;
  /// Incremented by every crash and restart.
  uint64_t generation_ = 0;
  /// Passivations of the batch's earlier orchestrators.
  uint64_t passivations_ = 0;
  /// Counted from the events of the run so far.
  uint64_t history_resets_ = 0;
  uint64_t storage_timeouts_ = 0;
};

inline void simulation::check_live(run_report& rep) {
  check_requests_answered(rep);
  check_inboxes_empty(rep);
  read_run_threads(rep);
  for (auto& [t, log] : rep.logs) {
    detail::check_history(t, log, rep.violations);
    for (auto& e : log) {
      if (e.kind != log_kind::user)
        ++rep.outcomes;
      else if (detail::is_agent_id(e.client_id))
        ++rep.agent_messages;
    }
  }
  detail::check_acks(rep);
  detail::check_tree(rep);
  detail::hash_trace(rep);
}

inline void simulation::check_requests_answered(run_report& rep) {
  // Never silence: every request of the current node incarnation is
  // answered (one sent to a node that crashed may be lost with it; one a
  // killed orchestrator held is answered by its exit handler).
  for (size_t i = 0; i < rep.ops.size(); ++i) {
    auto& r = rep.results[i];
    if (!r.issued || r.generation != generation_
        || (r.answered && !r.timed_out))
      continue;
    rep.violations.push_back("every request answered: #" + std::to_string(i)
                             + " " + to_string(rep.ops[i]) + " got no answer");
  }
}

inline void simulation::check_inboxes_empty(run_report& rep) {
  // Settled: nothing left in any inbox or outbox of the run's threads.
  auto prefix = thread_prefix(rep.seed);
  ask(
    rep, "inboxes",
    [&](std::vector<std::string>& threads) {
      for (auto& t : threads)
        if (t.rfind(prefix, 0) == 0)
          rep.violations.push_back("nothing pending after settling: " + t
                                   + " has inbox entries");
    },
    atom::inboxes_v);
}

inline void simulation::read_run_threads(run_report& rep) {
  auto& out = rep.violations;
  // The run's threads: those it routed to or spawned, and their children
  // from the tree, breadth first. (Reading every session of the batch would
  // cost more and more as the batch grows.)
  std::vector<std::string> todo;
  for (auto& x : rep.ops)
    if (detail::is_route(x) || x.kind == op_kind::cancel)
      todo.push_back(x.thread);
    else if (x.kind == op_kind::spawn)
      todo.push_back(x.arg);
  std::set<std::string> seen;
  while (!todo.empty()) {
    auto t = std::move(todo.back());
    todo.pop_back();
    if (!seen.insert(t).second)
      continue;
    ask(
      rep, "load",
      [&](thread_snapshot& snap) {
        for (auto& e : snap.outbox)
          out.push_back("messages between threads are delivered: " + e.from
                        + "/" + std::to_string(e.seq) + " for " + e.to
                        + " is still in the outbox");
        if (!snap.exists)
          return;
        rep.sessions.emplace(t, snap.session);
        todo.insert(todo.end(), snap.children.begin(), snap.children.end());
      },
      atom::load_v, t);
  }
  for (auto& t : seen)
    if (rep.sessions.count(t) > 0)
      rep.logs.emplace(t, history(t));
  for (auto& x : rep.ops)
    if (detail::is_route(x) && rep.logs.count(x.thread) == 0)
      rep.logs.emplace(x.thread, history(x.thread));
}

inline void simulation::finish(std::vector<run_report>& reps) {
  stop();
  // A violation naming a thread of a run is that run's; one naming none is
  // reported with every run of the batch.
  auto owner = [&](const std::string& where) -> std::vector<run_report*> {
    for (auto& rep : reps)
      if (where.find(thread_prefix(rep.seed)) != std::string::npos)
        return {&rep};
    std::vector<run_report*> all;
    for (auto& rep : reps)
      all.push_back(&rep);
    return all;
  };
  auto report = [&](const std::string& where, const std::string& what) {
    for (auto* rep : owner(where))
      rep->violations.push_back(what);
  };
  store_options opts;
  opts.read_only = true;
  auto db = store::open(config.data_dir + "/db", opts);
  if (!db) {
    report("", "the store opens: " + render(db.error()));
    return;
  }
  if (auto res = verify_store(**db); !res)
    report("", "the oracle reads the store: " + render(res.error()));
  else
    for (auto& v : res->violations)
      report(v.where, "oracle " + v.rule + ": " + v.where + ": " + v.what);
  if (auto moved = (*db)->quarantined(); !moved) {
    report("", "the quarantine reads: " + render(moved.error()));
  } else {
    std::set<std::string> threads;
    for (auto& rec : *moved)
      if (threads.insert(rec.thread).second)
        for (auto* rep : owner(rec.thread))
          ++rep->quarantined_threads;
  }
  std::map<uint64_t, std::set<std::pair<std::string, seq_t>>> dead;
  if (auto letters = (*db)->dead_letters(); !letters) {
    report("", "the dead letters read: " + render(letters.error()));
  } else {
    for (auto& d : *letters)
      for (auto* rep : owner(d.entry.from)) {
        dead[rep->seed].emplace(d.entry.from, d.entry.seq);
        ++rep->dead_letters;
        rep->hash(d.entry.client_id);
        rep->hash(d.entry.to);
      }
  }
  for (auto& rep : reps) {
    detail::check_forwarding(rep, dead[rep.seed]);
    rep.trace_hash = rep.trace.value();
  }
}

/// Runs `count` seeds from `first` on one node (a fresh data folder).
inline std::vector<run_report> run_batch(uint64_t first, uint64_t count) {
  std::vector<run_report> reps;
  simulation sim;
  for (auto seed = first; seed < first + count; ++seed)
    reps.push_back(sim.run(seed));
  sim.finish(reps);
  return reps;
}

/// Runs seed `seed` alone.
inline run_report run_seed(uint64_t seed) {
  return std::move(run_batch(seed, 1).front());
}

} // namespace keel::sim
