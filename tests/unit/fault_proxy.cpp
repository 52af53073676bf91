#define CAF_SUITE fault_proxy
#include <caf/test/unit_test.hpp>

#include "keel/tools/fault_proxy.hpp"

#include <chrono>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>

#include "keel/tools/process.hpp"

using namespace keel;
using namespace std::chrono_literals;

namespace net = boost::asio;
using tcp = net::ip::tcp;
using error_code = boost::system::error_code;

namespace {

/// Generous upper bound for events that normally take microseconds.
constexpr auto event_timeout = 10s;

/// How long a blackholed round trip waits for an answer that must not come.
constexpr auto silence = 300ms;

/// The proxy's target: echoes every byte back on its own I/O thread, and
/// closes a connection that sends "quit".
class echo_server {
public:
  echo_server() : acceptor_(ioc_, {net::ip::address_v4::loopback(), 0}) {
    accept();
    thread_ = std::thread{[this] { ioc_.run(); }};
  }

  ~echo_server() {
    ioc_.stop();
    thread_.join();
  }

  uint16_t port() const {
    return acceptor_.local_endpoint().port();
  }

private:
  struct connection {
    explicit connection(tcp::socket s) : sock(std::move(s)) {
    }
    tcp::socket sock;
    char buf[4096];
  };

  void accept() {
    acceptor_.async_accept([this](error_code ec, tcp::socket sock) {
      if (ec)
        return;
      echo(std::make_shared<connection>(std::move(sock)));
      accept();
    });
  }

  void echo(std::shared_ptr<connection> conn) {
    conn->sock.async_read_some(
      net::buffer(conn->buf), [this, conn](error_code ec, size_t n) {
        if (ec)
          return;
        std::string_view got{conn->buf, n};
        if (got.find("quit") != got.npos) {
          conn->sock.close();
          return;
        }
        net::async_write(conn->sock, net::buffer(conn->buf, n),
                         [this, conn](error_code wec, size_t) {
                           if (!wec)
                             echo(conn);
                         });
      });
  }

  net::io_context ioc_;
  tcp::acceptor acceptor_;
  std::thread thread_;
};

/// What a client saw within its deadline.
struct outcome {
  std::string data;
  error_code ec;
  bool timed_out = false;
};

/// A blocking-style test client with deadlines: each call runs its own
/// io_context until the operations finish or the time is up.
class client {
public:
  explicit client(uint16_t port) : sock_(ioc_) {
    sock_.connect({net::ip::address_v4::loopback(), port});
  }

  /// Writes `payload` while reading `expect` bytes (concurrently, so a large
  /// payload cannot deadlock against the echo), for at most `timeout`.
  outcome exchange(const std::string& payload, size_t expect,
                   std::chrono::milliseconds timeout = event_timeout) {
    outcome result;
    result.data.resize(expect);
    bool done = false;
    if (!payload.empty())
      net::async_write(sock_, net::buffer(payload), [](error_code, size_t) {});
    net::async_read(sock_, net::buffer(result.data),
                    [&](error_code ec, size_t n) {
                      done = true;
                      // Our own cancel after the deadline is no error.
                      if (ec != net::error::operation_aborted)
                        result.ec = ec;
                      result.data.resize(n);
                    });
    ioc_.restart();
    ioc_.run_for(timeout);
    if (!done) {
      result.timed_out = true;
      error_code ignored;
      sock_.cancel(ignored);
      ioc_.restart();
      ioc_.run();
    }
    return result;
  }

  /// Waits up to `timeout` for `n` bytes.
  outcome read(size_t n, std::chrono::milliseconds timeout = event_timeout) {
    return exchange("", n, timeout);
  }

  /// Writes each piece with a separate write call.
  void write_pieces(std::initializer_list<std::string> pieces) {
    for (auto& piece : pieces)
      net::write(sock_, net::buffer(piece));
  }

private:
  net::io_context ioc_;
  tcp::socket sock_;
};

/// The error a reset connection reports to a reader (a reset that races
/// with the close may show as EOF).
bool was_reset(const outcome& out) {
  return !out.timed_out
         && (out.ec == net::error::connection_reset
             || out.ec == net::error::eof);
}

/// Whole milliseconds since `start` (rounded down).
int64_t elapsed_ms(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
           std::chrono::steady_clock::now() - start)
    .count();
}

std::string pattern(size_t n) {
  std::string result(n, '\0');
  for (size_t i = 0; i < n; ++i)
    result[i] = static_cast<char>('a' + (i * 7 + i / 251) % 26);
  return result;
}

struct fixture {
  echo_server echo;
  std::unique_ptr<fault_proxy> proxy
    = std::make_unique<fault_proxy>("127.0.0.1", echo.port());

  /// Waits until `pred(counters)` holds; false after event_timeout.
  template <class Pred>
  bool wait_counters(Pred pred) {
    return poll_until(
      [&] { return pred(proxy->counters()); },
      std::chrono::duration_cast<std::chrono::milliseconds>(event_timeout),
      5ms);
  }

  /// Checks that a new connection through the proxy echoes.
  void check_round_trip(const std::string& payload) {
    client c{proxy->port()};
    auto out = c.exchange(payload, payload.size());
    CAF_CHECK(!out.timed_out);
    CAF_CHECK(!out.ec);
    CAF_CHECK_EQUAL(out.data, payload);
  }
};

} // namespace

CAF_TEST(link modes have names) {
  CAF_CHECK_EQUAL(std::string{to_string(link_mode::pass)}, "pass");
  CAF_CHECK_EQUAL(std::string{to_string(link_mode::delay)}, "delay");
  CAF_CHECK_EQUAL(std::string{to_string(link_mode::blackhole)}, "blackhole");
  CAF_CHECK_EQUAL(std::string{to_string(link_mode::reset)}, "reset");
}

CAF_TEST(listening on a taken port throws naming the address) {
  echo_server echo;
  fault_proxy first{"127.0.0.1", echo.port()};
  CAF_CHECK_NOT_EQUAL(first.port(), 0u);
  try {
    fault_proxy second{"127.0.0.1", echo.port(), first.port()};
    CAF_FAIL("a second proxy listens on the same port");
  } catch (const std::runtime_error& err) {
    std::string what = err.what();
    auto address = "127.0.0.1:" + std::to_string(first.port());
    CAF_CHECK(what.find(address) != std::string::npos);
  }
}

CAF_TEST_FIXTURE_SCOPE(fault_proxy_tests, fixture)

CAF_TEST(pass forwards both ways) {
  CAF_CHECK(proxy->mode() == link_mode::pass);
  client c{proxy->port()};
  auto small = c.exchange("hello proxy", 11);
  CAF_CHECK(!small.ec);
  CAF_CHECK_EQUAL(small.data, "hello proxy");
  auto big_payload = pattern(1024 * 1024);
  auto big = c.exchange(big_payload, big_payload.size());
  CAF_CHECK(!big.ec);
  CAF_CHECK_EQUAL(big.data.size(), big_payload.size());
  CAF_CHECK(big.data == big_payload);
  uint64_t both_ways = 2 * (11 + big_payload.size());
  CAF_CHECK(wait_counters([&](const fault_proxy::stats& st) {
    return st.bytes_forwarded == both_ways;
  }));
  auto st = proxy->counters();
  CAF_CHECK_EQUAL(st.accepted, 1u);
  CAF_CHECK_EQUAL(st.resets, 0u);
  CAF_CHECK_EQUAL(st.bytes_forwarded, both_ways);
  CAF_CHECK_EQUAL(st.bytes_dropped, 0u);
}

CAF_TEST(delay holds each chunk both ways and keeps the order) {
  constexpr auto delay = 150ms;
  proxy->set_mode(link_mode::delay, delay);
  CAF_CHECK(proxy->mode() == link_mode::delay);
  client c{proxy->port()};
  auto start = std::chrono::steady_clock::now();
  auto out = c.exchange("ping", 4);
  auto elapsed = elapsed_ms(start);
  CAF_CHECK(!out.ec);
  CAF_CHECK_EQUAL(out.data, "ping");
  // Held once on the way to the echo and once on the way back.
  CAF_CHECK_GREATER_OR_EQUAL(elapsed, 2 * delay.count());
  c.write_pieces({"one ", "two ", "three"});
  auto pieces = c.read(13);
  CAF_CHECK(!pieces.ec);
  CAF_CHECK_EQUAL(pieces.data, "one two three");
  proxy->set_mode(link_mode::pass);
  start = std::chrono::steady_clock::now();
  auto fast = c.exchange("pong", 4);
  CAF_CHECK_EQUAL(fast.data, "pong");
  // No longer held (a delayed round trip takes twice the delay).
  CAF_CHECK_LESS(elapsed_ms(start), 2 * delay.count());
}

CAF_TEST(blackhole silences open and new connections until pass) {
  client old_conn{proxy->port()};
  CAF_CHECK_EQUAL(old_conn.exchange("before", 6).data, "before");
  proxy->set_mode(link_mode::blackhole);
  CAF_CHECK(proxy->mode() == link_mode::blackhole);
  auto lost = old_conn.exchange("lost", 4, silence);
  CAF_CHECK(lost.timed_out);
  CAF_CHECK(!lost.ec); // Still open: no EOF, no reset.
  CAF_CHECK(lost.data.empty());
  client new_conn{proxy->port()};
  auto also_lost = new_conn.exchange("also lost", 9, silence);
  CAF_CHECK(also_lost.timed_out);
  CAF_CHECK(!also_lost.ec);
  CAF_CHECK(wait_counters(
    [](const fault_proxy::stats& st) { return st.bytes_dropped == 13; }));
  proxy->set_mode(link_mode::pass);
  // The dropped bytes stay gone: only the new ones come back.
  CAF_CHECK_EQUAL(old_conn.exchange("after", 5).data, "after");
  CAF_CHECK_EQUAL(new_conn.exchange("again", 5).data, "again");
  check_round_trip("fresh");
  auto st = proxy->counters();
  CAF_CHECK_EQUAL(st.accepted, 3u);
  CAF_CHECK_EQUAL(st.resets, 0u);
  CAF_CHECK_EQUAL(st.bytes_dropped, 13u);
}

CAF_TEST(reset breaks open connections and new ones at once) {
  client old_conn{proxy->port()};
  CAF_CHECK_EQUAL(old_conn.exchange("hello", 5).data, "hello");
  proxy->set_mode(link_mode::reset);
  CAF_CHECK(proxy->mode() == link_mode::reset);
  CAF_CHECK_EQUAL(proxy->counters().resets, 1u);
  auto old_out = old_conn.read(1);
  CAF_CHECK(was_reset(old_out));
  CAF_MESSAGE("the open connection saw: " << old_out.ec.message());
  client new_conn{proxy->port()};
  auto new_out = new_conn.read(1);
  CAF_CHECK(was_reset(new_out));
  CAF_MESSAGE("a new connection saw: " << new_out.ec.message());
  CAF_CHECK(wait_counters([](const fault_proxy::stats& st) {
    return st.accepted == 2 && st.resets == 2;
  }));
  proxy->set_mode(link_mode::pass);
  check_round_trip("back again");
  CAF_CHECK_EQUAL(proxy->counters().resets, 2u);
}

CAF_TEST(a target that closes closes the client) {
  client c{proxy->port()};
  auto out = c.exchange("quit", 1);
  CAF_CHECK(!out.timed_out);
  CAF_CHECK(out.ec == net::error::eof);
}

CAF_TEST(an unreachable target closes the client) {
  fault_proxy nowhere{"127.0.0.1", free_port()};
  client c{nowhere.port()};
  auto out = c.read(1);
  CAF_CHECK(!out.timed_out);
  CAF_CHECK(out.ec == net::error::eof);
  CAF_CHECK_EQUAL(nowhere.counters().accepted, 1u);
}

CAF_TEST(destroying the proxy closes its connections) {
  client c{proxy->port()};
  CAF_CHECK_EQUAL(c.exchange("bye", 3).data, "bye");
  proxy.reset();
  auto out = c.read(1);
  CAF_CHECK(!out.timed_out);
  CAF_CHECK(out.ec == net::error::eof);
}

CAF_TEST_FIXTURE_SCOPE_END()
