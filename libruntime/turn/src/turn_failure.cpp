#include "keel/turn_failure.hpp"

#include "keel/turn_texts.hpp"

namespace keel {

std::pair<std::string, std::string>
describe_failure(const model_failure& failure, const std::string& contact) {
  auto is = [&failure](ec code) { return failure.code == code; };
  if (failure.own_timeout || is(ec::provider_timeout) || is(ec::timeout))
    return {to_string(ec::provider_timeout), turn_errors::provider_timeout};
  if (is(ec::context_overflow))
    return {to_string(ec::context_overflow), turn_errors::context_overflow};
  if (is(ec::provider_rejected))
    return {to_string(ec::provider_rejected), turn_errors::provider_rejected};
  auto text = turn_errors::provider_failed;
  if (is(ec::provider_unauthorized))
    text = turn_errors::provider_unauthorized;
  if (is(ec::credits_exhausted))
    text = turn_errors::credits_exhausted;
  auto code = failure.code ? to_string(*failure.code)
                           : to_string(ec::provider_failed);
  return {code, with_owner_contact(text, contact)};
}

std::optional<owner_notice> provider_notice(const model_failure& failure,
                                            const std::string& pool,
                                            const std::string& thread) {
  if (failure.own_timeout)
    return std::nullopt;
  owner_notice x;
  x.subject = "pool " + pool;
  x.text = "Thread " + thread + " could not be answered: " + failure.text;
  if (failure.code == ec::credits_exhausted)
    x.kind = notice_kind::credits_exhausted;
  else if (failure.code == ec::provider_unauthorized)
    x.kind = notice_kind::provider_unauthorized;
  else if (!failure.code || failure.code == ec::provider_failed
           || failure.code == ec::provider_timeout)
    x.kind = notice_kind::all_models_failed;
  else
    return std::nullopt;
  return x;
}

} // namespace keel
