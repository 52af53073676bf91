#include "keel/tools/http_load.hpp"

#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <variant>
#include <vector>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/post.hpp>

#include "keel/llm_client.hpp"
#include "paced_load.hpp"

namespace keel::bench {

bool http_load_result::clean() const noexcept {
  return sent > 0 && answered == sent && errors == 0 && missing == 0;
}

namespace {

using namespace detail;

/// One HTTP benchmark run. Pacing and bookkeeping run on the thread that
/// calls `run`; the HTTP client runs on its own thread and posts each result
/// back, after taking its time stamp.
class http_run : public paced_load {
public:
  explicit http_run(const http_load_options& opts)
    : paced_load(opts, "calls", "result"),
      opts_(opts),
      work_(net::make_work_guard(ioc_)) {
    request_.thread = "keel-bench";
    request_.system_prompt = opts_.system_prompt;
    context_entry user;
    user.role = "user";
    user.content = message_text(opts_.text_bytes);
    request_.context.push_back(std::move(user));
  }

  caf::expected<http_load_result> run() {
    if (flat_out() && opts_.window == 0)
      return caf::make_error(ec::config_invalid, "window: must be at least 1");
    if (auto err = open_endpoint())
      return err;
    run_io([this] { start(); });
    for (auto& call : calls_)
      if (!call.done)
        ++result_.missing;
    result_.latency = latency_.summary();
    compute_throughput();
    return std::move(result_);
  }

private:
  struct call_state {
    steady::time_point sent_at;
    bool measured = false;
    bool done = false;
  };

  traffic_result& counts() override {
    return result_;
  }

  /// Makes the client for the server and checks the server with one call.
  caf::error open_endpoint() {
    auto server = opts_.server;
    if (server.kind.empty())
      server.kind = "openai";
    if (server.name.empty())
      server.name = "bench";
    io_ = std::make_unique<http_io>(1);
    auto ep = llm_endpoint::make(*io_, server);
    if (!ep)
      return ep.error();
    endpoint_ = std::move(*ep);
    return probe(server.base_url);
  }

  /// One call before the run, waited for: it opens the first connection and
  /// turns a server that cannot be reached or refuses the request into a
  /// clear error instead of a run full of failures.
  caf::error probe(const std::string& url) {
    struct state {
      std::mutex mtx;
      std::condition_variable cv;
      std::optional<call_result> result;
    };
    auto st = std::make_shared<state>();
    endpoint_->complete(request_, 0, nullptr, [st](call_result res) {
      std::lock_guard<std::mutex> guard{st->mtx};
      st->result = std::move(res);
      st->cv.notify_all();
    });
    std::unique_lock<std::mutex> guard{st->mtx};
    // The call's own total timeout bounds the wait; this only guards it.
    auto limit = opts_.server.total_timeout + std::chrono::seconds{5};
    if (!st->cv.wait_for(guard, limit, [&] { return st->result.has_value(); }))
      return caf::make_error(ec::timeout, "no answer from " + url);
    if (auto failure = std::get_if<call_failure>(&*st->result)) {
      auto code = failure->failure.transport && !failure->failure.status
                    ? ec::connection_failed
                    : ec::provider_failed;
      return caf::make_error(code, url + ": " + failure->message);
    }
    return {};
  }

  void refill(steady::time_point now) override {
    while (in_flight_ < opts_.window && may_send(now))
      send_one(now);
  }

  bool send_next(steady::time_point now) override {
    send_one(now);
    return true;
  }

  void send_one(steady::time_point now) {
    auto index = calls_.size();
    call_state call;
    call.sent_at = now;
    call.measured = measuring(now);
    calls_.push_back(call);
    count_sent(call.measured);
    endpoint_->complete(request_, 0, nullptr, [this, index](call_result res) {
      // The time stamp is taken here, on the client's thread, so the hop
      // back to the run's thread does not count.
      auto done = steady::now();
      net::post(ioc_, [this, index, done, res = std::move(res)]() mutable {
        on_result(index, done, std::move(res));
      });
    });
  }

  void on_result(size_t index, steady::time_point done, call_result res) {
    auto& call = calls_[index];
    if (call.done)
      return;
    call.done = true;
    count_outcome(done);
    if (auto failure = std::get_if<call_failure>(&res)) {
      count_failure(failure->message);
    } else {
      count_answer(call.measured);
      if (call.measured) {
        latency_.record(done - call.sent_at);
        extend_measured(done);
      }
    }
    if (finish_if_drained())
      return;
    if (phase_ == phase::running && flat_out())
      refill(steady::now());
  }

  void on_finish() override {
    // Results of calls still in flight are no longer waited for.
    work_.reset();
    ioc_.stop();
  }

  http_load_options opts_;
  net::executor_work_guard<net::io_context::executor_type> work_;
  completion_request request_;
  std::vector<call_state> calls_;
  latency_recorder latency_;
  http_load_result result_;
  // Last, so they go first: the client's shutdown fails the calls still in
  // flight, whose handlers post to `ioc_`, which must still exist.
  std::unique_ptr<http_io> io_;
  std::shared_ptr<llm_endpoint> endpoint_;
};

} // namespace

caf::expected<http_load_result> run_http_load(const http_load_options& opts) {
  try {
    http_run run{opts};
    return run.run();
  } catch (const std::exception& ex) {
    return caf::make_error(
      ec::unavailable, std::string{"HTTP load generator failed: "} + ex.what());
  }
}

} // namespace keel::bench
