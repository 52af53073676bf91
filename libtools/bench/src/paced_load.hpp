#pragma once

// What the WebSocket and the HTTP load generators share, on the I/O thread
// that runs them: sending at a rate or flat out with a window, the warmup
// before the measured phase, giving up on a server that stops answering,
// draining what is in flight, and the counts of `traffic_result`. Private
// to libtools.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include "keel/tools/traffic.hpp"

namespace keel::bench::detail {

namespace net = boost::asio;
using steady = std::chrono::steady_clock;

/// The first few failures a run keeps as samples.
constexpr size_t max_error_samples = 10;

/// The text of every message: recognizable, padded to `bytes`.
std::string message_text(size_t bytes);

/// Open-loop pacing on the I/O thread: calls `send(now)` `rate` times per
/// second from `start` on. Sends that fell due while the timer was late go
/// out at once, so a client or server that falls behind shows up as
/// growing latency, not as a lower rate. Stops when `send` returns false.
class pacer {
public:
  explicit pacer(net::io_context& ioc);

  void start(double rate, steady::time_point start,
             std::function<bool(steady::time_point)> send);

  void stop();

private:
  void tick();

  net::steady_timer timer_;
  steady::duration interval_{0};
  steady::time_point next_due_;
  std::function<bool(steady::time_point)> send_;
  bool stopped_ = true;
};

/// One load run's traffic, whatever carries it. A derived class sends
/// (`refill`, `send_next`), reports what it sent and what came back
/// (`count_sent`, `count_outcome` and the counting calls after it), and
/// stops its own I/O when the run ends (`on_finish`); this class decides
/// when to send, when to stop sending and when the run is over. The run
/// ends once the measured phase is over and nothing is in flight, when the
/// drain timeout passes after that, or when nothing came back for the
/// drain timeout while sending.
class paced_load {
public:
  /// `unit` names what is sent ("messages") and `outcome` what comes back
  /// ("outcome"), for the sample a stalled run leaves.
  paced_load(const traffic_options& opts, std::string unit,
             std::string outcome);

  virtual ~paced_load();

  paced_load(const paced_load&) = delete;
  paced_load& operator=(const paced_load&) = delete;

protected:
  enum class phase { connecting, running, draining, done };

  // -- what a derived class does --------------------------------------------

  /// The counts this run fills.
  virtual traffic_result& counts() = 0;

  /// Flat out: sends while the window has room and `may_send` allows.
  virtual void refill(steady::time_point now) = 0;

  /// Paced: sends one message; false stops the pacing.
  virtual bool send_next(steady::time_point now) = 0;

  /// Called once sending has started, before the first control round.
  virtual void on_started();

  /// Called once when the run ends: stops what keeps the I/O context busy.
  virtual void on_finish() = 0;

  // -- what a derived class calls -------------------------------------------

  bool flat_out() const noexcept {
    return traffic_.rate <= 0;
  }

  /// Whether a message sent at `now` belongs to the measured phase.
  bool measuring(steady::time_point now) const noexcept {
    return now >= measure_start_;
  }

  /// Runs the I/O context until the run is over, counting the CPU time
  /// this process spends; `begin` starts the traffic (or the connecting).
  void run_io(const std::function<void()>& begin);

  /// Starts sending: the warmup, then the measured phase.
  void start();

  /// Returns whether another message may be sent now; starts draining once
  /// the measured phase is over.
  bool may_send(steady::time_point now);

  /// Counts a message just sent.
  void count_sent(bool measured);

  /// Counts the first outcome of a message: one fewer in flight, and the
  /// server was heard from at `now`.
  void count_outcome(steady::time_point now);

  /// Counts an answer (a reply, a completion).
  void count_answer(bool measured);

  /// Counts a failure and keeps `what` as a sample.
  void count_failure(std::string what);

  /// Moves the end of the measured phase to `now` if it is later.
  void extend_measured(steady::time_point now);

  /// Ends the run when it is draining and nothing is in flight any more;
  /// returns whether it did.
  bool finish_if_drained();

  /// Ends the run (once).
  void finish();

  /// Keeps `what` as one of the first few error samples.
  void sample(std::string what);

  /// Sets the measured phase's length and throughput from its outcomes.
  void compute_throughput();

  net::io_context ioc_;
  phase phase_ = phase::connecting;
  /// Messages sent and not yet answered.
  uint64_t in_flight_ = 0;
  steady::time_point measure_start_;

private:
  /// Every 20 ms while the run lasts: gives up on a silent server, starts
  /// draining when the measured phase is over, ends a drain that took too
  /// long.
  void control();

  void begin_drain(steady::time_point now);

  traffic_options traffic_;
  std::string unit_;
  std::string outcome_;
  steady::time_point start_;
  steady::time_point last_measured_outcome_;
  /// The latest outcome of any message (or the start).
  steady::time_point last_outcome_;
  steady::time_point drain_deadline_;
  pacer pacer_;
  net::steady_timer control_timer_;
};

} // namespace keel::bench::detail
