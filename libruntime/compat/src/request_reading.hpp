#pragma once

// What reading a Chat Completions and a Messages request share: the JSON
// body, the text of a message's content, the thread and message id, and
// the 400s that name the field at fault.

#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "keel/compat_request.hpp"

namespace keel::compat::reading {

using json = nlohmann::json;

/// The error a reader stops at.
struct refused {
  api_error error;
};

/// Throws `refused` with a 400 naming `param`.
[[noreturn]] void fail(std::string code, std::string param,
                       std::string message);

/// The body as a JSON object (400 `invalid_json` otherwise).
json parse_body(std::string_view body);

/// The member `key` of `obj` when it is of the type `is` checks, nullopt
/// when absent or null; a 400 naming `param` when of another type.
const json* member(const json& obj, const char* key, bool (json::*is)() const,
                   const std::string& param, const char* type_name);

/// The text of `content` at `param`: a string, or a list of parts of which
/// those of type "text" count (joined by newlines). A part of any other
/// type is a 400 `unsupported_content` when `strict`, skipped otherwise.
std::string content_text(const json& content, const std::string& param,
                         bool strict);

/// Checks the new message: non-empty, at most `limits.max_text_bytes`.
void check_text(const std::string& text, const std::string& param,
                const request_limits& limits);

/// Reads the body's `messages`: each one's role by `role_of` (which
/// refuses what the API does not allow, more strictly for a message that
/// counts), its text; a message counts when it is the last or seeds a new
/// thread. The last, the user's, is the new message; the others are kept
/// as `earlier`.
void read_message_list(
  const json& body, compat_call& call, const request_limits& limits,
  const std::function<std::string(const json& message, const std::string& param,
                                  bool counts)>& role_of);

/// Sets the model of `call` from the body's required `model`, which must
/// name an agent (404 `model_not_found` otherwise).
void read_model(const json& body, compat_call& call);

/// Sets the thread of `call`: the header's, else `metadata_thread` (when
/// given); a bad id is a 400 naming where it came from.
void read_thread(const request_headers& headers,
                 const std::optional<std::string>& metadata_thread,
                 compat_call& call);

/// Sets the message id of `call`: the header's key, else `metadata_id`.
void read_message_id(const request_headers& headers,
                     const std::optional<std::string>& metadata_id,
                     compat_call& call);

/// Reads `body` as a request of `wire` with `read`, which sets the call
/// from the parsed body or throws `refused`; a member of a type no check
/// names is a 400 too.
std::variant<compat_call, api_error>
read_request(api wire, std::string_view body,
             const std::function<void(const json&, compat_call&)>& read);

/// Throws a 400 `unsupported_parameter` naming `param`.
[[noreturn]] void unsupported(const std::string& param, std::string why);

} // namespace keel::compat::reading
