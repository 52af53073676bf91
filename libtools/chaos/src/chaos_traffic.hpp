#pragma once

// keel-chaos's clients: each owns a connection and a share of the threads,
// sends at its share of the rate, and when the connection dies reconnects
// and resends what was not acknowledged (same client ids), as a real client
// does. In a cluster a client whose node is down, gone or silent moves to
// another running node (any gateway serves every thread), and back to its
// own once that runs again. Private to libtools.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "chaos_nodes.hpp"
#include "keel/tools/chaos_oracle.hpp"
#include "keel/tools/chaos_run.hpp"
#include "keel/tools/chaos_scenario.hpp"
#include "keel/tools/ws_client.hpp"

namespace keel::chaos::detail {

using clock_type = std::chrono::steady_clock;

/// An outcome frame as a client saw it.
struct answer_sample {
  std::string thread;
  /// Since the start of the traffic.
  std::chrono::milliseconds at{0};
  /// From the first send of the message.
  std::chrono::milliseconds latency{0};
};

/// What one client did and saw.
struct client_result {
  record rec;
  uint64_t sent = 0;
  uint64_t resends = 0;
  uint64_t reconnects = 0;
  std::map<std::string, uint64_t> errors_by_code;
  std::vector<internal_error> internal_errors;
  std::vector<answer_sample> answers;
};

/// Switches the clients share with the run.
struct traffic_control {
  clock_type::time_point start;
  /// New messages are sent while set.
  std::atomic<bool> sending{true};
  /// The clients return once set.
  std::atomic<bool> stop{false};
};

class traffic_client {
public:
  traffic_client(const scenario& sc, size_t index, const node_set& nodes,
                 traffic_control& ctl);

  /// Runs until `ctl.stop`.
  void run();

  /// Messages sent but not acknowledged or refused yet.
  size_t unacknowledged() const {
    return pending_.load();
  }

  client_result& result() {
    return result_;
  }

  /// The threads this client owns.
  const std::vector<std::string>& threads() const {
    return thread_ids_;
  }

  /// The node this client talks to (its own, unless it moved away in a
  /// cluster).
  size_t node() const {
    return node_.load();
  }

private:
  struct thread_slot {
    std::string thread;
    uint64_t next = 0;
    /// The client id sent and not yet acknowledged, or "", and its text.
    std::string outstanding;
    std::string text;
    /// When to send `outstanding` again after a refusal that may pass.
    clock_type::time_point retry_at = clock_type::time_point::max();
    /// When `outstanding` was last sent.
    clock_type::time_point sent_at;
  };

  bool connect();
  void disconnect();
  /// The node to connect to (see the top of this file).
  size_t choose_node(clock_type::time_point now) const;
  /// In a cluster, passes over `node` for a few seconds: it refused a
  /// connection or went silent.
  void shun(size_t node);
  /// In a cluster, whether to leave the current node for a better one (its
  /// own runs again, or a node to move to started); checked once a second.
  bool should_move(clock_type::time_point now);
  /// The text of the next new message.
  std::string next_text();
  void send(const std::string& thread, const std::string& id);
  void send_next();
  void resend_due(clock_type::time_point now);
  bool ack_overdue(clock_type::time_point now) const;
  void on_frame(const nlohmann::json& frame);
  void on_ack(const nlohmann::json& frame);
  void on_error(const nlohmann::json& frame);
  /// Keeps an `internal` error frame whole (see `internal_error`).
  void keep_internal(const nlohmann::json& frame);
  void on_outcome(const nlohmann::json& frame);
  void settle(const std::string& thread, const std::string& id);
  /// The slot of `thread`, or null for a thread of another client.
  thread_slot* slot_of(const std::string& thread);

  const scenario& sc_;
  const node_set& nodes_;
  traffic_control& ctl_;
  size_t index_;
  /// The node this client belongs to (index % nodes), and the one it uses.
  size_t home_;
  std::atomic<size_t> node_;
  std::vector<clock_type::time_point> shunned_until_;
  clock_type::time_point next_move_check_;
  uint64_t new_messages_ = 0;
  std::string text_;
  std::chrono::nanoseconds interval_;
  std::vector<thread_slot> slots_;
  std::vector<std::string> thread_ids_;
  size_t cursor_ = 0;
  std::map<std::string, clock_type::time_point> first_sent_;
  std::unique_ptr<ws_client> ws_;
  std::atomic<size_t> pending_{0};
  client_result result_;
};

} // namespace keel::chaos::detail
