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
  auto endpoint = post_endpoint::make(io, target);
  if (!endpoint) {
    // The Telegram URL holds the token, which errors must not show.
    auto what = error_message(endpoint.error());
    if (!cfg.token.empty())
      for (auto at = what.find(cfg.token); at != std::string::npos;
           at = what.find(cfg.token))
        what.replace(at, cfg.token.size(), "<token>");
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
