#pragma once

// The WebSocket load of `run_load`: one run (`load_run`, pacing and
// bookkeeping on the I/O thread) over its connections (`connection`, each
// owning a share of the threads). Private to libtools.

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/websocket.hpp>

#include <nlohmann/json.hpp>

#include "keel/tools/ws_load.hpp"
#include "paced_load.hpp"

namespace keel::bench::detail {

namespace beast = boost::beast;
namespace http = beast::http;
namespace websocket = beast::websocket;
using tcp = net::ip::tcp;

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

/// Fills the figures of `fo` for a run with a fault injected at `fault`:
/// `messages` are all messages of the run in send order, `providers` the
/// names that `message_state::provider` indexes.
void compute_failover(failover_result& fo,
                      const std::vector<const message_state*>& messages,
                      steady::time_point fault,
                      const std::vector<std::string>& providers,
                      const std::string& fallback_provider);

class connection;

/// One benchmark run: the I/O context, the connections, the pacing and the
/// bookkeeping. Everything runs on the thread that calls `run`.
class load_run : public paced_load {
public:
  explicit load_run(const load_options& opts);

  ~load_run() override;

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
  void on_closing();
  void on_closed();

  /// Counts a message just sent.
  void on_sent(bool measured) {
    count_sent(measured);
  }

  using paced_load::flat_out;
  using paced_load::may_send;
  using paced_load::measuring;

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
  traffic_result& counts() override {
    return result_;
  }

  void refill(steady::time_point now) override;
  bool send_next(steady::time_point now) override;
  void on_started() override;
  void on_finish() override;

  caf::error check_options() const;
  void begin();
  void inject_fault();
  void note_provider(message_state& msg, std::string_view provider);
  void check_order(const message_state& msg);
  void count_missing();
  std::vector<const message_state*> messages_by_send_time() const;

  load_options opts_;
  std::vector<std::unique_ptr<connection>> conns_;
  std::vector<std::string> thread_names_;
  std::vector<uint32_t> thread_next_order_;
  /// Order of the latest outcome per thread, plus one (0: none yet).
  std::vector<uint32_t> thread_last_outcome_;
  std::string text_;
  size_t ready_ = 0;
  size_t connect_failures_ = 0;
  caf::error fatal_;
  size_t next_conn_ = 0;
  /// Connections closing politely.
  size_t closing_ = 0;
  net::steady_timer stop_timer_;
  net::steady_timer fault_timer_;
  net::steady_timer measure_timer_;
  /// When the fault was injected.
  std::optional<steady::time_point> fault_at_;
  /// Providers named by replies (`message_state::provider` - 1 indexes it).
  std::vector<std::string> providers_;
  latency_recorder ack_latency_;
  latency_recorder reply_latency_;
  load_result result_;
};

/// One WebSocket connection owning a share of the threads.
class connection {
public:
  connection(load_run& run, net::io_context& ioc, size_t index);

  void add_thread(uint32_t thread) {
    threads_.push_back(thread);
  }

  bool usable() const noexcept {
    return ready_ && !closed_ && !closing_;
  }

  /// Whether this connection may send another message: always, unless
  /// each thread gets one message and every one of its threads has had it.
  bool has_more() const noexcept;

  const std::vector<message_state>& messages() const noexcept {
    return msgs_;
  }

  /// Connects and upgrades; reports to the run when ready or failed.
  void start(const tcp::resolver::results_type& addrs);

  /// Sends the next message (round robin over this connection's threads).
  void send_one(steady::time_point now);

  /// Flat out: tops the window up.
  void refill(steady::time_point now);

  /// Forgets the messages in flight (the connection is lost); returns how
  /// many there were.
  size_t drop_in_flight();

  /// Closes politely (after a write in progress, if any).
  void close();

private:
  void on_connect(beast::error_code ec);
  void on_handshake(beast::error_code ec);
  void connect_failed(const std::string& reason);
  void do_read();
  void on_read_failed(beast::error_code ec);
  void enqueue(std::string frame);
  void do_write();
  void do_close();
  void finish_close();
  /// Finds the message a frame names in `key`, or null.
  message_state* find(const nlohmann::json& body, const char* key);
  void on_frame(std::string_view text);
  void on_outcome_frame(const std::string& type, const nlohmann::json& body,
                        steady::time_point now);

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
};

} // namespace keel::bench::detail
