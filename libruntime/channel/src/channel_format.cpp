#include "keel/channel_format.hpp"

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <nlohmann/json.hpp>

namespace keel {

namespace {

using json = nlohmann::json;
using std::chrono::milliseconds;

std::string to_hex(const unsigned char* data, size_t size) {
  static constexpr const char* digits = "0123456789abcdef";
  std::string result;
  result.reserve(size * 2);
  for (size_t i = 0; i < size; ++i) {
    result += digits[data[i] >> 4];
    result += digits[data[i] & 0x0F];
  }
  return result;
}

json webhook_event(const outbound_message& msg) {
  if (msg.event == "notice")
    return json{{"event", msg.event},
                {"id", msg.id},
                {"kind", msg.kind},
                {"severity", msg.severity},
                {"subject", msg.subject},
                {"text", msg.text},
                {"at", msg.at}};
  return json{{"event", msg.event},
              {"id", msg.id},
              {"thread", msg.thread},
              {"seq", msg.seq},
              {"reply_to", msg.reply_to},
              {"text", msg.text},
              {"at", msg.at}};
}

channel_send webhook_send(const channel_config& cfg,
                          const outbound_message& msg, epoch_ms now) {
  auto event = webhook_event(msg);
  channel_send result;
  result.body = event.dump(-1, ' ', false, json::error_handler_t::replace);
  auto timestamp = std::to_string(now / 1000);
  result.headers = {{"Idempotency-Key", msg.id},
                    {"X-Keel-Event", msg.event},
                    {"X-Keel-Timestamp", timestamp}};
  if (!cfg.secret.empty())
    result.headers.emplace_back(
      "X-Keel-Signature",
      "sha256=" + hmac_sha256_hex(cfg.secret, timestamp + "." + result.body));
  return result;
}

channel_send telegram_send(const channel_config& cfg,
                           const outbound_message& msg, bool plain_text) {
  json body{{"chat_id", cfg.chat_id}};
  if (msg.event == "notice") {
    // Our own text: names such as all_models_failed are not markup.
    body["text"] = "[" + msg.severity + "] " + msg.kind + ": " + msg.subject
                   + "\n" + msg.text;
  } else if (plain_text || cfg.parse_mode.empty()) {
    body["text"] = plain_text ? strip_markdown(msg.text) : msg.text;
  } else {
    body["text"] = msg.text;
    body["parse_mode"] = cfg.parse_mode;
  }
  channel_send result;
  result.body = body.dump(-1, ' ', false, json::error_handler_t::replace);
  result.headers = {{"Idempotency-Key", msg.id}};
  return result;
}

/// Telegram's answer body, or an empty object.
json telegram_body(const std::string& body) {
  auto j = json::parse(body, nullptr, false);
  return j.is_object() ? j : json::object();
}

send_result failed(send_failure_kind kind, std::string description) {
  send_result result;
  result.failure.kind = kind;
  result.description = std::move(description);
  return result;
}

/// Reads a 2xx answer.
send_result read_delivered(channel_kind kind, const std::string& body) {
  if (kind != channel_kind::telegram) {
    send_result result;
    result.delivered = true;
    return result;
  }
  auto j = telegram_body(body);
  if (j.value("ok", false) == true) {
    send_result result;
    result.delivered = true;
    return result;
  }
  return failed(send_failure_kind::rejected,
                "the Bot API answered 2xx without \"ok\": true: "
                  + body.substr(0, 200));
}

bool transient_status(int status) {
  return status == 408 || status == 425 || status == 429 || status >= 500;
}

/// A send that did not deliver, as the retry policy reads it.
struct refusal {
  /// The answer's status; none when there was no answer.
  std::optional<unsigned> status;
  std::string body;
  std::optional<milliseconds> retry_after;
  std::string description;
};

/// What `answer`, not a delivery, says.
refusal refusal_of(const http_result& answer, std::string_view peer) {
  auto now = std::chrono::system_clock::now();
  auto answered = [&](const http_client_response& res) {
    return refusal{res.status, res.body, retry_after(res, now),
                   status_text(res, peer)};
  };
  if (auto res = std::get_if<http_client_response>(&answer))
    return answered(*res);
  auto& f = std::get<http_failure>(answer);
  if (f.error == http_error::too_large && f.partial)
    return refusal{f.partial->status, {}, std::nullopt, f.message};
  if (f.partial && !f.partial->ok())
    return answered(*f.partial); // Cut short, it still says why.
  return refusal{std::nullopt, {}, std::nullopt, f.message};
}

/// Reads a failed send: an HTTP error answer or a transport failure.
send_result read_failure(channel_kind kind, const refusal& f) {
  auto result = failed(send_failure_kind::transient, f.description);
  result.failure.retry_after = f.retry_after;
  if (!f.status)
    return result; // Connection refused or cut, a timeout: try again.
  auto status = static_cast<int>(*f.status);
  if (kind == channel_kind::telegram) {
    auto j = telegram_body(f.body);
    auto description = j.value("description", std::string{});
    if (!description.empty()
        && result.description.find(description) == std::string::npos)
      result.description += ": " + description;
    auto after = j.find("parameters");
    if (after != j.end() && after->is_object()
        && after->value("retry_after", json{}).is_number_integer())
      result.failure.retry_after
        = milliseconds{(*after)["retry_after"].get<int64_t>() * 1000};
    if (status == 400
        && description.find("can't parse entities") != std::string::npos) {
      result.failure.kind = send_failure_kind::parse_error;
      return result;
    }
  }
  if (!transient_status(status))
    result.failure.kind = send_failure_kind::rejected;
  return result;
}

} // namespace

outbound_message notice_message(const owner_notice& x) {
  outbound_message msg;
  msg.event = "notice";
  msg.kind = to_string(x.kind);
  msg.severity = to_string(severity_of(x.kind));
  msg.subject = x.subject;
  msg.id = "keel:notice:" + msg.kind + ":" + x.subject + ":"
           + std::to_string(x.at);
  msg.text = x.text;
  msg.at = x.at;
  return msg;
}

std::string reply_idempotency_key(const std::string& channel,
                                  const std::string& thread, seq_t seq) {
  return "keel:" + channel + ":" + thread + ":" + std::to_string(seq);
}

channel_send build_send(const channel_config& cfg, const outbound_message& msg,
                        bool plain_text, epoch_ms now) {
  if (cfg.kind == channel_kind::telegram)
    return telegram_send(cfg, msg, plain_text);
  return webhook_send(cfg, msg, now);
}

std::string send_url(const channel_config& cfg) {
  if (cfg.kind != channel_kind::telegram)
    return cfg.url;
  auto base = cfg.url;
  while (!base.empty() && base.back() == '/')
    base.pop_back();
  return base + "/bot" + cfg.token + "/sendMessage";
}

send_result read_send_answer(channel_kind kind, const http_result& answer,
                             std::string_view peer) {
  if (auto done = std::get_if<http_client_response>(&answer);
      done && done->ok())
    return read_delivered(kind, done->body);
  return read_failure(kind, refusal_of(answer, peer));
}

std::string hmac_sha256_hex(std::string_view key, std::string_view data) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
       reinterpret_cast<const unsigned char*>(data.data()), data.size(), digest,
       &size);
  return to_hex(digest, size);
}

} // namespace keel
