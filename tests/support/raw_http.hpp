#pragma once

// Raw HTTP against a node, for tests that send what a browser or an
// attacker would: requests with exactly the headers given, bytes as they
// are, and idle sockets that send nothing.

#include <cctype>
#include <chrono>
#include <map>
#include <memory>
#include <string>

#include <poll.h>
#include <sys/socket.h>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <nlohmann/json.hpp>

#include "keel/endpoint.hpp"

namespace keel::test {

namespace raw_detail {

namespace beast = boost::beast;
namespace http = beast::http;
using tcp = boost::asio::ip::tcp;
using namespace std::chrono_literals;

} // namespace raw_detail

using namespace raw_detail;

using header_map = std::map<std::string, std::string>;

struct raw_response {
  unsigned status = 0;
  std::string www_authenticate;
  std::string body;
  /// Every header field, by its name in lower case.
  header_map headers;
};

/// One HTTP request with exactly the headers given (Host included), so tests
/// can send what a browser or an attacker would.
inline raw_response raw_request(const endpoint& ep, const std::string& method,
                                const std::string& target,
                                const header_map& headers,
                                const std::string& body = {}) {
  boost::asio::io_context ioc;
  beast::tcp_stream stream{ioc};
  stream.expires_after(10s);
  stream.connect(
    tcp::endpoint{boost::asio::ip::make_address(ep.host), ep.port});
  http::request<http::string_body> req;
  req.method_string(method);
  req.target(target);
  req.version(11);
  for (auto& [name, value] : headers)
    req.set(name, value);
  req.body() = body;
  req.prepare_payload();
  http::write(stream, req);
  beast::flat_buffer buf;
  http::response_parser<http::string_body> parser;
  parser.skip(false);
  http::read_header(stream, buf, parser);
  raw_response result;
  result.status = parser.get().result_int();
  result.www_authenticate
    = std::string{parser.get()[http::field::www_authenticate]};
  for (auto& field : parser.get()) {
    auto name = std::string{field.name_string()};
    for (auto& c : name)
      c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    result.headers[name] = std::string{field.value()};
  }
  if (result.status != 101) {
    http::read(stream, buf, parser);
    result.body = parser.get().body();
  }
  return result;
}

/// Headers of a WebSocket upgrade of `/ws` to `ep`.
inline header_map upgrade_headers(const endpoint& ep,
                                  const std::string& token = {}) {
  header_map result{{"Host", to_string(ep)},
                    {"Connection", "Upgrade"},
                    {"Upgrade", "websocket"},
                    {"Sec-WebSocket-Version", "13"},
                    {"Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="}};
  if (!token.empty())
    result["Authorization"] = "Bearer " + token;
  return result;
}

inline header_map api_headers(const endpoint& ep,
                              const std::string& token = {}) {
  header_map result{{"Host", to_string(ep)}};
  if (!token.empty())
    result["Authorization"] = "Bearer " + token;
  return result;
}

inline std::string message_of(const raw_response& res) {
  auto j = nlohmann::json::parse(res.body, nullptr, false);
  return j.is_object() ? j.value("message", "") : res.body;
}

inline std::string code_of(const raw_response& res) {
  auto j = nlohmann::json::parse(res.body, nullptr, false);
  return j.is_object() ? j.value("code", "") : "";
}

/// Sends `bytes` as they are on a fresh connection and reads one answer;
/// status 0 when the node closed the connection without one.
inline raw_response raw_exchange(const endpoint& ep, const std::string& bytes,
                                 std::chrono::seconds timeout = 10s) {
  boost::asio::io_context ioc;
  beast::tcp_stream stream{ioc};
  stream.expires_after(timeout);
  stream.connect(
    tcp::endpoint{boost::asio::ip::make_address(ep.host), ep.port});
  boost::asio::write(stream, boost::asio::buffer(bytes));
  beast::flat_buffer buf;
  http::response_parser<http::string_body> parser;
  beast::error_code err;
  http::read(stream, buf, parser, err);
  raw_response result;
  if (err)
    return result;
  result.status = parser.get().result_int();
  result.body = parser.get().body();
  return result;
}

/// A connection to `ep` that sends nothing; bound to `source` (an address
/// of 127.0.0.0/8, say) when given.
inline std::unique_ptr<tcp::socket>
idle_socket(boost::asio::io_context& ioc, const endpoint& ep,
            const std::string& source = {}) {
  auto sock = std::make_unique<tcp::socket>(ioc);
  sock->open(tcp::v4());
  if (!source.empty())
    sock->bind(tcp::endpoint{boost::asio::ip::make_address(source), 0});
  sock->connect(tcp::endpoint{boost::asio::ip::make_address(ep.host), ep.port});
  return sock;
}

/// Whether the node closed `sock` (it reads end of stream or an error)
/// within `timeout`; bytes it wrote first (a 503, say) are skipped.
inline bool closed_by_peer(tcp::socket& sock,
                           std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - std::chrono::steady_clock::now());
    pollfd fd{sock.native_handle(), POLLIN, 0};
    if (::poll(&fd, 1, static_cast<int>(std::max<int64_t>(left.count(), 0)))
        <= 0)
      return false;
    char byte[512];
    auto n = ::recv(sock.native_handle(), byte, sizeof(byte), 0);
    if (n <= 0)
      return true;
  }
}

} // namespace keel::test
