#pragma once

// The account a tool runs as (`tools[].user`, `tools[].group`), looked up
// in the machine's user and group databases when the config is read.

#include <cstdint>
#include <string>

namespace keel {

/// A resolved account, or why it cannot be used.
struct account_lookup {
  int64_t uid = -1;
  int64_t gid = -1;
  /// Empty when resolved; else a sentence saying what is wrong.
  std::string error;
  /// Whether `error` is about the group (else about the user).
  bool group_error = false;
};

/// Resolves `user` (a name or a number) and `group` (a name, a number, or
/// empty for the user's primary group), and checks that this process may
/// switch to them (it is root, or has CAP_SETUID and CAP_SETGID, or the
/// account is its own).
account_lookup resolve_account(const std::string& user,
                               const std::string& group);

} // namespace keel
