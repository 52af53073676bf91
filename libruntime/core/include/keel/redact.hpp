#pragma once

// Keeps the node's secrets out of the text it keeps or shows: a provider or
// channel that quotes the request's key back in its error ("Incorrect API
// key provided: sk-...") must not put that key into /api/v1/providers, the
// log or an owner notice. The secrets are the configuration's
// (`configured_secrets` in keel/config_secrets.hpp); the text is any.

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace keel {

/// What stands in the text where a secret was.
inline constexpr std::string_view redacted_mark = "[redacted]";

/// Secrets shorter than this are not looked for: a one- or two-letter
/// "secret" would blank out ordinary words and protects nothing.
inline constexpr size_t min_secret_length = 4;

/// The secrets to look for, ready for `redact`: empty and short ones
/// dropped, each once, longest first (a secret containing another is
/// replaced whole).
std::vector<std::string> secret_list(std::vector<std::string> secrets);

/// `text` with every occurrence of each of `secrets` (as `secret_list`
/// made it) replaced by `redacted_mark`. Text without any comes back
/// unchanged.
std::string redact(std::string_view text,
                   const std::vector<std::string>& secrets);

} // namespace keel
