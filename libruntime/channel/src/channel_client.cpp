#include "keel/channel_client.hpp"

#include <chrono>

namespace keel {

channel_client::channel_client(channel_config cfg,
                               std::shared_ptr<post_endpoint> endpoint)
  : cfg_(std::move(cfg)), endpoint_(std::move(endpoint)) {
  // nop
}

caf::expected<std::unique_ptr<channel_client>>
channel_client::make(http_io& io, const channel_config& cfg) {
  post_target target;
  target.name = "delivery.channels." + cfg.name;
  target.url = send_url(cfg);
  target.timeout = cfg.retry.send_timeout;
  target.ca_file = cfg.ca_file;
  target.max_concurrency = max_in_flight;
  auto endpoint = post_endpoint::make(io, target);
  if (!endpoint) {
    // URLs may hold secrets (Telegram's token, a webhook's key), which
    // errors must not show.
    auto what = error_message(endpoint.error());
    for (auto& secret : {target.url, cfg.token})
      for (auto at = what.find(secret);
           !secret.empty() && at != std::string::npos; at = what.find(secret))
        what.replace(at, secret.size(),
                     secret == cfg.token ? "<token>" : "<url>");
    return caf::make_error(ec::config_invalid, std::move(what));
  }
  return std::unique_ptr<channel_client>{
    new channel_client(cfg, std::move(*endpoint))};
}

void channel_client::send(const outbound_message& msg, bool plain_text,
                          send_handler on_done) {
  using namespace std::chrono;
  auto now = duration_cast<milliseconds>(system_clock::now().time_since_epoch())
               .count();
  auto wire = build_send(cfg_, msg, plain_text, now);
  post_request req{std::move(wire.body), std::move(wire.headers)};
  endpoint_->post(std::move(req),
                  [kind = cfg_.kind,
                   on_done = std::move(on_done)](call_result answer) {
                    on_done(read_send_answer(kind, answer));
                  });
}

} // namespace keel
