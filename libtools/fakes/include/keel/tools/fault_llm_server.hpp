#pragma once

// An in-process, fault-injecting LLM server for tests and keel-chaos (and,
// wrapped by tests/tools/fault_llm.cpp, the `keel-fault-llm` executable). It
// listens on 127.0.0.1 (port 0 by default) on its own thread, speaks the OpenAI
// chat completions API (`POST .../chat/completions`) and the Anthropic Messages
// API (`POST .../messages`), plain or streamed (server-sent events) as the
// request's `stream` says, keeps connections alive, and optionally serves
// TLS with a certificate made in memory (`make_self_signed_identity`).
//
// What it does with a request is a `fault`, chosen in this order:
//   1. a directive in the text of the request's last user message,
//      `[[fault:SPEC]]` (does not consume the script);
//   2. the next entry of the script (`options::script`, `push`), consumed;
//   3. the default (`options::fallback`, `set_default`).
// So "the first N calls fail, then succeed" is a script of N failures with
// the default `ok`.
//
// SPEC is a `;`-separated list of items (the CLI's `--mode SPEC`; its
// `--sequence` takes a `,`-separated list of SPECs):
//   ok                 answer normally (the default): "echo: " + the last
//                      user message, streamed one word per event
//   reply=TEXT         answer TEXT instead (TEXT without ';' ',' or ']')
//   tool               answer with some text and a tool call (get_weather,
//                      {"city":"Paris"}), arguments streamed in pieces
//   status=N or N      answer HTTP N with the API's error body for N
//   error=TYPE         with status: the error type in the body, e.g.
//                      insufficient_quota (OpenAI), overloaded_error
//   message=TEXT       with status: the error body's message (TEXT without
//                      ';' ',' or ']'), e.g. one quoting the request's key
//   retry_after=V      with status: a `Retry-After: V` header
//   retry_after_ms=N   with status: a `retry-after-ms: N` header
//   reset              send the headers and half the body, then reset (RST)
//   truncate           streamed: half the events, then end the body cleanly
//                      without the terminal event; plain: half the body
//                      (short of Content-Length), then close
//   malformed          invalid JSON: the plain body, or a streamed event
//   sse_error[=TYPE]   streamed: some text, then an error event of TYPE
//                      (default overloaded_error); plain: HTTP 500
//   hang               read the request and never answer
//   drop               read the request and close the connection without
//                      answering
//   drip=DURATION      wait DURATION (e.g. 50ms, 2s) before each streamed
//                      event, or before a plain answer
//   close              answer with `Connection: close` and close
//   hangup             answer as if keeping the connection alive, then
//                      close it anyway (a stale pooled connection)
// Items combine: `[[fault:drip=20ms;truncate]]`, `--sequence 503,503,ok`,
// `--mode status=429;retry_after=2`.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <nlohmann/json.hpp>

#include "keel/tools/certificates.hpp"
#include "keel/tools/process.hpp"

namespace keel::fault_llm {

/// What the server does with one request (see the top of this file).
struct fault {
  enum class kind {
    ok,
    status,
    reset,
    truncate,
    malformed,
    sse_error,
    hang,
    drop,
  };
  kind what = kind::ok;
  /// HTTP status for `status`.
  int status = 200;
  /// Error type in an error body or error event; empty: one fitting status.
  std::string error_type;
  /// The error body's message; empty: one fitting the type.
  std::string error_message;
  /// Header values; empty: not sent.
  std::string retry_after;
  std::string retry_after_ms;
  /// Pause before each streamed event, or before a plain answer.
  std::chrono::milliseconds drip{0};
  /// Answer with a tool call.
  bool tool = false;
  /// Reply text; empty: "echo: " + the last user message.
  std::string reply;
  /// Close the connection after the answer, announced (`close`) or not
  /// (`hangup`).
  bool close = false;
  bool hangup = false;
};

namespace detail {

/// Reads a number of at most 9 decimal digits.
inline bool parse_count(std::string_view str, int& out) {
  if (str.empty() || str.size() > 9
      || str.find_first_not_of("0123456789") != std::string_view::npos)
    return false;
  out = std::stoi(std::string{str});
  return true;
}

// The items of a SPEC: each applies its value to a fault and returns why it
// cannot, or nothing.

using fault_item = std::string (*)(std::string_view value, fault& f);

template <fault::kind Kind>
std::string set_fault_kind(std::string_view, fault& f) {
  f.what = Kind;
  return {};
}

template <bool fault::*Flag>
std::string set_fault_flag(std::string_view, fault& f) {
  f.*Flag = true;
  return {};
}

template <std::string fault::*Field>
std::string set_fault_text(std::string_view value, fault& f) {
  f.*Field = std::string{value};
  return {};
}

/// `status=N` or `N`: a 2xx status answers normally. For any test server's
/// `Fault` with `what`, `status` and the kinds `ok` and `status`.
template <class Fault>
std::string set_fault_status(int n, Fault& f) {
  if (n < 100 || n > 999)
    return "status " + std::to_string(n) + " out of range";
  f.status = n;
  f.what = n / 100 == 2 ? Fault::kind::ok : Fault::kind::status;
  return {};
}

template <class Fault>
std::string set_fault_status_item(std::string_view value, Fault& f) {
  int n = 0;
  if (!parse_count(value, n))
    return "status needs a number";
  return set_fault_status(n, f);
}

inline std::string set_fault_sse_error(std::string_view value, fault& f) {
  f.what = fault::kind::sse_error;
  f.error_type = std::string{value};
  return {};
}

/// `drip=DURATION`: a count of ms or s.
inline std::string set_fault_drip(std::string_view value, fault& f) {
  const std::string why = "drip needs a duration like 50ms or 2s";
  auto digits = value.find_first_not_of("0123456789");
  int n = 0;
  if (digits == 0 || digits == std::string_view::npos
      || !parse_count(value.substr(0, digits), n))
    return why;
  auto unit = value.substr(digits);
  if (unit == "ms")
    f.drip = std::chrono::milliseconds{n};
  else if (unit == "s")
    f.drip = std::chrono::seconds{n};
  else
    return why;
  return {};
}

/// The items of a SPEC by name (a bare status number aside).
inline const std::map<std::string_view, fault_item>& fault_items() {
  static const std::map<std::string_view, fault_item> items{
    {"ok", set_fault_kind<fault::kind::ok>},
    {"status", set_fault_status_item<fault>},
    {"error", set_fault_text<&fault::error_type>},
    {"message", set_fault_text<&fault::error_message>},
    {"retry_after", set_fault_text<&fault::retry_after>},
    {"retry_after_ms", set_fault_text<&fault::retry_after_ms>},
    {"reset", set_fault_kind<fault::kind::reset>},
    {"truncate", set_fault_kind<fault::kind::truncate>},
    {"malformed", set_fault_kind<fault::kind::malformed>},
    {"sse_error", set_fault_sse_error},
    {"hang", set_fault_kind<fault::kind::hang>},
    {"drop", set_fault_kind<fault::kind::drop>},
    {"tool", set_fault_flag<&fault::tool>},
    {"close", set_fault_flag<&fault::close>},
    {"hangup", set_fault_flag<&fault::hangup>},
    {"reply", set_fault_text<&fault::reply>},
    {"drip", set_fault_drip},
  };
  return items;
}

/// Applies the item `key[=value]` to `f`; returns why it cannot, or nothing.
inline std::string apply_fault_item(std::string_view key,
                                    std::string_view value, fault& f) {
  if (auto i = fault_items().find(key); i != fault_items().end())
    return i->second(value, f);
  if (int n = 0; parse_count(key, n))
    return set_fault_status(n, f);
  return "unknown item '" + std::string{key} + "'";
}

/// Takes the text up to the next `separator` (or the end) off `list`,
/// without surrounding blanks.
inline std::string_view next_item(std::string_view& list, char separator) {
  auto end = list.find(separator);
  auto item = list.substr(0, end);
  list = end == std::string_view::npos ? std::string_view{}
                                       : list.substr(end + 1);
  while (!item.empty() && item.front() == ' ')
    item.remove_prefix(1);
  while (!item.empty() && item.back() == ' ')
    item.remove_suffix(1);
  return item;
}

} // namespace detail

namespace detail {

/// Parses a SPEC of `;`-separated `KEY[=VALUE]` items into a `Fault`, each
/// applied by `apply(key, value, fault)` (which returns why it cannot, or
/// nothing); on failure returns nullopt and says why in `error`. Shared by
/// the test servers, whose faults differ.
template <class Fault, class Apply>
std::optional<Fault>
parse_spec(std::string_view spec, std::string* error, Apply apply) {
  const std::string whole{spec};
  Fault result;
  while (!spec.empty()) {
    auto item = next_item(spec, ';');
    if (item.empty())
      continue;
    auto eq = item.find('=');
    auto value = eq == std::string_view::npos ? std::string_view{}
                                              : item.substr(eq + 1);
    auto why = apply(item.substr(0, eq), value, result);
    if (!why.empty()) {
      if (error != nullptr)
        *error = "bad fault '" + whole + "': " + why;
      return std::nullopt;
    }
  }
  return result;
}

/// Parses a `,`-separated list of SPECs with `parse(spec, error)`.
template <class Fault, class Parse>
std::optional<std::vector<Fault>>
parse_spec_list(std::string_view list, std::string* error, Parse parse) {
  std::vector<Fault> result;
  while (!list.empty()) {
    auto f = parse(next_item(list, ','), error);
    if (!f)
      return std::nullopt;
    result.push_back(std::move(*f));
  }
  return result;
}

} // namespace detail

/// Parses a SPEC (see the top of this file); on failure returns nullopt and
/// says why in `error`.
inline std::optional<fault> parse_fault(std::string_view spec,
                                        std::string* error = nullptr) {
  return detail::parse_spec<fault>(spec, error, detail::apply_fault_item);
}

/// Parses a `,`-separated list of SPECs (the CLI's `--sequence`).
inline std::optional<std::vector<fault>>
parse_fault_sequence(std::string_view list, std::string* error = nullptr) {
  return detail::parse_spec_list<fault>(
    list, error, [](std::string_view spec, std::string* why) {
      return parse_fault(spec, why);
    });
}

// Certificates for the server's TLS mode (see certificates.hpp).
using keel::make_self_signed_identity;
using keel::tls_identity;

/// One request as the server saw it.
struct recorded_request {
  std::string method;
  std::string target;
  /// Header names in lower case.
  std::map<std::string, std::string> headers;
  std::string body;
};

namespace detail {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace ssl = net::ssl;
using tcp = net::ip::tcp;
using error_code = boost::system::error_code;
using json = nlohmann::json;

/// The next fault of `script` (taken from it), else `fallback`. Callers
/// hold their state's lock.
template <class Fault>
Fault take_scripted(std::deque<Fault>& script, const Fault& fallback) {
  if (script.empty())
    return fallback;
  auto result = std::move(script.front());
  script.pop_front();
  return result;
}

/// What the sessions share with the server object. Thread-safe.
struct fault_state {
  mutable std::mutex mtx;
  std::condition_variable cv;
  std::deque<fault> script;
  fault fallback;
  std::vector<recorded_request> recorded;
  size_t connections = 0;
  size_t in_flight = 0;
  size_t max_in_flight = 0;

  fault next(const std::optional<fault>& directive) {
    std::lock_guard<std::mutex> guard{mtx};
    if (directive)
      return *directive;
    return take_scripted(script, fallback);
  }

  void record(recorded_request req) {
    std::lock_guard<std::mutex> guard{mtx};
    recorded.push_back(std::move(req));
    max_in_flight = std::max(max_in_flight, ++in_flight);
    cv.notify_all();
  }

  void answered() {
    std::lock_guard<std::mutex> guard{mtx};
    --in_flight;
    cv.notify_all();
  }

  void accepted() {
    std::lock_guard<std::mutex> guard{mtx};
    ++connections;
    cv.notify_all();
  }
};

/// The pieces of a response and how the exchange ends.
struct response_plan {
  enum class ending {
    /// Read the next request on the connection.
    next,
    /// Close after the last piece (FIN).
    close,
    /// Reset after the last piece (RST).
    reset,
    /// Never answer; wait for the client to go away.
    hang,
  };
  /// Each piece is written after its pause.
  std::vector<std::pair<std::chrono::milliseconds, std::string>> pieces;
  ending end = ending::next;
};

inline std::string chunk(std::string_view data) {
  char size[20];
  std::snprintf(size, sizeof(size), "%zx\r\n", data.size());
  std::string result = size;
  result.append(data.data(), data.size());
  result += "\r\n";
  return result;
}

inline std::string reason_phrase(int status) {
  auto reason = http::obsolete_reason(static_cast<http::status>(status));
  return reason.empty() || reason == "<unknown-status>" ? std::string{"Status"}
                                                        : std::string{reason};
}

/// Splits `text` into words, each keeping its following spaces.
inline std::vector<std::string> words(const std::string& text) {
  std::vector<std::string> result;
  size_t pos = 0;
  while (pos < text.size()) {
    auto end = text.find(' ', pos);
    end = end == std::string::npos ? text.size()
                                   : text.find_first_not_of(' ', end);
    if (end == std::string::npos)
      end = text.size();
    result.push_back(text.substr(pos, end - pos));
    pos = end;
  }
  return result;
}

/// Builds the answer to one request.
class responder {
public:
  responder(bool anthropic, bool stream, std::string model, fault f,
            std::string last_user)
    : anthropic_(anthropic),
      stream_(stream),
      model_(std::move(model)),
      f_(std::move(f)),
      text_(f_.reply.empty() ? "echo: " + last_user : f_.reply) {
    // nop
  }

  response_plan plan() {
    response_plan result;
    if (f_.close || f_.hangup)
      result.end = response_plan::ending::close;
    switch (f_.what) {
      case fault::kind::hang:
        result.end = response_plan::ending::hang;
        return result;
      case fault::kind::drop:
        result.end = response_plan::ending::close;
        return result;
      case fault::kind::status:
        add_plain(result, f_.status, error_body(f_.status, f_.error_type));
        return result;
      case fault::kind::sse_error:
        if (!stream_) {
          add_plain(result, 500, error_body(500, f_.error_type));
          return result;
        }
        break;
      default: break;
    }
    if (stream_)
      add_stream(result);
    else
      add_answer(result);
    return result;
  }

private:
  std::string header(int status, const char* content_type,
                     std::optional<size_t> length) const {
    std::string result = "HTTP/1.1 " + std::to_string(status) + " "
                         + reason_phrase(status) + "\r\n";
    result += "Server: keel-fault-llm\r\nContent-Type: ";
    result += content_type;
    result += "\r\n";
    if (length)
      result += "Content-Length: " + std::to_string(*length) + "\r\n";
    else
      result += "Transfer-Encoding: chunked\r\n";
    if (!f_.retry_after.empty())
      result += "Retry-After: " + f_.retry_after + "\r\n";
    if (!f_.retry_after_ms.empty())
      result += "retry-after-ms: " + f_.retry_after_ms + "\r\n";
    if (f_.close)
      result += "Connection: close\r\n";
    result += "\r\n";
    return result;
  }

  void add_plain(response_plan& plan, int status,
                 const std::string& body) const {
    plan.pieces.emplace_back(
      f_.drip, header(status, "application/json", body.size()) + body);
  }

  void add_answer(response_plan& plan) const {
    auto body = f_.what == fault::kind::malformed
                  ? std::string{R"({"id":"x","choices":[{"message":{"con)"}
                  : answer_body();
    auto head = header(200, "application/json", body.size());
    if (f_.what == fault::kind::reset || f_.what == fault::kind::truncate) {
      plan.pieces.emplace_back(f_.drip, head + body.substr(0, body.size() / 2));
      plan.end = f_.what == fault::kind::reset ? response_plan::ending::reset
                                               : response_plan::ending::close;
      return;
    }
    plan.pieces.emplace_back(f_.drip, head + body);
  }

  void add_stream(response_plan& plan) const {
    auto events = stream_events();
    plan.pieces.emplace_back(std::chrono::milliseconds{0},
                             header(200, "text/event-stream", std::nullopt));
    auto cut = events.size() / 2;
    for (size_t i = 0; i < events.size(); ++i) {
      if (i == cut && f_.what == fault::kind::reset) {
        plan.end = response_plan::ending::reset;
        return;
      }
      if (i == cut && f_.what == fault::kind::truncate) {
        plan.pieces.emplace_back(std::chrono::milliseconds{0}, "0\r\n\r\n");
        return;
      }
      auto pause = i == 0 ? std::chrono::milliseconds{0} : f_.drip;
      plan.pieces.emplace_back(pause, chunk(events[i]));
    }
    plan.pieces.emplace_back(std::chrono::milliseconds{0}, "0\r\n\r\n");
  }

  // -- bodies -----------------------------------------------------------------

  static constexpr const char* tool_name = "get_weather";
  static constexpr const char* tool_args = R"({"city":"Paris"})";

  std::string answer_body() const {
    json j;
    if (anthropic_) {
      auto content = json::array();
      if (!text_.empty())
        content.push_back({{"type", "text"}, {"text", text_}});
      if (f_.tool)
        content.push_back({{"type", "tool_use"},
                           {"id", "toolu_1"},
                           {"name", tool_name},
                           {"input", json::parse(tool_args)}});
      j = {{"id", "msg_1"},
           {"type", "message"},
           {"role", "assistant"},
           {"model", model_},
           {"content", content},
           {"stop_reason", f_.tool ? "tool_use" : "end_turn"},
           {"stop_sequence", nullptr},
           {"usage", {{"input_tokens", 10}, {"output_tokens", 10}}}};
    } else {
      json msg = {{"role", "assistant"}, {"content", text_}};
      if (f_.tool)
        msg["tool_calls"] = json::array(
          {{{"id", "call_1"},
            {"type", "function"},
            {"function", {{"name", tool_name}, {"arguments", tool_args}}}}});
      j = {{"id", "chatcmpl-1"},
           {"object", "chat.completion"},
           {"created", 0},
           {"model", model_},
           {"choices", json::array({{{"index", 0},
                                     {"message", msg},
                                     {"finish_reason",
                                      f_.tool ? "tool_calls" : "stop"}}})},
           {"usage", {{"prompt_tokens", 10}, {"completion_tokens", 10}}}};
    }
    return j.dump();
  }

  std::string error_body(int status, std::string type) const {
    std::string message;
    if (type.empty()) {
      switch (status) {
        case 400: type = "invalid_request_error"; break;
        case 401:
          type = anthropic_ ? "authentication_error" : "invalid_api_key";
          break;
        case 403: type = "permission_error"; break;
        case 404:
          type = anthropic_ ? "not_found_error" : "model_not_found";
          break;
        case 429:
          type = anthropic_ ? "rate_limit_error" : "rate_limit_exceeded";
          break;
        case 529: type = "overloaded_error"; break;
        default: type = anthropic_ ? "api_error" : "server_error";
      }
    }
    if (type == "insufficient_quota")
      message = "You exceeded your current quota, please check your plan "
                "and billing details.";
    else if (type == "overloaded_error")
      message = "Overloaded";
    else if (type == "rate_limit_error" || type == "rate_limit_exceeded")
      message = "Rate limit exceeded";
    else if (type == "invalid_api_key" || type == "authentication_error")
      message = "Invalid API key";
    else if (type == "model_not_found" || type == "not_found_error")
      message = "The model '" + model_ + "' does not exist";
    else
      message = "Simulated HTTP " + std::to_string(status);
    if (!f_.error_message.empty())
      message = f_.error_message;
    if (anthropic_)
      return json{{"type", "error"},
                  {"error", {{"type", type}, {"message", message}}}}
        .dump();
    return json{{"error",
                 {{"message", message},
                  {"type", type},
                  {"param", nullptr},
                  {"code", type}}}}
      .dump();
  }

  static std::string sse(const char* event, const json& data) {
    std::string result;
    if (event != nullptr) {
      result += "event: ";
      result += event;
      result += '\n';
    }
    result += "data: " + data.dump() + "\n\n";
    return result;
  }

  /// The events of the streamed answer, each one SSE event.
  std::vector<std::string> stream_events() const {
    std::vector<std::string> result;
    if (anthropic_) {
      add_anthropic_text_events(result);
      if (f_.tool)
        add_anthropic_tool_events(result);
      result.push_back(sse(
        "message_delta", {{"type", "message_delta"},
                          {"delta",
                           {{"stop_reason", f_.tool ? "tool_use" : "end_turn"},
                            {"stop_sequence", nullptr}}},
                          {"usage", {{"output_tokens", 10}}}}));
      result.push_back(sse("message_stop", {{"type", "message_stop"}}));
      return result;
    }
    add_openai_text_events(result);
    if (f_.tool)
      add_openai_tool_events(result);
    result.push_back(sse(
      nullptr, openai_chunk(json::object(), f_.tool ? "tool_calls" : "stop")));
    result.push_back("data: [DONE]\n\n");
    return result;
  }

  /// The tool call's arguments in three pieces: clients must join them.
  static std::vector<std::string> tool_arg_pieces() {
    return {R"({"ci)", R"(ty":)", R"("Paris"})"};
  }

  /// The error type of an `sse_error` event.
  std::string stream_error_type() const {
    return f_.error_type.empty() ? std::string{"overloaded_error"}
                                 : f_.error_type;
  }

  /// Anthropic: the message's start and its text block, with a malformed or
  /// error event after the first word if the fault says so.
  void add_anthropic_text_events(std::vector<std::string>& result) const {
    auto pieces = words(text_);
    result.push_back(
      sse("message_start",
          {{"type", "message_start"},
           {"message",
            {{"id", "msg_1"},
             {"type", "message"},
             {"role", "assistant"},
             {"model", model_},
             {"content", json::array()},
             {"stop_reason", nullptr},
             {"usage", {{"input_tokens", 10}, {"output_tokens", 1}}}}}}));
    result.push_back(
      sse("content_block_start",
          {{"type", "content_block_start"},
           {"index", 0},
           {"content_block", {{"type", "text"}, {"text", ""}}}}));
    result.push_back(sse("ping", {{"type", "ping"}}));
    for (size_t i = 0; i < pieces.size(); ++i) {
      if (i == 1 && f_.what == fault::kind::malformed)
        result.push_back("event: content_block_delta\ndata: {\"type\":\n\n");
      if (i == 1 && f_.what == fault::kind::sse_error)
        result.push_back(sse("error", {{"type", "error"},
                                       {"error",
                                        {{"type", stream_error_type()},
                                         {"message", "Overloaded"}}}}));
      result.push_back(
        sse("content_block_delta",
            {{"type", "content_block_delta"},
             {"index", 0},
             {"delta", {{"type", "text_delta"}, {"text", pieces[i]}}}}));
    }
    result.push_back(sse("content_block_stop",
                         {{"type", "content_block_stop"}, {"index", 0}}));
  }

  /// Anthropic: the tool_use block.
  void add_anthropic_tool_events(std::vector<std::string>& result) const {
    result.push_back(
      sse("content_block_start", {{"type", "content_block_start"},
                                  {"index", 1},
                                  {"content_block",
                                   {{"type", "tool_use"},
                                    {"id", "toolu_1"},
                                    {"name", tool_name},
                                    {"input", json::object()}}}}));
    for (auto& part : tool_arg_pieces())
      result.push_back(sse(
        "content_block_delta",
        {{"type", "content_block_delta"},
         {"index", 1},
         {"delta", {{"type", "input_json_delta"}, {"partial_json", part}}}}));
    result.push_back(sse("content_block_stop",
                         {{"type", "content_block_stop"}, {"index", 1}}));
  }

  /// OpenAI: one chat.completion.chunk.
  json openai_chunk(json delta, json finish) const {
    return json{{"id", "chatcmpl-1"},
                {"object", "chat.completion.chunk"},
                {"created", 0},
                {"model", model_},
                {"choices",
                 json::array({{{"index", 0},
                               {"delta", std::move(delta)},
                               {"finish_reason", std::move(finish)}}})}};
  }

  /// OpenAI: the role and the text, with a malformed or error event after
  /// the first word if the fault says so.
  void add_openai_text_events(std::vector<std::string>& result) const {
    auto pieces = words(text_);
    result.push_back(
      sse(nullptr,
          openai_chunk({{"role", "assistant"}, {"content", ""}}, nullptr)));
    // A comment line, as proxies send to keep connections open.
    result.push_back(": keep-alive\n\n");
    for (size_t i = 0; i < pieces.size(); ++i) {
      if (i == 1 && f_.what == fault::kind::malformed)
        result.push_back("data: {\"choices\":[{\"delta\":\n\n");
      if (i == 1 && f_.what == fault::kind::sse_error)
        result.push_back(
          sse(nullptr, {{"error",
                         {{"message", "The server is overloaded"},
                          {"type", stream_error_type()},
                          {"code", nullptr}}}}));
      result.push_back(
        sse(nullptr, openai_chunk({{"content", pieces[i]}}, nullptr)));
    }
  }

  /// OpenAI: the tool call, its arguments in pieces.
  void add_openai_tool_events(std::vector<std::string>& result) const {
    result.push_back(
      sse(nullptr,
          openai_chunk(
            {{"tool_calls",
              json::array(
                {{{"index", 0},
                  {"id", "call_1"},
                  {"type", "function"},
                  {"function", {{"name", tool_name}, {"arguments", ""}}}}})}},
            nullptr)));
    for (auto& part : tool_arg_pieces())
      result.push_back(sse(
        nullptr,
        openai_chunk({{"tool_calls",
                       json::array({{{"index", 0},
                                     {"function", {{"arguments", part}}}}})}},
                     nullptr)));
  }

  bool anthropic_;
  bool stream_;
  std::string model_;
  fault f_;
  std::string text_;
};

/// Finds `[[fault:SPEC]]` in `text`.
inline std::optional<fault> directive_in(const std::string& text) {
  auto start = text.find("[[fault:");
  if (start == std::string::npos)
    return std::nullopt;
  auto end = text.find("]]", start);
  if (end == std::string::npos)
    return std::nullopt;
  return parse_fault(std::string_view{text}.substr(start + 8, end - start - 8));
}

/// The text of the last user message of a request body.
inline std::string last_user_text(const json& body) {
  auto messages = body.find("messages");
  if (messages == body.end() || !messages->is_array())
    return {};
  for (auto i = messages->rbegin(); i != messages->rend(); ++i) {
    if (!i->is_object() || i->value("role", "") != "user")
      continue;
    auto content = i->find("content");
    if (content == i->end())
      return {};
    if (content->is_string())
      return content->get<std::string>();
    std::string result;
    if (content->is_array())
      for (auto& part : *content)
        if (part.is_object() && part.value("type", "") == "text")
          result += part.value("text", "");
    return result;
  }
  return {};
}

/// One connection: reads requests and answers each by its fault.
template <class Stream>
class fault_session
  : public std::enable_shared_from_this<fault_session<Stream>> {
public:
  template <class... Ts>
  fault_session(fault_state& state, Ts&&... xs)
    : state_(state),
      stream_(std::forward<Ts>(xs)...),
      timer_(stream_.get_executor()) {
    // nop
  }

  ~fault_session() {
    if (in_flight_)
      state_.answered();
  }

  void start() {
    if constexpr (std::is_same_v<Stream, tcp::socket>) {
      read();
    } else {
      stream_.async_handshake(
        ssl::stream_base::server,
        [self = this->shared_from_this()](error_code err) {
          if (!err)
            self->read();
        });
    }
  }

private:
  tcp::socket& socket() {
    return beast::get_lowest_layer(stream_);
  }

  void read() {
    parser_.emplace();
    parser_->body_limit(64 * 1024 * 1024);
    http::async_read(stream_, buffer_, *parser_,
                     [self = this->shared_from_this()](error_code err, size_t) {
                       self->on_request(err);
                     });
  }

  void on_request(error_code err) {
    if (err)
      return; // Client gone: the session ends.
    auto req = parser_->release();
    recorded_request rec;
    rec.method = std::string{req.method_string()};
    rec.target = std::string{req.target()};
    for (auto& field : req) {
      auto name = std::string{field.name_string()};
      for (auto& c : name)
        c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      rec.headers[name] = std::string{field.value()};
    }
    rec.body = req.body();
    in_flight_ = true;
    state_.record(std::move(rec));
    auto body = json::parse(req.body(), nullptr, false);
    // The API's path, without the query a base URL may carry (Azure's
    // `api-version`).
    std::string target{req.target().substr(0, req.target().find('?'))};
    auto ends_with = [&](std::string_view suffix) {
      return target.size() >= suffix.size()
             && target.compare(target.size() - suffix.size(), suffix.size(),
                               suffix)
                  == 0;
    };
    response_plan plan;
    if (req.method() != http::verb::post || !body.is_object()
        || !(ends_with("/chat/completions") || ends_with("/messages"))) {
      std::string msg = R"({"error":{"message":"not found"}})";
      plan.pieces.emplace_back(
        std::chrono::milliseconds{0},
        "HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\n"
        "Content-Length: "
          + std::to_string(msg.size()) + "\r\n\r\n" + msg);
    } else {
      auto user = last_user_text(body);
      auto f = state_.next(directive_in(user));
      auto stream = body.value("stream", false);
      responder r{ends_with("/messages"), stream, body.value("model", ""),
                  std::move(f), std::move(user)};
      plan = r.plan();
    }
    plan_ = std::move(plan);
    next_piece_ = 0;
    write_next();
  }

  void write_next() {
    if (next_piece_ == plan_.pieces.size()) {
      finish_answer();
      return;
    }
    auto pause = plan_.pieces[next_piece_].first;
    if (pause.count() > 0) {
      timer_.expires_after(pause);
      timer_.async_wait([self = this->shared_from_this()](error_code err) {
        if (!err)
          self->write_piece();
      });
      return;
    }
    write_piece();
  }

  void write_piece() {
    auto& piece = plan_.pieces[next_piece_].second;
    net::async_write(stream_, net::buffer(piece),
                     [self = this->shared_from_this()](error_code err, size_t) {
                       if (err)
                         return;
                       ++self->next_piece_;
                       self->write_next();
                     });
  }

  void finish_answer() {
    error_code ignored;
    switch (plan_.end) {
      case response_plan::ending::next:
        answered();
        read();
        return;
      case response_plan::ending::close:
        answered();
        socket().shutdown(tcp::socket::shutdown_send, ignored);
        socket().close(ignored);
        return;
      case response_plan::ending::reset:
        answered();
        socket().set_option(net::socket_base::linger(true, 0), ignored);
        socket().close(ignored);
        return;
      case response_plan::ending::hang:
        // Wait for the client to give up; the session ends with the read.
        socket().async_wait(tcp::socket::wait_read,
                            [self = this->shared_from_this()](error_code) {
                              // Nothing: dropping the session closes it.
                            });
        return;
    }
  }

  void answered() {
    if (in_flight_) {
      in_flight_ = false;
      state_.answered();
    }
  }

  fault_state& state_;
  Stream stream_;
  net::steady_timer timer_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  response_plan plan_;
  size_t next_piece_ = 0;
  bool in_flight_ = false;
};

/// A TCP acceptor on 127.0.0.1 serving on a thread of its own: each
/// accepted socket goes to `on_socket`, on that thread. Destroying it stops
/// the thread; connections still open are cut. Shared by the test servers.
class loopback_listener {
public:
  using socket_handler = std::function<void(tcp::socket)>;

  /// Binds 127.0.0.1:`port` (0: any free port); throws std::runtime_error
  /// naming `who` if it cannot.
  loopback_listener(const std::string& who, uint16_t port,
                    socket_handler on_socket)
    : acceptor_(ioc_), on_socket_(std::move(on_socket)) {
    error_code err;
    tcp::endpoint ep{net::ip::make_address("127.0.0.1"), port};
    acceptor_.open(ep.protocol(), err);
    if (!err)
      acceptor_.set_option(net::socket_base::reuse_address(true), err);
    if (!err)
      acceptor_.bind(ep, err);
    if (!err)
      acceptor_.listen(net::socket_base::max_listen_connections, err);
    if (err)
      throw std::runtime_error(who + ": cannot listen on 127.0.0.1:"
                               + std::to_string(port) + ": " + err.message());
    port_ = acceptor_.local_endpoint().port();
    accept();
    thread_ = std::thread{[this] { ioc_.run(); }};
  }

  ~loopback_listener() {
    ioc_.stop();
    thread_.join();
  }

  loopback_listener(const loopback_listener&) = delete;
  loopback_listener& operator=(const loopback_listener&) = delete;

  uint16_t port() const {
    return port_;
  }

private:
  void accept() {
    acceptor_.async_accept([this](error_code err, tcp::socket socket) {
      if (err == net::error::operation_aborted)
        return;
      if (!err)
        on_socket_(std::move(socket));
      accept();
    });
  }

  net::io_context ioc_;
  tcp::acceptor acceptor_;
  socket_handler on_socket_;
  uint16_t port_ = 0;
  std::thread thread_;
};

} // namespace detail

/// How a `fault_llm_server` starts.
struct fault_server_options {
  /// What requests without a directive get once the script is used up.
  fault fallback;
  /// Consumed one per request (without a directive), before `fallback`.
  std::vector<fault> script;
  /// Serve TLS with this identity instead of plain HTTP.
  std::optional<tls_identity> tls;
  /// Port to listen on (0: any free one).
  uint16_t port = 0;
};

/// The server (see the top of this file). Thread-safe.
class fault_llm_server {
public:
  using options = fault_server_options;

  /// Binds 127.0.0.1 and starts serving; throws std::runtime_error if it
  /// cannot bind.
  explicit fault_llm_server(options opts = {}) : tls_(opts.tls.has_value()) {
    state_.fallback = std::move(opts.fallback);
    state_.script.assign(opts.script.begin(), opts.script.end());
    if (opts.tls) {
      tls_ctx_.emplace(detail::ssl::context::tls_server);
      tls_ctx_->use_certificate_chain(detail::net::buffer(opts.tls->cert_pem));
      tls_ctx_->use_private_key(detail::net::buffer(opts.tls->key_pem),
                                detail::ssl::context::pem);
    }
    listener_.emplace("fault_llm_server", opts.port,
                      [this](detail::tcp::socket socket) {
                        serve(std::move(socket));
                      });
  }

  fault_llm_server(const fault_llm_server&) = delete;
  fault_llm_server& operator=(const fault_llm_server&) = delete;

  uint16_t port() const {
    return listener_->port();
  }

  /// "http://127.0.0.1:PORT" (or https).
  std::string base_url() const {
    return std::string{tls_ ? "https" : "http"}
           + "://127.0.0.1:" + std::to_string(port());
  }

  /// Appends to the script.
  void push(fault f) {
    std::lock_guard<std::mutex> guard{state_.mtx};
    state_.script.push_back(std::move(f));
  }

  void set_default(fault f) {
    std::lock_guard<std::mutex> guard{state_.mtx};
    state_.fallback = std::move(f);
  }

  /// Requests received so far.
  size_t requests() const {
    std::lock_guard<std::mutex> guard{state_.mtx};
    return state_.recorded.size();
  }

  /// Connections accepted so far.
  size_t connections() const {
    std::lock_guard<std::mutex> guard{state_.mtx};
    return state_.connections;
  }

  /// Requests received and not yet completely answered.
  size_t in_flight() const {
    std::lock_guard<std::mutex> guard{state_.mtx};
    return state_.in_flight;
  }

  /// Most requests in flight at once so far.
  size_t max_in_flight() const {
    std::lock_guard<std::mutex> guard{state_.mtx};
    return state_.max_in_flight;
  }

  std::vector<recorded_request> recorded() const {
    std::lock_guard<std::mutex> guard{state_.mtx};
    return state_.recorded;
  }

  /// The last request (empty if none).
  recorded_request last_request() const {
    std::lock_guard<std::mutex> guard{state_.mtx};
    return state_.recorded.empty() ? recorded_request{}
                                   : state_.recorded.back();
  }

  /// Waits until at least `n` requests arrived; false on timeout.
  bool wait_requests(size_t n, std::chrono::milliseconds timeout
                               = std::chrono::seconds{10}) {
    std::unique_lock<std::mutex> guard{state_.mtx};
    return state_.cv.wait_for(guard, timeout,
                              [&] { return state_.recorded.size() >= n; });
  }

  /// Waits until exactly `n` requests are in flight; false on timeout.
  bool wait_in_flight(size_t n, std::chrono::milliseconds timeout
                                = std::chrono::seconds{10}) {
    std::unique_lock<std::mutex> guard{state_.mtx};
    return state_.cv.wait_for(guard, timeout,
                              [&] { return state_.in_flight == n; });
  }

private:
  void serve(detail::tcp::socket socket) {
    state_.accepted();
    if (tls_ctx_)
      std::make_shared<
        detail::fault_session<detail::ssl::stream<detail::tcp::socket>>>(
        state_, std::move(socket), *tls_ctx_)
        ->start();
    else
      std::make_shared<detail::fault_session<detail::tcp::socket>>(
        state_, std::move(socket))
        ->start();
  }

  // Declared first: destroyed after the sessions that use it.
  detail::fault_state state_;
  std::optional<detail::ssl::context> tls_ctx_;
  bool tls_;
  // Last: stops serving before the rest goes.
  std::optional<detail::loopback_listener> listener_;
};

/// A local port nothing listens on (free a moment ago), for "connection
/// refused".
inline uint16_t closed_port() {
  return free_port();
}

} // namespace keel::fault_llm
