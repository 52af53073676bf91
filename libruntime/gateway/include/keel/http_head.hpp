#pragma once

// The gateway's checks on an HTTP request's head (its request line and
// header fields, up to the empty line) before Beast parses it: what Beast
// accepts but a proxy in front may read otherwise. Pure functions on the
// bytes read so far, for the server, a fuzzer or a unit test.

#include <cstddef>
#include <string>
#include <string_view>

namespace keel {

/// What the bytes read so far make of a request's head.
struct head_check {
  enum class verdict {
    /// No refusal yet and no end of the head: read on.
    incomplete,
    /// The head ends within the limit and passed every check.
    complete,
    /// Answer `status` with `message` and close.
    refused,
  };
  verdict outcome = verdict::incomplete;
  /// 400 or 431 when refused.
  unsigned status = 0;
  std::string message;
};

/// Checks the head at the start of `data` (empty lines before it are
/// skipped): 431 when it does not end within `limit` bytes; 400 for
/// obsolete line folding (a field line starting with a space or tab), a
/// line ending in a bare LF, or a `Transfer-Encoding` whose last coding is
/// not `chunked` or that names `chunked` twice.
head_check check_request_head(std::string_view data, size_t limit);

} // namespace keel
