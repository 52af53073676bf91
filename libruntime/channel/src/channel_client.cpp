#include "keel/channel_client.hpp"

#include <algorithm>
#include <chrono>

namespace keel {

namespace {

using namespace std::chrono_literals;

/// URLs may hold secrets (Telegram's token, a webhook's key), which errors
/// must not show.
caf::error without_secrets(const caf::error& err, const std::string& url,
                           const std::string& token) {
  auto what = error_message(err);
  for (auto& secret : {url, token})
    for (auto at = what.find(secret);
         !secret.empty() && at != std::string::npos; at = what.find(secret))
      what.replace(at, secret.size(), secret == token ? "<token>" : "<url>");
  return caf::make_error(ec::config_invalid, std::move(what));
}

/// Where sends to `cfg` go and how long one may take: the whole send within
/// the channel's send timeout, connecting at most 5 s of it.
caf::expected<http_endpoint_config> http_settings(const channel_config& cfg) {
  http_endpoint_config result;
  result.name = "delivery.channels." + cfg.name;
  auto url = parse_http_url(send_url(cfg));
  if (!url)
    return caf::make_error(ec::config_invalid,
                           result.name + ".url: " + error_message(url.error()));
  result.url = std::move(*url);
  result.ca_file = cfg.ca_file;
  result.max_concurrency = channel_client::max_in_flight;
  result.total_timeout = cfg.retry.send_timeout;
  result.first_byte_timeout = cfg.retry.send_timeout;
  result.connect_timeout
    = std::min<std::chrono::milliseconds>(cfg.retry.send_timeout, 5s);
  return result;
}

} // namespace

channel_client::channel_client(channel_config cfg,
                               std::shared_ptr<http_endpoint> endpoint)
  : cfg_(std::move(cfg)), endpoint_(std::move(endpoint)) {
  // nop
}

caf::expected<std::unique_ptr<channel_client>>
channel_client::make(http_io& io, const channel_config& cfg) {
  auto settings = http_settings(cfg);
  if (!settings)
    return without_secrets(settings.error(), send_url(cfg), cfg.token);
  auto endpoint = http_endpoint::make(io, std::move(*settings));
  if (!endpoint)
    return without_secrets(endpoint.error(), send_url(cfg), cfg.token);
  return std::unique_ptr<channel_client>{
    new channel_client(cfg, std::move(*endpoint))};
}

void channel_client::send(const outbound_message& msg, bool plain_text,
                          send_handler on_done) {
  using namespace std::chrono;
  auto now = duration_cast<milliseconds>(system_clock::now().time_since_epoch())
               .count();
  auto send = build_send(cfg_, msg, plain_text, now);
  http_client_request req;
  req.headers = {{"Content-Type", "application/json"},
                 {"Accept", "application/json"}};
  for (auto& field : send.headers)
    req.headers.push_back(std::move(field));
  req.body = std::move(send.body);
  endpoint_->send(std::move(req),
                  [kind = cfg_.kind, peer = endpoint_->config().url.authority,
                   on_done = std::move(on_done)](http_result answer) {
                    on_done(read_send_answer(kind, answer, peer));
                  });
}

} // namespace keel
