#include "keel/accounts.hpp"

#include <algorithm>
#include <cctype>
#include <fstream>
#include <vector>

#include <grp.h>
#include <pwd.h>
#include <unistd.h>

namespace keel {

namespace {

bool is_account_number(const std::string& text) {
  return !text.empty() && text.size() < 10
         && std::all_of(text.begin(), text.end(),
                        [](unsigned char c) { return std::isdigit(c); });
}

// The user `user` names: uid and primary group; uid -1 if unknown.
std::pair<int64_t, int64_t> find_user(const std::string& user) {
  passwd entry{};
  passwd* found = nullptr;
  std::vector<char> buf(16384);
  if (is_account_number(user))
    ::getpwuid_r(static_cast<uid_t>(std::stoul(user)), &entry, buf.data(),
                 buf.size(), &found);
  else
    ::getpwnam_r(user.c_str(), &entry, buf.data(), buf.size(), &found);
  if (found == nullptr)
    return {is_account_number(user) ? std::stoll(user) : -1, -1};
  return {found->pw_uid, found->pw_gid};
}

int64_t find_group(const std::string& group) {
  if (is_account_number(group))
    return std::stoll(group);
  ::group entry{};
  ::group* found = nullptr;
  std::vector<char> buf(16384);
  ::getgrnam_r(group.c_str(), &entry, buf.data(), buf.size(), &found);
  return found == nullptr ? -1 : static_cast<int64_t>(found->gr_gid);
}

// Whether this process holds CAP_SETUID and CAP_SETGID (CapEff bits 7, 6).
bool may_switch() {
  if (::geteuid() == 0)
    return true;
  std::ifstream status{"/proc/self/status"};
  std::string line;
  while (std::getline(status, line))
    if (line.rfind("CapEff:", 0) == 0) {
      auto caps = std::stoull(line.substr(7), nullptr, 16);
      return (caps & 0xc0) == 0xc0;
    }
  return false;
}

std::string account_quoted(const std::string& text) {
  return '"' + text + '"';
}

} // namespace

account_lookup resolve_account(const std::string& user,
                               const std::string& group) {
  account_lookup result;
  auto [uid, primary] = find_user(user);
  if (uid < 0) {
    result.error = "no user named " + account_quoted(user) + " on this machine";
    return result;
  }
  result.uid = uid;
  result.gid = group.empty() ? primary : find_group(group);
  if (result.gid < 0) {
    result.group_error = !group.empty();
    result.error = group.empty()
                     ? "user " + user
                         + " has no entry in the user database, so no "
                           "primary group: set group: as well"
                     : "no group named " + account_quoted(group)
                         + " on this machine";
    return result;
  }
  if (!may_switch() && (result.uid != ::geteuid() || result.gid != ::getegid()))
    result.error = "the node runs as uid " + std::to_string(::geteuid())
                   + " without CAP_SETUID and CAP_SETGID, so it cannot run "
                     "tools as "
                   + account_quoted(user)
                   + " (run it as root or give it those capabilities)";
  return result;
}

} // namespace keel
