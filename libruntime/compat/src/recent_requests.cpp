#include "keel/recent_requests.hpp"

#include "keel/compat_request.hpp"

namespace keel::compat {

std::string fingerprint(std::string_view token, std::string_view thread,
                        std::string_view body) {
  // Lengths first: no two different triples join to the same text.
  std::string text = std::to_string(token.size()) + ":"
                     + std::to_string(thread.size()) + ":";
  text.append(token).append(thread).append(body);
  return sha256_hex(text);
}

request_identity identity_for(const compat_call& call, std::string_view token,
                              std::string_view body, recent_requests& recent,
                              recent_requests::clock::time_point now,
                              const std::string& fresh) {
  auto one_shot = [&](std::string_view seed) {
    return "oai-"
           + sha256_hex(std::string{token} + "\n" + std::string{seed})
               .substr(0, 32);
  };
  if (!call.message_id.empty())
    return {call.thread.empty() ? one_shot(call.message_id) : call.thread,
            call.message_id};
  auto print = fingerprint(token, call.thread, body);
  if (call.retry_count > 0)
    if (auto seen = recent.find(print, now))
      return *seen;
  request_identity result{call.thread.empty() ? one_shot(fresh) : call.thread,
                          "fp:" + fresh};
  recent.remember(print, result, now);
  return result;
}

recent_requests::recent_requests(std::chrono::milliseconds window,
                                 size_t capacity)
  : window_(window), capacity_(capacity) {
  // nop
}

std::optional<request_identity>
recent_requests::find(const std::string& fingerprint, clock::time_point now) {
  forget_old(now);
  auto i = by_fingerprint_.find(fingerprint);
  if (i == by_fingerprint_.end())
    return std::nullopt;
  return i->second.id;
}

void recent_requests::remember(const std::string& fingerprint,
                               request_identity id, clock::time_point now) {
  forget_old(now);
  by_fingerprint_[fingerprint] = seen{std::move(id), now};
  order_.emplace_back(now, fingerprint);
  while (by_fingerprint_.size() > capacity_ && !order_.empty()) {
    auto& [at, key] = order_.front();
    auto i = by_fingerprint_.find(key);
    if (i != by_fingerprint_.end() && i->second.at == at)
      by_fingerprint_.erase(i);
    order_.pop_front();
  }
}

void recent_requests::forget_old(clock::time_point now) {
  while (!order_.empty() && now - order_.front().first > window_) {
    auto i = by_fingerprint_.find(order_.front().second);
    if (i != by_fingerprint_.end() && i->second.at == order_.front().first)
      by_fingerprint_.erase(i);
    order_.pop_front();
  }
}

} // namespace keel::compat
