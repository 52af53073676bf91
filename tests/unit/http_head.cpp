#define CAF_SUITE http_head
#include <caf/test/unit_test.hpp>

#include "keel/http_head.hpp"

#include <string>
#include <vector>

using namespace keel;

namespace {

using verdict = head_check::verdict;

constexpr size_t limit = 16 * 1024;

struct head_case {
  std::string name;
  std::string bytes;
  verdict outcome;
  unsigned status;
  std::string message_part;
};

const std::string get = "GET /ws HTTP/1.1\r\nHost: 127.0.0.1:8080\r\n";

std::vector<head_case> cases() {
  auto post = [](std::string te) {
    return "POST /api/v1/x HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: " + te
           + "\r\n\r\n";
  };
  return {
    {"plain get", get + "\r\n", verdict::complete, 0, ""},
    {"keep-alive leftovers", "\r\n" + get + "\r\nGET / HTTP/1.1\r\n",
     verdict::complete, 0, ""},
    {"websocket upgrade",
     get
       + "Connection: Upgrade\r\nUpgrade: websocket\r\n"
         "Sec-WebSocket-Version: 13\r\n"
         "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n",
     verdict::complete, 0, ""},
    {"a value with inner spaces and tabs", get + "X-A: a \t b\r\n\r\n",
     verdict::complete, 0, ""},
    {"head not ended yet", get + "X-A: 1\r", verdict::incomplete, 0, ""},
    {"chunked", post("chunked"), verdict::complete, 0, ""},
    {"gzip then chunked", post("gzip, Chunked"), verdict::complete, 0, ""},
    {"obs-fold space", get + "X-A: 1\r\n  2\r\n\r\n", verdict::refused, 400,
     "line folding"},
    {"obs-fold tab", get + "X-A: 1\r\n\t2\r\n\r\n", verdict::refused, 400,
     "line folding"},
    {"obs-fold before the end", get + "X-A: 1\r\n 2", verdict::incomplete, 0,
     ""},
    {"bare LF", "GET / HTTP/1.1\nHost: h\n\n", verdict::refused, 400,
     "LF without CR"},
    {"bare LF in a field", get + "X-A: 1\nX-B: 2\r\n\r\n", verdict::refused,
     400, "LF without CR"},
    {"chunked not last", post("chunked, gzip"), verdict::refused, 400,
     "Transfer-Encoding"},
    {"chunked twice", post("chunked, chunked"), verdict::refused, 400,
     "Transfer-Encoding"},
    {"gzip only", post("gzip"), verdict::refused, 400, "Transfer-Encoding"},
    {"empty transfer-encoding", post(""), verdict::refused, 400,
     "Transfer-Encoding"},
    {"chunked across two fields",
     "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n"
     "transfer-encoding: gzip\r\n\r\n",
     verdict::refused, 400, "Transfer-Encoding"},
    {"head at the limit",
     get + "X-A: " + std::string(limit - get.size() - 9, 'a') + "\r\n\r\n",
     verdict::complete, 0, ""},
    {"head one byte over",
     get + "X-A: " + std::string(limit - get.size() - 8, 'a') + "\r\n\r\n",
     verdict::refused, 431, "16384 bytes"},
    {"unended head at the limit", get + std::string(limit, 'a'),
     verdict::refused, 431, "16384 bytes"},
  };
}

} // namespace

CAF_TEST(request heads are checked before beast parses them) {
  for (auto& c : cases()) {
    CAF_MESSAGE(c.name);
    auto result = check_request_head(c.bytes, limit);
    CAF_CHECK(result.outcome == c.outcome);
    CAF_CHECK_EQUAL(result.status, c.status);
    CAF_CHECK(result.message.find(c.message_part) != std::string::npos);
  }
}
