#include "keel/http_head.hpp"

#include <algorithm>
#include <utility>
#include <vector>

#include "field_text.hpp"

namespace keel {

namespace {

using field_text::iequal;
using field_text::trim;

head_check refused(unsigned status, std::string message) {
  head_check result;
  result.outcome = head_check::verdict::refused;
  result.status = status;
  result.message = std::move(message);
  return result;
}

bool has_bare_lf(std::string_view text) {
  for (size_t i = text.find('\n'); i != text.npos; i = text.find('\n', i + 1))
    if (i == 0 || text[i - 1] != '\r')
      return true;
  return false;
}

bool is_chunked(std::string_view coding) {
  return iequal(coding, "chunked");
}

/// Adds the codings of one `Transfer-Encoding` value to `codings`.
void add_codings(std::string_view value,
                 std::vector<std::string_view>& codings) {
  while (!value.empty()) {
    auto comma = value.find(',');
    auto coding = trim(value.substr(0, comma));
    if (!coding.empty())
      codings.push_back(trim(coding.substr(0, coding.find(';'))));
    value = comma == value.npos ? std::string_view{} : value.substr(comma + 1);
  }
}

/// Checks the field lines of a complete head (each ending in CRLF, the
/// request line first).
head_check check_fields(std::string_view head) {
  std::vector<std::string_view> codings;
  bool first = true;
  bool transfer_encoding = false;
  while (!head.empty()) {
    auto eol = head.find("\r\n");
    auto line = head.substr(0, eol);
    head.remove_prefix(eol + 2);
    if (std::exchange(first, false))
      continue;
    if (!line.empty() && (line.front() == ' ' || line.front() == '\t'))
      return refused(400, "obsolete line folding (a header line starting "
                          "with a space or tab) is not accepted");
    auto colon = line.find(':');
    if (colon == line.npos
        || !iequal(trim(line.substr(0, colon)), "transfer-encoding"))
      continue;
    transfer_encoding = true;
    add_codings(line.substr(colon + 1), codings);
  }
  if (transfer_encoding
      && (codings.empty() || !is_chunked(codings.back())
          || std::count_if(codings.begin(), codings.end(), is_chunked) > 1))
    return refused(400, "Transfer-Encoding must end in chunked, once; the "
                        "length of this request's body is unknown");
  head_check result;
  result.outcome = head_check::verdict::complete;
  return result;
}

} // namespace

head_check check_request_head(std::string_view data, size_t limit) {
  size_t start = 0;
  while (data.compare(start, 2, "\r\n") == 0)
    start += 2;
  auto end = data.find("\r\n\r\n", start);
  auto head = data.substr(start,
                          end == data.npos ? data.npos : end + 2 - start);
  if (end == data.npos ? data.size() >= limit : end + 4 > limit)
    return refused(431, "the request's header fields exceed "
                          + std::to_string(limit) + " bytes");
  if (has_bare_lf(head))
    return refused(400, "a line of the request ends in LF without CR");
  if (end == data.npos)
    return {};
  return check_fields(head);
}

} // namespace keel
