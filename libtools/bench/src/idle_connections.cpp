// keel-bench's idle-connections run: many idle WebSocket connections to a
// node, opened on one I/O thread (the calling one) a bounded number at a
// time, each bound to one of several loopback source addresses so that
// their number is not capped by one address's ephemeral ports.

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <exception>
#include <memory>

#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>

#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/websocket.hpp>

#include "keel/protocol.hpp"
#include "keel/text.hpp"
#include "keel/tools/bench_memory.hpp"
#include "keel/tools/json_fields.hpp"
#include "keel/tools/ws_client.hpp"
#include "keel/tools/ws_identity.hpp"
#include "memory_probe.hpp"

namespace keel::bench {

namespace {

namespace beast = boost::beast;
namespace idle_net = boost::asio;
namespace idle_ws = beast::websocket;
using idle_tcp = idle_net::ip::tcp;

/// Raises the soft RLIMIT_NOFILE to the hard limit and returns it; fails
/// with `ec::config_invalid` when `connections` cannot fit under it.
caf::expected<uint64_t> raise_fd_limit(size_t connections) {
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
    return caf::make_error(ec::config_invalid,
                           std::string{"cannot read RLIMIT_NOFILE: "}
                             + std::strerror(errno));
  rl.rlim_cur = rl.rlim_max;
  if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
    return caf::make_error(ec::config_invalid,
                           std::string{"cannot raise RLIMIT_NOFILE to the "
                                       "hard limit: "}
                             + std::strerror(errno));
  auto needed = connections + idle_connections_fd_reserve;
  if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < needed)
    return caf::make_error(
      ec::config_invalid,
      std::to_string(connections) + " idle connections need "
        + std::to_string(needed) + " open files in keel-bench, but the hard "
        + "limit of open files is " + std::to_string(rl.rlim_max)
        + ": raise it (ulimit -Hn as root, LimitNOFILE=) or open at most "
        + std::to_string(
          rl.rlim_max
          - std::min<uint64_t>(rl.rlim_max, idle_connections_fd_reserve))
        + " (the node needs as many, see gateway.max_connections)");
  return rl.rlim_max == RLIM_INFINITY ? uint64_t{0} : rl.rlim_max;
}

class idle_pool;

/// One idle WebSocket connection: connects, upgrades, then only reads
/// (answering the node's pings) until it is closed.
class idle_link {
public:
  idle_link(idle_pool& pool, idle_net::io_context& ioc, size_t index)
    : pool_(pool), ws_(ioc), index_(index) {
    // nop
  }

  /// Connects from `source` (unspecified: the kernel's choice).
  void start(const idle_tcp::endpoint& target,
             const idle_net::ip::address_v4& source);

  /// Closes politely; reports to the pool once closed.
  void close();

  bool open() const noexcept {
    return open_;
  }

private:
  void on_connect(beast::error_code ec);
  void on_handshake(beast::error_code ec);
  void read();

  idle_pool& pool_;
  idle_ws::stream<beast::tcp_stream> ws_;
  idle_ws::response_type res_;
  beast::flat_buffer buf_;
  size_t index_;
  bool open_ = false;
  bool closing_ = false;
};

/// All the idle connections of one run, on one I/O context.
class idle_pool {
public:
  idle_pool(const idle_connections_options& opts,
            idle_connections_result& result);

  /// Opens every connection, at most `concurrency` attempts at a time;
  /// returns once each opened or failed.
  caf::error open_all();

  /// Runs the I/O (pings, losses) for `x`.
  void run_for(std::chrono::milliseconds x);

  /// Closes every open connection politely, waiting at most 10 s.
  void close_all();

  // -- callbacks from links ---------------------------------------------------

  const idle_connections_options& opts() const noexcept {
    return opts_;
  }
  void on_opened();
  void on_refused();
  void on_failed(const std::string& what);
  void on_lost(const std::string& what);
  void on_closed();

private:
  void start_next();
  void attempt_done();
  void sample(const std::string& what);

  const idle_connections_options& opts_;
  idle_connections_result& result_;
  idle_net::io_context ioc_;
  idle_tcp::endpoint target_;
  std::vector<idle_net::ip::address_v4> sources_;
  std::vector<std::unique_ptr<idle_link>> links_;
  size_t next_ = 0;
  size_t attempts_done_ = 0;
  size_t closing_ = 0;
};

// -- idle_link
// ------------------------------------------------------------------

void idle_link::start(const idle_tcp::endpoint& target,
                      const idle_net::ip::address_v4& source) {
  auto& sock = beast::get_lowest_layer(ws_).socket();
  beast::error_code ec;
  sock.open(idle_tcp::v4(), ec);
  if (!ec && !source.is_unspecified()) {
    // The port is chosen at connect time, per destination: each source
    // address then has the whole ephemeral range.
    int one = 1;
    ::setsockopt(sock.native_handle(), IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT,
                 &one, sizeof(one));
    sock.bind(idle_tcp::endpoint{source, 0}, ec);
  }
  if (ec)
    return on_connect(ec);
  beast::get_lowest_layer(ws_).expires_after(std::chrono::seconds{10});
  beast::get_lowest_layer(ws_).async_connect(
    target, [this](beast::error_code ec) { on_connect(ec); });
}

void idle_link::on_connect(beast::error_code ec) {
  if (ec)
    return pool_.on_failed("connection " + std::to_string(index_) + ": "
                           + ec.message());
  beast::get_lowest_layer(ws_).expires_never();
  ws_.set_option(idle_ws::stream_base::timeout{
    std::chrono::seconds{10}, idle_ws::stream_base::none(), false});
  keel::detail::set_client_identity(ws_, "keel-bench", pool_.opts().node.token);
  auto host = pool_.opts().node.host + ":"
              + std::to_string(pool_.opts().node.port);
  ws_.async_handshake(res_, host, protocol::ws_path,
                      [this](beast::error_code ec) { on_handshake(ec); });
}

void idle_link::on_handshake(beast::error_code ec) {
  auto status = res_.result_int();
  res_ = idle_ws::response_type{}; // Its memory is not what an idle connection
                                   // costs.
  if (!ec) {
    open_ = true;
    pool_.on_opened();
    return read();
  }
  if (status == 503)
    return pool_.on_refused();
  auto what = ec == idle_ws::error::upgrade_declined
                ? "upgrade refused with HTTP " + std::to_string(status)
                : ec.message();
  pool_.on_failed("connection " + std::to_string(index_) + ": " + what);
}

void idle_link::read() {
  ws_.async_read(buf_, [this](beast::error_code ec, size_t) {
    if (!ec) {
      buf_.consume(buf_.size()); // hello and status frames: not measured
      return read();
    }
    if (closing_ || !open_)
      return;
    open_ = false;
    pool_.on_lost("connection " + std::to_string(index_) + " lost: "
                  + (ec == idle_ws::error::closed
                       ? "closed by the node (code "
                           + std::to_string(ws_.reason().code) + ")"
                       : ec.message()));
  });
}

void idle_link::close() {
  if (!open_ || closing_)
    return;
  closing_ = true;
  ws_.async_close(idle_ws::close_code::normal, [this](beast::error_code) {
    open_ = false;
    pool_.on_closed();
  });
}

// -- idle_pool
// ------------------------------------------------------------------

idle_pool::idle_pool(const idle_connections_options& opts,
                     idle_connections_result& result)
  : opts_(opts), result_(result) {
  // nop
}

caf::error idle_pool::open_all() {
  idle_tcp::resolver resolver{ioc_};
  beast::error_code ec;
  auto addrs = resolver.resolve(opts_.node.host,
                                std::to_string(opts_.node.port), ec);
  if (ec || addrs.empty())
    return caf::make_error(ec::connection_failed, "cannot resolve "
                                                    + opts_.node.host + ": "
                                                    + ec.message());
  target_ = *addrs.begin();
  auto addr = target_.address();
  // Source addresses in 127.0.0.0/8 reach only a node on loopback.
  if (addr.is_v4() && addr.to_v4().to_bytes()[0] == 127) {
    auto n = (opts_.connections + connections_per_source_address - 1)
             / connections_per_source_address;
    for (size_t i = 0; i < n; ++i)
      sources_.push_back(idle_net::ip::address_v4{
        static_cast<idle_net::ip::address_v4::uint_type>(0x7f000001 + i)});
  }
  result_.source_addresses = sources_.size();
  for (size_t i = 0; i < opts_.connections; ++i)
    links_.push_back(std::make_unique<idle_link>(*this, ioc_, i));
  for (size_t i = 0; i < std::max<size_t>(opts_.concurrency, 1); ++i)
    start_next();
  while (attempts_done_ < links_.size() && !ioc_.stopped())
    ioc_.run_for(std::chrono::milliseconds{100});
  return caf::none;
}

void idle_pool::start_next() {
  if (next_ >= links_.size())
    return;
  auto i = next_++;
  auto source = sources_.empty() ? idle_net::ip::address_v4{}
                                 : sources_[i % sources_.size()];
  links_[i]->start(target_, source);
}

void idle_pool::run_for(std::chrono::milliseconds x) {
  ioc_.restart();
  ioc_.run_for(x);
}

void idle_pool::close_all() {
  for (auto& link : links_) {
    if (link->open()) {
      ++closing_;
      link->close();
    }
  }
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds{10};
  while (closing_ > 0 && std::chrono::steady_clock::now() < deadline) {
    ioc_.restart();
    ioc_.run_for(std::chrono::milliseconds{100});
  }
  if (closing_ > 0)
    sample(std::to_string(closing_)
           + " connections did not finish the close handshake in 10 s");
  links_.clear(); // closes whatever is left
}

void idle_pool::attempt_done() {
  ++attempts_done_;
  start_next();
}

void idle_pool::on_opened() {
  ++result_.opened;
  attempt_done();
}

void idle_pool::on_refused() {
  if (result_.refused++ == 0)
    sample("the node refused a connection with HTTP 503 (too many "
           "connections: gateway.max_connections)");
  attempt_done();
}

void idle_pool::on_failed(const std::string& what) {
  ++result_.failed;
  sample(what);
  attempt_done();
}

void idle_pool::on_lost(const std::string& what) {
  ++result_.lost;
  sample(what);
}

void idle_pool::on_closed() {
  if (closing_ > 0)
    --closing_;
}

void idle_pool::sample(const std::string& what) {
  if (result_.error_samples.size() < 10)
    result_.error_samples.push_back(what);
}

} // namespace

double idle_connections_result::bytes_per_connection() const noexcept {
  return detail::bytes_per(rss_before, after.rss_bytes, opened);
}

bool idle_connections_result::clean() const noexcept {
  return requested > 0 && opened == requested && refused == 0 && failed == 0
         && lost == 0 && problems.empty();
}

namespace {

/// Reads the node's RSS and open connections after the links closed.
void read_after_close(const endpoint& node, idle_connections_result& result) {
  auto status = api_call(node, "GET", "/api/v1/status");
  if (!status) {
    result.problems.push_back("reading the node's status after closing: "
                              + keel::render(status.error()));
    return;
  }
  result.rss_after_close = json_number(*status, {"rss_bytes"});
  result.node_connections_after_close
    = json_number(*status, {"gateway", "connections_open"});
}

/// Opens the connections and measures with them open; `pool` holds them.
void measure_open(const idle_connections_options& opts, idle_pool& pool,
                  idle_connections_result& result) {
  auto say = [&](const std::string& line) {
    if (opts.progress)
      opts.progress(line);
  };
  say("opening " + std::to_string(opts.connections) + " idle connections");
  auto start = std::chrono::steady_clock::now();
  if (auto err = pool.open_all()) {
    result.problems.push_back(keel::render(err));
    return;
  }
  result.open_seconds
    = std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
        .count();
  say(std::to_string(result.opened) + " open, " + std::to_string(result.refused)
      + " refused, " + std::to_string(result.failed)
      + " failed; waiting for the node's RSS to settle");
  nlohmann::json status;
  auto wait = [&pool](std::chrono::milliseconds x) { pool.run_for(x); };
  result.after = detail::settle_node_rss(opts.node, wait, status,
                                         result.problems);
  result.node_connections_after = json_number(status,
                                              {"gateway", "connections_open"});
  say("holding them open for " + human_duration(opts.hold));
  pool.run_for(opts.hold);
}

} // namespace

caf::expected<idle_connections_result>
run_idle_connections(const idle_connections_options& opts) {
  idle_connections_result result;
  result.requested = opts.connections;
  auto limit = raise_fd_limit(opts.connections);
  if (!limit)
    return limit.error();
  result.fd_limit = *limit;
  auto before = api_call(opts.node, "GET", "/api/v1/status");
  if (!before)
    return before.error();
  result.rss_before = json_number(*before, {"rss_bytes"});
  result.node_connections_before = json_number(*before,
                                               {"gateway", "connections_open"});
  try {
    idle_pool pool{opts, result};
    measure_open(opts, pool, result);
    if (opts.progress)
      opts.progress("closing them");
    pool.close_all();
  } catch (const std::exception& ex) {
    return caf::make_error(
      ec::unavailable, std::string{"idle connections failed: "} + ex.what());
  }
  read_after_close(opts.node, result);
  return result;
}

} // namespace keel::bench
