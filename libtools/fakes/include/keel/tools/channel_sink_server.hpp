#pragma once

// An in-process HTTP server that plays the receiver of Keel's outbound
// delivery channels, with scripted faults, for tests. Like
// fault_llm_server.hpp (whose helpers it uses) it listens on 127.0.0.1 (port
// 0 by default) on its own thread and keeps connections alive; plain HTTP
// only. It speaks, by the request target:
//   telegram  `POST .../bot<TOKEN>/sendMessage` with a JSON body
//             {"chat_id":..., "text":..., "parse_mode":...}; answers as the
//             Bot API does: {"ok":true,"result":{"message_id":N,...}}
//             (message ids count from 1 across all chats) or
//             {"ok":false,"error_code":N,"description":...}
//   webhook   any other `POST`: a JSON body with the headers
//             `Idempotency-Key`, `X-Keel-Event`, `X-Keel-Timestamp` and, with
//             `options::webhook_secret`, `X-Keel-Signature: sha256=HEX`
//             (HMAC-SHA256 of `timestamp + "." + body`); answers {"ok":true}
//             or {"error":...}
// Requests it refuses without consulting the script (the script is not
// consumed): a Telegram body without JSON, chat_id or text (400 "message
// text is empty" / "chat not found"), a webhook body that is not JSON (400),
// a webhook request with a missing or wrong signature while a secret is set
// (401 "bad signature"), and any method but POST (405).
//
// Every other request takes the next fault of the script (`options::script`,
// `push`), else the default (`options::fallback`, `set_default`). A fault is
// a SPEC, a `;`-separated list of items (`parse_fault`; a `,`-separated list
// of SPECs is a sequence, `parse_fault_sequence`):
//   ok                 answer normally (the default)
//   status=N or N      answer HTTP N (a 2xx answers normally with N:
//                      webhooks only; Telegram always answers 200)
//   retry_after=S      with 429: Telegram's parameters.retry_after; webhook:
//                      a `Retry-After: S` header on any error answer
//   parse_error        Telegram: 400 "can't parse entities" if the request
//                      has a parse_mode, else answer normally (consumed
//                      either way); webhook: 400
//   delay=DURATION     wait DURATION (e.g. 300ms, 12s) before the rest
//   hang               read the request and never answer
//   reset              read the request, then reset the connection (RST)
//   drop               read the request, then close without answering
// Items combine: `429;retry_after=2`, `delay=50ms;500`, `delay=1s;drop`.

#include <algorithm>
#include <cctype>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <ctime>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "keel/tools/fault_llm_server.hpp"

namespace keel::channel_sink {

/// What the server does with one request (see the top of this file).
struct fault {
  enum class kind { ok, status, parse_error, hang, reset, drop };
  kind what = kind::ok;
  /// HTTP status for `status`; a 2xx one for a webhook's `ok`.
  int status = 200;
  /// Seconds for Telegram's parameters.retry_after (429) or the webhook's
  /// Retry-After header (error answers); nullopt: not sent.
  std::optional<int> retry_after;
  /// Pause before answering (or hanging, resetting, dropping).
  std::chrono::milliseconds delay{0};
};

/// One request as the server saw it.
struct received {
  /// "telegram" or "webhook".
  std::string protocol;
  std::string method;
  std::string target;
  /// Header fields in arrival order, names in lower case.
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  /// `Idempotency-Key` and `X-Keel-Event`; empty if absent.
  std::string idempotency_key;
  std::string event;
  /// Whether `X-Keel-Signature` matched (true when no secret is set).
  bool signature_ok = true;
  /// Telegram: the body's chat_id (a number in decimal), text and
  /// parse_mode; webhook: `text` from the body's "text" if a string.
  std::string chat_id;
  std::string text;
  std::string parse_mode;
  /// The HTTP status answered, set as the answer starts out (a client that
  /// has the answer finds it set; one gone during a delay does not undo
  /// it); 0 while unanswered, and for hang, reset and drop.
  int status = 0;
  /// When the request had been read.
  std::chrono::steady_clock::time_point at;

  /// The value of header `name` (lower case); empty if absent.
  std::string header(std::string_view name) const {
    for (auto& [key, value] : headers)
      if (key == name)
        return value;
    return {};
  }
};

/// The `X-Keel-Signature` value for `body` sent at `timestamp` under
/// `secret`: "sha256=" + lowercase hex HMAC-SHA256 of `timestamp.body`.
inline std::string sign(std::string_view secret, std::string_view timestamp,
                        std::string_view body) {
  std::string data{timestamp};
  data += '.';
  data.append(body.data(), body.size());
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  static const unsigned char empty_key = 0;
  auto* key = secret.empty()
                ? &empty_key
                : reinterpret_cast<const unsigned char*>(secret.data());
  if (HMAC(EVP_sha256(), key, static_cast<int>(secret.size()),
           reinterpret_cast<const unsigned char*>(data.data()), data.size(),
           mac, &len)
      == nullptr)
    throw std::runtime_error("channel_sink::sign: HMAC failed");
  static constexpr char digits[] = "0123456789abcdef";
  std::string result = "sha256=";
  for (unsigned int i = 0; i < len; ++i) {
    result += digits[mac[i] >> 4];
    result += digits[mac[i] & 0x0F];
  }
  return result;
}

namespace detail {

namespace net = fault_llm::detail::net;
namespace beast = fault_llm::detail::beast;
namespace http = fault_llm::detail::http;
using fault_llm::detail::error_code;
using fault_llm::detail::json;
using fault_llm::detail::loopback_listener;
using fault_llm::detail::tcp;

// The items of a SPEC: each applies its value to a fault and returns why it
// cannot, or nothing.

using fault_item = std::string (*)(std::string_view value, fault& f);

template <fault::kind Kind>
std::string set_fault_kind(std::string_view, fault& f) {
  f.what = Kind;
  if (Kind == fault::kind::ok)
    f.status = 200;
  else if (Kind == fault::kind::parse_error)
    f.status = 400;
  return {};
}

using fault_llm::detail::set_fault_status;
using fault_llm::detail::set_fault_status_item;

inline std::string set_fault_retry_after(std::string_view value, fault& f) {
  int n = 0;
  if (!fault_llm::detail::parse_count(value, n))
    return "retry_after needs a number of seconds";
  f.retry_after = n;
  return {};
}

/// `delay=DURATION`: a count of ms or s (fault_llm's `drip` syntax).
inline std::string set_fault_delay(std::string_view value, fault& f) {
  fault_llm::fault parsed;
  if (!fault_llm::detail::set_fault_drip(value, parsed).empty())
    return "delay needs a duration like 300ms or 12s";
  f.delay = parsed.drip;
  return {};
}

/// The items of a SPEC by name (a bare status number aside).
inline const std::map<std::string_view, fault_item>& fault_items() {
  static const std::map<std::string_view, fault_item> items{
    {"ok", set_fault_kind<fault::kind::ok>},
    {"status", set_fault_status_item<fault>},
    {"retry_after", set_fault_retry_after},
    {"parse_error", set_fault_kind<fault::kind::parse_error>},
    {"delay", set_fault_delay},
    {"hang", set_fault_kind<fault::kind::hang>},
    {"reset", set_fault_kind<fault::kind::reset>},
    {"drop", set_fault_kind<fault::kind::drop>},
  };
  return items;
}

/// Applies the item `key[=value]` to `f`; returns why it cannot, or nothing.
inline std::string apply_fault_item(std::string_view key,
                                    std::string_view value, fault& f) {
  if (auto i = fault_items().find(key); i != fault_items().end())
    return i->second(value, f);
  if (int n = 0; fault_llm::detail::parse_count(key, n))
    return set_fault_status(n, f);
  return "unknown item '" + std::string{key} + "'";
}

} // namespace detail

/// Parses a SPEC (see the top of this file); on failure returns nullopt and
/// says why in `error`.
inline std::optional<fault> parse_fault(std::string_view spec,
                                        std::string* error = nullptr) {
  return fault_llm::detail::parse_spec<fault>(spec, error,
                                              detail::apply_fault_item);
}

/// Parses a `,`-separated list of SPECs, e.g. "500,429;retry_after=1,ok".
inline std::optional<std::vector<fault>>
parse_fault_sequence(std::string_view list, std::string* error = nullptr) {
  return fault_llm::detail::parse_spec_list<fault>(
    list, error, [](std::string_view spec, std::string* why) {
      return parse_fault(spec, why);
    });
}

namespace detail {

/// What the sessions share with the server object. Thread-safe; `secret`
/// does not change after construction.
struct sink_state {
  mutable std::mutex mtx;
  mutable std::condition_variable cv;
  std::deque<fault> script;
  fault fallback;
  std::string secret;
  std::vector<received> recorded;
  int64_t next_message_id = 1;

  /// The next fault of the script, else the default.
  fault next() {
    std::lock_guard<std::mutex> guard{mtx};
    return fault_llm::detail::take_scripted(script, fallback);
  }

  /// Records a request; returns its index for `answered`.
  size_t record(received rec) {
    std::lock_guard<std::mutex> guard{mtx};
    recorded.push_back(std::move(rec));
    cv.notify_all();
    return recorded.size() - 1;
  }

  void answered(size_t index, int status) {
    std::lock_guard<std::mutex> guard{mtx};
    recorded[index].status = status;
    cv.notify_all();
  }

  int64_t take_message_id() {
    std::lock_guard<std::mutex> guard{mtx};
    return next_message_id++;
  }

  /// The 2xx-answered requests, the first (in arrival order) per
  /// idempotency key only; requests without a key all count. Caller holds
  /// `mtx`.
  std::vector<const received*> delivered_locked() const {
    std::vector<const received*> result;
    std::set<std::string> seen;
    for (auto& rec : recorded)
      if (rec.status / 100 == 2
          && (rec.idempotency_key.empty()
              || seen.insert(rec.idempotency_key).second))
        result.push_back(&rec);
    return result;
  }

  /// The 2xx-answered requests. Caller holds `mtx`.
  size_t answered_2xx_locked() const {
    return static_cast<size_t>(
      std::count_if(recorded.begin(), recorded.end(),
                    [](const received& rec) { return rec.status / 100 == 2; }));
  }
};

/// How the server answers one request.
struct answer {
  enum class ending { reply, hang, reset, drop };
  ending end = ending::reply;
  std::chrono::milliseconds delay{0};
  int status = 200;
  /// JSON; empty: no body.
  std::string body;
  /// A `Retry-After` header; nullopt: none.
  std::optional<int> retry_after;
};

/// Whether `target` is `.../bot<TOKEN>/sendMessage` (query aside).
inline bool is_telegram_target(std::string_view target) {
  target = target.substr(0, target.find('?'));
  constexpr std::string_view method = "/sendMessage";
  if (target.size() <= method.size()
      || target.substr(target.size() - method.size()) != method)
    return false;
  target.remove_suffix(method.size());
  auto segment = target.substr(target.rfind('/') + 1);
  return segment.size() > 3 && segment.substr(0, 3) == "bot";
}

/// The JSON value as a string: strings as they are, anything else dumped.
inline std::string as_text(const json& value) {
  return value.is_string() ? value.get<std::string>() : value.dump();
}

/// Reads what the server records of `req` (its body parsed in `body`).
inline received read_received(const http::request<http::string_body>& req,
                              const json& body, const std::string& secret) {
  received rec;
  rec.at = std::chrono::steady_clock::now();
  rec.method = std::string{req.method_string()};
  rec.target = std::string{req.target()};
  rec.protocol = req.method() == http::verb::post
                     && is_telegram_target(rec.target)
                   ? "telegram"
                   : "webhook";
  for (auto& field : req) {
    auto name = std::string{field.name_string()};
    for (auto& c : name)
      c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    rec.headers.emplace_back(std::move(name), std::string{field.value()});
  }
  rec.body = req.body();
  rec.idempotency_key = rec.header("idempotency-key");
  rec.event = rec.header("x-keel-event");
  auto string_field = [&](const char* name) {
    auto i = body.find(name);
    return i != body.end() && i->is_string() ? i->get<std::string>()
                                             : std::string{};
  };
  if (body.is_object()) {
    rec.text = string_field("text");
    if (auto i = body.find("chat_id");
        rec.protocol == "telegram" && i != body.end())
      rec.chat_id = as_text(*i);
    if (rec.protocol == "telegram")
      rec.parse_mode = string_field("parse_mode");
  }
  if (rec.protocol == "webhook" && !secret.empty()) {
    auto ts = rec.header("x-keel-timestamp");
    auto got = rec.header("x-keel-signature");
    auto want = sign(secret, ts, rec.body);
    rec.signature_ok = !ts.empty() && got.size() == want.size()
                       && CRYPTO_memcmp(got.data(), want.data(), got.size())
                            == 0;
  }
  return rec;
}

/// The answer of `f` when it ends the exchange without one (hang, reset,
/// drop); nullopt for faults that answer.
inline std::optional<answer> silent_answer(const fault& f) {
  answer result;
  result.delay = f.delay;
  switch (f.what) {
    case fault::kind::hang: result.end = answer::ending::hang; break;
    case fault::kind::reset: result.end = answer::ending::reset; break;
    case fault::kind::drop: result.end = answer::ending::drop; break;
    default: return std::nullopt;
  }
  return result;
}

/// A Bot API error: {"ok":false,"error_code":N,"description":...}, with
/// parameters.retry_after for a 429 that has one.
inline answer telegram_error(int status, std::string description,
                             std::optional<int> retry_after = std::nullopt) {
  json body{{"ok", false},
            {"error_code", status},
            {"description", std::move(description)}};
  if (status == 429 && retry_after)
    body["parameters"] = {{"retry_after", *retry_after}};
  answer result;
  result.status = status;
  result.body = body.dump();
  return result;
}

/// The Bot API's description of an error status.
inline std::string telegram_description(int status,
                                        std::optional<int> retry_after) {
  switch (status) {
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden: bot was blocked by the user";
    case 404: return "Not Found";
    case 429:
      return retry_after ? "Too Many Requests: retry after "
                             + std::to_string(*retry_after)
                         : "Too Many Requests";
    case 500: return "Internal Server Error";
    default: return "Error";
  }
}

/// Answers a Telegram sendMessage (body parsed in `body`).
inline answer telegram_answer(sink_state& state, const received& rec,
                              const json& body) {
  if (!body.is_object() || !body.contains("chat_id"))
    return telegram_error(400, body.is_object()
                                 ? "Bad Request: chat not found"
                                 : "Bad Request: message text is empty");
  if (!body["chat_id"].is_string() && !body["chat_id"].is_number())
    return telegram_error(400, "Bad Request: chat not found");
  if (rec.text.empty())
    return telegram_error(400, "Bad Request: message text is empty");
  auto f = state.next();
  if (auto silent = silent_answer(f))
    return *silent;
  answer result;
  if (f.what == fault::kind::status)
    result = telegram_error(
      f.status, telegram_description(f.status, f.retry_after), f.retry_after);
  else if (f.what == fault::kind::parse_error && !rec.parse_mode.empty())
    result = telegram_error(400, "Bad Request: can't parse entities: Can't "
                                 "find end of the entity starting at byte "
                                 "offset 0");
  else
    result.body = json{{"ok", true},
                       {"result",
                        {{"message_id", state.take_message_id()},
                         {"chat", {{"id", body["chat_id"]}}},
                         {"date", static_cast<int64_t>(std::time(nullptr))},
                         {"text", rec.text}}}}
                    .dump();
  result.delay = f.delay;
  return result;
}

/// A webhook error answer: {"error":TEXT}.
inline answer webhook_error(int status, const std::string& text,
                            std::optional<int> retry_after = std::nullopt) {
  answer result;
  result.status = status;
  result.body = json{{"error", text}}.dump();
  result.retry_after = retry_after;
  return result;
}

/// Answers a webhook delivery (body parsed in `body`).
inline answer webhook_answer(sink_state& state, const received& rec,
                             const json& body) {
  if (rec.method != "POST")
    return webhook_error(405, "method not allowed");
  if (!rec.signature_ok)
    return webhook_error(401, "bad signature");
  if (body.is_discarded())
    return webhook_error(400, "body is not JSON");
  auto f = state.next();
  if (auto silent = silent_answer(f))
    return *silent;
  answer result;
  if (f.what == fault::kind::status)
    result = webhook_error(f.status, fault_llm::detail::reason_phrase(f.status),
                           f.retry_after);
  else if (f.what == fault::kind::parse_error)
    result = webhook_error(400, "Bad Request", f.retry_after);
  else {
    result.status = f.status;
    if (f.status != 204) // A 204 has no body.
      result.body = R"({"ok":true})";
  }
  result.delay = f.delay;
  return result;
}

/// One connection: reads requests and answers each by its fault, keeping
/// the connection while the client does.
class sink_session : public std::enable_shared_from_this<sink_session> {
public:
  sink_session(sink_state& state, tcp::socket socket)
    : state_(state),
      socket_(std::move(socket)),
      timer_(socket_.get_executor()) {
    // nop
  }

  void start() {
    read();
  }

private:
  void read() {
    parser_.emplace();
    parser_->body_limit(16 * 1024 * 1024);
    http::async_read(socket_, buffer_, *parser_,
                     [self = shared_from_this()](error_code err, size_t) {
                       if (!err)
                         self->on_request();
                     });
  }

  void on_request() {
    auto req = parser_->release();
    keep_alive_ = req.keep_alive();
    auto body = json::parse(req.body(), nullptr, false);
    auto rec = read_received(req, body, state_.secret);
    index_ = state_.record(rec);
    answer_ = rec.protocol == "telegram" ? telegram_answer(state_, rec, body)
                                         : webhook_answer(state_, rec, body);
    if (answer_.delay.count() == 0) {
      act();
      return;
    }
    timer_.expires_after(answer_.delay);
    timer_.async_wait([self = shared_from_this()](error_code err) {
      if (!err)
        self->act();
    });
  }

  /// Answers, or ends the exchange without an answer.
  void act() {
    error_code ignored;
    switch (answer_.end) {
      case answer::ending::reply: reply(); return;
      case answer::ending::hang:
        // Wait for the client to go; the session (and socket) ends with the
        // wait, or with the server.
        socket_.async_wait(tcp::socket::wait_read,
                           [self = shared_from_this()](error_code) {});
        return;
      case answer::ending::reset:
        socket_.set_option(net::socket_base::linger(true, 0), ignored);
        socket_.close(ignored);
        return;
      case answer::ending::drop:
        socket_.shutdown(tcp::socket::shutdown_send, ignored);
        socket_.close(ignored);
        return;
    }
  }

  /// Writes the answer, marking the request answered first (so a client
  /// that has the answer finds it counted); then reads the next request or
  /// closes.
  void reply() {
    response_ = {};
    response_.version(11);
    response_.result(static_cast<unsigned>(answer_.status));
    response_.reason(fault_llm::detail::reason_phrase(answer_.status));
    response_.set(http::field::server, "keel-channel-sink");
    if (!answer_.body.empty())
      response_.set(http::field::content_type, "application/json");
    if (answer_.retry_after)
      response_.set(http::field::retry_after,
                    std::to_string(*answer_.retry_after));
    response_.keep_alive(keep_alive_);
    response_.body() = answer_.body;
    response_.prepare_payload();
    state_.answered(index_, answer_.status);
    http::async_write(
      socket_, response_, [self = shared_from_this()](error_code err, size_t) {
        if (err)
          return;
        if (self->keep_alive_) {
          self->read();
          return;
        }
        error_code ignored;
        self->socket_.shutdown(tcp::socket::shutdown_send, ignored);
        self->socket_.close(ignored);
      });
  }

  sink_state& state_;
  tcp::socket socket_;
  net::steady_timer timer_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  http::response<http::string_body> response_;
  answer answer_;
  size_t index_ = 0;
  bool keep_alive_ = true;
};

} // namespace detail

/// How a `channel_sink_server` starts (its `options`; a class of its own so
/// that it can be a default argument of the server's constructor).
struct sink_options {
  /// Port to listen on (0: any free one).
  uint16_t port = 0;
  /// Consumed one per request (see the top of this file), before
  /// `fallback`.
  std::vector<fault> script;
  /// What requests get once the script is used up.
  fault fallback;
  /// Non-empty: webhook requests must carry a valid `X-Keel-Signature`.
  std::string webhook_secret;
};

/// The server (see the top of this file). Thread-safe.
class channel_sink_server {
public:
  using options = sink_options;

  /// Binds 127.0.0.1 and starts serving; throws std::runtime_error if it
  /// cannot bind.
  explicit channel_sink_server(options opts = {}) {
    state_.fallback = std::move(opts.fallback);
    state_.script.assign(opts.script.begin(), opts.script.end());
    state_.secret = std::move(opts.webhook_secret);
    listener_.emplace(
      "channel_sink_server", opts.port, [this](detail::tcp::socket socket) {
        std::make_shared<detail::sink_session>(state_, std::move(socket))
          ->start();
      });
  }

  channel_sink_server(const channel_sink_server&) = delete;
  channel_sink_server& operator=(const channel_sink_server&) = delete;

  uint16_t port() const {
    return listener_->port();
  }

  /// "http://127.0.0.1:PORT".
  std::string base_url() const {
    return "http://127.0.0.1:" + std::to_string(port());
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

  /// Every request so far, in arrival order.
  std::vector<received> requests() const {
    std::lock_guard<std::mutex> guard{state_.mtx};
    return state_.recorded;
  }

  /// The requests answered 2xx, in arrival order, only the first per
  /// idempotency key (requests without a key all count).
  std::vector<received> delivered() const {
    std::lock_guard<std::mutex> guard{state_.mtx};
    std::vector<received> result;
    for (auto* rec : state_.delivered_locked())
      result.push_back(*rec);
    return result;
  }

  /// The requests answered 2xx whose idempotency key an earlier request
  /// answered 2xx had.
  size_t duplicates() const {
    std::lock_guard<std::mutex> guard{state_.mtx};
    return state_.answered_2xx_locked() - state_.delivered_locked().size();
  }

  /// Waits until delivered().size() >= n; false on timeout.
  bool wait_for_delivered(size_t n, std::chrono::milliseconds timeout) const {
    std::unique_lock<std::mutex> guard{state_.mtx};
    return state_.cv.wait_for(guard, timeout, [&] {
      return state_.delivered_locked().size() >= n;
    });
  }

  /// Waits until requests().size() >= n; false on timeout.
  bool wait_for_requests(size_t n, std::chrono::milliseconds timeout) const {
    std::unique_lock<std::mutex> guard{state_.mtx};
    return state_.cv.wait_for(guard, timeout,
                              [&] { return state_.recorded.size() >= n; });
  }

private:
  // Declared first: destroyed after the sessions that use it.
  detail::sink_state state_;
  // Last: stops serving (cutting open connections) before the rest goes.
  std::optional<detail::loopback_listener> listener_;
};

} // namespace keel::channel_sink
