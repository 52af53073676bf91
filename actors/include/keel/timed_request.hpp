#pragma once

// Requests whose timeouts cost no clock entry each. A CAF request with a
// timeout puts an entry on the actor clock: a wake-up of the clock's thread
// when it is set and another when it fires (long after most answers came),
// holding the entry until then. An actor whose state has a
// `deadline_set deadlines` member and answers `atom::expire` with
// `expire_deadlines(self)` instead sends its requests without a CAF
// timeout: their deadlines join the set, which keeps one timer armed at the
// earliest, and an answer takes its deadline out at once. A request still
// unanswered at its deadline gets `sec::request_timeout` as its answer,
// exactly as with a CAF timeout.

#include <type_traits>
#include <utility>

#include <caf/detail/type_traits.hpp>
#include <caf/duration.hpp>
#include <caf/error.hpp>
#include <caf/message_id.hpp>
#include <caf/sec.hpp>

#include "keel/actors.hpp"
#include "keel/deadline_set.hpp"

namespace keel {

/// Whether `Self`'s state keeps a deadline set for its requests.
template <class Self, class = void>
struct has_deadline_set : std::false_type {};

template <class Self>
struct has_deadline_set<
  Self, std::void_t<decltype(std::declval<Self&>().state.deadlines)>>
  : std::is_same<std::decay_t<decltype(std::declval<Self&>().state.deadlines)>,
                 deadline_set> {};

/// Adds a deadline `timeout` from now to `self`'s set, moving the actor's
/// single `atom::expire` timer forward if it comes first.
template <class Self>
void add_deadline(Self* self, deadline_set::kind what, uint64_t id,
                  caf::timespan timeout) {
  auto at = self->clock().now() + timeout;
  if (self->state.deadlines.add(what, id, at))
    self->delayed_send(self, timeout, atom::expire_v);
}

/// The response handle of a request guarded by the actor's deadline set:
/// `then` and `await` as on CAF's handle.
template <class Self, class Handle>
class timed_response {
public:
  timed_response(Self* self, Handle handle, caf::timespan timeout)
    : self_(self), handle_(handle), timeout_(timeout) {
  }

  template <class F, class OnError>
  void then(F f, OnError g) const {
    auto* set = &self_->state.deadlines;
    auto key = handle_.id().integer_value();
    handle_.then(forget_deadline_first(set, key, std::move(f), arg_types<F>{}),
                 forget_deadline_first(set, key, std::move(g),
                                       arg_types<OnError>{}));
  }

  /// While the actor awaits, no other message runs, not even its deadline
  /// timer: an awaited request takes a CAF timeout after all.
  template <class F, class OnError>
  void await(F f, OnError g) const {
    auto response = handle_.id().integer_value();
    self_->state.deadlines.remove(deadline_set::kind::response, response);
    auto request = response & ~caf::message_id::response_flag_mask;
    self_->request_response_timeout(caf::duration{timeout_},
                                    caf::message_id{request});
    handle_.await(std::move(f), std::move(g));
  }

private:
  template <class F>
  using arg_types = typename caf::detail::get_callable_trait<F>::arg_types;

  // Wraps a response handler (with its own argument types, which CAF
  // checks against the request's response) so that it first takes the
  // request's deadline out of the set.
  template <class F, class... Ts>
  static auto forget_deadline_first(deadline_set* set, uint64_t key, F f,
                                    caf::detail::type_list<Ts...>) {
    return [set, key, f = std::move(f)](Ts... xs) mutable {
      set->remove(deadline_set::kind::response, key);
      f(std::forward<Ts>(xs)...);
    };
  }

  Self* self_;
  Handle handle_;
  caf::timespan timeout_;
};

/// Sends a request guarded by `self`'s deadline set (see above).
template <class Self, class Dest, class... Ts>
auto timed_request(Self* self, const Dest& dest, caf::timespan timeout,
                   Ts&&... xs) {
  auto handle = self->request(dest, caf::infinite, std::forward<Ts>(xs)...);
  add_deadline(self, deadline_set::kind::response, handle.id().integer_value(),
               timeout);
  return timed_response<Self, decltype(handle)>{self, handle, timeout};
}

/// The `atom::expire` timer fired: answers every request past its deadline
/// with `sec::request_timeout` (an answer that came first already took its
/// deadline out), hands every other due work id to `on_work`, and arms the
/// timer for the next deadline.
template <class Self, class OnWork>
void expire_deadlines(Self* self, OnWork on_work) {
  auto& set = self->state.deadlines;
  for (auto& due : set.expire(self->clock().now())) {
    if (due.what == deadline_set::kind::response)
      self->eq_impl(caf::message_id{due.id}, nullptr, self->context(),
                    caf::make_error(caf::sec::request_timeout));
    else
      on_work(due.id);
  }
  if (auto next = set.rearm())
    self->delayed_send(self, *next - self->clock().now(), atom::expire_v);
}

template <class Self>
void expire_deadlines(Self* self) {
  expire_deadlines(self, [](uint64_t) {});
}

} // namespace keel
