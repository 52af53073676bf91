#include "keel/tools/ws_load.hpp"

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <exception>

#include "keel/text.hpp"
#include "keel/tools/ws_client.hpp"
#include "ws_load_run.hpp"

namespace keel::bench {

bool load_result::clean() const noexcept {
  return sent > 0 && acked == sent && answered == sent && errors == 0
         && missing_acks == 0 && missing_replies == 0 && duplicates == 0
         && unknown_ids == 0 && out_of_order == 0 && connection_errors == 0;
}

namespace detail {

load_run::load_run(const load_options& opts)
  : paced_load(opts, "messages", "outcome"),
    opts_(opts),
    stop_timer_(ioc_),
    fault_timer_(ioc_),
    measure_timer_(ioc_) {
  if (opts_.thread_prefix.empty())
    opts_.thread_prefix = "bench-" + random_hex(6);
  thread_names_.reserve(opts_.threads);
  for (size_t i = 0; i < opts_.threads; ++i)
    thread_names_.push_back(opts_.thread_prefix + "-" + std::to_string(i));
  thread_next_order_.assign(opts_.threads, 0);
  thread_last_outcome_.assign(opts_.threads, 0);
  text_ = message_text(opts_.text_bytes);
}

load_run::~load_run() {
  // nop
}

caf::error load_run::check_options() const {
  if (opts_.connections == 0)
    return caf::make_error(ec::config_invalid,
                           "connections: must be at least 1");
  if (opts_.threads < opts_.connections)
    return caf::make_error(ec::config_invalid,
                           "threads: must be at least the number of "
                           "connections (each connection owns its threads)");
  if (flat_out() && opts_.window == 0)
    return caf::make_error(ec::config_invalid, "window: must be at least 1");
  if (opts_.one_message_per_thread && opts_.messages != opts_.threads)
    return caf::make_error(ec::config_invalid,
                           "one message per thread: messages must equal "
                           "threads");
  return caf::none;
}

caf::expected<load_result> load_run::run() {
  if (auto err = check_options())
    return err;
  tcp::resolver resolver{ioc_};
  beast::error_code ec;
  auto addrs = resolver.resolve(opts_.node.host,
                                std::to_string(opts_.node.port), ec);
  if (ec)
    return caf::make_error(ec::connection_failed, ec.message());
  for (size_t i = 0; i < opts_.connections; ++i)
    conns_.push_back(std::make_unique<connection>(*this, ioc_, i));
  for (size_t t = 0; t < opts_.threads; ++t)
    conns_[t % opts_.connections]->add_thread(static_cast<uint32_t>(t));
  run_io([&] {
    for (auto& conn : conns_)
      conn->start(addrs);
  });
  if (fatal_)
    return fatal_;
  count_missing();
  result_.ack_latency = ack_latency_.summary();
  result_.reply_latency = reply_latency_.summary();
  if (tracking() && fault_at_)
    compute_failover(result_.failover, messages_by_send_time(), *fault_at_,
                     providers_, opts_.fault.fallback_provider);
  compute_throughput();
  return std::move(result_);
}

void load_run::count_missing() {
  // Every message gets exactly one ack and one outcome; count what is not.
  for (auto& conn : conns_) {
    for (auto& msg : conn->messages()) {
      if (msg.outcomes == 0)
        ++result_.missing_replies;
      if (msg.acks == 0 && !msg.error)
        ++result_.missing_acks;
    }
  }
}

std::vector<const message_state*> load_run::messages_by_send_time() const {
  std::vector<const message_state*> all;
  for (auto& conn : conns_)
    for (auto& msg : conn->messages())
      all.push_back(&msg);
  std::sort(all.begin(), all.end(),
            [](auto* a, auto* b) { return a->sent_at < b->sent_at; });
  return all;
}

// -- connecting and sending ---------------------------------------------------

void load_run::on_ready() {
  if (phase_ != phase::connecting)
    return;
  if (++ready_ + connect_failures_ == conns_.size())
    begin();
}

void load_run::on_connect_failed(caf::error err) {
  if (phase_ != phase::connecting)
    return;
  ++connect_failures_;
  if (!fatal_)
    fatal_ = std::move(err);
  if (ready_ + connect_failures_ == conns_.size())
    finish();
}

void load_run::begin() {
  if (connect_failures_ > 0)
    return finish();
  start();
}

void load_run::on_started() {
  if (opts_.on_measure_start) {
    measure_timer_.expires_at(measure_start_);
    measure_timer_.async_wait([this](beast::error_code ec) {
      if (!ec && phase_ != phase::done)
        opts_.on_measure_start();
    });
  }
  if (!opts_.fault.at)
    return;
  fault_timer_.expires_at(measure_start_ + *opts_.fault.at);
  fault_timer_.async_wait([this](beast::error_code ec) {
    if (!ec && phase_ == phase::running)
      inject_fault();
  });
}

void load_run::refill(steady::time_point now) {
  for (auto& conn : conns_)
    conn->refill(now);
}

bool load_run::send_next(steady::time_point now) {
  // Round robin over the connections that are still usable.
  connection* conn = nullptr;
  for (size_t i = 0; i < conns_.size() && conn == nullptr; ++i) {
    auto& candidate = conns_[next_conn_++ % conns_.size()];
    if (candidate->usable() && candidate->has_more())
      conn = candidate.get();
  }
  if (conn == nullptr) {
    finish();
    return false;
  }
  conn->send_one(now);
  return true;
}

void load_run::inject_fault() {
  const auto& fault = opts_.fault;
  // Taken before the kill: the figures include the time the process takes
  // to die.
  fault_at_ = steady::now();
  result_.failover.injected = true;
  if (fault.kill_pid > 0 && ::kill(fault.kill_pid, SIGKILL) != 0)
    result_.failover.fault_error = "cannot kill process "
                                   + std::to_string(fault.kill_pid) + ": "
                                   + std::strerror(errno);
  text_ += fault.text_suffix;
}

// -- ending -------------------------------------------------------------------

void load_run::on_finish() {
  fault_timer_.cancel();
  measure_timer_.cancel();
  for (auto& conn : conns_)
    conn->close();
  if (closing_ == 0)
    return;
  // A node that does not answer the close handshake must not hang the run.
  stop_timer_.expires_after(std::chrono::seconds{3});
  stop_timer_.async_wait([this](beast::error_code ec) {
    if (!ec)
      ioc_.stop();
  });
}

void load_run::on_closing() {
  ++closing_;
}

void load_run::on_closed() {
  if (closing_ > 0 && --closing_ == 0)
    stop_timer_.cancel();
}

// -- what comes back ----------------------------------------------------------

void load_run::on_ack(message_state& msg, steady::time_point now) {
  if (msg.acks++ > 0) {
    ++result_.duplicates;
    return;
  }
  ++result_.acked;
  if (msg.measured)
    ack_latency_.record(now - msg.sent_at);
}

bool load_run::on_outcome(message_state& msg, bool is_error,
                          const std::string& what, steady::time_point now,
                          std::string_view provider) {
  if (msg.outcomes++ > 0) {
    ++result_.duplicates;
    return false;
  }
  if (tracking()) {
    msg.done_at = now;
    note_provider(msg, provider);
  }
  count_outcome(now);
  check_order(msg);
  if (is_error) {
    msg.error = true;
    count_failure("error frame: " + what);
  } else {
    count_answer(msg.measured);
    if (msg.measured)
      reply_latency_.record(now - msg.sent_at);
  }
  if (msg.measured)
    extend_measured(now);
  finish_if_drained();
  return true;
}

void load_run::note_provider(message_state& msg, std::string_view provider) {
  if (provider.empty())
    return;
  auto i = std::find(providers_.begin(), providers_.end(), provider);
  if (i == providers_.end() && providers_.size() < UINT16_MAX - 1)
    i = providers_.insert(providers_.end(), std::string{provider});
  if (i != providers_.end())
    msg.provider = static_cast<uint16_t>(i - providers_.begin() + 1);
}

void load_run::check_order(const message_state& msg) {
  auto& last = thread_last_outcome_[msg.thread];
  if (msg.order + 1 < last)
    ++result_.out_of_order;
  else
    last = msg.order + 1;
}

void load_run::on_lost(connection& conn, const std::string& reason) {
  ++result_.connection_errors;
  sample(reason);
  in_flight_ -= std::min<uint64_t>(in_flight_, conn.drop_in_flight());
  finish_if_drained();
  if (phase_ == phase::running
      && std::none_of(conns_.begin(), conns_.end(),
                      [](auto& c) { return c->usable(); }))
    finish();
}

void load_run::on_stray(const std::string& what) {
  ++result_.unknown_ids;
  sample(what);
}

} // namespace detail

caf::expected<load_result> run_load(const load_options& opts) {
  try {
    detail::load_run run{opts};
    auto result = run.run();
    if (!result)
      return describe_node_error(opts.node, result.error());
    return result;
  } catch (const std::exception& ex) {
    return caf::make_error(ec::unavailable,
                           std::string{"load generator failed: "} + ex.what());
  }
}

} // namespace keel::bench
