#include "chaos_traffic.hpp"

#include <algorithm>
#include <optional>
#include <thread>

#include "keel/protocol.hpp"
#include "keel/tools/json_fields.hpp"

namespace keel::chaos::detail {

using namespace std::chrono_literals;
using std::chrono::duration_cast;
using std::chrono::milliseconds;

traffic_client::traffic_client(const scenario& sc, size_t index,
                               const node_set& nodes, traffic_control& ctl)
  : sc_(sc),
    nodes_(nodes),
    ctl_(ctl),
    index_(index),
    home_(index % nodes.size()),
    node_(index % nodes.size()),
    shunned_until_(nodes.size()) {
  auto& traffic = sc.traffic;
  for (size_t t = index; t < traffic.threads; t += traffic.connections) {
    slots_.push_back({"t" + std::to_string(t), 0, {}, {}});
    thread_ids_.push_back(slots_.back().thread);
  }
  text_.assign(traffic.message_bytes, 'x');
  auto per_client = traffic.rate / static_cast<double>(traffic.connections);
  interval_ = std::chrono::nanoseconds{static_cast<int64_t>(1e9 / per_client)};
}

/// Connects to the node `choose_node` picks, subscribes to every owned
/// thread (outcomes of messages sent before a disconnect arrive again) and
/// resends what was not acknowledged.
bool traffic_client::connect() {
  auto now = clock_type::now();
  node_ = choose_node(now);
  next_move_check_ = now + 1s;
  auto ws = ws_client::connect(nodes_.address(node_), "/ws", 2s);
  if (!ws) {
    shun(node_);
    return false;
  }
  ws_ = std::move(*ws);
  for (auto& slot : slots_) {
    if (ws_->send_text(protocol::subscribe_frame(slot.thread))) {
      disconnect();
      return false;
    }
    if (!slot.outstanding.empty() && ws_) {
      slot.retry_at = clock_type::time_point::max();
      ++result_.resends;
      send(slot.thread, slot.outstanding);
    }
  }
  return ws_ != nullptr;
}

size_t traffic_client::choose_node(clock_type::time_point now) const {
  if (!nodes_.cluster())
    return home_;
  std::optional<size_t> shunned;
  for (size_t k = 0; k < nodes_.size(); ++k) {
    auto i = (home_ + k) % nodes_.size();
    if (!nodes_.serving(i))
      continue;
    if (shunned_until_[i] <= now)
      return i;
    if (!shunned)
      shunned = i;
  }
  return shunned.value_or(home_);
}

void traffic_client::shun(size_t node) {
  if (nodes_.cluster())
    shunned_until_.at(node) = clock_type::now() + 3s;
}

bool traffic_client::should_move(clock_type::time_point now) {
  if (!nodes_.cluster() || now < next_move_check_)
    return false;
  next_move_check_ = now + 1s;
  return choose_node(now) != node_;
}

std::string traffic_client::next_text() {
  auto every = sc_.traffic.slow_every;
  if (every == 0 || ++new_messages_ % every != 0)
    return text_;
  auto slow = std::string{slow_marker} + " ";
  return slow + text_.substr(std::min(slow.size(), text_.size()));
}

void traffic_client::disconnect() {
  ws_.reset();
  ++result_.reconnects;
}

void traffic_client::send(const std::string& thread, const std::string& id) {
  result_.rec.sent(thread, id);
  auto slot = slot_of(thread);
  if (slot)
    slot->sent_at = clock_type::now();
  first_sent_.emplace(id, clock_type::now());
  // Without a connection, connect() sends it once there is one.
  auto& text = slot ? slot->text : text_;
  if (ws_ && ws_->send_text(protocol::send_frame(thread, id, text)))
    disconnect();
}

/// Sends a new message to the next thread that has none unacknowledged.
void traffic_client::send_next() {
  for (size_t n = 0; n < slots_.size(); ++n) {
    auto& slot = slots_[cursor_];
    cursor_ = (cursor_ + 1) % slots_.size();
    if (!slot.outstanding.empty())
      continue;
    slot.outstanding = slot.thread + "-m" + std::to_string(slot.next++);
    slot.text = next_text();
    slot.retry_at = clock_type::time_point::max();
    ++result_.sent;
    ++pending_;
    send(slot.thread, slot.outstanding);
    return;
  }
}

void traffic_client::resend_due(clock_type::time_point now) {
  for (auto& slot : slots_) {
    if (!ws_ || slot.retry_at > now)
      continue;
    slot.retry_at = clock_type::time_point::max();
    ++result_.resends;
    send(slot.thread, slot.outstanding);
  }
}

bool traffic_client::ack_overdue(clock_type::time_point now) const {
  return std::any_of(slots_.begin(), slots_.end(), [&](const thread_slot& s) {
    return !s.outstanding.empty() && s.retry_at == clock_type::time_point::max()
           && now - s.sent_at > sc_.traffic.ack_timeout;
  });
}

void traffic_client::run() {
  auto next_send = ctl_.start;
  while (!ctl_.stop) {
    if (!ws_ && !connect()) {
      std::this_thread::sleep_for(100ms);
      continue;
    }
    auto now = clock_type::now();
    if (ack_overdue(now)) {
      shun(node_);
      disconnect(); // connect() resends what is unacknowledged
      continue;
    }
    if (should_move(now)) {
      disconnect();
      continue;
    }
    resend_due(now);
    if (ws_ && ctl_.sending && now >= next_send) {
      send_next();
      // After a long stall, do not burst to catch up.
      next_send = std::max(next_send + interval_, now - 1s);
      continue;
    }
    auto wait = ctl_.sending ? duration_cast<milliseconds>(next_send - now)
                             : 50ms;
    auto msg = ws_ ? ws_->receive(std::clamp(wait, 1ms, 50ms))
                   : caf::expected<ws_message>{ws_message{}};
    if (!msg) {
      if (msg.error() != ec::timeout)
        disconnect();
      continue;
    }
    if (!msg->payload.empty())
      on_frame(nlohmann::json::parse(msg->payload, nullptr, false));
  }
}

void traffic_client::on_frame(const nlohmann::json& frame) {
  if (!frame.is_object())
    return;
  auto type = json_string(frame, "type");
  if (type == "ack")
    on_ack(frame);
  else if (type == "reply")
    on_outcome(frame);
  else if (type == "error")
    on_error(frame);
}

void traffic_client::on_ack(const nlohmann::json& frame) {
  auto thread = json_string(frame, "thread");
  auto id = json_string(frame, "id");
  result_.rec.acked(thread, id, json_number(frame, {"seq"}));
  settle(thread, id);
}

void traffic_client::on_error(const nlohmann::json& frame) {
  ++result_.errors_by_code[json_string(frame, "code")];
  if (json_string(frame, "code") == "internal")
    keep_internal(frame);
  if (frame.contains("reply_to")) {
    on_outcome(frame);
    return;
  }
  auto thread = json_string(frame, "thread");
  auto id = json_string(frame, "id");
  if (thread.empty() || id.empty())
    return;
  // A refusal the protocol says to resend (storage failing, a component
  // restarting, a full queue) is sent again with the same id a moment
  // later, as a client would; others are final.
  auto code = json_string(frame, "code");
  if (code == "storage_io" || code == "overloaded" || code == "unavailable"
      || code == "internal" || code == "rate_limited") {
    if (auto slot = slot_of(thread); slot && slot->outstanding == id)
      slot->retry_at = clock_type::now() + 200ms;
    return;
  }
  result_.rec.refused(thread, id, code);
  settle(thread, id);
}

void traffic_client::keep_internal(const nlohmann::json& frame) {
  internal_error x;
  x.at = duration_cast<milliseconds>(clock_type::now() - ctl_.start);
  x.client = index_;
  x.node = node_;
  x.thread = json_string(frame, "thread");
  x.id = json_string(frame, "id");
  x.outcome = frame.contains("reply_to");
  x.message = json_string(frame, "message");
  result_.internal_errors.push_back(std::move(x));
}

void traffic_client::on_outcome(const nlohmann::json& frame) {
  auto thread = json_string(frame, "thread");
  auto id = json_string(frame, "id");
  result_.rec.outcome(thread, id, json_number(frame, {"seq"}));
  auto now = clock_type::now();
  answer_sample sample;
  sample.thread = thread;
  sample.at = duration_cast<milliseconds>(now - ctl_.start);
  if (auto i = first_sent_.find(id); i != first_sent_.end())
    sample.latency = duration_cast<milliseconds>(now - i->second);
  result_.answers.push_back(std::move(sample));
}

/// The message `id` of `thread` got its answer: the thread may take the
/// next one.
void traffic_client::settle(const std::string& thread, const std::string& id) {
  if (auto slot = slot_of(thread); slot && slot->outstanding == id) {
    slot->outstanding.clear();
    slot->retry_at = clock_type::time_point::max();
    --pending_;
  }
}

traffic_client::thread_slot*
traffic_client::slot_of(const std::string& thread) {
  for (auto& slot : slots_)
    if (slot.thread == thread)
      return &slot;
  return nullptr;
}

} // namespace keel::chaos::detail
