#include "keel/tools/bench.hpp"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <deque>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <random>
#include <sstream>
#include <thread>

#include <boost/asio/connect.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/websocket.hpp>


#include "keel/llm_client.hpp"
#include "keel/proc.hpp"
#include "keel/protocol.hpp"
#include "keel/text.hpp"

namespace keel::bench {

// -- latencies ----------------------------------------------------------------

void latency_recorder::record(std::chrono::nanoseconds latency) {
  samples_.push_back(std::max<int64_t>(latency.count(), 0));
  sorted_ = false;
}

void latency_recorder::sort() {
  if (!sorted_) {
    std::sort(samples_.begin(), samples_.end());
    sorted_ = true;
  }
}

int64_t latency_recorder::percentile(double q) {
  if (samples_.empty())
    return 0;
  sort();
  q = std::clamp(q, 0.0, 1.0);
  // Nearest rank: the smallest sample with at least q of all at or below it.
  auto rank = static_cast<size_t>(std::ceil(q * samples_.size()));
  return samples_[rank == 0 ? 0 : rank - 1];
}

latency_summary latency_recorder::summary() {
  latency_summary result;
  result.count = samples_.size();
  if (samples_.empty())
    return result;
  auto ms = [](int64_t ns) { return static_cast<double>(ns) / 1e6; };
  result.p50 = ms(percentile(0.50));
  result.p90 = ms(percentile(0.90));
  result.p99 = ms(percentile(0.99));
  result.max = ms(samples_.back());
  double sum = 0;
  for (auto x : samples_)
    sum += static_cast<double>(x);
  result.mean = ms(static_cast<int64_t>(sum / samples_.size()));
  return result;
}

// -- WebSocket load ---------------------------------------------------------------

bool load_result::clean() const noexcept {
  return sent > 0 && acked == sent && answered == sent && errors == 0
         && missing_acks == 0 && missing_replies == 0 && duplicates == 0
         && unknown_ids == 0 && out_of_order == 0 && connection_errors == 0;
}

namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace websocket = beast::websocket;
using tcp = net::ip::tcp;
using steady = std::chrono::steady_clock;

constexpr size_t max_error_samples = 10;

/// What the run knows about one message it sent.
struct message_state {
  /// Index of the message's thread.
  uint32_t thread = 0;
  /// Position among the messages of its thread.
  uint32_t order = 0;
  steady::time_point sent_at;
  /// When the first outcome arrived (kept only with a fault configured).
  steady::time_point done_at;
  /// Index of the provider that answered, plus one (0: unknown; kept only
  /// with a fault configured).
  uint16_t provider = 0;
  bool measured = false;
  uint8_t acks = 0;
  uint8_t outcomes = 0;
  bool error = false;
};

double cpu_seconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  auto secs = [](const timeval& tv) {
    return static_cast<double>(tv.tv_sec) + tv.tv_usec / 1e6;
  };
  return secs(usage.ru_utime) + secs(usage.ru_stime);
}

/// The text of every message: recognizable, padded to `bytes`.
std::string message_text(size_t bytes) {
  std::string result = "keel-bench message ";
  result.resize(std::max(bytes, size_t{1}), 'x');
  return result;
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

/// Open-loop pacing on the I/O thread: calls `send(now)` `rate` times per
/// second from `start` on. Sends that fell due while the timer was late go
/// out at once, so a client or server that falls behind shows up as
/// growing latency, not as a lower rate. Stops when `send` returns false.
class pacer {
public:
  explicit pacer(net::io_context& ioc) : timer_(ioc) {
    // nop
  }

  void start(double rate, steady::time_point start,
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

  void stop() {
    stopped_ = true;
    timer_.cancel();
  }

private:
  void tick() {
    auto now = steady::now();
    while (next_due_ <= now && !stopped_) {
      if (!send_(now))
        return stop();
      next_due_ += interval_;
    }
    if (stopped_)
      return;
    timer_.expires_at(next_due_);
    timer_.async_wait([this](beast::error_code ec) {
      // A handler already queued when `stop` ran still sees no error.
      if (!ec && !stopped_)
        tick();
    });
  }

  net::steady_timer timer_;
  steady::duration interval_{0};
  steady::time_point next_due_;
  std::function<bool(steady::time_point)> send_;
  bool stopped_ = true;
};

class connection;

/// One benchmark run: the I/O context, the connections, the pacing and the
/// bookkeeping. Everything runs on the thread that calls `run`.
class load_run {
public:
  explicit load_run(const load_options& opts);

  caf::expected<load_result> run();

  // -- callbacks from connections ---------------------------------------------

  void on_ready();
  void on_connect_failed(caf::error err);
  void on_ack(message_state& msg, steady::time_point now);
  /// Returns false when the outcome was a duplicate. `provider` is the
  /// reply's provider (looked at only with a fault configured).
  bool on_outcome(message_state& msg, bool is_error, const std::string& what,
                  steady::time_point now, std::string_view provider = {});
  void on_lost(connection& conn, const std::string& reason);
  void on_stray(const std::string& what);
  void on_closed();

  /// Returns whether another message may be sent now; starts draining once
  /// the measured phase is over.
  bool may_send(steady::time_point now);
  /// Counts a message just sent.
  void on_sent(bool measured);

  bool flat_out() const noexcept {
    return opts_.rate <= 0;
  }

  bool measuring(steady::time_point now) const noexcept {
    return now >= measure_start_;
  }

  /// Whether outcomes keep their time and provider (for failover figures).
  bool tracking() const noexcept {
    return opts_.fault.at.has_value();
  }

  const load_options& opts() const noexcept {
    return opts_;
  }

  const std::string& thread_name(uint32_t index) const {
    return thread_names_[index];
  }

  uint32_t next_order(uint32_t thread) {
    return thread_next_order_[thread]++;
  }

  const std::string& text() const noexcept {
    return text_;
  }

private:
  enum class phase { connecting, running, draining, done };

  void begin();
  void begin_drain(steady::time_point now);
  void finish();
  bool send_paced(steady::time_point now);
  void control();
  void sample(std::string what);
  void inject_fault();
  void compute_failover();

  load_options opts_;
  net::io_context ioc_;
  std::vector<std::unique_ptr<connection>> conns_;
  std::vector<std::string> thread_names_;
  std::vector<uint32_t> thread_next_order_;
  /// Order of the latest outcome per thread, plus one (0: none yet).
  std::vector<uint32_t> thread_last_outcome_;
  std::string text_;
  phase phase_ = phase::connecting;
  size_t ready_ = 0;
  size_t connect_failures_ = 0;
  caf::error fatal_;
  steady::time_point start_;
  steady::time_point measure_start_;
  steady::time_point last_measured_outcome_;
  /// The latest outcome of any message (or the start).
  steady::time_point last_outcome_;
  steady::time_point drain_deadline_;
  size_t next_conn_ = 0;
  uint64_t in_flight_ = 0;
  size_t closing_ = 0;
  pacer pacer_;
  net::steady_timer control_timer_;
  net::steady_timer stop_timer_;
  net::steady_timer fault_timer_;
  /// When the fault was injected.
  std::optional<steady::time_point> fault_at_;
  /// Providers named by replies (`message_state::provider` - 1 indexes it).
  std::vector<std::string> providers_;
  latency_recorder ack_latency_;
  latency_recorder reply_latency_;
  load_result result_;
  friend class connection;
};

/// One WebSocket connection owning a share of the threads.
class connection {
public:
  connection(load_run& run, net::io_context& ioc, size_t index)
    : run_(run),
      ws_(ioc),
      index_(index),
      id_prefix_("c" + std::to_string(index) + "-") {
    // nop
  }

  void add_thread(uint32_t thread) {
    threads_.push_back(thread);
  }

  bool usable() const noexcept {
    return ready_ && !closed_ && !closing_;
  }

  const std::vector<message_state>& messages() const noexcept {
    return msgs_;
  }

  void start(const tcp::resolver::results_type& addrs) {
    beast::get_lowest_layer(ws_).expires_after(std::chrono::seconds{10});
    beast::get_lowest_layer(ws_).async_connect(
      addrs, [this](beast::error_code ec, const tcp::endpoint&) {
        on_connect(ec);
      });
  }

  /// Sends the next message (round robin over this connection's threads).
  void send_one(steady::time_point now) {
    auto thread = threads_[next_thread_++ % threads_.size()];
    message_state msg;
    msg.thread = thread;
    msg.order = run_.next_order(thread);
    msg.sent_at = now;
    msg.measured = run_.measuring(now);
    auto id = id_prefix_ + std::to_string(msgs_.size());
    msgs_.push_back(msg);
    ++in_flight_;
    run_.on_sent(msg.measured);
    enqueue(protocol::send_frame(run_.thread_name(thread), id, run_.text()));
  }

  /// Flat out: tops the window up.
  void refill(steady::time_point now) {
    while (usable() && in_flight_ < run_.opts().window && run_.may_send(now))
      send_one(now);
  }

  /// Closes politely (after a write in progress, if any).
  void close() {
    if (closed_ || closing_)
      return;
    if (!ready_) {
      beast::error_code ignored;
      beast::get_lowest_layer(ws_).socket().close(ignored);
      closed_ = true;
      return;
    }
    closing_ = true;
    ++run_.closing_;
    if (!writing_)
      do_close();
  }

private:
  void on_connect(beast::error_code ec) {
    if (ec)
      return connect_failed(ec.message());
    beast::get_lowest_layer(ws_).socket().set_option(tcp::no_delay{true}, ec);
    beast::get_lowest_layer(ws_).expires_never();
    websocket::stream_base::timeout timeouts{std::chrono::seconds{10},
                                             websocket::stream_base::none(),
                                             false};
    ws_.set_option(timeouts);
    auto token = run_.opts().node.token;
    ws_.set_option(websocket::stream_base::decorator(
      [token](websocket::request_type& req) {
        req.set(http::field::user_agent, "keel-bench");
        if (!token.empty())
          req.set(http::field::authorization, "Bearer " + token);
      }));
    ws_.text(true);
    auto host = run_.opts().node.host + ":"
                + std::to_string(run_.opts().node.port);
    ws_.async_handshake(res_, host, protocol::ws_path,
                        [this](beast::error_code ec) { on_handshake(ec); });
  }

  void on_handshake(beast::error_code ec) {
    if (ec) {
      if (res_.result() == http::status::unauthorized) {
        closed_ = true;
        run_.on_connect_failed(caf::make_error(
          ec::unauthorized, "the node refused the token (401)"));
        return;
      }
      if (ec == websocket::error::upgrade_declined)
        return connect_failed("upgrade refused with HTTP "
                              + std::to_string(res_.result_int()));
      return connect_failed(ec.message());
    }
    ready_ = true;
    do_read();
    run_.on_ready();
  }

  void connect_failed(const std::string& reason) {
    closed_ = true;
    run_.on_connect_failed(caf::make_error(ec::connection_failed, reason));
  }

  void do_read() {
    ws_.async_read(buf_, [this](beast::error_code ec, size_t) {
      if (ec)
        return on_read_failed(ec);
      auto data = buf_.cdata();
      on_frame(std::string_view{static_cast<const char*>(data.data()),
                                data.size()});
      buf_.consume(buf_.size());
      do_read();
    });
  }

  void on_read_failed(beast::error_code ec) {
    if (closed_ || closing_)
      return;
    closed_ = true;
    std::string reason = ec == websocket::error::closed
                           ? "closed by the node (code "
                               + std::to_string(ws_.reason().code) + ")"
                           : ec.message();
    run_.on_lost(*this, "connection " + std::to_string(index_) + ": "
                          + reason);
  }

  void enqueue(std::string frame) {
    out_.push_back(std::move(frame));
    if (!writing_)
      do_write();
  }

  void do_write() {
    writing_ = true;
    ws_.async_write(net::buffer(out_.front()),
                    [this](beast::error_code ec, size_t) {
                      writing_ = false;
                      out_.pop_front();
                      if (ec) {
                        out_.clear();
                        if (closing_)
                          return finish_close();
                        return on_read_failed(ec);
                      }
                      if (closing_)
                        return do_close();
                      if (!out_.empty())
                        do_write();
                    });
  }

  void do_close() {
    ws_.async_close(websocket::close_code::normal,
                    [this](beast::error_code) { finish_close(); });
  }

  void finish_close() {
    if (closed_)
      return;
    closed_ = true;
    run_.on_closed();
  }

  /// Finds the message a frame names in `key`, or null.
  message_state* find(const nlohmann::json& body, const char* key) {
    auto i = body.find(key);
    if (i == body.end() || !i->is_string())
      return nullptr;
    const auto& id = i->get_ref<const std::string&>();
    if (id.compare(0, id_prefix_.size(), id_prefix_) != 0)
      return nullptr;
    char* end = nullptr;
    auto str = id.c_str() + id_prefix_.size();
    errno = 0;
    auto index = std::strtoull(str, &end, 10);
    if (end == str || *end != '\0' || errno != 0 || index >= msgs_.size())
      return nullptr;
    return &msgs_[index];
  }

  static std::string describe(const nlohmann::json& body) {
    auto field = [&](const char* key) {
      auto i = body.find(key);
      return i != body.end() && i->is_string() ? i->get<std::string>()
                                               : std::string{};
    };
    auto result = field("code");
    auto message = field("message");
    if (message.empty())
      message = field("text");
    if (!message.empty())
      result += (result.empty() ? "" : ": ") + message;
    return result.empty() ? body.dump() : result;
  }

  void on_frame(std::string_view text) {
    auto now = steady::now();
    auto frame = protocol::decode_server_frame(text);
    if (!frame)
      return run_.on_stray("undecodable frame: " + keel::render(frame.error()));
    const auto& type = frame->type;
    if (type == "ack") {
      if (auto msg = find(frame->body, "id"))
        run_.on_ack(*msg, now);
      else
        run_.on_stray("ack for an unknown id: " + frame->body.dump());
    } else if (type == "reply" || type == "error") {
      auto is_error = type == "error";
      // Outcome frames carry the answered message's client id in `id`.
      auto msg = find(frame->body, "id");
      if (!msg)
        return run_.on_stray(type + " for no message of this run: "
                             + describe(frame->body));
      std::string_view provider;
      if (!is_error && run_.tracking()) {
        auto i = frame->body.find("provider");
        if (i != frame->body.end() && i->is_string())
          provider = i->get_ref<const std::string&>();
      }
      auto first = run_.on_outcome(*msg, is_error,
                                   is_error ? describe(frame->body)
                                            : std::string{},
                                   now, provider);
      if (first && in_flight_ > 0)
        --in_flight_;
      if (run_.flat_out())
        refill(now);
    }
    // hello, status, pong and history frames carry nothing we measure.
  }

  load_run& run_;
  websocket::stream<beast::tcp_stream> ws_;
  http::response<http::string_body> res_;
  beast::flat_buffer buf_;
  std::deque<std::string> out_;
  size_t index_;
  std::string id_prefix_;
  std::vector<uint32_t> threads_;
  size_t next_thread_ = 0;
  std::vector<message_state> msgs_;
  size_t in_flight_ = 0;
  bool ready_ = false;
  bool writing_ = false;
  bool closing_ = false;
  bool closed_ = false;
  friend class load_run;
};

load_run::load_run(const load_options& opts)
  : opts_(opts),
    pacer_(ioc_),
    control_timer_(ioc_),
    stop_timer_(ioc_),
    fault_timer_(ioc_) {
  if (opts_.thread_prefix.empty())
    opts_.thread_prefix = "bench-" + random_hex(6);
  thread_names_.reserve(opts_.threads);
  for (size_t i = 0; i < opts_.threads; ++i)
    thread_names_.push_back(opts_.thread_prefix + "-" + std::to_string(i));
  thread_next_order_.assign(opts_.threads, 0);
  thread_last_outcome_.assign(opts_.threads, 0);
  text_ = message_text(opts_.text_bytes);
}

caf::expected<load_result> load_run::run() {
  if (opts_.connections == 0)
    return caf::make_error(ec::config_invalid,
                           "connections: must be at least 1");
  if (opts_.threads < opts_.connections)
    return caf::make_error(ec::config_invalid,
                           "threads: must be at least the number of "
                           "connections (each connection owns its threads)");
  if (flat_out() && opts_.window == 0)
    return caf::make_error(ec::config_invalid, "window: must be at least 1");
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
  auto cpu_before = cpu_seconds();
  for (auto& conn : conns_)
    conn->start(addrs);
  ioc_.run();
  result_.client_cpu_seconds = cpu_seconds() - cpu_before;
  if (fatal_)
    return fatal_;
  // Every message gets exactly one ack and one outcome; count what is not.
  for (auto& conn : conns_) {
    for (auto& msg : conn->messages()) {
      if (msg.outcomes == 0)
        ++result_.missing_replies;
      if (msg.acks == 0 && !msg.error)
        ++result_.missing_acks;
    }
  }
  result_.ack_latency = ack_latency_.summary();
  result_.reply_latency = reply_latency_.summary();
  if (tracking())
    compute_failover();
  if (result_.measured_answered > 0) {
    result_.measured_seconds
      = std::chrono::duration<double>(last_measured_outcome_ - measure_start_)
          .count();
    if (result_.measured_seconds > 0)
      result_.answered_per_second
        = result_.measured_answered / result_.measured_seconds;
  }
  return std::move(result_);
}

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
  phase_ = phase::running;
  start_ = steady::now();
  measure_start_ = start_ + opts_.warmup;
  last_measured_outcome_ = measure_start_;
  last_outcome_ = start_;
  if (flat_out()) {
    for (auto& conn : conns_)
      conn->refill(start_);
  } else {
    pacer_.start(opts_.rate, start_,
                 [this](steady::time_point now) { return send_paced(now); });
  }
  if (opts_.fault.at) {
    fault_timer_.expires_at(measure_start_ + *opts_.fault.at);
    fault_timer_.async_wait([this](beast::error_code ec) {
      if (!ec && phase_ == phase::running)
        inject_fault();
    });
  }
  control();
}

bool load_run::may_send(steady::time_point now) {
  if (phase_ != phase::running)
    return false;
  bool more = wants_more(opts_, now, measure_start_, result_.measured_sent);
  if (!more)
    begin_drain(now);
  return more;
}

void load_run::on_sent(bool measured) {
  ++result_.sent;
  ++in_flight_;
  if (measured)
    ++result_.measured_sent;
}

bool load_run::send_paced(steady::time_point now) {
  if (!may_send(now))
    return false;
  // Round robin over the connections that are still usable.
  connection* conn = nullptr;
  for (size_t i = 0; i < conns_.size() && conn == nullptr; ++i) {
    auto& candidate = conns_[next_conn_++ % conns_.size()];
    if (candidate->usable())
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

void load_run::control() {
  auto now = steady::now();
  if (phase_ == phase::running) {
    // A node that stops answering must not stall the run forever.
    if (in_flight_ > 0 && now - last_outcome_ >= opts_.drain_timeout) {
      sample("no outcome for "
             + std::to_string(opts_.drain_timeout.count())
             + " ms with messages in flight: stopped sending");
      return finish();
    }
    may_send(now); // starts draining when the measured phase is over
  }
  if (phase_ == phase::draining && now >= drain_deadline_)
    return finish();
  if (phase_ == phase::done)
    return;
  control_timer_.expires_after(std::chrono::milliseconds{20});
  control_timer_.async_wait([this](beast::error_code ec) {
    if (!ec)
      control();
  });
}

void load_run::begin_drain(steady::time_point now) {
  if (phase_ != phase::running)
    return;
  phase_ = phase::draining;
  drain_deadline_ = now + opts_.drain_timeout;
  pacer_.stop();
  if (in_flight_ == 0)
    finish();
}

void load_run::finish() {
  if (phase_ == phase::done)
    return;
  phase_ = phase::done;
  pacer_.stop();
  control_timer_.cancel();
  fault_timer_.cancel();
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

void load_run::on_closed() {
  if (closing_ > 0 && --closing_ == 0)
    stop_timer_.cancel();
}

void load_run::sample(std::string what) {
  if (result_.error_samples.size() < max_error_samples)
    result_.error_samples.push_back(std::move(what));
}

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
    if (!provider.empty()) {
      auto i = std::find(providers_.begin(), providers_.end(), provider);
      if (i == providers_.end() && providers_.size() < UINT16_MAX - 1)
        i = providers_.insert(providers_.end(), std::string{provider});
      if (i != providers_.end())
        msg.provider = static_cast<uint16_t>(i - providers_.begin() + 1);
    }
  }
  if (in_flight_ > 0)
    --in_flight_;
  last_outcome_ = now;
  auto& last = thread_last_outcome_[msg.thread];
  if (msg.order + 1 < last)
    ++result_.out_of_order;
  else
    last = msg.order + 1;
  if (is_error) {
    msg.error = true;
    ++result_.errors;
    sample("error frame: " + what);
  } else {
    ++result_.answered;
    if (msg.measured) {
      ++result_.measured_answered;
      reply_latency_.record(now - msg.sent_at);
    }
  }
  if (msg.measured && now > last_measured_outcome_)
    last_measured_outcome_ = now;
  if (phase_ == phase::draining && in_flight_ == 0)
    finish();
  return true;
}

void load_run::on_lost(connection& conn, const std::string& reason) {
  ++result_.connection_errors;
  sample(reason);
  in_flight_ -= std::min<uint64_t>(in_flight_, conn.in_flight_);
  conn.in_flight_ = 0;
  if (phase_ == phase::draining && in_flight_ == 0)
    finish();
  if (phase_ == phase::running
      && std::none_of(conns_.begin(), conns_.end(),
                      [](auto& c) { return c->usable(); }))
    finish();
}

void load_run::on_stray(const std::string& what) {
  ++result_.unknown_ids;
  sample(what);
}

void load_run::compute_failover() {
  auto& fo = result_.failover;
  if (!fault_at_)
    return;
  auto fault = *fault_at_;
  auto ms = [](steady::duration d) {
    return std::chrono::duration<double, std::milli>(d).count();
  };
  std::vector<const message_state*> all;
  for (auto& conn : conns_)
    for (auto& msg : conn->messages())
      all.push_back(&msg);
  std::sort(all.begin(), all.end(), [](auto* a, auto* b) {
    return a->sent_at < b->sent_at;
  });
  auto name = [&](const message_state& msg) -> std::string {
    if (msg.outcomes == 0)
      return "none";
    if (msg.error)
      return "error";
    return msg.provider > 0 ? providers_[msg.provider - 1] : "unknown";
  };
  // The first reply from the fallback, whichever message it answered.
  std::optional<steady::time_point> recovered;
  for (auto* msg : all)
    if (msg->outcomes > 0 && !msg->error && msg->done_at >= fault
        && name(*msg) == opts_.fault.fallback_provider
        && (!recovered || msg->done_at < *recovered))
      recovered = msg->done_at;
  if (recovered)
    fo.to_first_fallback = ms(*recovered - fault);
  latency_recorder affected;
  latency_recorder before;
  latency_recorder after;
  for (auto* msg : all) {
    bool done = msg->outcomes > 0;
    if (done && msg->done_at < fault) {
      if (msg->measured && !msg->error)
        before.record(msg->done_at - msg->sent_at);
      continue;
    }
    if (msg->sent_at >= fault && done && !msg->error)
      ++fo.replies_after_fault[name(*msg)];
    if (recovered && msg->sent_at >= *recovered) {
      if (done && !msg->error)
        after.record(msg->done_at - msg->sent_at);
      continue;
    }
    ++fo.affected;
    if (!done || msg->error)
      ++fo.affected_failed;
    if (done)
      affected.record(msg->done_at - msg->sent_at);
    if (fo.affected_latencies.size() < 50)
      fo.affected_latencies.emplace_back(done ? ms(msg->done_at - msg->sent_at)
                                              : -1.0,
                                         name(*msg));
  }
  fo.affected_latency = affected.summary();
  fo.before = before.summary();
  fo.after = after.summary();
}

} // namespace

caf::expected<load_result> run_load(const load_options& opts) {
  try {
    load_run run{opts};
    auto result = run.run();
    if (!result)
      return describe_node_error(opts.node, result.error());
    return result;
  } catch (const std::exception& ex) {
    return caf::make_error(ec::unavailable,
                           std::string{"load generator failed: "} + ex.what());
  }
}

// -- HTTP load ----------------------------------------------------------------

bool http_load_result::clean() const noexcept {
  return sent > 0 && answered == sent && errors == 0 && missing == 0;
}

namespace {

/// One HTTP benchmark run. Pacing and bookkeeping run on the thread that
/// calls `run`; the HTTP client runs on its own thread and posts each result
/// back, after taking its time stamp.
class http_run {
public:
  explicit http_run(const http_load_options& opts)
    : opts_(opts),
      work_(net::make_work_guard(ioc_)),
      pacer_(ioc_),
      control_timer_(ioc_) {
    request_.thread = "keel-bench";
    request_.system_prompt = opts_.system_prompt;
    context_entry user;
    user.role = "user";
    user.content = message_text(opts_.text_bytes);
    request_.context.push_back(std::move(user));
  }

  caf::expected<http_load_result> run() {
    if (opts_.rate <= 0 && opts_.window == 0)
      return caf::make_error(ec::config_invalid, "window: must be at least 1");
    auto server = opts_.server;
    if (server.kind.empty())
      server.kind = "openai";
    if (server.name.empty())
      server.name = "bench";
    io_ = std::make_unique<http_io>(1);
    auto ep = llm_endpoint::make(*io_, server);
    if (!ep)
      return ep.error();
    endpoint_ = std::move(*ep);
    if (auto err = probe(server.base_url))
      return err;
    auto cpu_before = cpu_seconds();
    begin();
    ioc_.run();
    result_.client_cpu_seconds = cpu_seconds() - cpu_before;
    for (auto& call : calls_)
      if (!call.done)
        ++result_.missing;
    result_.latency = latency_.summary();
    if (result_.measured_answered > 0) {
      result_.measured_seconds
        = std::chrono::duration<double>(last_measured_result_ - measure_start_)
            .count();
      if (result_.measured_seconds > 0)
        result_.answered_per_second
          = result_.measured_answered / result_.measured_seconds;
    }
    return std::move(result_);
  }

private:
  enum class phase { running, draining, done };

  struct call_state {
    steady::time_point sent_at;
    bool measured = false;
    bool done = false;
  };

  /// One call before the run, waited for: it opens the first connection and
  /// turns a server that cannot be reached or refuses the request into a
  /// clear error instead of a run full of failures.
  caf::error probe(const std::string& url) {
    struct state {
      std::mutex mtx;
      std::condition_variable cv;
      std::optional<call_result> result;
    };
    auto st = std::make_shared<state>();
    endpoint_->complete(request_, 0, nullptr, [st](call_result res) {
      std::lock_guard<std::mutex> guard{st->mtx};
      st->result = std::move(res);
      st->cv.notify_all();
    });
    std::unique_lock<std::mutex> guard{st->mtx};
    // The call's own total timeout bounds the wait; this only guards it.
    auto limit = opts_.server.total_timeout + std::chrono::seconds{5};
    if (!st->cv.wait_for(guard, limit, [&] { return st->result.has_value(); }))
      return caf::make_error(ec::timeout, "no answer from " + url);
    if (auto failure = std::get_if<call_failure>(&*st->result)) {
      auto code = failure->failure.transport && !failure->failure.status
                    ? ec::connection_failed
                    : ec::provider_failed;
      return caf::make_error(code, url + ": " + failure->message);
    }
    return {};
  }

  void begin() {
    start_ = steady::now();
    measure_start_ = start_ + opts_.warmup;
    last_measured_result_ = measure_start_;
    last_result_ = start_;
    if (opts_.rate > 0)
      pacer_.start(opts_.rate, start_, [this](steady::time_point now) {
        if (!may_send(now))
          return false;
        send_one(now);
        return true;
      });
    else
      refill(start_);
    control();
  }

  bool may_send(steady::time_point now) {
    if (phase_ != phase::running)
      return false;
    if (wants_more(opts_, now, measure_start_, result_.measured_sent))
      return true;
    begin_drain(now);
    return false;
  }

  void refill(steady::time_point now) {
    while (in_flight_ < opts_.window && may_send(now))
      send_one(now);
  }

  void send_one(steady::time_point now) {
    auto index = calls_.size();
    call_state call;
    call.sent_at = now;
    call.measured = now >= measure_start_;
    calls_.push_back(call);
    ++result_.sent;
    if (call.measured)
      ++result_.measured_sent;
    ++in_flight_;
    endpoint_->complete(request_, 0, nullptr, [this, index](call_result res) {
      // The time stamp is taken here, on the client's thread, so the hop
      // back to the run's thread does not count.
      auto done = steady::now();
      net::post(ioc_, [this, index, done, res = std::move(res)]() mutable {
        on_result(index, done, std::move(res));
      });
    });
  }

  void on_result(size_t index, steady::time_point done, call_result res) {
    auto& call = calls_[index];
    if (call.done)
      return;
    call.done = true;
    --in_flight_;
    last_result_ = done;
    if (auto failure = std::get_if<call_failure>(&res)) {
      ++result_.errors;
      if (result_.error_samples.size() < max_error_samples)
        result_.error_samples.push_back(failure->message);
    } else {
      ++result_.answered;
      if (call.measured) {
        ++result_.measured_answered;
        latency_.record(done - call.sent_at);
        if (done > last_measured_result_)
          last_measured_result_ = done;
      }
    }
    if (phase_ == phase::draining && in_flight_ == 0)
      return finish();
    if (phase_ == phase::running && opts_.rate <= 0)
      refill(steady::now());
  }

  void control() {
    auto now = steady::now();
    if (phase_ == phase::running) {
      // A server that stops answering must not stall the run forever.
      if (in_flight_ > 0 && now - last_result_ >= opts_.drain_timeout) {
        if (result_.error_samples.size() < max_error_samples)
          result_.error_samples.push_back(
            "no result for " + std::to_string(opts_.drain_timeout.count())
            + " ms with calls in flight: stopped sending");
        return finish();
      }
      may_send(now); // starts draining when the measured phase is over
    }
    if (phase_ == phase::draining && now >= drain_deadline_)
      return finish();
    if (phase_ == phase::done)
      return;
    control_timer_.expires_after(std::chrono::milliseconds{20});
    control_timer_.async_wait([this](beast::error_code ec) {
      if (!ec)
        control();
    });
  }

  void begin_drain(steady::time_point now) {
    if (phase_ != phase::running)
      return;
    phase_ = phase::draining;
    drain_deadline_ = now + opts_.drain_timeout;
    pacer_.stop();
    if (in_flight_ == 0)
      finish();
  }

  void finish() {
    if (phase_ == phase::done)
      return;
    phase_ = phase::done;
    pacer_.stop();
    control_timer_.cancel();
    // Results of calls still in flight are no longer waited for.
    work_.reset();
    ioc_.stop();
  }

  http_load_options opts_;
  net::io_context ioc_;
  net::executor_work_guard<net::io_context::executor_type> work_;
  completion_request request_;
  phase phase_ = phase::running;
  std::vector<call_state> calls_;
  uint64_t in_flight_ = 0;
  steady::time_point start_;
  steady::time_point measure_start_;
  steady::time_point last_measured_result_;
  steady::time_point last_result_;
  steady::time_point drain_deadline_;
  pacer pacer_;
  net::steady_timer control_timer_;
  latency_recorder latency_;
  http_load_result result_;
  // Last, so they go first: the client's shutdown fails the calls still in
  // flight, whose handlers post to `ioc_`, which must still exist.
  std::unique_ptr<http_io> io_;
  std::shared_ptr<llm_endpoint> endpoint_;
};

} // namespace

caf::expected<http_load_result> run_http_load(const http_load_options& opts) {
  try {
    http_run run{opts};
    return run.run();
  } catch (const std::exception& ex) {
    return caf::make_error(ec::unavailable,
                           std::string{"HTTP load generator failed: "}
                             + ex.what());
  }
}

// -- the whole report -------------------------------------------------------------

double report::durable_ratio() const noexcept {
  if (!raw_available || raw.writes_per_second <= 0)
    return 0;
  return load.answered_per_second / raw.writes_per_second;
}

namespace {

nlohmann::json to_json(const latency_summary& x) {
  return {{"count", x.count}, {"p50", x.p50}, {"p90", x.p90},
          {"p99", x.p99},     {"max", x.max}, {"mean", x.mean}};
}

std::string seconds_str(std::chrono::milliseconds x) {
  return fixed(x.count() / 1000.0, 1) + " s";
}

std::string latency_line(const latency_summary& x) {
  if (x.count == 0)
    return "no samples";
  return "p50 " + fixed(x.p50, 2) + " ms   p90 " + fixed(x.p90, 2)
         + " ms   p99 " + fixed(x.p99, 2) + " ms   max " + fixed(x.max, 2)
         + " ms";
}

/// One line of a readable report: the label in a column of 15.
void table_row(std::ostream& out, const char* label, const std::string& value) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%-15s", label);
  out << buf << value << '\n';
}

std::string length_str(const traffic_options& o) {
  return o.messages > 0 ? std::to_string(o.messages) + " measured messages"
                        : seconds_str(o.duration) + " measured";
}

nlohmann::json to_json(const failover_result& x, const fault_options& f) {
  nlohmann::json j;
  j["at_s"] = f.at ? f.at->count() / 1000.0 : 0.0;
  j["kill_pid"] = f.kill_pid;
  j["text_suffix"] = f.text_suffix;
  j["fallback_provider"] = f.fallback_provider;
  j["injected"] = x.injected;
  if (!x.fault_error.empty())
    j["fault_error"] = x.fault_error;
  j["to_first_fallback_ms"] = x.to_first_fallback >= 0
                                ? nlohmann::json(x.to_first_fallback)
                                : nlohmann::json(nullptr);
  j["affected"] = x.affected;
  j["affected_failed"] = x.affected_failed;
  auto list = nlohmann::json::array();
  for (auto& [ms, by] : x.affected_latencies)
    list.push_back({{"latency_ms", ms >= 0 ? nlohmann::json(ms)
                                           : nlohmann::json(nullptr)},
                    {"outcome", by}});
  j["affected_messages"] = std::move(list);
  j["affected_latency_ms"] = to_json(x.affected_latency);
  j["before_latency_ms"] = to_json(x.before);
  j["after_latency_ms"] = to_json(x.after);
  j["replies_after_fault"] = x.replies_after_fault;
  return j;
}

void render(std::ostream& out, const failover_result& x,
            const fault_options& f) {
  auto at = fixed(f.at ? f.at->count() / 1000.0 : 0.0, 1);
  std::string what;
  if (f.kill_pid > 0)
    what = "SIGKILL to process " + std::to_string(f.kill_pid);
  if (!f.text_suffix.empty())
    what += (what.empty() ? "" : ", ") + std::string{"text suffix \""}
            + f.text_suffix + "\"";
  table_row(out, "fault", (x.injected ? "" : "NOT injected: ") + what + " at "
                            + at + " s into the measured phase");
  if (!x.fault_error.empty())
    table_row(out, "fault error", x.fault_error);
  if (!x.injected)
    return;
  table_row(out, "failover", x.to_first_fallback >= 0
                               ? fixed(x.to_first_fallback, 1)
                                   + " ms from the fault to the first reply by "
                                   + f.fallback_provider
                               : "no reply by " + f.fallback_provider
                                   + " after the fault");
  table_row(out, "affected", std::to_string(x.affected)
                               + " messages (outcome after the fault, sent "
                                 "before the first fallback reply), "
                               + std::to_string(x.affected_failed)
                               + " of them failed");
  table_row(out, "  latency", latency_line(x.affected_latency));
  std::string list;
  for (auto& [ms, by] : x.affected_latencies)
    list += (list.empty() ? "" : ", ")
            + (ms >= 0 ? fixed(ms, 1) : std::string{"-"}) + " (" + by + ")";
  if (!list.empty())
    table_row(out, "  each (ms)", list);
  table_row(out, "before fault", latency_line(x.before));
  table_row(out, "after failover", latency_line(x.after));
  std::string by;
  for (auto& [name, n] : x.replies_after_fault)
    by += (by.empty() ? "" : ", ") + name + " " + std::to_string(n);
  table_row(out, "replies after", by.empty() ? "none" : by);
}

} // namespace

nlohmann::json to_json(const report& x) {
  const auto& o = x.load_opts;
  const auto& l = x.load;
  nlohmann::json j;
  j["config"] = {
    {"node", o.node.host + ":" + std::to_string(o.node.port)},
    {"connections", o.connections},
    {"threads", o.threads},
    {"rate", o.rate > 0 ? nlohmann::json(o.rate) : nlohmann::json("flat out")},
    {"window", o.window},
    {"messages", o.messages},
    {"duration_s", o.messages > 0 ? 0.0 : o.duration.count() / 1000.0},
    {"warmup_s", o.warmup.count() / 1000.0},
    {"text_bytes", o.text_bytes},
    {"thread_prefix", o.thread_prefix},
  };
  j["messages"] = {
    {"sent", l.sent},
    {"acked", l.acked},
    {"answered", l.answered},
    {"errors", l.errors},
    {"missing_acks", l.missing_acks},
    {"missing_replies", l.missing_replies},
    {"duplicates", l.duplicates},
    {"unknown_ids", l.unknown_ids},
    {"out_of_order", l.out_of_order},
    {"connection_errors", l.connection_errors},
    {"measured_sent", l.measured_sent},
    {"measured_answered", l.measured_answered},
  };
  j["clean"] = l.clean();
  j["measured_seconds"] = l.measured_seconds;
  j["answered_per_second"] = l.answered_per_second;
  j["ack_latency_ms"] = to_json(l.ack_latency);
  j["reply_latency_ms"] = to_json(l.reply_latency);
  j["client_cpu_seconds"] = l.client_cpu_seconds;
  j["error_samples"] = l.error_samples;
  if (o.fault.at)
    j["failover"] = to_json(l.failover, o.fault);
  if (x.node.available) {
    j["node"] = {{"name", x.node.name},
                 {"rss_bytes", x.node.rss_bytes},
                 {"peak_rss_bytes", x.node.peak_rss_bytes},
                 {"store_flushes", x.node.store_flushes},
                 {"data_dir", x.node.data_dir}};
  } else {
    j["node"] = {{"unavailable", x.node.reason}};
  }
  if (x.raw_available) {
    j["raw"] = {{"path", x.raw.path},
                {"concurrency", x.raw.concurrency},
                {"value_bytes", x.raw.value_bytes},
                {"writes", x.raw.writes},
                {"seconds", x.raw.seconds},
                {"writes_per_second", x.raw.writes_per_second}};
    j["durable_ratio"] = x.durable_ratio();
  } else {
    j["raw"] = {{"unavailable", x.raw_reason}};
    j["durable_ratio"] = nullptr;
  }
  return j;
}

std::string render(const report& x) {
  const auto& o = x.load_opts;
  const auto& l = x.load;
  std::ostringstream out;
  auto row = [&](const char* label, const std::string& value) {
    table_row(out, label, value);
  };
  std::string mode = o.rate > 0 ? "paced at " + fixed(o.rate, 0) + " msg/s"
                                : "flat out (window " + std::to_string(o.window)
                                    + " per connection)";
  std::string length = length_str(o);
  row("run", std::to_string(o.connections) + " connections, "
               + std::to_string(o.threads) + " threads, " + mode + ", "
               + length + " after " + seconds_str(o.warmup) + " warmup");
  row("node", o.node.host + ":" + std::to_string(o.node.port)
                + (x.node.available ? " (" + x.node.name + ")" : ""));
  row("messages", "sent " + std::to_string(l.sent) + ", acked "
                    + std::to_string(l.acked) + ", answered "
                    + std::to_string(l.answered) + ", errors "
                    + std::to_string(l.errors));
  row("checks", "missing acks " + std::to_string(l.missing_acks)
                  + ", missing replies " + std::to_string(l.missing_replies)
                  + ", duplicates " + std::to_string(l.duplicates)
                  + ", unknown ids " + std::to_string(l.unknown_ids)
                  + ", out of order " + std::to_string(l.out_of_order)
                  + ", connection errors "
                  + std::to_string(l.connection_errors));
  row("throughput", fixed(l.answered_per_second, 1)
                      + " answered msgs/s (" + std::to_string(l.measured_answered)
                      + " measured msgs in " + fixed(l.measured_seconds, 2)
                      + " s)");
  row("ack latency", latency_line(l.ack_latency));
  row("reply latency", latency_line(l.reply_latency));
  if (o.fault.at)
    render(out, l.failover, o.fault);
  if (x.node.available) {
    std::string flushes = std::to_string(x.node.store_flushes)
                          + " store flushes during the run";
    if (x.node.store_flushes > 0 && l.sent > 0)
      flushes += " (" + fixed(static_cast<double>(l.sent) / x.node.store_flushes, 2)
                 + " msgs per flush)";
    row("node memory", "peak RSS " + human_bytes(x.node.peak_rss_bytes)
                         + ", RSS now " + human_bytes(x.node.rss_bytes));
    row("node store", flushes);
  } else {
    row("node status", "unavailable: " + x.node.reason);
  }
  if (x.raw_available) {
    row("raw RocksDB", fixed(x.raw.writes_per_second, 1)
                         + " synced writes/s ("
                         + std::to_string(x.raw.concurrency) + " writers, "
                         + std::to_string(x.raw.value_bytes) + "-byte values, "
                         + fixed(x.raw.seconds, 1) + " s)");
    row("durable ratio", fixed(x.durable_ratio(), 3)
                           + " (answered msgs/s / raw synced writes/s)");
  } else {
    row("raw RocksDB", "not measured: " + x.raw_reason);
  }
  row("client CPU", fixed(l.client_cpu_seconds, 2) + " s (keel-bench itself)");
  row("result", l.clean() ? "clean: every message got exactly one ack and "
                            "one reply, in order"
                          : "NOT CLEAN: see the checks above");
  for (auto& sample : l.error_samples)
    row("  sample", sample);
  return out.str();
}

std::string markdown_header() {
  return "| date | scenario | connections / threads | load "
         "| answered msgs/s | ack p50 / p99 (ms) | reply p50 / p99 (ms) "
         "| node peak RSS | raw synced writes/s | durable ratio | clean |\n"
         "|---|---|---|---|---|---|---|---|---|---|---|\n";
}

std::string markdown_row(const report& x, const std::string& label) {
  const auto& o = x.load_opts;
  const auto& l = x.load;
  std::string load = o.rate > 0 ? fixed(o.rate, 0) + " msg/s"
                                : "flat out, window " + std::to_string(o.window);
  auto cell = [](const std::string& str) { return " " + str + " |"; };
  char date[16];
  auto now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  std::strftime(date, sizeof(date), "%Y-%m-%d", &utc);
  std::string row = "|";
  row += cell(date);
  row += cell(label);
  row += cell(std::to_string(o.connections) + " / "
              + std::to_string(o.threads));
  row += cell(load);
  row += cell(fixed(l.answered_per_second, 0));
  row += cell(fixed(l.ack_latency.p50, 2) + " / "
              + fixed(l.ack_latency.p99, 2));
  row += cell(fixed(l.reply_latency.p50, 2) + " / "
              + fixed(l.reply_latency.p99, 2));
  row += cell(x.node.available ? human_bytes(x.node.peak_rss_bytes) : "n/a");
  row += cell(x.raw_available ? fixed(x.raw.writes_per_second, 0) : "n/a");
  row += cell(x.raw_available ? fixed(x.durable_ratio(), 2) : "n/a");
  row += cell(l.clean() ? "yes" : "NO");
  return row + "\n";
}

nlohmann::json to_json(const http_load_options& opts,
                       const http_load_result& x) {
  nlohmann::json j;
  j["config"] = {
    {"url", opts.server.base_url},
    {"model", opts.server.model},
    {"headers", opts.server.headers},
    {"rate", opts.rate > 0 ? nlohmann::json(opts.rate)
                           : nlohmann::json("flat out")},
    {"window", opts.window},
    {"messages", opts.messages},
    {"duration_s", opts.messages > 0 ? 0.0 : opts.duration.count() / 1000.0},
    {"warmup_s", opts.warmup.count() / 1000.0},
    {"text_bytes", opts.text_bytes},
  };
  j["calls"] = {{"sent", x.sent},
                {"answered", x.answered},
                {"errors", x.errors},
                {"missing", x.missing},
                {"measured_sent", x.measured_sent},
                {"measured_answered", x.measured_answered}};
  j["clean"] = x.clean();
  j["measured_seconds"] = x.measured_seconds;
  j["answered_per_second"] = x.answered_per_second;
  j["latency_ms"] = to_json(x.latency);
  j["client_cpu_seconds"] = x.client_cpu_seconds;
  j["error_samples"] = x.error_samples;
  return j;
}

std::string render(const http_load_options& opts, const http_load_result& x) {
  std::ostringstream out;
  auto row = [&](const char* label, const std::string& value) {
    table_row(out, label, value);
  };
  std::string mode = opts.rate > 0
                       ? "paced at " + fixed(opts.rate, 0) + " calls/s"
                       : opts.window == 1
                         ? std::string{"sequential (one call at a time)"}
                         : "flat out (" + std::to_string(opts.window)
                             + " calls in flight)";
  row("run", "HTTP chat completions, " + mode + ", " + length_str(opts)
               + " after " + seconds_str(opts.warmup) + " warmup");
  std::string headers;
  for (auto& [key, value] : opts.server.headers)
    headers += (headers.empty() ? " (" : ", ") + key + ": " + value;
  row("server", opts.server.base_url + (headers.empty() ? "" : headers + ")"));
  row("calls", "sent " + std::to_string(x.sent) + ", answered "
                 + std::to_string(x.answered) + ", errors "
                 + std::to_string(x.errors) + ", missing "
                 + std::to_string(x.missing));
  row("throughput", fixed(x.answered_per_second, 1) + " answered calls/s ("
                      + std::to_string(x.measured_answered)
                      + " measured calls in " + fixed(x.measured_seconds, 2)
                      + " s)");
  row("latency", latency_line(x.latency));
  row("client CPU", fixed(x.client_cpu_seconds, 2)
                      + " s (keel-bench itself, HTTP client included)");
  row("result", x.clean() ? "clean: every call returned a completion"
                          : "NOT CLEAN: see the counts above");
  for (auto& sample : x.error_samples)
    row("  sample", sample);
  return out.str();
}

namespace {

uint64_t get_u64(const nlohmann::json& j, std::initializer_list<const char*> path) {
  const nlohmann::json* cur = &j;
  for (auto key : path) {
    if (!cur->is_object())
      return 0;
    auto i = cur->find(key);
    if (i == cur->end())
      return 0;
    cur = &*i;
  }
  return cur->is_number_unsigned() || cur->is_number_integer()
           ? cur->get<uint64_t>()
           : 0;
}

std::string get_str(const nlohmann::json& j, const char* key) {
  auto i = j.find(key);
  return i != j.end() && i->is_string() ? i->get<std::string>() : std::string{};
}

} // namespace

caf::expected<report> run_benchmark(const benchmark_options& opts) {
  report result;
  result.load_opts = opts.load;
  if (result.load_opts.thread_prefix.empty())
    result.load_opts.thread_prefix = "bench-" + random_hex(6);
  // Reaching the node (and the token) is checked before anything else.
  auto before = api_call(opts.load.node, "GET", "/api/v1/status");
  if (!before) {
    const auto& err = before.error();
    if (err == ec::connection_failed || err == ec::unauthorized
        || err == ec::timeout)
      return err;
    result.node.reason = keel::render(before.error());
  }
  auto say = [&](const std::string& line) {
    if (opts.progress)
      opts.progress(line);
  };
  if (opts.raw) {
    auto raw_opts = opts.raw_opts;
    raw_opts.concurrency = opts.load.connections;
    say("measuring RocksDB's raw synced-write rate (" + seconds_str(raw_opts.duration)
        + ", " + std::to_string(raw_opts.concurrency) + " writers, in "
        + raw_opts.dir + ")");
    if (auto raw = measure_raw_synced_writes(raw_opts)) {
      result.raw_available = true;
      result.raw = std::move(*raw);
    } else {
      result.raw_reason = keel::render(raw.error());
    }
  } else {
    result.raw_reason = "skipped (--no-raw)";
  }
  say("driving the node: " + std::to_string(opts.load.connections)
      + " connections, " + std::to_string(opts.load.threads) + " threads, "
      + (opts.load.rate > 0 ? fixed(opts.load.rate, 0) + " msg/s"
                            : std::string{"flat out"}));
  auto load = run_load(result.load_opts);
  if (!load)
    return load.error();
  result.load = std::move(*load);
  if (before) {
    if (auto after = api_call(opts.load.node, "GET", "/api/v1/status")) {
      result.node.available = true;
      result.node.name = get_str(*after, "node");
      result.node.data_dir = get_str(*after, "data_dir");
      result.node.rss_bytes = get_u64(*after, {"rss_bytes"});
      result.node.peak_rss_bytes = get_u64(*after, {"peak_rss_bytes"});
      auto flushes_before = get_u64(*before, {"store", "flushes"});
      auto flushes_after = get_u64(*after, {"store", "flushes"});
      result.node.store_flushes = flushes_after >= flushes_before
                                    ? flushes_after - flushes_before
                                    : 0;
    } else {
      result.node.reason = keel::render(after.error());
    }
  }
  return result;
}

// -- helpers for the command-line tools -------------------------------------------


} // namespace keel::bench
