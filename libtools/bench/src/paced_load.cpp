#include "paced_load.hpp"

#include <algorithm>

#include "keel/proc.hpp"

namespace keel::bench::detail {

namespace {

/// User plus system CPU seconds of this process (0 when /proc cannot say).
double cpu_seconds() {
  auto secs = read_cpu_seconds();
  return secs ? *secs : 0;
}

/// Whether a run should send another message at `now`: always during the
/// warmup, then until `messages` measured messages are out or `duration`
/// has passed.
bool wants_more(const traffic_options& opts, steady::time_point now,
                steady::time_point measure_start, uint64_t measured_sent) {
  if (opts.messages > 0)
    return now < measure_start || measured_sent < opts.messages;
  return now < measure_start + opts.duration;
}

} // namespace

std::string message_text(size_t bytes) {
  std::string result = "keel-bench message ";
  result.resize(std::max(bytes, size_t{1}), 'x');
  return result;
}

// -- pacer --------------------------------------------------------------------

pacer::pacer(net::io_context& ioc) : timer_(ioc) {
  // nop
}

void pacer::start(double rate, steady::time_point start,
                  std::function<bool(steady::time_point)> send) {
  interval_ = std::chrono::duration_cast<steady::duration>(
    std::chrono::duration<double>(1.0 / rate));
  if (interval_.count() <= 0)
    interval_ = steady::duration{1};
  next_due_ = start;
  send_ = std::move(send);
  stopped_ = false;
  tick();
}

void pacer::stop() {
  stopped_ = true;
  timer_.cancel();
}

void pacer::tick() {
  auto now = steady::now();
  while (next_due_ <= now && !stopped_) {
    if (!send_(now))
      return stop();
    next_due_ += interval_;
  }
  if (stopped_)
    return;
  timer_.expires_at(next_due_);
  timer_.async_wait([this](boost::system::error_code ec) {
    // A handler already queued when `stop` ran still sees no error.
    if (!ec && !stopped_)
      tick();
  });
}

// -- paced_load ---------------------------------------------------------------

paced_load::paced_load(const traffic_options& opts, std::string unit,
                       std::string outcome)
  : traffic_(opts),
    unit_(std::move(unit)),
    outcome_(std::move(outcome)),
    pacer_(ioc_),
    control_timer_(ioc_) {
  // nop
}

paced_load::~paced_load() {
  // nop
}

void paced_load::on_started() {
  // nop
}

void paced_load::run_io(const std::function<void()>& begin) {
  auto cpu_before = cpu_seconds();
  begin();
  ioc_.run();
  counts().client_cpu_seconds = cpu_seconds() - cpu_before;
}

void paced_load::start() {
  phase_ = phase::running;
  start_ = steady::now();
  measure_start_ = start_ + traffic_.warmup;
  last_measured_outcome_ = measure_start_;
  last_outcome_ = start_;
  if (flat_out())
    refill(start_);
  else
    pacer_.start(traffic_.rate, start_, [this](steady::time_point now) {
      return may_send(now) && send_next(now);
    });
  on_started();
  control();
}

bool paced_load::may_send(steady::time_point now) {
  if (phase_ != phase::running)
    return false;
  if (wants_more(traffic_, now, measure_start_, counts().measured_sent))
    return true;
  begin_drain(now);
  return false;
}

void paced_load::count_sent(bool measured) {
  auto& n = counts();
  ++n.sent;
  ++in_flight_;
  if (measured)
    ++n.measured_sent;
}

void paced_load::count_outcome(steady::time_point now) {
  if (in_flight_ > 0)
    --in_flight_;
  last_outcome_ = now;
}

void paced_load::count_answer(bool measured) {
  auto& n = counts();
  ++n.answered;
  if (measured)
    ++n.measured_answered;
}

void paced_load::count_failure(std::string what) {
  ++counts().errors;
  sample(std::move(what));
}

void paced_load::extend_measured(steady::time_point now) {
  if (now > last_measured_outcome_)
    last_measured_outcome_ = now;
}

bool paced_load::finish_if_drained() {
  if (phase_ != phase::draining || in_flight_ > 0)
    return false;
  finish();
  return true;
}

void paced_load::control() {
  auto now = steady::now();
  if (phase_ == phase::running) {
    // A server that stops answering must not stall the run forever.
    if (in_flight_ > 0 && now - last_outcome_ >= traffic_.drain_timeout) {
      sample("no " + outcome_ + " for "
             + std::to_string(traffic_.drain_timeout.count()) + " ms with "
             + unit_ + " in flight: stopped sending");
      return finish();
    }
    may_send(now); // starts draining when the measured phase is over
  }
  if (phase_ == phase::draining && now >= drain_deadline_)
    return finish();
  if (phase_ == phase::done)
    return;
  control_timer_.expires_after(std::chrono::milliseconds{20});
  control_timer_.async_wait([this](boost::system::error_code ec) {
    if (!ec)
      control();
  });
}

void paced_load::begin_drain(steady::time_point now) {
  if (phase_ != phase::running)
    return;
  phase_ = phase::draining;
  drain_deadline_ = now + traffic_.drain_timeout;
  pacer_.stop();
  if (in_flight_ == 0)
    finish();
}

void paced_load::finish() {
  if (phase_ == phase::done)
    return;
  phase_ = phase::done;
  pacer_.stop();
  control_timer_.cancel();
  on_finish();
}

void paced_load::sample(std::string what) {
  auto& samples = counts().error_samples;
  if (samples.size() < max_error_samples)
    samples.push_back(std::move(what));
}

void paced_load::compute_throughput() {
  auto& n = counts();
  if (n.measured_answered == 0)
    return;
  n.measured_seconds
    = std::chrono::duration<double>(last_measured_outcome_ - measure_start_)
        .count();
  if (n.measured_seconds > 0)
    n.answered_per_second = n.measured_answered / n.measured_seconds;
}

} // namespace keel::bench::detail
