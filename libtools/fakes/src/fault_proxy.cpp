#include "keel/tools/fault_proxy.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <deque>
#include <future>
#include <set>
#include <stdexcept>
#include <thread>
#include <utility>
#include <vector>

#include <boost/asio/connect.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/address_v4.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>

// The proxy's classes are nested in fault_proxy::impl rather than put in an
// anonymous namespace: impl has fields of their types, and a named class
// with fields of anonymous types draws -Wsubobject-linkage once this file is
// compiled as part of the module's single unit.

namespace keel {

namespace {

using proxy_tcp = boost::asio::ip::tcp;
using proxy_clock = std::chrono::steady_clock;
using proxy_error = boost::system::error_code;

/// A direction reads at most this much at a time; each read is one chunk.
constexpr size_t proxy_chunk_size = 16 * 1024;

/// A direction stops reading while this much waits to be written on, so a
/// peer that reads slowly slows the one that writes (as a plain TCP link
/// would) instead of growing the queue without bound.
constexpr size_t proxy_queue_limit = 256 * 1024;

/// After a failed accept (out of file descriptors, say) the proxy waits this
/// long before accepting again rather than spinning.
constexpr auto proxy_accept_pause = std::chrono::milliseconds{50};

/// Resets `sock`: SO_LINGER 0 makes close() send RST instead of FIN.
void proxy_abort(proxy_tcp::socket& sock) {
  proxy_error ignored;
  sock.set_option(proxy_tcp::socket::linger{true, 0}, ignored);
  sock.close(ignored);
}

} // namespace

const char* to_string(link_mode mode) {
  switch (mode) {
    case link_mode::pass: return "pass";
    case link_mode::delay: return "delay";
    case link_mode::blackhole: return "blackhole";
    case link_mode::reset: return "reset";
  }
  return "unknown";
}

/// The listener, the I/O thread and what the connections share. Everything
/// but the atomics, `listen_port` and the thread is touched by the I/O
/// thread only.
struct fault_proxy::impl {
  class session;

  impl(std::string target_host, uint16_t target_port_in, uint16_t port_in);

  void listen(uint16_t port_in);
  void accept();
  void admit(proxy_tcp::socket sock);
  void apply(link_mode new_mode);
  void stop();

  const std::string host;
  const uint16_t target_port;
  uint16_t listen_port = 0;
  std::atomic<link_mode> mode{link_mode::pass};
  std::atomic<int64_t> delay_ms{0};
  std::atomic<uint64_t> accepted{0};
  std::atomic<uint64_t> resets{0};
  std::atomic<uint64_t> forwarded{0};
  std::atomic<uint64_t> dropped{0};
  // The I/O objects come after the io_context: they go first.
  boost::asio::io_context ioc;
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> work;
  proxy_tcp::acceptor acceptor;
  boost::asio::steady_timer accept_timer;
  std::set<std::shared_ptr<session>> sessions;
  bool stopping = false;
  std::thread io_thread;
};

/// One proxied connection: the accepted socket (client), the one to the
/// target (upstream) and a direction per way. A session is in `sessions`
/// from its start until it closes; every pending handler holds it too.
class fault_proxy::impl::session
  : public std::enable_shared_from_this<session> {
public:
  session(impl& owner, proxy_tcp::socket client);

  /// Resolves and connects to the target, then forwards both ways.
  void start();

  /// Applies a mode change: a blackhole drops what waits to be written;
  /// every direction reads (and writes) again if it may.
  void poke();

  /// Closes both sockets (FIN) and leaves `sessions`. Idempotent.
  void close();

  /// Closes both sockets with RST and counts a reset. Idempotent.
  void reset();

private:
  struct chunk {
    std::vector<char> bytes;
    proxy_clock::time_point due;
  };

  /// One way: reads `from`, queues chunks, writes them to `to` in order.
  struct direction {
    direction(proxy_tcp::socket& from_in, proxy_tcp::socket& to_in);
    proxy_tcp::socket& from;
    proxy_tcp::socket& to;
    std::array<char, proxy_chunk_size> buf;
    std::deque<chunk> queue;
    size_t queued = 0;    // Bytes in `queue`.
    bool reading = false; // A read is pending.
    bool writing = false; // A write, or the wait for the front's due time.
    bool eof = false;     // `from` has closed: close once `queue` is written.
    boost::asio::steady_timer timer;
  };

  void on_connected();
  void read(direction& d);
  void on_read(direction& d, const proxy_error& ec, size_t n);
  void pump(direction& d);
  void write_front(direction& d);
  void on_written(direction& d, const proxy_error& ec, size_t n);
  void drop_queue(direction& d);

  impl& owner_;
  proxy_tcp::socket client_;
  proxy_tcp::socket upstream_;
  proxy_tcp::resolver resolver_;
  direction up_;   // client -> target
  direction down_; // target -> client
  bool connected_ = false;
  bool closed_ = false;
};

// -- session ------------------------------------------------------------------

fault_proxy::impl::session::direction::direction(proxy_tcp::socket& from_in,
                                                 proxy_tcp::socket& to_in)
  : from(from_in), to(to_in), timer(from_in.get_executor()) {
  // nop
}

fault_proxy::impl::session::session(impl& owner, proxy_tcp::socket client)
  : owner_(owner),
    client_(std::move(client)),
    upstream_(owner.ioc),
    resolver_(owner.ioc),
    up_(client_, upstream_),
    down_(upstream_, client_) {
  // nop
}

void fault_proxy::impl::session::start() {
  auto self = shared_from_this();
  auto on_resolved = [this, self](const proxy_error& ec,
                                  proxy_tcp::resolver::results_type results) {
    if (closed_)
      return;
    if (ec) {
      close();
      return;
    }
    boost::asio::async_connect(upstream_, results,
                               [this, self](const proxy_error& cec,
                                            const proxy_tcp::endpoint&) {
                                 if (closed_)
                                   return;
                                 if (cec)
                                   close();
                                 else
                                   on_connected();
                               });
  };
  resolver_.async_resolve(owner_.host, std::to_string(owner_.target_port),
                          std::move(on_resolved));
}

void fault_proxy::impl::session::on_connected() {
  if (owner_.mode == link_mode::reset) {
    reset();
    return;
  }
  connected_ = true;
  proxy_error ignored;
  client_.set_option(proxy_tcp::no_delay{true}, ignored);
  upstream_.set_option(proxy_tcp::no_delay{true}, ignored);
  read(up_);
  read(down_);
}

void fault_proxy::impl::session::poke() {
  for (auto* d : {&up_, &down_}) {
    pump(*d);
    read(*d);
  }
}

void fault_proxy::impl::session::close() {
  if (closed_)
    return;
  closed_ = true;
  auto self = shared_from_this(); // Keeps *this alive past the erase.
  proxy_error ignored;
  resolver_.cancel();
  up_.timer.cancel();
  down_.timer.cancel();
  client_.close(ignored);
  upstream_.close(ignored);
  owner_.sessions.erase(self);
}

void fault_proxy::impl::session::reset() {
  if (closed_)
    return;
  ++owner_.resets;
  proxy_abort(client_);
  proxy_abort(upstream_);
  close();
}

// Reads when connected, open, not at EOF, not already reading and the queue
// has room; on_written calls it again once the queue drains.
void fault_proxy::impl::session::read(direction& d) {
  if (!connected_ || closed_ || d.reading || d.eof
      || d.queued >= proxy_queue_limit)
    return;
  d.reading = true;
  d.from.async_read_some(boost::asio::buffer(d.buf),
                         [this, self = shared_from_this(),
                          &d](const proxy_error& ec, size_t n) {
                           d.reading = false;
                           on_read(d, ec, n);
                         });
}

// A blackhole drops the chunk; pass and delay queue it, due now or after
// the delay. EOF closes the session once the queue is written; any other
// error closes it at once.
void fault_proxy::impl::session::on_read(direction& d, const proxy_error& ec,
                                         size_t n) {
  if (closed_)
    return;
  if (ec == boost::asio::error::eof) {
    d.eof = true;
    pump(d);
    return;
  }
  if (ec) {
    close();
    return;
  }
  auto mode = owner_.mode.load();
  if (mode == link_mode::reset) {
    reset();
    return;
  }
  if (mode == link_mode::blackhole) {
    owner_.dropped += n;
  } else {
    auto hold = std::chrono::milliseconds{
      mode == link_mode::delay ? std::max<int64_t>(owner_.delay_ms, 0) : 0};
    d.queue.push_back(chunk{std::vector<char>(d.buf.data(), d.buf.data() + n),
                            proxy_clock::now() + hold});
    d.queued += n;
    pump(d);
  }
  read(d);
}

// Writes the queue front once it is due, one chunk at a time (so the order
// is kept); in a blackhole drops the queue instead. Closes the session when
// the reading side has closed and nothing is left to write.
void fault_proxy::impl::session::pump(direction& d) {
  if (closed_ || d.writing)
    return;
  if (owner_.mode == link_mode::blackhole)
    drop_queue(d);
  if (d.queue.empty()) {
    if (d.eof)
      close();
    return;
  }
  auto due = d.queue.front().due;
  if (due <= proxy_clock::now()) {
    write_front(d);
    return;
  }
  d.writing = true;
  d.timer.expires_at(due);
  d.timer.async_wait([this, self = shared_from_this(), &d](const proxy_error&) {
    d.writing = false;
    pump(d);
  });
}

void fault_proxy::impl::session::write_front(direction& d) {
  d.writing = true;
  boost::asio::async_write(d.to, boost::asio::buffer(d.queue.front().bytes),
                           [this, self = shared_from_this(),
                            &d](const proxy_error& ec, size_t n) {
                             d.writing = false;
                             on_written(d, ec, n);
                           });
}

void fault_proxy::impl::session::on_written(direction& d, const proxy_error& ec,
                                            size_t n) {
  if (closed_)
    return;
  if (ec) {
    close();
    return;
  }
  owner_.forwarded += n;
  d.queued -= d.queue.front().bytes.size();
  d.queue.pop_front();
  pump(d);
  read(d); // The queue may have room again.
}

void fault_proxy::impl::session::drop_queue(direction& d) {
  owner_.dropped += d.queued;
  d.queue.clear();
  d.queued = 0;
}

// -- impl ---------------------------------------------------------------------

fault_proxy::impl::impl(std::string target_host, uint16_t target_port_in,
                        uint16_t port_in)
  : host(std::move(target_host)),
    target_port(target_port_in),
    work(boost::asio::make_work_guard(ioc)),
    acceptor(ioc),
    accept_timer(ioc) {
  listen(port_in);
  accept();
  io_thread = std::thread{[this] { ioc.run(); }};
}

void fault_proxy::impl::listen(uint16_t port_in) {
  proxy_tcp::endpoint ep{boost::asio::ip::address_v4::loopback(), port_in};
  proxy_error ec;
  acceptor.open(ep.protocol(), ec);
  if (!ec)
    acceptor.set_option(proxy_tcp::acceptor::reuse_address{true}, ec);
  if (!ec)
    acceptor.bind(ep, ec);
  if (!ec)
    acceptor.listen(boost::asio::socket_base::max_listen_connections, ec);
  if (!ec)
    listen_port = acceptor.local_endpoint(ec).port();
  if (ec)
    throw std::runtime_error("fault_proxy: cannot listen on 127.0.0.1:"
                             + std::to_string(port_in) + ": " + ec.message());
}

// Accepts until stop(); after an error, pauses briefly and tries again.
void fault_proxy::impl::accept() {
  acceptor.async_accept([this](const proxy_error& ec, proxy_tcp::socket sock) {
    if (stopping)
      return;
    if (!ec) {
      admit(std::move(sock));
      accept();
      return;
    }
    accept_timer.expires_after(proxy_accept_pause);
    accept_timer.async_wait([this](const proxy_error&) {
      if (!stopping)
        accept();
    });
  });
}

// In reset mode a new connection is reset before anything else happens;
// otherwise it becomes a session that connects to the target.
void fault_proxy::impl::admit(proxy_tcp::socket sock) {
  ++accepted;
  if (mode == link_mode::reset) {
    ++resets;
    proxy_abort(sock);
    return;
  }
  auto s = std::make_shared<session>(*this, std::move(sock));
  sessions.insert(s);
  s->start();
}

void fault_proxy::impl::apply(link_mode new_mode) {
  // Sessions leave `sessions` as they close: walk a copy.
  std::vector<std::shared_ptr<session>> open{sessions.begin(), sessions.end()};
  for (auto& s : open) {
    if (new_mode == link_mode::reset)
      s->reset();
    else
      s->poke();
  }
}

// Closes the listener and every session on the I/O thread; run() returns
// once their handlers have finished.
void fault_proxy::impl::stop() {
  boost::asio::post(ioc, [this] {
    stopping = true;
    proxy_error ignored;
    acceptor.close(ignored);
    accept_timer.cancel();
    std::vector<std::shared_ptr<session>> open{sessions.begin(),
                                               sessions.end()};
    for (auto& s : open)
      s->close();
  });
  work.reset();
  io_thread.join();
}

// -- fault_proxy --------------------------------------------------------------

fault_proxy::fault_proxy(std::string target_host, uint16_t target_port,
                         uint16_t listen_port)
  : impl_(
    std::make_unique<impl>(std::move(target_host), target_port, listen_port)) {
  // nop
}

fault_proxy::~fault_proxy() {
  impl_->stop();
}

uint16_t fault_proxy::port() const {
  return impl_->listen_port;
}

void fault_proxy::set_mode(link_mode mode, std::chrono::milliseconds delay) {
  impl_->delay_ms = delay.count();
  impl_->mode = mode;
  std::promise<void> applied;
  auto done = applied.get_future();
  boost::asio::post(impl_->ioc, [this, mode, &applied] {
    impl_->apply(mode);
    applied.set_value();
  });
  done.wait();
}

link_mode fault_proxy::mode() const {
  return impl_->mode;
}

fault_proxy::stats fault_proxy::counters() const {
  return stats{impl_->accepted, impl_->resets, impl_->forwarded,
               impl_->dropped};
}

} // namespace keel
