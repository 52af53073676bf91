#define CAF_SUITE tls

// The gateway's TLS against a real keel-node serving a certificate made at
// test time: wss:// and https:// work for a client that trusts it, plain
// ws:// on the same port and clients limited to TLS 1.1 are refused.

#include <chrono>
#include <string>

#include <caf/test/unit_test.hpp>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <boost/beast/websocket.hpp>
#include <boost/beast/websocket/ssl.hpp>

#include "node_client.hpp"
#include "temp_dir.hpp"
#include "tls_cert.hpp"

#include "keel/protocol.hpp"

using namespace keel;
using namespace keel::test;
using namespace std::chrono_literals;

namespace {

namespace beast = boost::beast;
namespace http = beast::http;
namespace websocket = beast::websocket;
namespace ssl = boost::asio::ssl;
using tcp = boost::asio::ip::tcp;
using tls_stream = beast::ssl_stream<beast::tcp_stream>;

/// A node on 127.0.0.1 serving TLS with a fresh self-signed certificate.
struct tls_node {
  temp_dir dir{"keel-tls"};
  tls_files files = make_self_signed(dir.str());
  node_process node{
    dir.str(), "node:\n  name: tls\n  data_dir: " + dir.str()
                 + "/data\ngateway:\n  port: 0\n  tls:\n    certificate_file: "
                 + files.certificate_file + "\n    key_file: " + files.key_file
                 + "\nproviders:\n  - name: echo\n    kind: echo\n"
                   "pools:\n  - name: default\n    chain: [echo]\n"
                   "logging:\n  level: info\n"};

  ~tls_node() {
    node.stop();
  }

  /// A client context that trusts only the node's certificate, limited to
  /// `max_version` (0: whatever OpenSSL offers).
  ssl::context client_context(int max_version = 0) {
    ssl::context ctx{ssl::context::tls_client};
    ctx.load_verify_file(files.certificate_file);
    ctx.set_verify_mode(ssl::verify_peer);
    if (max_version != 0) {
      SSL_CTX_set_min_proto_version(ctx.native_handle(), TLS1_VERSION);
      SSL_CTX_set_max_proto_version(ctx.native_handle(), max_version);
      // OpenSSL 3 refuses TLS 1.1 at its default security level.
      SSL_CTX_set_security_level(ctx.native_handle(), 0);
    }
    return ctx;
  }

  /// Connects and completes the TLS handshake (checking the certificate
  /// names 127.0.0.1); returns the error of the handshake.
  beast::error_code handshake(tls_stream& stream) {
    auto ep = node.address();
    beast::get_lowest_layer(stream).expires_after(10s);
    beast::get_lowest_layer(stream).connect(
      tcp::endpoint{boost::asio::ip::make_address(ep.host), ep.port});
    SSL_set1_host(stream.native_handle(), ep.host.c_str());
    beast::error_code err;
    stream.handshake(ssl::stream_base::client, err);
    return err;
  }
};

} // namespace

CAF_TEST(a client that trusts the certificate talks wss and https) {
  tls_node n;
  auto ep = n.node.address();
  boost::asio::io_context ioc;
  auto ctx = n.client_context();
  websocket::stream<tls_stream> ws{ioc, ctx};
  CAF_REQUIRE_EQUAL(n.handshake(ws.next_layer()), beast::error_code{});
  ws.handshake(to_string(ep), "/ws");
  beast::flat_buffer buf;
  ws.read(buf);
  auto hello = nlohmann::json::parse(beast::buffers_to_string(buf.data()));
  CAF_CHECK_EQUAL(hello["type"], "hello");
  CAF_CHECK_EQUAL(hello["node"], "tls");
  ws.write(boost::asio::buffer(protocol::send_frame("t1", "m1", "hi")));
  bool acked = false;
  while (!acked) {
    buf.consume(buf.size());
    ws.read(buf);
    auto j = nlohmann::json::parse(beast::buffers_to_string(buf.data()));
    acked = j["type"] == "ack" && j["id"] == "m1";
  }
  CAF_CHECK(acked);
  ws.close(websocket::close_code::normal);
  // https on the same port.
  tls_stream https{ioc, ctx};
  CAF_REQUIRE_EQUAL(n.handshake(https), beast::error_code{});
  http::request<http::empty_body> req{http::verb::get, "/api/v1/status", 11};
  req.set(http::field::host, to_string(ep));
  http::write(https, req);
  http::response<http::string_body> res;
  beast::flat_buffer body_buf;
  http::read(https, body_buf, res);
  CAF_CHECK_EQUAL(res.result_int(), 200u);
  auto status = nlohmann::json::parse(res.body());
  CAF_CHECK_EQUAL(status["node"], "tls");
}

CAF_TEST(plain websockets and old tls versions are refused) {
  tls_node n;
  // ws:// to the TLS port: the node reads no HTTP there.
  auto plain = ws_client::connect(n.node.address(), "/ws", 5s);
  CAF_CHECK(!plain);
  boost::asio::io_context ioc;
  auto old_ctx = n.client_context(TLS1_1_VERSION);
  tls_stream old{ioc, old_ctx};
  auto err = n.handshake(old);
  CAF_MESSAGE("a TLS 1.1 client: " << err.message());
  CAF_CHECK_NOT_EQUAL(err, beast::error_code{});
  // The refusals cost the node nothing: a good client still gets in.
  auto ctx = n.client_context();
  tls_stream good{ioc, ctx};
  CAF_CHECK_EQUAL(n.handshake(good), beast::error_code{});
  CAF_CHECK(n.node.running());
}

CAF_TEST(the tools reach a tls node with wss addresses) {
  tls_node n;
  auto port = std::to_string(n.node.address().port);
  auto ep = parse_endpoint("wss://127.0.0.1:" + port);
  CAF_REQUIRE(ep);
  ep->ca_file = n.files.certificate_file;
  auto ws = connect_client(*ep);
  CAF_REQUIRE(!ws->send_text(protocol::send_frame("t1", "m1", "hi")));
  auto ack = receive_until(*ws, [](auto& j) { return j["type"] == "ack"; });
  CAF_CHECK(ack);
  auto status = api_call(*ep, "GET", "/api/v1/status");
  CAF_REQUIRE(status);
  CAF_CHECK_EQUAL((*status)["node"], "tls");
  auto ctl = tool_binary("keelctl");
  auto sent = run_command({ctl, "send", "--node", "wss://127.0.0.1:" + port,
                           "--ca-file", n.files.certificate_file, "t2", "hey"});
  CAF_CHECK_EQUAL(sent.exit_code, 0);
  CAF_CHECK(sent.out.find("echo: hey") != std::string::npos);
  auto shown
    = run_command({ctl, "status", "--node", "https://127.0.0.1:" + port,
                   "--ca-file", n.files.certificate_file});
  CAF_CHECK_EQUAL(shown.exit_code, 0);
  CAF_CHECK(shown.out.find("tls") != std::string::npos);
}

CAF_TEST(the tools refuse a certificate they cannot trust) {
  tls_node n;
  auto port = std::to_string(n.node.address().port);
  auto ctl = tool_binary("keelctl");
  // The system's store does not know the self-signed certificate.
  auto untrusted
    = run_command({ctl, "status", "--node", "wss://127.0.0.1:" + port});
  CAF_CHECK_EQUAL(untrusted.exit_code, 3);
  CAF_MESSAGE("untrusted: " << untrusted.err);
  CAF_CHECK(untrusted.err.find("TLS handshake failed") != std::string::npos);
  CAF_CHECK(untrusted.err.find("self-signed") != std::string::npos
            || untrusted.err.find("self signed") != std::string::npos);
  // The certificate names 127.0.0.1, not localhost.
  auto wrong_name
    = run_command({ctl, "status", "--node", "wss://localhost:" + port,
                   "--ca-file", n.files.certificate_file});
  CAF_CHECK_EQUAL(wrong_name.exit_code, 3);
  CAF_MESSAGE("wrong name: " << wrong_name.err);
  CAF_CHECK(wrong_name.err.find("TLS handshake failed") != std::string::npos);
  CAF_CHECK(wrong_name.err.find("hostname mismatch") != std::string::npos);
  auto no_file
    = run_command({ctl, "status", "--node", "wss://127.0.0.1:" + port,
                   "--ca-file", n.files.certificate_file + ".none"});
  CAF_CHECK_EQUAL(no_file.exit_code, 2);
  CAF_MESSAGE("missing CA file: " << no_file.err);
  CAF_CHECK(no_file.err.find(".none': No such file") != std::string::npos);
  CAF_CHECK(n.node.running());
}
