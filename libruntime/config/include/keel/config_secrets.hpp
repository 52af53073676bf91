#pragma once

// The secrets a configuration holds, for `redact` (keel/redact.hpp): what
// must never show in error text, the log, /api/v1/providers or an owner
// notice, even when a provider or channel quotes it back.

#include <string>
#include <string_view>
#include <vector>

#include "keel/config.hpp"

namespace keel {

/// Every secret of `cfg`, ready for `redact`: the gateway's client and
/// admin tokens, each provider's API key and the values of its headers
/// that carry credentials (`header_holds_secret`), each channel's webhook
/// secret and bot token, the cluster token, and the PostgreSQL URL with
/// the password in it.
std::vector<std::string> configured_secrets(const node_config& cfg);

/// Whether a provider header named `name` carries a credential: its name,
/// in any case, contains "auth", "key", "token", "secret" or "cookie".
bool header_holds_secret(std::string_view name);

/// The password of a libpq URI (`postgres://user:PASSWORD@host/db`) or
/// conninfo string (`password=PASSWORD` or `password='PASSWORD'`); empty if
/// there is none.
std::string postgres_password(std::string_view url);

} // namespace keel
