#include "keel/llm_client.hpp"

#include <algorithm>

#include "keel/llm_wire.hpp"

namespace keel {

namespace {

using clock_type = std::chrono::system_clock;

/// What `classify` understands of a failure below HTTP.
transport_error transport_of(http_error error) {
  switch (error) {
    case http_error::connect_refused: return transport_error::connect_refused;
    case http_error::dns: return transport_error::dns;
    case http_error::tls: return transport_error::tls;
    case http_error::timeout: return transport_error::timeout;
    case http_error::reset: return transport_error::reset;
    default: return transport_error::other;
  }
}

class endpoint_impl : public llm_endpoint,
                      public std::enable_shared_from_this<endpoint_impl> {
public:
  endpoint_impl(provider_config cfg, llm_wire::api api,
                std::shared_ptr<http_endpoint> http)
    : cfg_(std::move(cfg)), api_(api), http_(std::move(http)) {
    // nop
  }

  call_canceller complete(const completion_request& req, uint32_t max_tokens,
                          delta_handler on_delta,
                          result_handler on_done) override;

  const std::string& name() const override {
    return cfg_.name;
  }

  const provider_config& cfg() const {
    return cfg_;
  }

  llm_wire::api api() const {
    return api_;
  }

  http_endpoint& http() {
    return *http_;
  }

  const std::string& host() const {
    return http_->config().url.authority;
  }

private:
  provider_config cfg_;
  llm_wire::api api_;
  std::shared_ptr<http_endpoint> http_;
};

/// One call: the request in the API's format, then the answer read whole
/// or as a stream of server-sent events, delivered exactly once as a
/// completion or a `call_failure`. The HTTP client runs every step on the
/// exchange's strand, one at a time.
class call : public std::enable_shared_from_this<call> {
public:
  call(std::shared_ptr<endpoint_impl> ep, delta_handler on_delta,
       result_handler on_done)
    : ep_(std::move(ep)),
      decoder_(ep_->api()),
      on_delta_(std::move(on_delta)),
      on_done_(std::move(on_done)) {
    // nop
  }

  /// Sends `body`, bounded by `time_budget` (0: the total timeout).
  call_canceller start(std::string body, std::chrono::milliseconds budget) {
    http_client_request req;
    req.headers = headers();
    req.body = std::move(body);
    req.time_budget = budget;
    req.budget_owner = "its turn";
    req.reader.wants
      = [self = shared_from_this()](const http_client_response& head) {
          return self->wants(head);
        };
    req.reader.on_body = [self = shared_from_this()](std::string_view piece) {
      return self->on_body(piece);
    };
    return ep_->http().send(std::move(req),
                            [self = shared_from_this()](http_result result) {
                              self->on_result(std::move(result));
                            });
  }

private:
  const provider_config& cfg() const {
    return ep_->cfg();
  }

  const std::string& host() const {
    return ep_->host();
  }

  http_headers headers() const {
    auto& cfg = this->cfg();
    http_headers result{{"Content-Type", "application/json"},
                        {"Accept", cfg.stream ? "text/event-stream"
                                              : "application/json"}};
    if (ep_->api() == llm_wire::api::openai) {
      if (!cfg.api_key.empty())
        result.emplace_back("Authorization", "Bearer " + cfg.api_key);
    } else {
      if (!cfg.api_key.empty())
        result.emplace_back("x-api-key", cfg.api_key);
      result.emplace_back("anthropic-version", "2023-06-01");
    }
    for (auto& [key, value] : cfg.headers)
      result.emplace_back(key, value);
    return result;
  }

  // -- the stream -------------------------------------------------------------

  /// Streams a 2xx event stream, when the provider is set to stream.
  bool wants(const http_client_response& head) {
    status_ = head.status;
    streaming_ = head.ok() && cfg().stream
                 && head.header("content-type").find("text/event-stream")
                      != std::string_view::npos;
    return streaming_;
  }

  body_step on_body(std::string_view piece) {
    sse_.feed(piece, [this](std::string_view event, std::string_view data) {
      on_event(event, data);
    });
    switch (stream_step_) {
      case llm_wire::stream_decoder::step::failed: return body_step::stop;
      case llm_wire::stream_decoder::step::done: return body_step::enough;
      default: return body_step::more;
    }
  }

  void on_event(std::string_view event, std::string_view data) {
    if (stream_step_ != llm_wire::stream_decoder::step::more)
      return; // Ignore anything after the end.
    stream_step_ = decoder_.on_event(event, data, delta_);
    if (!delta_.empty()) {
      hand_on(delta_);
      delta_.clear();
    }
  }

  void hand_on(std::string_view text) {
    if (!on_delta_)
      return;
    delta_sent_ = true;
    try {
      on_delta_(text);
    } catch (...) {
      // Handlers must not throw; the call goes on.
    }
  }

  /// The body of a streamed answer ended, cleanly or `cut`. Its last event
  /// may lack the blank line that ends it.
  void end_stream(const http_failure* cut) {
    sse_.finish([this](std::string_view event, std::string_view data) {
      on_event(event, data);
    });
    if (stream_step_ != llm_wire::stream_decoder::step::more) {
      settle_stream();
      return;
    }
    auto what = "the stream from " + host()
                + (cut ? " broke off before " : " ended before ")
                + terminal_name() + " ("
                + std::to_string(decoder_.result().text.size())
                + " characters received)";
    if (cut)
      fail(failure(cut->error, what + ": " + cut->cause, cut->cause));
    else
      fail(failure(http_error::reset, std::move(what), {}));
  }

  /// Ends a stream whose decoder finished or failed.
  void settle_stream() {
    if (stream_step_ == llm_wire::stream_decoder::step::done) {
      succeed(std::move(decoder_.result()));
    } else if (decoder_.provider_error()) {
      call_failure f;
      f.failure.body = decoder_.error_body();
      f.message = host() + " reported an error in the stream: "
                  + error_summary(decoder_.error_body());
      f.failure.causes.push_back(f.message);
      fail(std::move(f));
    } else {
      fail(unparseable(decoder_.error()));
    }
  }

  const char* terminal_name() const {
    return ep_->api() == llm_wire::api::openai ? "[DONE]" : "message_stop";
  }

  // -- results ----------------------------------------------------------------

  void on_result(http_result result) {
    if (auto res = std::get_if<http_client_response>(&result))
      on_response(*res);
    else
      on_failure(std::get<http_failure>(result));
  }

  void on_response(http_client_response& res) {
    if (!res.ok()) {
      fail(refusal(res));
      return;
    }
    if (streaming_) {
      end_stream(nullptr);
      return;
    }
    completion result;
    std::string error;
    if (!llm_wire::parse_answer(ep_->api(), res.body, result, error)) {
      fail(unparseable(std::move(error)));
      return;
    }
    // Asked to stream but answered at once: the text is one delta.
    if (cfg().stream && !result.text.empty())
      hand_on(result.text);
    succeed(std::move(result));
  }

  void on_failure(http_failure& f) {
    if (f.error == http_error::too_large) {
      status_ = f.partial ? f.partial->status : 0;
      fail(unparseable("the answer is larger than "
                       + std::to_string(cfg().max_response_bytes)
                       + " bytes (providers[].max_response_bytes)"));
    } else if (f.partial && !f.partial->ok()) {
      // Keep what the error answer said, even cut.
      fail(refusal(*f.partial));
    } else if (f.partial && streaming_) {
      end_stream(&f);
    } else {
      fail(failure(f.error, f.message, f.cause));
    }
  }

  call_failure failure(http_error error, std::string message,
                       const std::string& cause) {
    call_failure f;
    f.failure.transport = transport_of(error);
    f.failure.causes.push_back(message);
    if (!cause.empty())
      f.failure.causes.push_back(cause);
    f.message = std::move(message);
    return f;
  }

  call_failure unparseable(std::string what) {
    call_failure f;
    f.failure.unparseable = true;
    f.failure.status = static_cast<int>(status_);
    f.failure.causes.push_back(what);
    f.message = "unusable answer from " + host() + ": " + std::move(what);
    return f;
  }

  /// An answer that is not a success, with what it said.
  call_failure refusal(http_client_response& res) {
    call_failure f;
    f.failure.status = static_cast<int>(res.status);
    f.retry_after = retry_after(res, clock_type::now());
    f.message = status_text(res, host());
    f.failure.body = std::move(res.body);
    return f;
  }

  void succeed(completion result) {
    if (result.model.empty())
      result.model = cfg().model;
    result.provider = cfg().name;
    deliver(std::move(result));
  }

  void fail(call_failure f) {
    f.partial = delta_sent_;
    f.in_stream = streaming_;
    deliver(std::move(f));
  }

  void deliver(call_result result) {
    auto handler = std::move(on_done_);
    on_done_ = nullptr;
    on_delta_ = nullptr;
    if (!handler)
      return;
    try {
      handler(std::move(result));
    } catch (...) {
      // Handlers must not throw; nothing sensible to do here.
    }
  }

  std::shared_ptr<endpoint_impl> ep_;
  unsigned status_ = 0;
  bool streaming_ = false;
  llm_wire::sse_parser sse_;
  llm_wire::stream_decoder decoder_;
  llm_wire::stream_decoder::step stream_step_
    = llm_wire::stream_decoder::step::more;
  std::string delta_;
  bool delta_sent_ = false;
  delta_handler on_delta_;
  result_handler on_done_;
};

call_canceller
endpoint_impl::complete(const completion_request& req, uint32_t max_tokens,
                        delta_handler on_delta, result_handler on_done) {
  llm_wire::request_settings settings{cfg_.model,
                                      overlay(cfg_.params, req.params),
                                      cfg_.token_limit_field, cfg_.stream};
  // A retry after a timeout asks for fewer tokens than the limit.
  settings.params.max_output_tokens
    = max_tokens > 0 ? max_tokens : output_token_limit(cfg_.params, req.params);
  auto body = llm_wire::request_body(api_, req, settings);
  auto c = std::make_shared<call>(shared_from_this(), std::move(on_delta),
                                  std::move(on_done));
  return c->start(std::move(body),
                  std::chrono::milliseconds{req.time_budget_ms});
}

/// The HTTP endpoint's settings for provider `cfg` at `url`.
http_endpoint_config http_settings(const provider_config& cfg,
                                   llm_wire::base_url url) {
  http_endpoint_config result;
  result.name = "providers." + cfg.name;
  result.url = std::move(url);
  result.ca_file = cfg.ca_file;
  result.max_concurrency = cfg.max_concurrency;
  result.connect_timeout = cfg.connect_timeout;
  result.first_byte_timeout = cfg.first_byte_timeout;
  result.total_timeout = cfg.total_timeout;
  result.max_body_bytes = cfg.max_response_bytes;
  return result;
}

} // namespace

llm_endpoint::~llm_endpoint() {
  // nop
}

caf::expected<std::shared_ptr<llm_endpoint>>
llm_endpoint::make(http_io& io, const provider_config& cfg) {
  auto key = [&](const char* name) {
    return "providers." + cfg.name + "." + name;
  };
  llm_wire::api api;
  if (cfg.kind == "openai")
    api = llm_wire::api::openai;
  else if (cfg.kind == "anthropic")
    api = llm_wire::api::anthropic;
  else
    return caf::make_error(ec::config_invalid,
                           key("kind") + ": '" + cfg.kind
                             + "' is not an HTTP provider kind (expected "
                               "openai or anthropic)");
  auto url = llm_wire::parse_base_url(cfg.base_url, api);
  if (!url)
    return caf::make_error(ec::config_invalid,
                           key("base_url") + ": " + error_message(url.error()));
  auto http = http_endpoint::make(io, http_settings(cfg, std::move(*url)));
  if (!http)
    return std::move(http.error());
  return std::shared_ptr<llm_endpoint>{
    std::make_shared<endpoint_impl>(cfg, api, std::move(*http))};
}

} // namespace keel
