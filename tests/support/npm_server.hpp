#pragma once

// The third-party servers from npm that Keel's tests and benchmarks talk to
// (installed in tests/npm by scripts/setup; see docs/testing-providers.md):
//
//   mock_llm         @dwmkerr/mock-llm, an OpenAI-compatible mock answering
//                    by a rule file from tests/mock-llm
//   portkey_gateway  @portkey-ai/gateway, Portkey's open-source AI gateway
//
// Each starts on a free port on 127.0.0.1, is waited for until it answers
// HTTP, and is killed (its whole process group) when the object goes away;
// the processes also die with the test process if it aborts. Plus a small
// blocking HTTP client that shows response headers (http_call) and helpers
// for OpenAI chat requests and server-sent events.
//
// Header-only (the test binaries are the only users).

#include "source_dir.hpp"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <regex>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <nlohmann/json.hpp>

#include "keel/tools/process.hpp"
#include "temp_dir.hpp"

namespace keel::test {

/// HTTP header fields, in the order received.
using http_fields = std::vector<std::pair<std::string, std::string>>;

/// tests/npm/node_modules/.bin/NAME; throws std::runtime_error (pointing at
/// scripts/setup) when it is not installed.
inline std::string npm_bin(const std::string& name) {
  auto path = keel_source_dir() + "/tests/npm/node_modules/.bin/" + name;
  if (::access(path.c_str(), X_OK) != 0)
    throw std::runtime_error(path + " is missing: run scripts/setup");
  return path;
}

/// The rule file `name` of tests/mock-llm ("ok.yaml"); a name with a '/' is
/// taken as a path as it is.
inline std::string mock_llm_rules(const std::string& name) {
  if (name.find('/') != std::string::npos)
    return name;
  return keel_source_dir() + "/tests/mock-llm/" + name;
}

/// An HTTP response.
struct http_reply {
  unsigned status = 0;
  http_fields headers;
  std::string body;

  /// The value of header `name` (any case); "" if absent.
  std::string header(std::string_view name) const {
    for (auto& [key, value] : headers)
      if (key.size() == name.size()
          && std::equal(key.begin(), key.end(), name.begin(),
                        [](char a, char b) {
                          return std::tolower(static_cast<unsigned char>(a))
                                 == std::tolower(static_cast<unsigned char>(b));
                        }))
        return value;
    return {};
  }
};

/// One blocking HTTP/1.1 request to 127.0.0.1:`port` (Connection: close),
/// reading the whole response (a stream until the server ends it). A
/// non-empty `body` goes as application/json unless `headers` has a
/// Content-Type. std::nullopt, with the reason in `*error`, when there is
/// no complete response within `timeout`.
inline std::optional<http_reply>
try_http_call(uint16_t port, const std::string& method,
              const std::string& target, const std::string& body = {},
              const http_fields& headers = {},
              std::chrono::milliseconds timeout = std::chrono::seconds{10},
              std::string* error = nullptr) {
  namespace beast = boost::beast;
  namespace bhttp = boost::beast::http;
  using boost::asio::ip::tcp;
  boost::asio::io_context ioc;
  beast::tcp_stream stream{ioc};
  bhttp::request<bhttp::string_body> req;
  req.method_string(method);
  req.target(target);
  req.version(11);
  req.set(bhttp::field::host, "127.0.0.1:" + std::to_string(port));
  req.set(bhttp::field::connection, "close");
  for (auto& [key, value] : headers)
    req.set(key, value);
  if (!body.empty() && req.find(bhttp::field::content_type) == req.end())
    req.set(bhttp::field::content_type, "application/json");
  req.body() = body;
  req.prepare_payload();
  bhttp::response_parser<bhttp::string_body> parser;
  parser.body_limit(64 * 1024 * 1024);
  beast::flat_buffer buf;
  beast::error_code result;
  stream.expires_after(timeout);
  tcp::endpoint ep{boost::asio::ip::make_address_v4("127.0.0.1"), port};
  stream.async_connect(ep, [&](beast::error_code ec) {
    if (ec) {
      result = ec;
      return;
    }
    bhttp::async_write(stream, req, [&](beast::error_code ec2, size_t) {
      if (ec2) {
        result = ec2;
        return;
      }
      bhttp::async_read(stream, buf, parser,
                        [&](beast::error_code ec3, size_t) { result = ec3; });
    });
  });
  ioc.run();
  if (result) {
    if (error != nullptr)
      *error = method + " http://127.0.0.1:" + std::to_string(port) + target
               + ": " + result.message();
    return std::nullopt;
  }
  auto& res = parser.get();
  http_reply reply;
  reply.status = res.result_int();
  for (auto& field : res)
    reply.headers.emplace_back(std::string{field.name_string()},
                               std::string{field.value()});
  reply.body = std::move(res.body());
  beast::error_code ignored;
  stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
  return reply;
}

/// try_http_call that throws std::runtime_error with the reason instead.
inline http_reply
http_call(uint16_t port, const std::string& method, const std::string& target,
          const std::string& body = {}, const http_fields& headers = {},
          std::chrono::milliseconds timeout = std::chrono::seconds{10}) {
  std::string error;
  auto reply = try_http_call(port, method, target, body, headers, timeout,
                             &error);
  if (!reply)
    throw std::runtime_error(error);
  return std::move(*reply);
}

/// The body of an OpenAI chat completion request with one user message.
inline std::string chat_request(const std::string& text, bool stream = false,
                                const std::string& model = "gpt-4o-mini") {
  nlohmann::json req{{"model", model},
                     {"messages", {{{"role", "user"}, {"content", text}}}}};
  if (stream)
    req["stream"] = true;
  return req.dump();
}

/// The `data:` payloads of a server-sent events body, in order (a final
/// "[DONE]" included; events of several data lines joined by '\n').
inline std::vector<std::string> sse_data(const std::string& body) {
  std::vector<std::string> events;
  std::optional<std::string> current;
  size_t pos = 0;
  while (pos <= body.size()) {
    auto end = body.find('\n', pos);
    auto line = body.substr(pos, end == std::string::npos ? std::string::npos
                                                          : end - pos);
    if (!line.empty() && line.back() == '\r')
      line.pop_back();
    if (line.empty()) {
      if (current)
        events.push_back(std::move(*current));
      current.reset();
    } else if (line.rfind("data:", 0) == 0) {
      auto value = line.substr(5);
      if (!value.empty() && value.front() == ' ')
        value.erase(0, 1);
      current = current ? *current + "\n" + value : value;
    }
    if (end == std::string::npos)
      break;
    pos = end + 1;
  }
  if (current)
    events.push_back(std::move(*current));
  return events;
}

/// The text of an OpenAI chat completion: choices[0].message.content of a
/// JSON body, or the concatenated choices[0].delta.content of a stream.
inline std::string completion_text(const std::string& body) {
  auto j = nlohmann::json::parse(body, nullptr, false);
  if (!j.is_discarded()) {
    if (!j.is_object())
      return {};
    auto& content = j["choices"][0]["message"]["content"];
    return content.is_string() ? content.get<std::string>() : std::string{};
  }
  std::string text;
  for (auto& data : sse_data(body)) {
    auto chunk = nlohmann::json::parse(data, nullptr, false);
    if (chunk.is_discarded() || !chunk.is_object())
      continue;
    auto choices = chunk.find("choices");
    if (choices == chunk.end() || !choices->is_array() || choices->empty())
      continue;
    auto& content = (*choices)[0]["delta"]["content"];
    if (content.is_string())
      text += content.get<std::string>();
  }
  return text;
}

namespace npm_detail {

// A server process started by start_server.
struct started_server {
  std::unique_ptr<child_process> child;
  uint16_t port = 0;
};

// Starts `make(port)` on a free port until `ready(port, child)` holds
// (polled; the child must stay alive) within `timeout`. A child that exits
// early because its port was taken after all is retried on another port;
// other failures throw with the log. The log file collects every attempt.
inline started_server
start_server(const std::string& what,
             const std::function<child_options(uint16_t)>& make,
             const std::function<bool(uint16_t, child_process&)>& ready,
             std::chrono::milliseconds timeout) {
  constexpr int attempts = 3;
  for (int attempt = 1;; ++attempt) {
    auto port = free_port();
    auto opts = make(port);
    auto log_path = opts.log_path;
    auto child = std::make_unique<child_process>(std::move(opts));
    auto up = poll_until(
      [&] { return !child->running() || ready(port, *child); }, timeout);
    if (up && child->running())
      return {std::move(child), port};
    child->kill();
    auto log = child->log();
    auto port_taken = log.find("EADDRINUSE") != std::string::npos;
    if (!port_taken || attempt == attempts)
      throw std::runtime_error(what + (up ? " exited" : " did not answer")
                               + " on port " + std::to_string(port) + " (log "
                               + log_path + "):\n" + log);
    std::ofstream{log_path, std::ios::app} << "\n[npm_server: port " << port
                                           << " was taken, retrying]\n";
  }
}

// True if `path` uses a rule extension of mock-llm-with-headers.cjs: a
// `headers:` or `errorStatusWhenStreaming:` key (not inside a JSON body,
// whose keys are quoted).
inline bool uses_rule_extensions(const std::string& path) {
  std::ifstream in{path};
  if (!in)
    throw std::runtime_error("mock-llm rule file " + path + " is missing");
  static const std::regex key{R"(^\s*(headers|errorStatusWhenStreaming)\s*:)"};
  std::string line;
  while (std::getline(in, line))
    if (std::regex_search(line, key))
      return true;
  return false;
}

// What both servers offer: the process on its port, started in a
// temporary folder of its own (removed after the process is killed).
class server_process {
public:
  explicit server_process(const char* dir_name) : dir_{dir_name} {
    // nop
  }

  server_process(const server_process&) = delete;
  server_process& operator=(const server_process&) = delete;

  uint16_t port() const {
    return port_;
  }

  /// The OpenAI base URL, "http://127.0.0.1:PORT/v1".
  std::string base_url() const {
    return "http://127.0.0.1:" + std::to_string(port_) + "/v1";
  }

  /// True while the server runs.
  bool running() {
    return child_->running();
  }

  /// Everything the server printed so far (mock-llm: one line per request).
  std::string log() const {
    return child_->log();
  }

protected:
  void adopt(started_server started) {
    child_ = std::move(started.child);
    port_ = started.port;
  }

  temp_dir dir_;

private:
  std::unique_ptr<child_process> child_;
  uint16_t port_ = 0;
};

} // namespace npm_detail

/// @dwmkerr/mock-llm with a rule file (see tests/mock-llm and
/// docs/testing-providers.md). A file using Keel's rule extensions
/// (response `headers`, `errorStatusWhenStreaming`) is served through
/// tests/mock-llm/mock-llm-with-headers.cjs, which runs the same mock-llm
/// code with them; other files by mock-llm's own binary.
class mock_llm : public npm_detail::server_process {
public:
  /// Starts mock-llm with `rules`: a file name in tests/mock-llm
  /// ("ok.yaml") or a path. Throws std::runtime_error with the server's
  /// output if it does not come up.
  explicit mock_llm(std::string rules, std::chrono::milliseconds timeout
                                       = std::chrono::seconds{30})
    : server_process("keel-mock-llm"),
      rules_(mock_llm_rules(rules)),
      extended_(npm_detail::uses_rule_extensions(rules_)) {
    adopt(npm_detail::start_server(
      "mock-llm (" + rules_ + ")",
      [this](uint16_t port) {
        child_options opts;
        if (extended_) {
          auto node = find_in_path("node");
          if (!node)
            throw std::runtime_error("node is not in PATH: run scripts/setup");
          opts.argv
            = {*node,
               keel_source_dir() + "/tests/mock-llm/mock-llm-with-headers.cjs",
               "--config", rules_};
        } else {
          opts.argv = {npm_bin("mock-llm"), "--config", rules_};
        }
        opts.env = {{"HOST", "127.0.0.1"}, {"PORT", std::to_string(port)}};
        // mock-llm reads ./mock-llm.yaml when --config is absent: run it
        // where there is none.
        opts.cwd = dir_.str();
        opts.log_path = dir_.str() + "/mock-llm.log";
        return opts;
      },
      [](uint16_t port, child_process& child) {
        // Our child printed its ready line (not some other server that
        // took the port) and answers.
        if (child.log().find("server running on 127.0.0.1:"
                             + std::to_string(port))
            == std::string::npos)
          return false;
        auto res = try_http_call(port, "GET", "/health", {}, {},
                                 std::chrono::milliseconds{500});
        return res && res->status == 200;
      },
      timeout));
  }

  /// Kills the server.
  ~mock_llm() = default;

  /// The rule file's path.
  const std::string& rules() const {
    return rules_;
  }

  /// True if the file uses Keel's rule extensions (see the class comment).
  bool extended() const {
    return extended_;
  }

  /// `DELETE /config`: the rules of the file again, and the request counts
  /// of `sequence` rules back to 0.
  void reset() {
    auto res = http_call(port(), "DELETE", "/config");
    if (res.status != 200)
      throw std::runtime_error("mock-llm: DELETE /config answered "
                               + std::to_string(res.status));
  }

private:
  std::string rules_;
  bool extended_ = false;
};

/// @portkey-ai/gateway (`gateway --port=N --headless`). It listens on all
/// interfaces (it has no option for the address) and needs no network
/// beyond the upstreams its requests name. Route a request to an
/// OpenAI-compatible upstream with the headers of route_to().
class portkey_gateway : public npm_detail::server_process {
public:
  /// Starts the gateway. Throws std::runtime_error with its output if it
  /// does not come up.
  explicit portkey_gateway(std::chrono::milliseconds timeout
                           = std::chrono::seconds{30})
    : server_process("keel-portkey") {
    adopt(npm_detail::start_server(
      "Portkey gateway",
      [this](uint16_t port) {
        child_options opts;
        opts.argv = {npm_bin("gateway"), "--port=" + std::to_string(port),
                     "--headless"};
        opts.cwd = dir_.str();
        opts.log_path = dir_.str() + "/gateway.log";
        return opts;
      },
      [](uint16_t port, child_process&) {
        auto res = try_http_call(port, "GET", "/", {}, {},
                                 std::chrono::milliseconds{500});
        return res && res->status == 200
               && res->body.find("AI Gateway") != std::string::npos;
      },
      timeout));
  }

  /// Kills the gateway.
  ~portkey_gateway() = default;

  /// The request headers that make the gateway forward a request as is to
  /// the OpenAI-compatible API at `upstream_base_url` (e.g.
  /// mock_llm::base_url(), ending in /v1) with `api_key` as its bearer
  /// token: `x-portkey-provider: openai`, `x-portkey-custom-host`,
  /// `Authorization`.
  static http_fields route_to(const std::string& upstream_base_url,
                              const std::string& api_key = "sk-mock") {
    return {{"x-portkey-provider", "openai"},
            {"x-portkey-custom-host", upstream_base_url},
            {"Authorization", "Bearer " + api_key}};
  }

  /// The same route as one `x-portkey-config` header, with `extra` merged
  /// into the config (e.g. {"retry": {"attempts": 3}}).
  static http_fields
  route_config(const std::string& upstream_base_url,
               const nlohmann::json& extra = nlohmann::json::object(),
               const std::string& api_key = "sk-mock") {
    nlohmann::json config{{"provider", "openai"},
                          {"api_key", api_key},
                          {"custom_host", upstream_base_url}};
    config.update(extra);
    return {{"x-portkey-config", config.dump()}};
  }
};

} // namespace keel::test
