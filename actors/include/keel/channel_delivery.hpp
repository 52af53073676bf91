#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <caf/typed_event_based_actor.hpp>
#include <caf/typed_response_promise.hpp>

#include "keel/actors.hpp"
#include "keel/channel_client.hpp"
#include "keel/config.hpp"
#include "keel/delivery_policy.hpp"
#include "keel/types.hpp"

namespace keel {

/// Configuration of the outbound channels (see `channel_delivery`).
struct channel_delivery_config {
  std::vector<channel_config> channels;
  /// The node's HTTP client (shared with the providers).
  std::shared_ptr<http_io> io;
  /// Bounds each store request.
  caf::timespan store_timeout = std::chrono::seconds{30};
  /// Cluster: read the delivery records this often, for threads the node
  /// came to serve (written by another node); none on a single node, where
  /// every reply passes through this actor.
  std::optional<caf::timespan> poll;
  /// After a failed write of a reply's outcome (its record stays), read the
  /// records again this much later.
  std::chrono::milliseconds reload_after_failure{std::chrono::seconds{5}};
  /// The node's secrets (`configured_secrets`): redacted from each failed
  /// send's description (a bot token in a quoted URL) before it is logged,
  /// stored in a dead letter or told the owner.
  std::vector<std::string> secrets;
  /// Seeds the jitter of the retry delays.
  uint64_t seed = std::random_device{}();
};

/// The reply dead letter of `reply` after its channels `failed` (each
/// with its error in `errors`, same order).
dead_letter reply_letter(const reply_delivery& reply,
                         const std::vector<std::string>& failed,
                         const std::vector<std::string>& errors);

/// The reply a dead letter of a reply stands for (its `channels` are the
/// letter's).
reply_delivery reply_of(const dead_letter& letter);

/// One reply's way to its channels: the reply's own delivery (retried per
/// channel policy, its outcome stored) or one attempt for a dead letter
/// (its outcome answered); or a notice's way to the owner's channel
/// (retried per policy, its outcome answered).
struct delivery_job {
  reply_delivery reply;
  /// Set for a notice: what goes out instead of `reply`.
  std::optional<owner_notice> notice;
  /// Sends still under way.
  size_t in_flight = 0;
  std::vector<std::string> delivered;
  /// Channels that gave up, each with its last error.
  std::vector<std::string> failed;
  std::vector<std::string> errors;
  /// Set for a dead letter's attempt: where its outcome goes.
  std::optional<caf::typed_response_promise<dead_letter>> answer;
  /// Set for a notice: where its outcome goes.
  std::optional<caf::typed_response_promise<owner_notice>> notice_answer;
};

/// One send of a job's reply to one channel.
struct channel_send_state {
  uint64_t job = 0;
  std::string channel;
  /// Attempts made (1-based once the first is under way).
  uint32_t attempt = 0;
  bool plain_text = false;
};

/// The sends of one channel: at most `channel_client::max_in_flight` of
/// replies' own sends at the client, the others waiting in order (their
/// timeout starts when they leave). Dead letters' attempts and notices do
/// not wait here (see `attempt`).
struct channel_line {
  size_t in_flight = 0;
  std::deque<uint64_t> waiting;
};

/// State of the outbound channels.
struct channel_delivery_state {
  using self_ptr
    = channel_delivery_actor::stateful_pointer<channel_delivery_state>;

  static inline const char* name = "keel.channel_delivery";

  channel_delivery_config cfg;
  std::map<std::string, std::unique_ptr<channel_client>> clients;
  std::map<uint64_t, delivery_job> jobs;
  std::map<uint64_t, channel_send_state> sends;
  std::map<std::string, channel_line> lines;
  /// Replies (`thread/seq`) with a job under way, or whose outcome is being
  /// stored: a read of the records from before that write must not start
  /// them again.
  std::set<std::string> busy_replies;
  uint64_t next_id = 1;
  std::mt19937_64 rng;

  /// Whether reply `thread/seq` has a job under way or an outcome being
  /// stored.
  bool busy(const reply_delivery& reply) const;

  /// What follows a failed attempt of `send` (its policy is its channel's;
  /// a dead letter's attempt retries only as plain text).
  send_decision after_failure(const channel_send_state& send,
                              const send_failure& failure);
};

/// Spawns the outbound channels. At start (and after a restart) they read
/// every stored delivery record and send what is still due, so a reply
/// committed before a crash reaches its channels after it (at least once:
/// the idempotency key lets a receiver drop a repeat).
channel_delivery_actor::behavior_type channel_delivery(
  channel_delivery_actor::stateful_pointer<channel_delivery_state> self,
  channel_delivery_config cfg);

} // namespace keel
