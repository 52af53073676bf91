#pragma once

// One HTTP connection, over a plain or a TLS stream: reads requests,
// serves the probes (`/healthz`, `/readyz`) and the static files, asks the
// request policy (keel/gateway_policy.hpp), hands `/api/` and `/metrics`
// requests to the handler and WebSocket upgrades to a ws_session.

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "keel/compat_errors.hpp"
#include "keel/gateway_policy.hpp"

#include "ws_session.hpp"

namespace keel::gateway {

/// Header fields of an answer, beside the content type.
using header_fields = std::vector<std::pair<std::string, std::string>>;

template <class Stream>
class http_session : public http_link,
                     public std::enable_shared_from_this<http_session<Stream>> {
public:
  http_session(server_impl* srv, connection_id id, Stream&& stream);

  ~http_session() override;

  /// Starts reading (after the TLS handshake on a TLS stream).
  void run();

  void shutdown() override;

  void deliver(uint64_t id, unsigned status, std::string content_type,
               std::string body) override;

  const executor_type& executor() const override {
    return ex_;
  }

  // -- for a compatible API request (compat_exchange.hpp) -------------------

  Stream& stream() {
    return stream_;
  }

  unsigned version() const {
    return version_;
  }

  /// Whether the connection may carry another request after this one.
  bool keep_alive() const {
    return keep_alive_ && !srv_->stopping();
  }

  /// Answers the request with `body` and `fields`, then reads the next.
  void answer(unsigned status, std::string content_type, std::string body,
              const header_fields& fields);

  /// The request was answered by a stream: reads the next request if the
  /// connection is `reusable`, else closes it.
  void resume(bool reusable);

private:
  void compat_request(const request& req, std::string_view path,
                      const request_facts& facts);
  void compat_models(const request& req, std::string_view path,
                     const std::string& request_id);
  void compat_refuse(compat::api wire, const compat::api_error& err,
                     const std::string& request_id);
  void do_read();
  void read_head();
  void on_head_bytes(error_code err, size_t n);
  void on_read(error_code err, size_t);
  void route(request req);
  void upgrade(request& req, std::string_view path);
  bool serve_itself(const request& req, std::string_view path);
  void probe(const request& req, std::string_view path, bool ok, const char* up,
             const char* down);
  void serve_file(const request& req, const static_file& file);
  void api_request(const request& req);
  void start_api_timer();
  void not_found(std::string_view path);
  void body_too_large();
  void refuse(const request_decision& decision);
  void overloaded();
  void malformed(unsigned status, std::string message);
  void expire_read();
  void reply(http::status status, std::string content_type, std::string body,
             bool fresh = true);
  void on_write(error_code err, size_t);
  void close_socket();

  server_impl* srv_;
  connection_id id_;
  const executor_type ex_;
  Stream stream_;
  beast::flat_buffer buf_;
  std::optional<http::request_parser<http::string_body>> parser_;
  http::response<http::string_body> res_;
  std::unique_ptr<net::steady_timer> timer_;
  uint64_t pending_ = 0;
  unsigned version_ = 11;
  bool keep_alive_ = false;
  bool shut_down_ = false;
  // Passed the token check: holds a slot of `max_connections` instead of
  // a place in the unauthenticated budget.
  bool authenticated_ = false;
  // The stream moved to a ws_session (which took over the slot too, the
  // connection being authenticated): never touch it again.
  bool handed_off_ = false;
  error_code ignored_;
};

extern template class http_session<plain_stream>;
extern template class http_session<tls_stream>;

} // namespace keel::gateway
