#pragma once

// What a failed model call means for the turn: the code and text the
// thread gets, and what the owner hears of it.

#include <optional>
#include <string>
#include <utility>

#include "keel/error.hpp"
#include "keel/types.hpp"

namespace keel {

/// A model call that failed, as the turn needs to know it.
struct model_failure {
  /// Its Keel error code; none for an error of another kind (the pool is
  /// down or restarting: still a provider problem to the user).
  std::optional<ec> code;
  /// The conversation's own timer fired: the pool did not answer at all.
  bool own_timeout = false;
  /// The error as logged and told to the owner.
  std::string text;
};

/// The code and the `turn_errors` text the thread gets for `failure`,
/// naming `contact` where it asks the user to get in touch.
std::pair<std::string, std::string>
describe_failure(const model_failure& failure, const std::string& contact);

/// What the owner hears of a turn of `thread` (answered by `pool`) that
/// failed with `failure`: every provider of the pool failing, out of credit
/// or refusing the credentials; none for the thread's own limits (context,
/// a rejected message, its own timeout).
std::optional<owner_notice> provider_notice(const model_failure& failure,
                                            const std::string& pool,
                                            const std::string& thread);

} // namespace keel
