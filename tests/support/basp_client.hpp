#pragma once

// A BASP client of the tests' own (CAF 0.17's Binary Actor System Protocol,
// version 3), written from its wire format: a plain socket, no middleman,
// as someone who reaches a node's cluster port without being a node would
// talk to it. CAF's binary serializer writes the header and payload fields
// (big-endian integers, as CAF's middleman writes them). With `tls` it
// talks through OpenSSL first, as CAF's OpenSSL module does, presenting a
// client certificate if given one.
//
// Wire format: every frame is a 32-byte header (operation, two padding
// bytes, flags, payload length, operation data, source and destination
// actor ids), then the payload. The server sends its handshake first
// (node id, application ids, the published actor's id, its interface); the
// client answers with its own (its node id). A direct message's payload is
// the forwarding stack and the message; its destination is an actor id, or
// with the named-receiver flag an atom looked up in the node's registry.

#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include <caf/actor_control_block.hpp>
#include <caf/actor_system.hpp>
#include <caf/binary_deserializer.hpp>
#include <caf/binary_serializer.hpp>
#include <caf/io/basp/header.hpp>
#include <caf/io/basp/message_type.hpp>
#include <caf/message.hpp>
#include <caf/message_id.hpp>
#include <caf/node_id.hpp>

#include <openssl/err.h>
#include <openssl/ssl.h>

namespace keel::test {

class basp_client {
public:
  using header = caf::io::basp::header;
  using message_type = caf::io::basp::message_type;

  /// Where a request goes: a registered name or an actor id.
  struct receiver {
    uint64_t dest = 0;
    bool named = false;
  };

  static receiver named(caf::atom_value name) {
    return {static_cast<uint64_t>(name), true};
  }

  static receiver by_id(caf::actor_id id) {
    return {id, false};
  }

  /// A TLS client's files (PEM); an empty `cert` presents none.
  struct tls_options {
    std::string cert;
    std::string key;
  };

  /// Connects to 127.0.0.1:`port`; throws if nobody listens there. With
  /// `tls`, makes a TLS handshake first (whose outcome `tls_error` tells:
  /// under TLS 1.3 the server's verdict on a client certificate comes only
  /// with the first read).
  basp_client(caf::actor_system& sys, uint16_t port,
              const tls_options* tls = nullptr)
    : sys_(sys) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd_ < 0
        || ::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr))
             != 0)
      throw std::runtime_error("basp_client: cannot connect to port "
                               + std::to_string(port));
    if (tls)
      start_tls(*tls);
  }

  basp_client(const basp_client&) = delete;
  basp_client& operator=(const basp_client&) = delete;

  ~basp_client() {
    if (ssl_)
      SSL_free(ssl_);
    if (ctx_)
      SSL_CTX_free(ctx_);
    ::close(fd_);
  }

  /// What the TLS handshake failed with; empty if it did not (or there was
  /// none).
  const std::string& tls_error() const {
    return tls_error_;
  }

  /// Reads the server's handshake and answers with this client's; returns
  /// the id of the actor published on the port.
  caf::actor_id handshake() {
    auto frame = read_frame(std::chrono::seconds{5});
    if (!frame || frame->hdr.operation != message_type::server_handshake)
      throw std::runtime_error("basp_client: no server handshake");
    caf::binary_deserializer source{sys_, frame->payload};
    caf::node_id server;
    std::vector<std::string> app_ids;
    caf::actor_id published = 0;
    std::set<std::string> iface;
    if (auto err = source(server, app_ids, published, iface))
      throw std::runtime_error("basp_client: bad server handshake");
    std::vector<char> payload;
    caf::binary_serializer sink{sys_, payload};
    if (sink(own_node()))
      throw std::runtime_error("basp_client: cannot write its node id");
    write_frame(header(message_type::client_handshake, 0, 0, 0, 0, 0), payload);
    return published;
  }

  /// Sends `msg` as a request to `to` and waits up to `timeout` for the
  /// answer: none if none came or the node closed the connection.
  std::optional<caf::message> request(receiver to, const caf::message& msg,
                                      std::chrono::milliseconds timeout) {
    auto id = caf::make_message_id(++last_id_);
    std::vector<char> payload;
    caf::binary_serializer sink{sys_, payload};
    std::vector<caf::strong_actor_ptr> stages;
    if (sink(stages, const_cast<caf::message&>(msg)))
      throw std::runtime_error("basp_client: cannot write a message");
    uint8_t flags = to.named ? uint8_t{0x01} : uint8_t{0}; // named receiver
    write_frame(header(message_type::direct_message, flags, 0,
                       id.integer_value(), own_actor, to.dest),
                payload);
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (auto frame = read_frame(left(deadline))) {
      if (frame->hdr.operation != message_type::direct_message
          || frame->hdr.operation_data != id.response_id().integer_value())
        continue; // Heartbeats, the node's own requests, monitors.
      caf::binary_deserializer source{sys_, frame->payload};
      caf::message answer;
      if (source(stages, answer))
        throw std::runtime_error("basp_client: cannot read an answer");
      return answer;
    }
    return std::nullopt;
  }

  /// Writes `bytes` as they are.
  void send_raw(const std::vector<char>& bytes) {
    write_all(bytes.data(), bytes.size());
  }

  /// A header as CAF writes it, for frames put together by hand.
  std::vector<char> encode(header hdr) {
    std::vector<char> out;
    caf::binary_serializer sink{sys_, out};
    if (sink(hdr))
      throw std::runtime_error("basp_client: cannot write a header");
    return out;
  }

  /// Whether the node closed the connection within `timeout` (reading and
  /// dropping whatever it sent first).
  bool closed_by_node(std::chrono::milliseconds timeout) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    char buf[4096];
    while (wait_readable(left(deadline)))
      if (receive(buf, sizeof(buf)) <= 0)
        return true;
    return false;
  }

  /// The actor id this client's messages come from.
  static constexpr caf::actor_id own_actor = 7;

private:
  struct frame {
    header hdr;
    std::vector<char> payload;
  };

  static caf::node_id own_node() {
    return *caf::make_node_id(4242, "0123456789abcdef0123456789abcdef01234567");
  }

  static std::chrono::milliseconds
  left(std::chrono::steady_clock::time_point deadline) {
    auto d = deadline - std::chrono::steady_clock::now();
    return std::max(std::chrono::milliseconds{0},
                    std::chrono::duration_cast<std::chrono::milliseconds>(d));
  }

  void start_tls(const tls_options& tls) {
    ctx_ = SSL_CTX_new(TLS_client_method());
    if (!ctx_)
      throw std::runtime_error("basp_client: SSL_CTX_new failed");
    // The server is not checked: the tests ask what the server accepts.
    SSL_CTX_set_verify(ctx_, SSL_VERIFY_NONE, nullptr);
    if (!tls.cert.empty()
        && (SSL_CTX_use_certificate_chain_file(ctx_, tls.cert.c_str()) != 1
            || SSL_CTX_use_PrivateKey_file(ctx_, tls.key.c_str(),
                                           SSL_FILETYPE_PEM)
                 != 1))
      throw std::runtime_error("basp_client: cannot load " + tls.cert);
    ssl_ = SSL_new(ctx_);
    SSL_set_fd(ssl_, fd_);
    if (SSL_connect(ssl_) != 1)
      tls_error_ = last_tls_error("the handshake failed");
  }

  static std::string last_tls_error(const std::string& what) {
    char text[256] = "";
    if (auto code = ERR_get_error())
      ERR_error_string_n(code, text, sizeof(text));
    return what + ": " + text;
  }

  // Reads what is there, up to `n` bytes: 0 or less once the connection is
  // closed (or TLS failed).
  ssize_t receive(char* out, size_t n) {
    if (!ssl_)
      return ::recv(fd_, out, n, 0);
    auto k = SSL_read(ssl_, out, static_cast<int>(n));
    if (k <= 0 && tls_error_.empty())
      tls_error_ = last_tls_error("reading failed");
    return k;
  }

  bool wait_readable(std::chrono::milliseconds timeout) {
    if (ssl_ && SSL_pending(ssl_) > 0)
      return true;
    pollfd p{fd_, POLLIN, 0};
    return ::poll(&p, 1, static_cast<int>(timeout.count())) > 0;
  }

  // Reads exactly `n` bytes; false if the connection closed or `timeout`
  // passed first.
  bool read_exactly(std::vector<char>& out, size_t n,
                    std::chrono::milliseconds timeout) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    out.resize(n);
    for (size_t got = 0; got < n;) {
      if (!wait_readable(left(deadline)))
        return false;
      auto k = receive(out.data() + got, n - got);
      if (k <= 0)
        return false;
      got += static_cast<size_t>(k);
    }
    return true;
  }

  std::optional<frame> read_frame(std::chrono::milliseconds timeout) {
    frame f;
    std::vector<char> raw;
    if (!read_exactly(raw, caf::io::basp::header_size, timeout))
      return std::nullopt;
    caf::binary_deserializer source{sys_, raw};
    if (source(f.hdr))
      throw std::runtime_error("basp_client: cannot read a header");
    if (f.hdr.payload_len > 0
        && !read_exactly(f.payload, f.hdr.payload_len, timeout))
      return std::nullopt;
    return f;
  }

  void write_frame(header hdr, const std::vector<char>& payload) {
    hdr.payload_len = static_cast<uint32_t>(payload.size());
    auto bytes = encode(hdr);
    bytes.insert(bytes.end(), payload.begin(), payload.end());
    write_all(bytes.data(), bytes.size());
  }

  void write_all(const char* data, size_t n) {
    while (n > 0) {
      auto k = ssl_ ? SSL_write(ssl_, data, static_cast<int>(n))
                    : ::send(fd_, data, n, MSG_NOSIGNAL);
      if (k <= 0)
        throw std::runtime_error("basp_client: the node closed the "
                                 "connection");
      data += k;
      n -= static_cast<size_t>(k);
    }
  }

  caf::actor_system& sys_;
  int fd_ = -1;
  SSL_CTX* ctx_ = nullptr;
  SSL* ssl_ = nullptr;
  std::string tls_error_;
  uint64_t last_id_ = 0;
};

} // namespace keel::test
