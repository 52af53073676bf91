#pragma once

// What the tools' WebSocket clients (the client's and the load generators')
// send with their upgrade request.

#include <string>

#include <boost/beast/http/field.hpp>
#include <boost/beast/websocket/stream.hpp>

namespace keel::detail {

/// Makes `ws` send `agent` as its User-Agent and, unless empty, `token` as
/// its bearer token with the upgrade request.
template <class NextLayer>
void set_client_identity(boost::beast::websocket::stream<NextLayer>& ws,
                         const char* agent, const std::string& token) {
  namespace http = boost::beast::http;
  namespace websocket = boost::beast::websocket;
  ws.set_option(websocket::stream_base::decorator(
    [agent, token](websocket::request_type& req) {
      req.set(http::field::user_agent, agent);
      if (!token.empty())
        req.set(http::field::authorization, "Bearer " + token);
    }));
}

} // namespace keel::detail
